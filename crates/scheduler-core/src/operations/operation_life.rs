//! An operation's life where it moves more than itself: it is admitted (its pools
//! resolved, counts checked, ephemeral pools made, nodes told of new work), it ends
//! (running jobs aborted, its pools counted again, an ephemeral pool left empty goes
//! away), pending operations start as room frees, and a configuration change decides
//! afresh which are lightweight. Admission, the operation control calls, results that
//! end an operation, time limits and placeability all end operations here.

use crate::jobs::job_index::JobIndex;
use crate::nodes::nudges::nudger;
use crate::operations::new_pool::NewPool;
use crate::operations::operation::Placement;
use crate::operations::operation_counts::PoolCountMap;
use crate::operations::placeability::{placeability, PlaceabilityWatch};
use crate::operations::pool_resolution::AdmitInTrees;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::tree_state::TreeStates;
use crate::Operation;
use crate::{ClusterConfig, CoreConfig, CoreEvent, Node};
use std::collections::{BTreeMap, HashMap};
use ytsched_common::api::ApiError;
use ytsched_common::identity::Caller;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::pool_config::PoolMode;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::spec::ValidSpec;
use ytsched_common::states::{AbortReason, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

/// What an operation's life moves and reads, borrowed from the core.
pub(crate) struct OperationLife<'a> {
    pub(crate) config: &'a CoreConfig,
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) jobs: &'a mut JobIndex,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) cluster: &'a mut ClusterConfig,
    pub(crate) config_revision: &'a mut u64,
    pub(crate) trees: &'a mut TreeStates,
    pub(crate) nudge_cursor: &'a mut Option<NodeId>,
    pub(crate) placeability: &'a mut PlaceabilityWatch,
}

/// `OperationLife` over a core's parts.
macro_rules! operation_life {
    ($core:expr) => {
        $crate::operations::operation_life::OperationLife {
            config: &$core.config,
            operations: &mut $core.operations,
            jobs: &mut $core.jobs,
            nodes: &$core.nodes,
            outbox: &mut $core.outbox,
            cluster: &mut $core.cluster,
            config_revision: &mut $core.config_revision,
            trees: &mut $core.trees,
            nudge_cursor: &mut $core.nudge_cursor,
            placeability: &mut $core.placeability,
        }
    };
}
pub(crate) use operation_life;

