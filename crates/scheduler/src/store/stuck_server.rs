//! A NATS client stays on its server as long as that server answers its pings. A
//! server whose routes to the others are not whole again (just back from a partition)
//! answers pings but not JetStream requests, nor passes on what the others carry, so a
//! client on it could wait there for a minute (issue 42's campaign: revivals held 63 s
//! until that server was killed, open finding 1 of `docs/reliability.md`). A caller whose
//! requests keep failing (store writes, or the bus probes of `service/bus_watch.rs`)
//! tells this watch; once they have failed for `MOVE_AFTER`, it moves the connection to
//! another server (the client picks one at random), at most once per `MOVE_AFTER`.

use std::time::{Duration, Instant};
use tracing::warn;

/// How long requests fail before the connection moves: longer than a stream's leader
/// election (a few seconds, during which any server answers errors), short against the
/// 45 s the campaign allows a recovery.
pub const MOVE_AFTER: Duration = Duration::from_secs(8);

/// One connection's stretch of failing store requests.
#[derive(Clone, Debug)]
pub struct StuckServer {
    client: async_nats::Client,
    /// What uses the connection, for the log.
    role: &'static str,
    stretch: FailureStretch,
}

impl StuckServer {
    pub fn new(client: async_nats::Client, role: &'static str) -> Self {
        StuckServer {
            client,
            role,
            stretch: FailureStretch::default(),
        }
    }

    pub fn succeeded(&mut self) {
        self.stretch.failing_since = None;
    }

    /// A request failed just now; moves the connection when the failures have lasted.
    pub async fn failed(&mut self) {
        let Some(failing_for) = self.stretch.failed(Instant::now()) else {
            return;
        };
        self.move_now(failing_for).await;
    }

    /// Moves the connection to another server at once; `failing_for`: how long its
    /// requests have failed, for the log. The move is not counted against
    /// `MOVE_AFTER`: only moves the failure stretch decides are (`FailureStretch`).
    pub async fn move_now(&mut self, failing_for: Duration) {
        let server = self.client.server_info();
        warn!(
            role = self.role,
            server = %format!("{}:{}", server.host, server.port),
            failing_for_ms = failing_for.as_millis() as u64,
            "requests keep failing on this NATS server; moving the connection to another"
        );
        if let Err(e) = self.client.force_reconnect().await {
            warn!(role = self.role, error = %e, "cannot move the connection");
        }
    }
}

/// When failures began, and when the connection was last moved.
#[derive(Clone, Copy, Debug, Default)]
struct FailureStretch {
    failing_since: Option<Instant>,
    moved_at: Option<Instant>,
}

impl FailureStretch {
    /// A failure at `now`: how long failures have lasted, where it is time to move.
    fn failed(&mut self, now: Instant) -> Option<Duration> {
        let since = *self.failing_since.get_or_insert(now);
        let due = |at: Instant| now.saturating_duration_since(at) >= MOVE_AFTER;
        if !due(since) || !self.moved_at.is_none_or(due) {
            return None;
        }
        self.moved_at = Some(now);
        Some(now.saturating_duration_since(since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_once_failures_have_lasted_and_then_at_most_once_per_period() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = FailureStretch::default();
        assert_eq!(s.failed(at(0)), None);
        assert_eq!(s.failed(at(7_999)), None, "a stream election lasts seconds");
        assert_eq!(s.failed(at(8_000)), Some(Duration::from_secs(8)));
        assert_eq!(s.failed(at(10_000)), None, "just moved");
        assert_eq!(s.failed(at(16_000)), Some(Duration::from_secs(16)));
        // A success ends the stretch: the next failure starts a new one.
        s.failing_since = None;
        assert_eq!(s.failed(at(30_000)), None);
        assert_eq!(s.failed(at(38_000)), Some(Duration::from_secs(8)));
    }
}
