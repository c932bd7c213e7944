//! Calls that change an operation after admission (SPEC 5.14).
//!
//! - `update_operation_parameters` (SPEC 5.14): an operation changes pool, weight, limits
//!   or owners while pending or running. A move is admission again for the trees whose
//!   pool changes (`use` there, count limits not counting the operation itself); a change
//!   of weight or limits alone is never refused for counts. Running jobs stay; the next
//!   fair-share update counts the operation in its new place, and limits lowered below
//!   its usage are taken back there as `resource_limits_violation`.
//! - `suspend_operation` / `resume_operation` (SPEC 5.14): a suspended operation keeps its
//!   place (pool, counts, running jobs) but is given no new jobs, and its demand is its
//!   usage, so that it holds no fair share it cannot use (`Operation::demand_in`,
//!   `smallest_waiting`). Both are idempotent: a script that retries gets the same state.

use crate::nodes::nudges::nudger;
use crate::operations::new_pool::NewPool;
use crate::operations::operation::TreeSlot;
use crate::operations::operation_life::operation_life;
use crate::operations::pool_resolution::AdmitInTrees;
use crate::operations::pool_resolution::{requested_pool, resolve_pool};
use crate::{CoreEvent, SchedulerCore};
use ytsched_common::api::ApiError;
use ytsched_common::identity::Caller;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::spec::OperationParameters;
use ytsched_common::states::AbortReason;
use ytsched_common::states::OperationState;
use ytsched_common::{JobId, OperationId};

/// How a change starts in the operation's history (`explain` lists those lines).
pub(crate) const UPDATED: &str = "parameters updated: ";

impl SchedulerCore {
    /// Applies `params` to an unfinished operation. `caller` is checked for `use` on a
    /// pool the operation moves to (the service has already checked that the caller
    /// controls the operation); trusted callers (the simulator) pass `None`. Nothing
    /// changes unless every tree accepts the change.
    #[tracing::instrument(level = "info", skip_all, fields(operation = %id))]
    pub fn update_operation_parameters(
        &mut self,
        id: &OperationId,
        caller: Option<&Caller>,
        params: &OperationParameters,
        now: UnixMillis,
    ) -> Result<(), ApiError> {
        self.latest_now.observe(now);
        let op = self
            .reads()
            .unfinished_operation(id, "have its parameters changed")?;
        for tree in params.scheduling_options_per_pool_tree.keys() {
            if op.slot(tree.as_str()).is_none() {
                return Err(ApiError::new(format!(
                    "scheduling_options_per_pool_tree.{tree}: operation {id} does not run in pool tree '{tree}' (it runs in {})",
                    op.tree_names().collect::<Vec<_>>().join(", ")
                )));
            }
        }
        let spec = params
            .apply_to(&op.spec)
            .map_err(|e| ApiError::new(e.to_string()))?;
        crate::operations::record_room::check(&spec, self.config.max_record_bytes)?;
        let user = op.user.clone();
        let running = op.state == OperationState::Running;
        let Readmission {
            slots,
            new_pools,
            moved,
        } = readmit(&self.cluster, &self.operations, id, caller, &spec)?;
        operation_life!(self).create_ephemeral_pools(new_pools, &user)?;
        let summary = params.summary();
        if let Some(mut op) = self.operations.edit(id) {
            op.spec = spec;
            op.trees = slots;
            op.record(now, format!("{UPDATED}{summary}"));
        }
        self.outbox.event(CoreEvent::OperationParametersUpdated {
            id: id.clone(),
            parameters: summary,
        });
        let trees: Vec<TreeName> = self.operations[id]
            .trees
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        for tree in &trees {
            self.trees.mark_stale(tree);
        }
        for (tree, old_pool) in moved {
            operation_life!(self).remove_empty_ephemeral_pools(&tree, &old_pool);
        }
        // A pending operation moved to a pool with room starts now.
        operation_life!(self).promote_pending(now);
        if running {
            nudger!(self).announce_new_work(id);
        }
        Ok(())
    }
}