impl OperationLife<'_> {
    #[tracing::instrument(level = "info", skip_all, fields(operation = %id, user = user))]
    pub(crate) fn admit(
        &mut self,
        id: OperationId,
        user: &str,
        caller: Option<&Caller>,
        spec: ValidSpec,
        now: UnixMillis,
    ) -> Result<OperationId, ApiError> {
        crate::operations::record_room::check(&spec, self.config.max_record_bytes)?;
        if self.operations.contains_key(&id) {
            return Err(ApiError::conflict(format!("operation {id} already exists")));
        }
        let tree_names = self.cluster.operation_trees(&spec)?;
        let mut slots = Vec::with_capacity(tree_names.len());
        let mut new_pools = Vec::new();
        let mut pending = false;
        for tree_name in &tree_names {
            let counts = self.operations.pool_counts(self.cluster, tree_name);
            let admitted =
                self.cluster
                    .admit_in_tree(tree_name, user, caller, &spec, Some(&counts))?;
            pending |= admitted.blocked.is_some();
            if let Some(np) = admitted.new_pool {
                new_pools.push((tree_name.clone(), admitted.slot.pool.clone(), np));
            }
            slots.push((tree_name.clone(), admitted.slot));
        }
        self.create_ephemeral_pools(new_pools, user)?;
        let seq = self.operations.next_seq;
        self.operations.next_seq += 1;
        let placement = Placement {
            trees: slots,
            pending,
        };
        let op = Operation::new(
            id.clone(),
            user.to_string(),
            spec.into_inner(),
            placement,
            seq,
            now,
        );
        self.outbox.event(CoreEvent::OperationStarted {
            id: id.clone(),
            user: user.to_string(),
            pool: op.main_pool().clone(),
            jobs: op.total_job_count(),
        });
        if pending {
            self.outbox
                .event(CoreEvent::OperationPending { id: id.clone() });
        }
        if op.uses_speculation() {
            self.operations.speculating.insert(id.clone());
        }
        if op.is_gang() {
            self.operations.gangs.insert(id.clone());
        }
        self.operations.insert(op, true);
        for tree in &tree_names {
            self.trees.mark_stale(tree);
        }
        self.fail_unplaceable(Some(&id), now);
        if !pending {
            nudger!(self).announce_new_work(&id);
        }
        Ok(id)
    }

    /// Ephemeral pools admission decided to create, each under its parent.
    pub(crate) fn create_ephemeral_pools(
        &mut self,
        pools: Vec<(TreeName, TreePoolName, NewPool)>,
        user: &str,
    ) -> Result<(), ApiError> {
        for (tree_name, pool, np) in pools {
            let tree = self.cluster.tree_mut(&tree_name)?;
            tree.add_pool(&tree_name, &pool, &np.parent, np.config, Some(user.into()))?;
            *self.config_revision += 1;
        }
        Ok(())
    }

    /// Decides afresh, after a configuration change, whether each unfinished operation
    /// is lightweight in each of its trees (SPEC 5.6): a FIFO pool with
    /// `enable_lightweight_operations`. One that stops being lightweight counts as
    /// running from now on but keeps running even above the limit; a pending one that
    /// becomes lightweight is no longer held back (`promote_pending` starts it).
    pub(crate) fn reevaluate_lightweight(&mut self) {
        let mut changed = vec![];
        for op in self.operations.values().filter(|o| !o.state.is_finished()) {
            for (k, (tree_name, slot)) in op.trees.iter().enumerate() {
                let now_lightweight = self
                    .cluster
                    .trees
                    .get(tree_name)
                    .and_then(|t| t.pool(&slot.pool).ok())
                    .is_some_and(|p| {
                        p.config.mode() == PoolMode::Fifo
                            && p.config.enable_lightweight_operations == Some(true)
                    });
                if now_lightweight != slot.lightweight {
                    changed.push((op.id.clone(), k, now_lightweight));
                }
            }
        }
        for (id, k, lightweight) in changed {
            if let Some(mut op) = self.operations.edit(&id) {
                op.trees[k].1.lightweight = lightweight;
                tracing::info!(operation = %id, tree = %op.trees[k].0, lightweight, "operation lightweightness changed with its pool");
            }
        }
    }

    /// Starts pending operations, oldest first, while their pools have room.
    pub(crate) fn promote_pending(&mut self, now: UnixMillis) {
        let pending = self.operations.pending_operations();
        if pending.is_empty() {
            return;
        }
        let mut counts_by_tree: HashMap<TreeName, PoolCountMap> = HashMap::new();
        for id in pending {
            let slots: Vec<(TreeName, TreePoolName, bool)> = self.operations[&id]
                .trees
                .iter()
                .map(|(t, s)| (t.clone(), s.pool.clone(), s.lightweight))
                .collect();
            let mut chains = Vec::with_capacity(slots.len());
            let mut blocked = false;
            for (tree_name, pool, lightweight) in &slots {
                let Ok(tree) = self.cluster.tree(tree_name) else {
                    blocked = true;
                    break;
                };
                let counts = counts_by_tree
                    .entry(tree_name.clone())
                    .or_insert_with(|| self.operations.pool_counts(self.cluster, tree_name));
                let chain: Vec<TreePoolName> = tree.lineage(pool).into_iter().cloned().collect();
                blocked |= !lightweight
                    && chain.iter().any(|p| {
                        counts.get(p).copied().unwrap_or_default().running
                            >= tree.max_running_operation_count(p)
                    });
                chains.push((tree_name.clone(), chain));
            }
            if blocked {
                continue;
            }
            for (tree_name, chain) in chains {
                let counts = counts_by_tree.get_mut(&tree_name).expect("counted above");
                for p in chain {
                    counts.entry(p).or_default().running += 1;
                }
                self.trees.mark_stale(&tree_name);
            }
            if let Some(mut op) = self.operations.edit(&id) {
                op.promote(now);
            }
            self.outbox
                .event(CoreEvent::OperationRunning { id: id.clone() });
            nudger!(self).announce_new_work(&id);
        }
    }

    /// Ends an operation: running jobs are aborted (their nodes told on the next
    /// heartbeat, and nudged so that it comes soon), waiting jobs dropped; a pending
    /// operation may take its place, and an ephemeral pool left empty goes away.
    #[tracing::instrument(name = "finish_operation", level = "info", skip_all, fields(operation = %id, state = %state))]
    pub(crate) fn finish(
        &mut self,
        id: &OperationId,
        state: OperationState,
        error: Option<String>,
        now: UnixMillis,
    ) {
        let Some(mut op) = self.operations.edit(id) else {
            return;
        };
        let running: Vec<JobId> = op.running_job_ids().collect();
        for job_id in running {
            if let Some(node_id) = op.abort_job(&job_id, AbortReason::OperationAborted, now) {
                self.jobs.ended(&node_id, &job_id);
                if self.nodes.contains_key(&node_id) {
                    self.outbox.nudge(node_id);
                }
            }
        }
        op.finish(state, error.clone(), now);
        let pools: Vec<(TreeName, TreePoolName)> = op
            .trees
            .iter()
            .map(|(t, s)| (t.clone(), s.pool.clone()))
            .collect();
        drop(op);
        self.operations.speculating.remove(id);
        self.operations.gangs.remove(id);
        self.outbox.event(CoreEvent::OperationFinished {
            id: id.clone(),
            state,
            error,
        });
        for (tree, pool) in pools {
            self.trees.mark_stale(&tree);
            self.remove_empty_ephemeral_pools(&tree, &pool);
        }
        self.operations.note_finished(id);
        self.promote_pending(now);
    }

    /// Removes `pool` (and then its ephemeral parents) once no unfinished operation
    /// and no child pool is left in it. Asks the operation-count index, not every
    /// operation: a burst of finishing one-job operations stays linear.
    pub(crate) fn remove_empty_ephemeral_pools(
        &mut self,
        tree_name: &TreeName,
        pool: &TreePoolName,
    ) {
        let mut current = pool.clone();
        loop {
            let busy = self
                .operations
                .pool_count(self.cluster, tree_name, &current)
                .total
                > 0;
            let Ok(tree) = self.cluster.tree_mut(tree_name) else {
                return;
            };
            let Some(p) = tree.pools.get(&current) else {
                return;
            };
            if busy || p.ephemeral_user.is_none() || tree.children(&current).next().is_some() {
                return;
            }
            let parent = p.parent.clone();
            tree.pools.remove(&current);
            *self.config_revision += 1;
            self.outbox.event(CoreEvent::PoolRemoved {
                tree: tree_name.clone(),
                pool: current.clone(),
            });
            current = parent;
        }
    }

    /// Fails every unfinished operation whose `time_limit` has run out.
    pub(crate) fn enforce_time_limits(&mut self, now: UnixMillis) {
        for id in self.operations.take_due_deadlines(now) {
            let Some(op) = self.operations.get(&id) else {
                continue;
            };
            if op.state.is_finished() {
                continue;
            }
            let limit = op
                .spec
                .time_limit
                .map(|l| l.to_string())
                .unwrap_or_default();
            self.finish(
                &id,
                OperationState::Failed,
                Some(format!(
                    "operation time limit exceeded: it has gone on longer than its time_limit of {limit}"
                )),
                now,
            );
        }
    }

    /// An operation whose job fits no node it may run on (in its trees, through its tag
    /// filter) would wait forever: fail it now with the resource that is short. With no
    /// such node at all it waits, as nodes may still come. `only`: one operation (a new
    /// one: nodes did not change).
    pub(crate) fn fail_unplaceable(&mut self, only: Option<&OperationId>, now: UnixMillis) {
        for (id, error) in placeability!(self).unplaceable(only) {
            self.finish(&id, OperationState::Failed, Some(error), now);
        }
    }

    /// `fail_unplaceable`, when the nodes offer something else than at the last pass.
    pub(crate) fn fail_unplaceable_if_offer_changed(&mut self, now: UnixMillis) {
        let offer = placeability!(self).offer();
        if self.placeability.offer.as_ref() != Some(&offer) {
            self.placeability.passes += 1;
            self.fail_unplaceable(None, now);
            self.placeability.offer = Some(offer);
        }
    }
}
