//! Preemption (SPEC 5.3): which running jobs may be taken back, and the preemptive
//! stage of a heartbeat that takes them for a starving operation.
//!
//! An operation's jobs, oldest first, fall into three classes by how much of its fair
//! share the jobs before them already use: up to `aggressive_preemption_satisfaction_
//! threshold` × fair share they are non-preemptible, up to `preemption_satisfaction_
//! threshold` × fair share aggressively preemptible, beyond that preemptible. So the
//! newest jobs beyond fair share go first.

use crate::jobs::adoption::StartHold;
use crate::jobs::job_index::JobIndex;
use crate::jobs::job_life::job_life;
use crate::jobs::start_tokens::StartKey;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::preemptibility::{victims, Preemptibility};
use crate::trees::starvation::StarvationStatus;
use crate::trees::tree_state::TreeStates;
use crate::{ClusterConfig, Node};
use std::collections::BTreeMap;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{JobAbort, JobStartSpec, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::{JobId, NodeId, OperationId};

/// Starving operations in the order the preemptive stage tries them.
type StarvingOrder = std::sync::Arc<Vec<(OperationId, StarvationStatus)>>;

/// The most starving operations one heartbeat's preemptive stage examines. Thousands
/// turn starving together when a full cluster passes the starvation timeout; walking all
/// of them (fit and path checks each) on every node's heartbeat, under the core's lock,
/// to preempt nothing in the end, stalled the scheduler for seconds.
pub const PREEMPTIVE_CHECKS_PER_HEARTBEAT: usize = 32;

/// Which starving operations one stage tries, in order: the first half of the budget
/// from the head of the list (the most starving, in the update's order), the other half
/// a window of the rest starting at `cursor`, so that an operation that cannot run on
/// the nodes the head is tried on is still reached in turn.
fn starving_to_try(
    order: &[(OperationId, StarvationStatus)],
    cursor: usize,
) -> impl Iterator<Item = &(OperationId, StarvationStatus)> {
    let half = PREEMPTIVE_CHECKS_PER_HEARTBEAT / 2;
    let (head, rest) = order.split_at(order.len().min(half));
    let start = if rest.is_empty() {
        0
    } else {
        cursor % rest.len()
    };
    let window = rest.len().min(PREEMPTIVE_CHECKS_PER_HEARTBEAT - head.len());
    head.iter()
        .chain(rest[start..].iter().chain(&rest[..start]).take(window))
}

/// What starting a job by preemption moves, borrowed from the core for one stage: the
/// preemptive stage for starving operations and the placement of gangs, whose starts
/// may take running jobs back.
pub(crate) struct Preemptor<'a> {
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) jobs: &'a mut JobIndex,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) nodes: &'a mut BTreeMap<NodeId, Node>,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) trees: &'a mut TreeStates,
    pub(crate) start_key: &'a StartKey,
    pub(crate) start_hold: &'a mut Option<StartHold>,
}

/// `Preemptor` over a core's parts, each borrowed on its own.
macro_rules! preemptor {
    ($core:expr) => {
        $crate::trees::preemption::Preemptor {
            operations: &mut $core.operations,
            jobs: &mut $core.jobs,
            outbox: &mut $core.outbox,
            nodes: &mut $core.nodes,
            cluster: &$core.cluster,
            trees: &mut $core.trees,
            start_key: &$core.start_key,
            start_hold: &mut $core.start_hold,
        }
    };
}
pub(crate) use preemptor;