/// The operation admitted again in each of its trees with `spec`: where a pool
/// changes, `use` there and count limits (not counting the operation itself).
fn readmit(
    cluster: &crate::ClusterConfig,
    operations: &crate::operations::table::OperationTable,
    id: &OperationId,
    caller: Option<&Caller>,
    spec: &ytsched_common::spec::VanillaSpec,
) -> Result<Readmission, ApiError> {
    let op = &operations[id];
    let user = op.user.clone();
    let running = op.state == OperationState::Running;
    let mut done = Readmission::default();
    for (tree_name, old) in &op.trees {
        let tree = cluster.tree(tree_name)?;
        let (pool, _) = resolve_pool(
            tree,
            tree_name,
            &requested_pool(spec, tree_name, &user),
            &user,
        )?;
        let moves = pool != old.pool;
        // Counted without this operation, which is already counted in its old pool.
        let counts = moves.then(|| {
            let mut counts = operations.pool_counts(cluster, tree_name);
            for p in tree.lineage(&old.pool) {
                if let Some(c) = counts.get_mut(p) {
                    c.total = c.total.saturating_sub(1);
                    if running && !old.lightweight {
                        c.running = c.running.saturating_sub(1);
                    }
                }
            }
            counts
        });
        let admitted = cluster.admit_in_tree(
            tree_name,
            &user,
            caller.filter(|_| moves),
            spec,
            counts.as_ref(),
        )?;
        if let (true, Some((pool, count, max))) = (running, &admitted.blocked) {
            let what = if pool.is_root() {
                format!("pool tree '{tree_name}'")
            } else {
                format!("pool '{pool}' of pool tree '{tree_name}'")
            };
            return Err(ApiError::limit_reached(format!(
                "cannot move running operation {id}: {what} already runs {count} operations, its max_running_operation_count is {max}"
            )));
        }
        if moves {
            done.moved.push((tree_name.clone(), old.pool.clone()));
        }
        if let Some(np) = admitted.new_pool {
            done.new_pools
                .push((tree_name.clone(), admitted.slot.pool.clone(), np));
        }
        let mut slot = admitted.slot;
        slot.usage = old.usage;
        done.slots.push((tree_name.clone(), slot));
    }
    Ok(done)
}

/// An operation's place in each tree after a change of its parameters.
#[derive(Default)]
struct Readmission {
    slots: Vec<(TreeName, TreeSlot)>,
    new_pools: Vec<(TreeName, TreePoolName, NewPool)>,
    /// The trees it left a pool in, with that pool (emptied ephemeral pools go).
    moved: Vec<(TreeName, TreePoolName)>,
}

