//! `suspend_operation` / `resume_operation` (SPEC 5.14): a suspended operation keeps its
//! place (pool, counts, running jobs) but is given no new jobs, and its demand is its
//! usage, so that it holds no fair share it cannot use (`Operation::demand_in`,
//! `smallest_waiting`). Both are idempotent: a script that retries gets the same state.

use crate::nodes::nudges::nudger;
use crate::{CoreEvent, SchedulerCore};
use ytsched_common::api::ApiError;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::states::AbortReason;
use ytsched_common::{JobId, OperationId};

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