impl Preemptor<'_> {
    /// The preemptive stage: if an operation of this node's tree is starving and the
    /// node's backoff has passed, place at most one of its jobs here, preempting the
    /// fewest jobs needed (latest-started first). The start and the aborts go into the
    /// context; no start when a victim is preempted gracefully (it starts once they
    /// have exited). `None`: the stage had nothing to do on this node.
    pub(crate) fn preemptive_stage(&mut self, ctx: &mut HeartbeatContext) -> Option<()> {
        let (node_id, free, now) = (&ctx.node.clone(), ctx.free(), ctx.now);
        let (tree_name, starving) =
            preemptive_stage_due(self.cluster, self.trees, self.nodes, node_id, now)?;
        self.trees.refresh_live(self.operations);
        let cursor = self
            .trees
            .next_preemption_window(&tree_name, PREEMPTIVE_CHECKS_PER_HEARTBEAT / 2);
        let node = self.nodes.get(node_id)?;
        let shares = self.trees.shares(&tree_name)?;
        let candidates = victims!(self).preemption_candidates(node_id, &tree_name);
        // Nothing here may be taken: the stage could only start a job that fits what is
        // free, and placement just found none that does. Walking every starving
        // operation to learn that again is what a full cluster must not pay per node.
        if candidates
            .iter()
            .all(|(_, class)| *class == Preemptibility::NonPreemptible)
        {
            if let Some(n) = self.nodes.get_mut(node_id) {
                n.last_preemptive_stage = Some(now);
            }
            return None;
        }
        let usage = self.trees.live_usage(self.operations, &tree_name, &shares);
        // Once per stage, not per starving operation tried: O(the node's jobs).
        let coming = self.jobs.interrupting_on(node_id, self.operations);
        for (op_id, status) in starving_to_try(&starving, cursor) {
            let (op_id, status) = (op_id.clone(), *status);
            let Some(op) = self.operations.get(&op_id) else {
                continue;
            };
            // Placed since the update: nothing of it waits any more.
            if op.state != OperationState::Running
                || op.suspended
                || op.waiting_job_count() == 0
                || !op.tag_filter().matches(&node.all_tags)
            {
                continue;
            }
            let aggressive = status == StarvationStatus::AggressivelyStarving;
            let Some(&idx) = shares.operation_index.get(&op_id) else {
                continue;
            };
            if !shares.admits(idx, &node.all_tags) {
                continue;
            }
            let room =
                crate::trees::placement::room_along_path(self.operations, &shares, &usage, idx);
            let Some(task) = op.next_fitting_task(&room) else {
                continue;
            };
            let need = op.task_spec(task).job_resources();
            // Jobs already told to exit gracefully free their room soon: wait for them
            // rather than preempt more for the same need.
            if coming != ResourceVector::ZERO && need.fits_in(&(free + coming)) {
                break;
            }
            let Some(victims) = victims!(self).choose_victims(
                &tree_name,
                &op_id,
                aggressive,
                need,
                free + coming,
                &candidates,
            ) else {
                continue;
            };
            let (start, aborts) =
                self.preempt_and_start(node_id, &tree_name, &op_id, task, victims, now);
            ctx.start_and_abort(start, aborts);
            return Some(());
        }
        if let Some(n) = self.nodes.get_mut(node_id) {
            n.last_preemptive_stage = Some(now);
        }
        None
    }

    fn preempt_and_start(
        &mut self,
        node_id: &NodeId,
        tree: &TreeName,
        op_id: &OperationId,
        task: usize,
        victims: Vec<(JobId, OperationId)>,
        now: UnixMillis,
    ) -> (Option<JobStartSpec>, Vec<JobAbort>) {
        let pool = self.operations[op_id]
            .slot(tree)
            .map_or("", |s| s.pool.as_str());
        let message =
            format!("preempted to make room for starving operation {op_id} in pool {pool}");
        let (graceful, aborts) =
            job_life!(self).take_victims(node_id, victims, op_id, &message, now);
        if let Some(node) = self.nodes.get_mut(node_id) {
            node.last_preemptive_stage = Some(now);
        }
        self.trees.mark_stale(tree);
        // A graceful victim holds its room until it has exited: the starving operation
        // takes it then, through placement, like any freed room.
        if graceful {
            return (None, aborts);
        }
        let spec = (self.operations.edit(op_id).expect("starving operation"))
            .start_job(task, node_id, tree, now);
        job_life!(self).record_start(node_id, op_id, &spec);
        (Some(spec), aborts)
    }
}

/// The node's tree and its starving operations, if this node's stage is due: its
/// backoff has passed and some operation starves. In the order of the last update
/// (as its snapshot holds them): sorting every starving operation on each heartbeat
/// would cost more than the stage itself.
fn preemptive_stage_due(
    cluster: &crate::ClusterConfig,
    trees: &crate::trees::tree_state::TreeStates,
    nodes: &std::collections::BTreeMap<NodeId, crate::Node>,
    node_id: &NodeId,
    now: UnixMillis,
) -> Option<(TreeName, StarvingOrder)> {
    let node = nodes.get(node_id)?;
    let tree_name = cluster.tree_of(node)?.clone();
    let tree = cluster.trees.get(tree_name.as_str())?;
    let backoff = tree.config.preemptive_scheduling_backoff.0;
    if node
        .last_preemptive_stage
        .is_some_and(|t| now.saturating_sub(t) < backoff)
    {
        return None;
    }
    let state = trees.get(&tree_name)?;
    let starving = state.snapshot.as_ref()?.starving_order.clone();
    (!starving.is_empty()).then_some((tree_name, starving))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_tries_a_bounded_share_of_the_starving_and_reaches_every_one_in_turn() {
        let order: Vec<(OperationId, StarvationStatus)> = (0..100)
            .map(|i| {
                (
                    OperationId(format!("op{i:03}").into()),
                    StarvationStatus::Starving,
                )
            })
            .collect();
        let tried = |cursor| -> Vec<usize> {
            starving_to_try(&order, cursor)
                .map(|(id, _)| id.0[2..].parse().unwrap())
                .collect()
        };
        let first = tried(0);
        assert_eq!(first.len(), PREEMPTIVE_CHECKS_PER_HEARTBEAT);
        let half = PREEMPTIVE_CHECKS_PER_HEARTBEAT / 2;
        assert_eq!(
            first[..half],
            (0..half).collect::<Vec<_>>()[..],
            "the head first"
        );
        // The rotating window wraps around the end of the list.
        let late = tried(80);
        assert_eq!(late[half], half + 80 % (100 - half));
        assert!(late.contains(&99) && late.contains(&half));
        // Successive stages (the cursor moves by half the budget) reach every one.
        let mut reached = std::collections::BTreeSet::new();
        for stage in 0..(100 / half + 1) {
            reached.extend(tried(stage * half));
        }
        assert_eq!(reached.len(), 100);
        assert_eq!(tried(7).len(), PREEMPTIVE_CHECKS_PER_HEARTBEAT);
        // A short list is tried whole, once.
        let short = &order[..10];
        assert_eq!(starving_to_try(short, 3).count(), 10);
        let medium = &order[..20];
        let ids: Vec<_> = starving_to_try(medium, 5)
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(ids.len(), 20);
        assert_eq!(
            ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
            20,
            "no one twice"
        );
    }
}