impl SchedulerCore {
    /// Suspends an unfinished operation; with `abort_running_jobs`, its running jobs are
    /// aborted as `suspended` and wait again (their nodes are told on their next
    /// heartbeat, and nudged so that it comes soon).
    #[tracing::instrument(level = "info", skip_all, fields(operation = %id))]
    pub fn suspend_operation(
        &mut self,
        id: &OperationId,
        abort_running_jobs: bool,
        now: UnixMillis,
    ) -> Result<(), ApiError> {
        self.latest_now.observe(now);
        let op = self.reads().unfinished_operation(id, "be suspended")?;
        let was_suspended = op.suspended;
        if was_suspended && !abort_running_jobs {
            return Ok(());
        }
        let Some(mut op) = self.operations.edit(id) else {
            return Ok(());
        };
        op.suspended = true;
        let mut aborted: Vec<(JobId, ytsched_common::NodeId)> = vec![];
        if abort_running_jobs {
            let running: Vec<JobId> = op.running_job_ids().collect();
            for job_id in running {
                if let Some(node) = op.abort_job(&job_id, AbortReason::Suspended, now) {
                    if let Some(j) = op.jobs.get_mut(&job_id) {
                        j.error =
                            Some("its operation was suspended with abort_running_jobs".into());
                    }
                    aborted.push((job_id, node));
                }
            }
        }
        op.record(
            now,
            match (was_suspended, aborted.len()) {
                (true, n) => format!("{n} running job(s) aborted while suspended"),
                (false, 0) => "suspended".into(),
                (false, n) => format!("suspended; {n} running job(s) aborted"),
            },
        );
        let trees: Vec<String> = op.tree_names().map(str::to_string).collect();
        drop(op);
        for (job_id, node) in &aborted {
            self.jobs.ended(node, job_id);
            let attempt = self.operations.attempt_facts(id, job_id);
            self.outbox.event(CoreEvent::JobAborted {
                id: job_id.clone(),
                operation: id.clone(),
                node: node.clone(),
                reason: AbortReason::Suspended,
                preempted_by: None,
                attempt,
            });
            if self.nodes.contains_key(node) {
                self.outbox.nudge(node.clone());
            }
        }
        if !was_suspended {
            self.outbox.event(CoreEvent::OperationSuspended {
                id: id.clone(),
                aborted_jobs: aborted.len(),
            });
        }
        for tree in &trees {
            self.trees.mark_stale(tree);
        }
        Ok(())
    }

    /// Aborts one running job at a user's request (YTsaurus's `abort_job`): it goes back
    /// to waiting and runs again, its node is told on its next heartbeat and nudged.
    #[tracing::instrument(level = "info", skip_all, fields(operation = %op_id, job = %job_id))]
    pub fn abort_job(
        &mut self,
        op_id: &OperationId,
        job_id: &JobId,
        now: UnixMillis,
    ) -> Result<(), ApiError> {
        self.latest_now.observe(now);
        let op = self
            .reads()
            .unfinished_operation(op_id, "have a job aborted")?;
        let job = op
            .jobs
            .get(job_id)
            .ok_or_else(|| ApiError::not_found(format!("no such job: {job_id}")))?;
        if job.state != ytsched_common::states::JobState::Running {
            return Err(ApiError::conflict(format!(
                "job {job_id} is {}; only a running job can be aborted",
                job.state
            )));
        }
        let node = job.node.clone();
        let message = "aborted by user request";
        let gang = crate::jobs::job_life::job_life!(self).abort_running_job(
            &node,
            op_id,
            job_id,
            AbortReason::UserRequest,
            message,
            now,
        );
        for (_, node) in gang.into_iter().chain([(job_id.clone(), node)]) {
            if self.nodes.contains_key(&node) {
                self.outbox.nudge(node);
            }
        }
        if let Some(tree) = self
            .operations
            .get(op_id)
            .and_then(|op| op.tree_names().next().map(str::to_string))
        {
            self.trees.mark_stale(&tree);
        }
        Ok(())
    }

    /// Gives a suspended operation jobs again (a running one at once: its nodes are
    /// nudged).
    #[tracing::instrument(level = "info", skip_all, fields(operation = %id))]
    pub fn resume_operation(&mut self, id: &OperationId, now: UnixMillis) -> Result<(), ApiError> {
        self.latest_now.observe(now);
        let op = self.reads().unfinished_operation(id, "be resumed")?;
        if !op.suspended {
            return Ok(());
        }
        let Some(mut op) = self.operations.edit(id) else {
            return Ok(());
        };
        op.suspended = false;
        op.record(now, "resumed".into());
        let trees: Vec<String> = op.tree_names().map(str::to_string).collect();
        let running = op.state == ytsched_common::states::OperationState::Running;
        drop(op);
        self.outbox
            .event(CoreEvent::OperationResumed { id: id.clone() });
        for tree in &trees {
            self.trees.mark_stale(tree);
        }
        if running {
            nudger!(self).announce_new_work(id);
        }
        Ok(())
    }
}
