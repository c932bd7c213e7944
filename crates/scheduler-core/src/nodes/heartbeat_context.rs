//! One heartbeat's working state, made first and passed through every stage (results,
//! reconcile, limits, placement, preemption, speculation, reply), as YTsaurus's
//! scheduling heartbeat context is: what the node has free is worked out in one place,
//! and every acknowledgement, start, resent start and abort of the heartbeat lands in
//! its lists, with no tuples handed between stages.

use ytsched_common::protocol::{JobAbort, JobStartSpec, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::{JobId, NodeId};

#[derive(Debug)]
pub(crate) struct HeartbeatContext {
    pub node: NodeId,
    pub now: UnixMillis,
    /// The heartbeat's sequence number, and the last reply the node says it read.
    pub seq: u64,
    pub last_reply_seq: Option<u64>,
    /// What the node offers (set when placement begins).
    limits: ResourceVector,
    /// What the node's running jobs held when the stages began. A job a stage aborts
    /// stays counted: it holds its resources until the node reports it gone.
    running: ResourceVector,
    /// What jobs killed before this heartbeat still hold (the node still reports them).
    dying: ResourceVector,
    /// What the jobs started in this heartbeat take.
    started: ResourceVector,
    pub starts: Vec<JobStartSpec>,
    pub aborts: Vec<JobAbort>,
    /// Results taken (the node deletes their sandboxes).
    pub acknowledged: Vec<JobId>,
    /// Starts sent before in a reply the node has not read: they go again, first.
    pub resent: Vec<JobStartSpec>,
}

impl HeartbeatContext {
    pub fn new(node: NodeId, now: UnixMillis, seq: u64, last_reply_seq: Option<u64>) -> Self {
        HeartbeatContext {
            node,
            now,
            seq,
            last_reply_seq,
            limits: ResourceVector::ZERO,
            running: ResourceVector::ZERO,
            dying: ResourceVector::ZERO,
            started: ResourceVector::ZERO,
            starts: Vec::new(),
            aborts: Vec::new(),
            acknowledged: Vec::new(),
            resent: Vec::new(),
        }
    }

    /// What the node offers and what its running jobs hold as placement begins.
    pub fn begin_placement(&mut self, limits: ResourceVector, running: ResourceVector) {
        self.limits = limits;
        self.running = running;
    }

    /// An abort of a job not counted in `running` at placement: it holds `holds` until
    /// its node reports it gone.
    pub fn abort_dying(&mut self, abort: JobAbort, holds: ResourceVector) {
        self.dying += holds;
        self.aborts.push(abort);
    }

    /// What jobs aborted before placement (their aborts already listed) still hold.
    pub fn abort_dying_resources(&mut self, holds: ResourceVector) {
        self.dying += holds;
    }

    /// Limits − running − being killed − started in this heartbeat. May be negative in
    /// a resource after a preemption: the victims' resources are not free until they
    /// are gone.
    pub fn free(&self) -> ResourceVector {
        self.limits - self.running - self.dying - self.started
    }

    pub fn start(&mut self, spec: JobStartSpec) {
        self.started += spec.resources;
        self.starts.push(spec);
    }

    /// A preemption's outcome: the starving operation's job (none while graceful
    /// victims exit) and its victims' aborts.
    pub fn start_and_abort(&mut self, start: Option<JobStartSpec>, aborts: Vec<JobAbort>) {
        if let Some(start) = start {
            self.start(start);
        }
        self.aborts.extend(aborts);
    }

    /// An abort of a job counted in `running` (it keeps its resources until gone).
    pub fn abort(&mut self, abort: JobAbort) {
        self.aborts.push(abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ytsched_common::OperationId;

    fn cpu(c: f64) -> ResourceVector {
        ResourceVector::new(c, 0.0, 0.0, c)
    }

    #[test]
    fn free_is_limits_less_running_dying_and_started() {
        let mut ctx = HeartbeatContext::new(NodeId("n".into()), 0, 1, None);
        ctx.begin_placement(cpu(8.0), cpu(3.0));
        ctx.abort_dying(
            JobAbort {
                job_id: JobId("dying".into()),
                reason: ytsched_common::states::AbortReason::Preempted,
                message: String::new(),
                graceful_timeout_ms: None,
            },
            cpu(1.0),
        );
        assert_eq!(ctx.free(), cpu(4.0));
        ctx.start(JobStartSpec {
            job_id: JobId("j".into()),
            operation_id: OperationId("o".into()),
            task_name: "t".into(),
            job_index: 0,
            job_count: 1,
            command: "true".into(),
            environment: Default::default(),
            stdin: None,
            resources: cpu(2.0),
            disk_space: None,
            interruption_signal: None,
            start_token: None,
            files: vec![],
            layers: vec![],
        });
        assert_eq!(ctx.free(), cpu(2.0));
        ctx.abort(JobAbort {
            job_id: JobId("old".into()),
            reason: ytsched_common::states::AbortReason::Preempted,
            message: String::new(),
            graceful_timeout_ms: None,
        });
        assert_eq!(ctx.free(), cpu(2.0), "an aborted job holds on until gone");
        assert_eq!((ctx.starts.len(), ctx.aborts.len()), (1, 2));
    }
}
