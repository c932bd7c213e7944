//! The agent's own fence (SPEC 5.11): a node the scheduler no longer hears stops its
//! jobs before the scheduler runs them elsewhere, so no job runs twice at once.

use super::{Agent, JobAbort};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};
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

    /// Kills this node's jobs itself once the scheduler has not taken a heartbeat for
    /// nearly its node timeout (Nomad's `stop_after_client_disconnect`): the scheduler
    /// runs them elsewhere after the full timeout, counted from when it last heard this
    /// node, which is no earlier than the sending of the last heartbeat it answered; the
    /// margin covers the kill grace. A node cut off from the bus (partitioned, or its
    /// identity revoked) thus never runs a job at the same time as its re-run. While the
    /// bus answers that no scheduler listens (one restarting), the silence does not
    /// count: no scheduler counts it, and a revived one waits for the jobs instead.
    ///
    /// A heartbeat that went to a scheduler that then died is never answered, not even
    /// by "no responders", and would be waited for whole. So shortly before fencing, the
    /// agent probes: if no scheduler listens its silence stops counting, and if one
    /// answers, the heartbeat that waits is given up and sent again to it (issue 42's
    /// CI: a restart fenced 38 jobs of `killed_scheduler_revives_...`).
    pub(super) async fn fence_when_silent(
        self: Arc<Self>,
        client: async_nats::Client,
        subject: String,
    ) {
        let mut fenced = false;
        let mut probed_at = None;
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
            if probe_due(
                silent,
                fence_at,
                probed_at.map(|t: std::time::Instant| t.elapsed()),
            ) {
                probed_at = Some(std::time::Instant::now());
                self.probe(&client, &subject).await;
                continue;
            }
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

impl Agent {
    /// Asks whether a scheduler listens on this node's heartbeat subject (an empty
    /// request, which a scheduler answers at once with an empty reply).
    async fn probe(&self, client: &async_nats::Client, subject: &str) {
        let asked = tokio::time::timeout(
            PROBE_WAIT,
            client.request(subject.to_string(), bytes::Bytes::new()),
        )
        .await;
        match asked {
            Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                // No scheduler counts this node's silence.
                *self.last_answer.lock().expect("answer lock") = std::time::Instant::now();
            }
            Ok(Ok(_)) => {
                info!("a scheduler answers while this node's heartbeat waits: sending it again");
                // Only a heartbeat waiting now is given up; the next one goes at once.
                self.resend.notify_waiters();
                self.wake.notify_one();
            }
            _ => {}
        }
    }
}

/// How long before its fence an agent probes, and how long it waits for the answer.
const PROBE_LEAD: Duration = Duration::from_millis(800);
const PROBE_WAIT: Duration = Duration::from_millis(400);

/// Whether to probe now: within `PROBE_LEAD` of the fence, at most once per lead.
fn probe_due(silent: Duration, fence_at: Duration, since_probe: Option<Duration>) -> bool {
    silent + PROBE_LEAD >= fence_at && since_probe.is_none_or(|t| t >= PROBE_LEAD)
}

/// How long an agent goes without an answer before it stops its jobs: the node timeout
/// less a margin of a quarter of it, or the kill grace and a second (at most half the
/// timeout), whichever is more.
pub fn fence_after(node_timeout: Duration, kill_grace: Duration) -> Duration {
    let margin =
        (node_timeout / 4).max((kill_grace + Duration::from_secs(1)).min(node_timeout / 2));
    node_timeout.saturating_sub(margin)
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
    fn a_silent_node_probes_shortly_before_its_fence_and_no_more_often() {
        let ms = Duration::from_millis;
        let fence_at = ms(3_000);
        assert!(!probe_due(ms(2_100), fence_at, None));
        assert!(probe_due(ms(2_200), fence_at, None));
        assert!(probe_due(ms(2_900), fence_at, Some(ms(800))));
        assert!(!probe_due(ms(2_900), fence_at, Some(ms(600))));
        // Past the fence a node still probes: its silence may yet stop counting.
        assert!(probe_due(ms(9_000), fence_at, Some(ms(900))));
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
