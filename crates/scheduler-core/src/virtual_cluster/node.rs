//! One simulated node, played the way an agent behaves on the bus: it reports what it
//! runs and every result until the scheduler acknowledges it, carries out aborts (a
//! graceful one only when the job's interruption timeout ends), and starts what the reply
//! says. Jobs end on their own only when they were given a duration.

use crate::SchedulerCore;
use std::collections::BTreeMap;
use ytsched_common::protocol::{
    AttemptOf, FinishedJob, HeartbeatReply, HeartbeatRequest, JobStartSpec, JobStatistics,
    RunningJob, UnixMillis,
};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::JobState;
use ytsched_common::{IncarnationId, JobId, NodeId};

/// How long a started job runs, by its spec (`None`: until it is aborted or a test ends
/// it).
pub type Durations<'d> = &'d dyn Fn(&JobStartSpec) -> Option<u64>;

/// A job as the node runs it.
pub struct VirtualJob {
    pub spec: JobStartSpec,
    pub started_at: UnixMillis,
    ends_at: Option<UnixMillis>,
    /// Gracefully preempted: it exits (aborted) at this time unless it ends first.
    interrupted_at: Option<UnixMillis>,
}

impl VirtualJob {
    /// When and how it ends by itself, if it does.
    fn end(&self) -> Option<(UnixMillis, JobState)> {
        match (self.ends_at, self.interrupted_at) {
            (Some(f), Some(i)) if i < f => Some((i, JobState::Aborted)),
            (None, Some(i)) => Some((i, JobState::Aborted)),
            (Some(f), _) => Some((f, JobState::Completed)),
            (None, None) => None,
        }
    }

    /// Its result, ending in `state` at `now`; it printed `out <index>`.
    fn result(&self, state: JobState, now: UnixMillis) -> FinishedJob {
        FinishedJob {
            job_id: self.spec.job_id.clone(),
            operation_id: self.spec.operation_id.clone(),
            state,
            error: (state == JobState::Failed).then(|| "command exited with code 1".into()),
            start_time: self.started_at,
            finish_time: now.max(self.started_at),
            statistics: JobStatistics {
                wall_time_ms: now.saturating_sub(self.started_at),
                exit_code: (state == JobState::Completed).then_some(0),
                ..Default::default()
            },
            stdout_tail: format!("out {}", self.spec.job_index),
            stderr_tail: String::new(),
            attempt_of: Some(AttemptOf::of(&self.spec)),
        }
    }
}

/// A node: what it offers, its tags, what it runs and what it has yet to report.
pub struct VirtualNode {
    pub id: NodeId,
    pub resources: ResourceVector,
    pub tags: Vec<String>,
    /// When it comes online (its first heartbeat is due then).
    pub joins_at: UnixMillis,
    /// While set, aborts are not carried out: its jobs keep running and being reported.
    pub slow_to_kill: bool,
    running: BTreeMap<JobId, VirtualJob>,
    finished: Vec<FinishedJob>,
    seq: u64,
}

impl VirtualNode {
    pub fn new(id: NodeId, resources: ResourceVector, tags: Vec<String>) -> Self {
        VirtualNode {
            id,
            resources,
            tags,
            joins_at: 0,
            slow_to_kill: false,
            running: BTreeMap::new(),
            finished: vec![],
            seq: 0,
        }
    }

    /// The same node, coming online at `at`.
    pub fn joining_at(mut self, at: UnixMillis) -> Self {
        self.joins_at = at;
        self
    }

    pub fn running(&self) -> impl Iterator<Item = &VirtualJob> {
        self.running.values()
    }

    /// Job `job` ends with `state` at `now` (reported at the next heartbeat); its result,
    /// for a test to shape further. `None`: the node does not run it.
    pub fn end_job(
        &mut self,
        job: &JobId,
        state: JobState,
        now: UnixMillis,
    ) -> Option<&mut FinishedJob> {
        let j = self.running.remove(job)?;
        self.finished.push(j.result(state, now));
        self.finished.last_mut()
    }

    /// Every job it runs ends with `state` at `now`.
    pub fn end_all(&mut self, state: JobState, now: UnixMillis) {
        for (_, j) in std::mem::take(&mut self.running) {
            self.finished.push(j.result(state, now));
        }
    }

    /// Jobs whose time is up at `t` end (completed, or aborted where a graceful
    /// preemption's timeout came first); true if any did.
    pub fn end_due(&mut self, t: UnixMillis) -> bool {
        let due: Vec<JobId> = self
            .running
            .iter()
            .filter(|(_, j)| j.end().is_some_and(|(at, _)| at <= t))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            let j = self.running.remove(id).expect("listed");
            let (at, state) = j.end().expect("filtered");
            self.finished.push(j.result(state, at));
        }
        !due.is_empty()
    }

    /// The earliest time one of its jobs ends by itself.
    pub fn next_end(&self) -> Option<UnixMillis> {
        self.running
            .values()
            .filter_map(|j| j.end())
            .map(|e| e.0)
            .min()
    }

    /// One heartbeat at `now`: report, then carry out the reply (each start runs for
    /// what `durations` says).
    pub fn heartbeat(
        &mut self,
        core: &mut SchedulerCore,
        now: UnixMillis,
        durations: Durations,
    ) -> HeartbeatReply {
        let reply = core.process_heartbeat(self.request(), now);
        self.carry_out(&reply, now, durations);
        reply
    }

    fn request(&mut self) -> HeartbeatRequest {
        self.seq += 1;
        let name = self.id.to_string();
        HeartbeatRequest {
            seq: self.seq,
            tags: self.tags.clone(),
            system_tags: vec![format!("host:{name}")],
            resource_usage: self.running.values().map(|j| j.spec.resources).sum(),
            running_jobs: self
                .running
                .values()
                .map(|j| RunningJob::started(&j.spec, j.started_at))
                .collect(),
            finished_jobs: self.finished.clone(),
            ..HeartbeatRequest::new(
                self.id.clone(),
                IncarnationId(format!("{name}-1")),
                self.resources,
            )
        }
    }

    fn carry_out(&mut self, reply: &HeartbeatReply, now: UnixMillis, durations: Durations) {
        self.finished
            .retain(|f| !reply.acknowledged_jobs.contains(&f.job_id));
        for abort in &reply.jobs_to_abort {
            match (
                abort.graceful_timeout_ms,
                self.running.get_mut(&abort.job_id),
            ) {
                (_, None) => {}
                (Some(ms), Some(job)) => {
                    job.interrupted_at.get_or_insert(now + ms);
                }
                (None, Some(_)) if self.slow_to_kill => {}
                (None, Some(_)) => {
                    self.end_job(&abort.job_id, JobState::Aborted, now);
                }
            }
        }
        for start in &reply.jobs_to_start {
            let job = VirtualJob {
                spec: start.clone(),
                started_at: now,
                ends_at: durations(start).map(|d| now + d),
                interrupted_at: None,
            };
            self.running.insert(start.job_id.clone(), job);
        }
    }
}
