//! Which nodes hear that new work is waiting. A nudge makes an agent heartbeat now rather
//! than at its period; nudging every node for every operation makes a burst of
//! submissions a storm of heartbeats that mostly find nothing to do. So new work nudges
//! only nodes that could start one of its jobs right away, at most one per waiting job
//! and never more than `MAX_NUDGES_FOR_NEW_WORK`; the rest of the cluster finds the work at
//! its next regular heartbeat.

use crate::jobs::job_index::JobIndex;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::pool_rules::PoolRules;
use crate::{ClusterConfig, Node};
use std::collections::BTreeMap;
use ytsched_common::{NodeId, OperationId};

/// The most nodes one operation's arrival nudges.
pub const MAX_NUDGES_FOR_NEW_WORK: usize = 64;

/// What nudging reads and moves, borrowed from the core.
pub(crate) struct Nudger<'a> {
    pub(crate) operations: &'a OperationTable,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) jobs: &'a JobIndex,
    /// Where the last round of nudges stopped.
    pub(crate) nudge_cursor: &'a mut Option<NodeId>,
    pub(crate) outbox: &'a mut Outbox,
    /// Fair-share updates are computed inline (`CoreConfig::background_share_updates`
    /// off): new work is placeable at the next placement.
    pub(crate) inline_updates: bool,
}

/// `Nudger` over a core's parts.
macro_rules! nudger {
    ($core:expr) => {
        $crate::nodes::nudges::Nudger {
            operations: &$core.operations,
            cluster: &$core.cluster,
            nodes: &$core.nodes,
            jobs: &$core.jobs,
            nudge_cursor: &mut $core.nudge_cursor,
            outbox: &mut $core.outbox,
            inline_updates: !$core.config.background_share_updates,
        }
    };
}
pub(crate) use nudger;

impl Nudger<'_> {
    /// An operation got work to place (accepted, or promoted from pending). Placement
    /// can start it only once a fair-share update includes it: computed inline, that is
    /// the next placement, so its nodes hear now; computed in the background, the update
    /// that includes it nudges them when it is applied (`apply_share_update`).
    pub(crate) fn announce_new_work(&mut self, id: &OperationId) {
        if self.inline_updates {
            self.nudge_for(id);
        }
    }

    /// Nudges nodes that could start a job of operation `id` now: online, schedulable, in
    /// one of its trees, admitted by its tag filter and its pools' filters, with a user
    /// slot free (every job takes one). Successive calls start where the previous one
    /// stopped, so a stream of submissions spreads over the cluster.
    pub(crate) fn nudge_for(&mut self, id: &OperationId) {
        let Some(op) = self.operations.get(id) else {
            return;
        };
        let wanted = (op.waiting_job_count() as usize).min(MAX_NUDGES_FOR_NEW_WORK);
        if wanted == 0 {
            return;
        }
        let trees: Vec<(&str, Vec<&ytsched_common::tag_filter::TagFilter>)> = op
            .trees
            .iter()
            .map(|(t, slot)| (t.as_str(), self.cluster.pool_filters(t, &slot.pool)))
            .collect();
        let start = self.nudge_cursor.clone();
        let after = start
            .as_ref()
            .map(|c| {
                self.nodes
                    .range::<NodeId, _>((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
            })
            .into_iter()
            .flatten();
        let before = self
            .nodes
            .range::<NodeId, _>(..)
            .take_while(|(k, _)| start.as_ref().is_none_or(|c| *k <= c));
        let mut chosen: Vec<NodeId> = Vec::with_capacity(wanted);
        for (node_id, node) in after.chain(before) {
            if chosen.len() == wanted {
                break;
            }
            if !node.online || !node.is_schedulable() {
                continue;
            }
            if (self.jobs.count_on(node_id) as f64) + 1.0 > node.resource_limits.user_slots + 1e-9 {
                continue;
            }
            let Some(tree) = self.cluster.tree_of(node) else {
                continue;
            };
            let admitted = trees.iter().any(|(t, filters)| {
                *t == tree.as_str() && filters.iter().all(|f| f.matches(&node.all_tags))
            }) && op.tag_filter().matches(&node.all_tags);
            if admitted {
                chosen.push(node_id.clone());
            }
        }
        if let Some(last) = chosen.last() {
            *self.nudge_cursor = Some(last.clone());
        }
        self.outbox.nudge_all(chosen);
    }
}
