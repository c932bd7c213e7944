//! How long this scheduler may still act as the leader without hearing from the store:
//! until the lease's time has passed since the last renewal was sent. The store expires
//! the lease key no sooner than that (its clock starts when the write arrives, after it
//! was sent), so a successor cannot hold the lease while this says it is valid.
//!
//! A leader paused for longer than its lease (SIGSTOP, a VM stopped) wakes with its
//! subscriptions open and its memory as it was. Before the lease thread has learnt that
//! the lease is gone, heartbeats queued for it would be answered from that memory, and
//! jobs started that its successor also starts. While the lease is not surely valid the
//! leader starts no job; it still answers heartbeats (an agent that hears nothing
//! fences its jobs) and still writes (its writes are fenced by the epoch). An earlier
//! gate that left heartbeats unanswered also fenced healthy nodes' jobs whenever the
//! lease bucket's stream re-elected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shared between the lease thread, which moves it on, and whoever acts as the leader.
#[derive(Clone, Debug)]
pub struct LeaseValidity {
    base: Instant,
    /// Milliseconds after `base` until which the lease is surely this scheduler's.
    valid_until_ms: Arc<AtomicU64>,
}

impl Default for LeaseValidity {
    fn default() -> Self {
        LeaseValidity {
            base: Instant::now(),
            valid_until_ms: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl LeaseValidity {
    /// A write of the lease that was sent at `sent` has been stored.
    pub fn renewed(&self, sent: Instant, ttl: Duration) {
        let until = sent.saturating_duration_since(self.base) + ttl;
        self.valid_until_ms
            .fetch_max(until.as_millis() as u64, Ordering::Relaxed);
    }

    /// Whether the lease is surely still this scheduler's now.
    pub fn holds(&self) -> bool {
        let now = self.base.elapsed().as_millis() as u64;
        now < self.valid_until_ms.load(Ordering::Relaxed)
    }
}

/// The lease's validity as the heartbeat path asks it, with one log line per change.
#[derive(Debug)]
pub struct LeaseGate {
    validity: LeaseValidity,
    lapsed: std::sync::atomic::AtomicBool,
}

impl LeaseGate {
    pub fn new(validity: LeaseValidity) -> Self {
        LeaseGate {
            validity,
            lapsed: Default::default(),
        }
    }

    /// Whether the lease surely holds now; says so in the log when that changes.
    pub fn holds(&self) -> bool {
        let holds = self.validity.holds();
        if self.lapsed.swap(!holds, Ordering::Relaxed) == holds {
            if holds {
                tracing::info!("leader lease renewed in time again: jobs start again");
            } else {
                tracing::warn!(
                    "leader lease not renewed within its time: no job starts until it is"
                );
            }
        }
        holds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_for_the_lease_time_from_when_the_renewal_was_sent() {
        let v = LeaseValidity::default();
        assert!(!v.holds(), "nothing renewed yet");
        let sent = Instant::now();
        v.renewed(sent, Duration::from_secs(60));
        assert!(v.holds());
        // A renewal stored only after a pause longer than the lease does not hold.
        let w = LeaseValidity::default();
        let sent = Instant::now();
        std::thread::sleep(Duration::from_millis(150));
        w.renewed(sent, Duration::from_millis(100));
        assert!(!w.holds(), "sent a lease time ago");
        // An older renewal never shortens a newer one.
        v.renewed(sent, Duration::from_millis(100));
        assert!(v.holds());
    }
}
