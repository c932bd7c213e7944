//! What a node reports, taken into the jobs' life: finished jobs' results, the jobs it
//! runs (an unknown or aborted one is told to stop, one told to exit gracefully is
//! told again), and the jobs it does not report (a start it has not read is sent
//! again; any other is lost).

use crate::jobs::job_life::JobLife;
use crate::membership::tree_change_message;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::operation::ResultEffect;
use crate::CoreEvent;
use std::collections::BTreeSet;
use std::collections::HashSet;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{
    HeartbeatReply, JobAbort, JobStartSpec, RunningJob, UnixMillis, PROTOCOL_VERSION,
};
use ytsched_common::states::{AbortReason, JobState, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

/// What taking one result did.
pub(crate) struct ResultTaken {
    /// Whether the node is told the result was taken (it then deletes the sandbox).
    pub(crate) acknowledge: bool,
    /// The result ended its operation: how.
    pub(crate) ends: Option<(OperationId, OperationState, Option<String>)>,
}

impl ResultTaken {
    const ACKNOWLEDGED: ResultTaken = ResultTaken {
        acknowledge: true,
        ends: None,
    };
    const REFUSED: ResultTaken = ResultTaken {
        acknowledge: false,
        ends: None,
    };
}

impl JobLife<'_> {
    /// Takes one result; returns whether to acknowledge it. Only a result of a job placed
    /// on this very node is taken (the agent deletes the job's sandbox on the
    /// acknowledgement); a repeated one is acknowledged again and counted once. A result
    /// of a job the scheduler no longer holds (settled and released to the store, or its
    /// operation retired) is acknowledged and not taken: the node would otherwise keep
    /// it and send it forever.
    #[tracing::instrument(level = "debug", skip_all, fields(job = %result.job_id, operation = %result.operation_id))]
    pub(crate) fn apply_result(
        &mut self,
        node_id: &NodeId,
        result: &ytsched_common::protocol::FinishedJob,
        now: UnixMillis,
    ) -> ResultTaken {
        if self.jobs.owner(&result.job_id).is_none() {
            // An attempt started by a scheduler that crashed before storing anything of
            // it: taken as if it had been reported running, if its job still waits.
            self.adopt_attempt(
                node_id,
                &result.job_id,
                &result.operation_id,
                result.attempt_of.as_ref(),
                result.start_time,
            );
        }
        let Some(op_id) = self.jobs.owner(&result.job_id).cloned() else {
            if self.adoptable_later(result) {
                return ResultTaken::REFUSED;
            }
            return ResultTaken::ACKNOWLEDGED;
        };
        let Some(mut op) = self.operations.edit(&op_id) else {
            return ResultTaken::ACKNOWLEDGED;
        };
        if op
            .jobs
            .get(&result.job_id)
            .is_none_or(|j| &j.node != node_id)
        {
            return ResultTaken::REFUSED;
        }
        let first_result = op
            .jobs
            .get(&result.job_id)
            .is_some_and(|j| j.statistics.is_none());
        let effect = op.record_result(node_id, result, now);
        if effect == ResultEffect::Recorded {
            op.break_gang(&result.job_id, now);
        }
        // What the job printed goes to the store with its first result, not into memory.
        if first_result && !(result.stdout_tail.is_empty() && result.stderr_tail.is_empty()) {
            self.outbox.output(crate::jobs::job_output::JobOutput {
                job: result.job_id.clone(),
                stdout: result.stdout_tail.clone(),
                stderr: result.stderr_tail.clone(),
            });
        }
        drop(op);
        if effect == ResultEffect::Ignored {
            return ResultTaken::ACKNOWLEDGED;
        }
        self.jobs.ended(node_id, &result.job_id);
        self.settle_gang_lost(&op_id);
        let op = &self.operations[&op_id];
        let job = &op.jobs[&result.job_id];
        let won = job.state == JobState::Completed;
        // A result that sent the job back to waiting (a graceful preemption ended, a
        // restart_exit_code, a node giving the job up) says why, as an abort does.
        self.outbox.event(match job.abort_reason {
            Some(reason) if job.state == JobState::Aborted => CoreEvent::JobAborted {
                id: result.job_id.clone(),
                operation: op_id.clone(),
                node: node_id.clone(),
                reason,
                preempted_by: None,
                attempt: Some(crate::AttemptFacts::of(job)),
            },
            _ => CoreEvent::JobFinished {
                id: result.job_id.clone(),
                operation: op_id.clone(),
                node: node_id.clone(),
                state: job.state.name(),
                error: job.error.clone(),
                attempt: Some(crate::AttemptFacts::of(job)),
            },
        });
        if won {
            self.abort_losing_copy(&op_id, &result.job_id, now);
        }
        let ends = match effect {
            ResultEffect::OperationCompleted => Some((OperationState::Completed, None)),
            ResultEffect::OperationFailed(error) => Some((OperationState::Failed, Some(error))),
            ResultEffect::Recorded | ResultEffect::Ignored => None,
        };
        ResultTaken {
            acknowledge: true,
            ends: ends.map(|(state, error)| (op_id, state, error)),
        }
    }

    /// Whether the unrecorded attempt `result` ended may still be adopted once its
    /// operation runs (`Operation::may_adopt_later`): the node keeps the result till then.
    fn adoptable_later(&self, result: &ytsched_common::protocol::FinishedJob) -> bool {
        let (Some(of), Some(op)) = (
            result.attempt_of.as_ref(),
            self.operations.get(&result.operation_id),
        ) else {
            return false;
        };
        result
            .job_id
            .attempt_seq(&result.operation_id)
            .is_some_and(|seq| op.may_adopt_later(seq, of))
    }

    /// Jobs the node runs that the scheduler does not (aborted, unknown, given away)
    /// are aborted. A job the scheduler placed here that the node does not report is
    /// sent again if its start went out in a reply the node has not yet read (the node
    /// says which replies it read: `last_reply_seq`); otherwise it died or its start was
    /// lost for good: it is lost and runs again elsewhere. (Results were applied first,
    /// so finished jobs are no longer among the node's jobs.) Also returns what the jobs
    /// being aborted still hold: their resources stay taken until the node reports them
    /// gone.
    pub(crate) fn reconcile_running(
        &mut self,
        ctx: &mut HeartbeatContext,
        running_jobs: &[RunningJob],
    ) {
        let (node_id, now) = (&ctx.node.clone(), ctx.now);
        let mut reported: HashSet<&JobId> = HashSet::with_capacity(running_jobs.len());
        for running in running_jobs {
            reported.insert(&running.job_id);
            if self.jobs.owner(&running.job_id).is_none()
                && self.adopt_attempt(
                    node_id,
                    &running.job_id,
                    &running.operation_id,
                    running.attempt_of.as_ref(),
                    running.start_time,
                )
            {
                continue;
            }
            let job = self
                .jobs
                .owner(&running.job_id)
                .and_then(|op| self.operations.get(op))
                .and_then(|op| op.jobs.get(&running.job_id));
            let abort = match job {
                // Told to exit gracefully: told again until it has (a reply may be lost).
                Some(j) if j.state == JobState::Running && &j.node == node_id => {
                    if j.interrupting.is_some() {
                        ctx.abort(crate::trees::victims::graceful_abort(self.cluster, j, now));
                    }
                    let preparing = running.state == JobState::Preparing;
                    if j.preparing != preparing {
                        self.set_preparing(node_id, &running.job_id, preparing);
                    }
                    continue;
                }
                j => {
                    let reported_aborted = j.is_some_and(|j| &j.node == node_id);
                    let abort = stale_job_abort(&running.job_id, j);
                    if reported_aborted {
                        self.hold_while_reported(&running.job_id, now);
                    }
                    abort
                }
            };
            ctx.abort_dying(abort, running.resource_usage);
        }
        ctx.resent = self.resend_or_lose(ctx, &reported);
    }

    /// Its node still reports aborted attempt `job`: an index that waits again is held
    /// until the node says the attempt ended, so it never runs twice at once, and a held
    /// one's node timeout runs from this report. The operation is edited only when the
    /// index waits.
    fn hold_while_reported(&mut self, job: &JobId, now: UnixMillis) {
        let Some(op_id) = self.jobs.owner(job).cloned() else {
            return;
        };
        if self.operations.renew_hold(&op_id, job, now) {
            return;
        }
        if self
            .operations
            .get(&op_id)
            .is_some_and(|op| op.index_waits_after_abort(job))
        {
            if let Some(mut op) = self.operations.edit(&op_id) {
                op.hold_again(job, now);
            }
        }
    }

    /// A running attempt's node says it is (or no longer is) fetching its files; the
    /// first time, the event log says so.
    fn set_preparing(&mut self, node_id: &NodeId, job_id: &JobId, preparing: bool) {
        let Some(op_id) = self.jobs.owner(job_id).cloned() else {
            return;
        };
        if let Some(mut op) = self.operations.edit(&op_id) {
            if let Some(j) = op.jobs.get_mut(job_id) {
                j.preparing = preparing;
            }
        }
        if preparing {
            let attempt = self.operations.attempt_facts(&op_id, job_id);
            self.outbox.event(CoreEvent::JobPreparing {
                id: job_id.clone(),
                operation: op_id,
                node: node_id.clone(),
                attempt,
            });
        }
    }

    /// The jobs placed on the node that it does not report: a start no reply the node
    /// read has carried is sent again (returned); any other is lost.
    pub(crate) fn resend_or_lose(
        &mut self,
        ctx: &HeartbeatContext,
        reported: &HashSet<&JobId>,
    ) -> Vec<JobStartSpec> {
        let (node_id, now) = (&ctx.node, ctx.now);
        let mut resent = Vec::new();
        let read_up_to = ctx.last_reply_seq;
        // A start no reply has carried yet (a gang's, booked by `tick`) goes in this one.
        self.jobs.confirm(node_id, |job, sent_in| {
            !reported.contains(job)
                && (sent_in == crate::jobs::job_index::NEVER_SENT
                    || read_up_to.is_some_and(|r| r < sent_in))
        });
        let missing: Vec<JobId> = self
            .jobs
            .on(node_id)
            .filter(|j| !reported.contains(*j))
            .cloned()
            .collect();
        for job_id in missing {
            let unread = self.jobs.is_unconfirmed(node_id, &job_id);
            let spec = unread
                .then(|| {
                    self.jobs
                        .owner(&job_id)
                        .and_then(|op| self.operations.get(op))
                        .and_then(|op| op.start_spec(&job_id))
                })
                .flatten();
            match spec {
                Some(spec) => {
                    // A gang's start, booked by `tick`: its attempt number is in a
                    // record that must be stored before the number goes out.
                    if self.jobs.never_sent(node_id, &job_id) {
                        self.outbox.reply_after_store();
                    }
                    self.jobs.sent_in(node_id, &job_id, ctx.seq);
                    resent.push(spec);
                }
                None => self.lose_job(node_id, &job_id, now),
            }
        }
        resent
    }

    /// Aborts the jobs a node may no longer run, at its heartbeat before what it runs is
    /// reconciled, when its tree changed or it was banned since the last one.
    /// Jobs of a tree it left run again in their tree; a banned node runs nothing, and
    /// its jobs run again elsewhere (a decommissioned one keeps its jobs until they end).
    /// Returns the trees whose jobs it aborted: their shares are stale.
    pub(crate) fn evict_strays(&mut self, node_id: &NodeId, now: UnixMillis) -> BTreeSet<TreeName> {
        let mut stale = BTreeSet::new();
        let Some(node) = self.nodes.get(node_id) else {
            return stale;
        };
        let banned = node.maintenance.banned;
        let current = self.cluster.tree_of(node).cloned();
        let strays: Vec<(OperationId, JobId, TreeName)> = self
            .jobs
            .on(node_id)
            .filter_map(|j| {
                let op = self.jobs.owner(j)?;
                let job = self.operations.get(op)?.jobs.get(j)?;
                (job.state == JobState::Running && (banned || Some(&job.tree) != current.as_ref()))
                    .then(|| (op.clone(), j.clone(), job.tree.clone()))
            })
            .collect();
        for (op, job, tree) in strays {
            let (reason, message) = if banned {
                (
                    AbortReason::NodeBanned,
                    format!("node {node_id} is banned; the job runs again elsewhere"),
                )
            } else {
                (
                    AbortReason::NodeFairShareTreeChanged,
                    tree_change_message(self.nodes, node_id, &tree, current.as_deref()),
                )
            };
            self.abort_running_job(node_id, &op, &job, reason, &message, now);
            stale.insert(tree);
        }
        stale
    }

    /// At the end of the revival window, jobs no node reported are lost: they run again.
    pub(crate) fn end_revival_if_due(
        &mut self,
        deadline: &mut Option<UnixMillis>,
        now: UnixMillis,
    ) {
        if deadline.is_none_or(|d| now < d) {
            return;
        }
        *deadline = None;
        let silent: Vec<(NodeId, Vec<JobId>)> = self
            .jobs
            .nodes()
            .filter(|id| self.nodes.get(*id).is_none_or(|n| !n.online))
            .map(|id| (id.clone(), self.jobs.on(id).cloned().collect()))
            .collect();
        let mut lost = 0;
        for (node, jobs) in &silent {
            for job in jobs {
                lost += 1;
                self.lose_job(node, job, now);
                if let Some(op) = self.jobs.owner(job).cloned() {
                    if let Some(mut o) = self.operations.edit(&op) {
                        o.record(
                            now,
                            format!(
                                "job {job} lost: node {node} did not report it after the revival"
                            ),
                        );
                    }
                }
            }
        }
        self.outbox.event(CoreEvent::RevivalEnded {
            lost_jobs: lost,
            silent_nodes: silent.len(),
        });
        self.outbox
            .nudge_all(crate::nodes::node::online_ids(self.nodes));
    }

    /// The heartbeat's reply stage: starts resent first (the node would have run them had it read the
    /// reply), each start stamped with its token and noted as sent in this reply.
    pub(crate) fn reply(
        &mut self,
        ctx: HeartbeatContext,
        period_ms: u64,
        default_timeout_ms: u64,
    ) -> HeartbeatReply {
        let HeartbeatContext {
            node: node_id,
            seq,
            last_reply_seq,
            starts,
            aborts,
            acknowledged,
            resent,
            ..
        } = ctx;
        if last_reply_seq.is_some() {
            for start in &starts {
                self.jobs.sent_in(&node_id, &start.job_id, seq);
            }
        }
        let mut jobs_to_start: Vec<JobStartSpec> = if resent.is_empty() {
            starts
        } else {
            resent.into_iter().chain(starts).collect()
        };
        self.stamp_starts(&node_id, &mut jobs_to_start);
        let node = &self.nodes[&node_id];
        HeartbeatReply {
            protocol_version: PROTOCOL_VERSION,
            registration: node.registration.clone(),
            jobs_to_start,
            jobs_to_abort: aborts,
            acknowledged_jobs: acknowledged,
            user_tags: self.cluster.user_tags(&node_id).to_vec(),
            heartbeat_period_ms: period_ms,
            node_heartbeat_timeout_ms: self.cluster.node_timeout_ms(node, default_timeout_ms),
        }
    }
}

/// The abort of a job a node runs that the scheduler does not run there: aborted (saying
/// why), placed elsewhere, or unknown.
fn stale_job_abort(job_id: &JobId, job: Option<&crate::Job>) -> JobAbort {
    let (reason, message) = match job {
        Some(j) => (
            j.abort_reason.unwrap_or(AbortReason::OperationAborted),
            match j.abort_reason {
                Some(AbortReason::NodeLost) => {
                    "the scheduler lost contact with this node and ran the job elsewhere".into()
                }
                Some(r) => j
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("job was aborted: {r}")),
                None => "job is not running on this node".into(),
            },
        ),
        None => (
            AbortReason::OperationAborted,
            "the scheduler knows no such job".into(),
        ),
    };
    JobAbort {
        job_id: job_id.clone(),
        reason,
        message,
        graceful_timeout_ms: None,
    }
}
