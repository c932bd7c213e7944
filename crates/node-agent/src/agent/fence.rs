//! The agent's own fence (SPEC 5.11): a node the scheduler no longer hears stops its
//! jobs before the scheduler runs them elsewhere, so no job runs twice at once.

use super::{Agent, JobAbort};
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;
use ytsched_common::states::AbortReason;

impl Agent {
    /// Whether an answer to a heartbeat sent at `sent` comes when this node would
    /// already fence its jobs: the scheduler may count it lost by now.
    pub(super) fn too_late_to_start(&self, sent: std::time::Instant) -> bool {
        answer_too_late(
            sent.elapsed(),
            self.node_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
            self.config.sandbox.kill_grace,
        )
    }

    /// How long the next heartbeat waits for its answer. A heartbeat in flight when its
    /// scheduler dies is never answered, not even by "no responders"; waiting it out whole
    /// would let the silence reach the fence, and a mere restart of the scheduler would
    /// stop every job (issue 42's CI: 11 jobs killed). Given up halfway to the fence, it
    /// is sent again in time to hear that no scheduler listens, which stops the count.
    pub(super) fn patience(&self) -> Duration {
        let timeout = self
            .node_timeout_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        let silent = self.last_answer.lock().expect("answer lock").elapsed();
        heartbeat_patience(silent, timeout, self.config.sandbox.kill_grace)
    }

    /// Kills this node's jobs itself once the scheduler has not taken a heartbeat for
    /// nearly its node timeout (Nomad's `stop_after_client_disconnect`): the scheduler
    /// runs them elsewhere after the full timeout, counted from when it last heard this
    /// node, which is no earlier than the sending of the last heartbeat it answered; the
    /// margin covers the kill grace. A node cut off from the bus (partitioned, or its
    /// identity revoked) thus never runs a job at the same time as its re-run. While the
    /// bus answers that no scheduler listens (one restarting), the silence does not
    /// count: no scheduler counts it, and a revived one waits for the jobs instead.
    pub(super) async fn fence_when_silent(self: Arc<Self>) {
        let mut fenced = false;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let timeout = self
                .node_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed);
            if timeout == 0 {
                continue;
            }
            let timeout = Duration::from_millis(timeout);
            let silent = self.last_answer.lock().expect("answer lock").elapsed();
            let fence_at = fence_after(timeout, self.config.sandbox.kill_grace);
            if silent < fence_at {
                // The guardian fences in this agent's stead should it stop saying so.
                self.config.sandbox.guardian.alive_for(fence_at - silent);
                fenced = false;
                continue;
            }
            let mut st = self.lock();
            let mut stopped = 0;
            for entry in st.running.values_mut() {
                if let Some(tx) = entry.abort.take() {
                    stopped += 1;
                    let _ = tx.send(JobAbort {
                        job_id: entry.spec.job_id.clone(),
                        reason: AbortReason::NodeLost,
                        message: format!(
                            "no answer from the scheduler for {} s (node timeout {} s): stopped so that its re-run elsewhere never overlaps it",
                            silent.as_secs(),
                            timeout.as_secs()
                        ),
                        graceful_timeout_ms: None,
                    });
                }
            }
            drop(st);
            if !fenced || stopped > 0 {
                warn!(
                    silent_ms = silent.as_millis() as u64,
                    node_timeout_ms = timeout.as_millis() as u64,
                    jobs = stopped,
                    "no answer from the scheduler for nearly its node timeout: this node's jobs are stopped, as it will run them elsewhere"
                );
                fenced = true;
            }
        }
    }
}

/// How long an agent goes without an answer before it stops its jobs: the node timeout
/// less a margin of a quarter of it, or the kill grace and a second (at most half the
/// timeout), whichever is more.
pub fn fence_after(node_timeout: Duration, kill_grace: Duration) -> Duration {
    let margin =
        (node_timeout / 4).max((kill_grace + Duration::from_secs(1)).min(node_timeout / 2));
    node_timeout.saturating_sub(margin)
}

