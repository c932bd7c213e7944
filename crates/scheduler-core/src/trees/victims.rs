//! Taking the victims a preemption chose (SPEC 5.3, 5.15): at once, or gracefully where
//! their operation asks for it (`preemption_mode: graceful`). A graceful victim is sent
//! its interruption signal with the time it has, stays running and counted on its node
//! (marked `interrupting`) and is told again at each heartbeat until its node reports it
//! stopped; what such victims hold on a node is room coming, not room to take again.

use crate::ClusterConfig;
use crate::Job;
use ytsched_common::protocol::{JobAbort, UnixMillis};
use ytsched_common::states::AbortReason;

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
