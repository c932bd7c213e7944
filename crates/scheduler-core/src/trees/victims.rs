//! Taking the victims a preemption chose (SPEC 5.3, 5.15): at once, or gracefully where
//! their operation asks for it (`preemption_mode: graceful`). A graceful victim is sent
//! its interruption signal with the time it has, stays running and counted on its node
//! (marked `interrupting`) and is told again at each heartbeat until its node reports it
//! stopped; what such victims hold on a node is room coming, not room to take again.

use crate::ClusterConfig;
use crate::{CoreEvent, Job, SchedulerCore};
use ytsched_common::protocol::{JobAbort, UnixMillis};
use ytsched_common::spec::PreemptionMode;
use ytsched_common::states::{AbortReason, JobState};
use ytsched_common::{JobId, NodeId, OperationId};

impl SchedulerCore {
    /// Preempts `victims` on the node: at once, or gracefully where their operation
    /// asks for it. A gang victim takes its whole gang with it: its members on this node
    /// are aborted here too. Returns whether any victim is graceful, and the aborts.
    pub(crate) fn take_victims(
        &mut self,
        node_id: &NodeId,
        victims: Vec<(JobId, OperationId)>,
        preemptor: &OperationId,
        message: &str,
        now: UnixMillis,
    ) -> (bool, Vec<JobAbort>) {
        let mut graceful = false;
        let mut aborts = vec![];
        for (job, owner) in victims {
            if self.operations[&owner].spec.preemption_mode == Some(PreemptionMode::Graceful) {
                graceful = true;
                // A gang victim was chosen for all its jobs here: each is told.
                let mut jobs = vec![job];
                if self.operations[&owner].is_gang() {
                    jobs = self
                        .jobs
                        .on(node_id)
                        .filter(|j| self.jobs.owner(j) == Some(&owner))
                        .filter(|j| {
                            self.operations[&owner].jobs.get(*j).is_some_and(|x| {
                                x.state == JobState::Running && x.interrupting.is_none()
                            })
                        })
                        .cloned()
                        .collect();
                }
                for j in jobs {
                    aborts.push(self.interrupt_job(node_id, &owner, &j, preemptor, message, now));
                }
                continue;
            }
            let members = self.abort_running_job_for(
                node_id,
                &owner,
                &job,
                AbortReason::Preempted,
                message,
                now,
                Some(preemptor),
            );
            aborts.push(JobAbort {
                job_id: job,
                reason: AbortReason::Preempted,
                message: message.to_string(),
                graceful_timeout_ms: None,
            });
            for (member, on) in members {
                if &on == node_id {
                    aborts.push(JobAbort {
                        job_id: member,
                        reason: AbortReason::GangMemberLost,
                        message: format!("another job of its gang was {message}"),
                        graceful_timeout_ms: None,
                    });
                }
            }
        }
        (graceful, aborts)
    }

    /// Graceful preemption (SPEC 5.3): the job is told to stop with its interruption
    /// signal and the tree's `job_graceful_interrupt_timeout`; it stays running, and
    /// counted on its node, until its node reports it gone.
    fn interrupt_job(
        &mut self,
        node_id: &NodeId,
        op_id: &OperationId,
        job_id: &JobId,
        preemptor: &OperationId,
        message: &str,
        now: UnixMillis,
    ) -> JobAbort {
        if let Some(mut op) = self.operations.edit(op_id) {
            if let Some(j) = op.jobs.get_mut(job_id) {
                j.interrupting = Some(now);
                j.error = Some(format!("{message} (gracefully)"));
            }
            op.changed_jobs.push(job_id.clone());
        }
        let attempt = self.operations.attempt_facts(op_id, job_id);
        self.outbox.event(CoreEvent::JobInterrupted {
            id: job_id.clone(),
            operation: op_id.clone(),
            node: node_id.clone(),
            preempted_by: Some(preemptor.clone()),
            attempt,
        });
        let job = &self.operations[op_id].jobs[job_id];
        crate::trees::victims::graceful_abort(&self.cluster, job, now)
    }
}

/// The abort a gracefully preempted job is sent (again, while its node still reports
/// it): the time it has left to exit, by its tree's `job_graceful_interrupt_timeout`.
pub(crate) fn graceful_abort(cluster: &ClusterConfig, job: &Job, now: UnixMillis) -> JobAbort {
    let timeout = cluster
        .trees
        .get(job.tree.as_str())
        .map_or(60_000, |t| t.config.job_graceful_interrupt_timeout.0);
    let since = job.interrupting.unwrap_or(now);
    JobAbort {
        job_id: job.id.clone(),
        reason: AbortReason::Preempted,
        message: job.error.clone().unwrap_or_default(),
        graceful_timeout_ms: Some(timeout.saturating_sub(now.saturating_sub(since))),
    }
}