/// The longest a heartbeat waits for its answer, when the node has no fence to keep to.
const MOST_PATIENCE: Duration = Duration::from_secs(5);
/// The least: a busy scheduler is not asked again more often than this, and it answers
/// a heartbeat only while more than its margin (250 ms) of the wait is left.
const LEAST_PATIENCE: Duration = Duration::from_millis(500);

/// How long a heartbeat sent after `silent` without an answer waits for one: half of what
/// is left before the fence (`timeout_ms` 0: none said yet), within bounds.
fn heartbeat_patience(silent: Duration, timeout_ms: u64, kill_grace: Duration) -> Duration {
    if timeout_ms == 0 {
        return MOST_PATIENCE;
    }
    let fence_at = fence_after(Duration::from_millis(timeout_ms), kill_grace);
    (fence_at.saturating_sub(silent) / 2).clamp(LEAST_PATIENCE, MOST_PATIENCE)
}

/// Whether an answer that came `waited` after its heartbeat was sent comes when the
/// node fences its jobs (`timeout_ms` 0: the scheduler has not said its timeout yet).
fn answer_too_late(waited: Duration, timeout_ms: u64, kill_grace: Duration) -> bool {
    timeout_ms > 0 && waited >= fence_after(Duration::from_millis(timeout_ms), kill_grace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_stop_well_before_the_scheduler_runs_them_elsewhere() {
        let s = Duration::from_secs;
        assert_eq!(fence_after(s(30), s(5)), Duration::from_millis(22_500));
        assert_eq!(fence_after(s(30), s(20)), s(15));
        assert_eq!(fence_after(s(4), s(5)), s(2));
        assert_eq!(
            fence_after(Duration::from_millis(1000), s(0)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn a_heartbeat_lost_with_its_scheduler_is_sent_again_before_the_fence() {
        // The lab's case: a 5 s node timeout and a 1 s kill grace fence at 3 s. A
        // heartbeat sent 0.5 s after the last answered one gives up at 1.75 s, and the
        // next one (after a 100 ms backoff) hears "no responders" well before 3 s.
        let ms = Duration::from_millis;
        let fence_at = fence_after(ms(5_000), ms(1_000));
        assert_eq!(fence_at, ms(3_000));
        let given_up_at = ms(500) + heartbeat_patience(ms(500), 5_000, ms(1_000));
        assert_eq!(given_up_at, ms(1_750));
        let resent = given_up_at + ms(100);
        assert!(resent + heartbeat_patience(resent, 5_000, ms(1_000)) < fence_at);
        // Close to the fence a busy scheduler is still given a fair time to answer.
        assert_eq!(heartbeat_patience(ms(2_900), 5_000, ms(1_000)), ms(500));
        assert_eq!(heartbeat_patience(ms(9_000), 5_000, ms(1_000)), ms(500));
        // The default 30 s timeout, or none said yet, keeps the 5 s of before.
        assert_eq!(heartbeat_patience(ms(0), 30_000, ms(5_000)), ms(5_000));
        assert_eq!(heartbeat_patience(ms(0), 0, ms(5_000)), ms(5_000));
    }

    #[test]
    fn an_answer_that_comes_when_the_node_would_fence_starts_nothing() {
        // The campaign's case: a 5 s node timeout, and an answer that waited 4.5 s on
        // the scheduler's store. The node fences 3.75 s after sending.
        let ms = Duration::from_millis;
        assert!(!answer_too_late(ms(3_749), 5_000, ms(0)));
        assert!(answer_too_late(ms(3_750), 5_000, ms(0)));
        assert!(answer_too_late(ms(4_500), 5_000, ms(0)));
        assert!(!answer_too_late(ms(4_500), 30_000, ms(0)));
        assert!(
            !answer_too_late(ms(60_000), 0, ms(0)),
            "no timeout said yet"
        );
    }
}
