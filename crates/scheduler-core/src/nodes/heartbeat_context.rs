//! One heartbeat's working state, passed through its stages (limits, placement,
//! preemption, speculation) instead of loose locals: what the node has free is worked
//! out in one place, as YTsaurus's scheduling context does, and every start and abort
//! of the heartbeat lands in the same two lists.

use ytsched_common::protocol::{JobAbort, JobStartSpec, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::NodeId;

#[derive(Debug)]
pub(crate) struct HeartbeatContext {
    pub node: NodeId,
    pub now: UnixMillis,
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
}

impl HeartbeatContext {
    pub fn new(
        node: NodeId,
        now: UnixMillis,
        limits: ResourceVector,
        running: ResourceVector,
        dying: ResourceVector,
        aborts: Vec<JobAbort>,
    ) -> Self {
        HeartbeatContext {
            node,
            now,
            limits,
            running,
            dying,
            started: ResourceVector::ZERO,
            starts: Vec::new(),
            aborts,
        }
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

    /// An abort of a job counted in `running` (it keeps its resources until gone).
    pub fn abort(&mut self, abort: JobAbort) {
        self.aborts.push(abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ytsched_common::{JobId, OperationId};

    fn cpu(c: f64) -> ResourceVector {
        ResourceVector::new(c, 0.0, 0.0, c)
    }

    #[test]
    fn free_is_limits_less_running_dying_and_started() {
        let mut ctx =
            HeartbeatContext::new(NodeId("n".into()), 0, cpu(8.0), cpu(3.0), cpu(1.0), vec![]);
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
        });
        assert_eq!(ctx.free(), cpu(2.0));
        ctx.abort(JobAbort {
            job_id: JobId("old".into()),
            reason: ytsched_common::states::AbortReason::Preempted,
            message: String::new(),
            graceful_timeout_ms: None,
        });
        assert_eq!(ctx.free(), cpu(2.0), "an aborted job holds on until gone");
        assert_eq!((ctx.starts.len(), ctx.aborts.len()), (1, 1));
    }
}
