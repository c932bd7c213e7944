//! Requests the scheduler drops or turns away before they reach the core, counted by
//! reason for `/metrics`. A hostile or broken caller can send them by the hundred
//! thousand: each reason is logged at most once per `LOG_EVERY`, with how many went
//! unlogged, so a flood costs a counter increment, not a log line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::warn;

const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The reply subject is not below the requester's own inbox: answering would make
    /// the scheduler publish where the caller chose (a confused deputy).
    ForeignReply,
    /// A request without a reply subject: nothing to answer on.
    NoReply,
    /// A subject that is not one of ours, or names a reserved identity.
    MalformedSubject,
    /// The caller sent more than its rate allows.
    RateLimited,
    /// Too many requests were waiting already.
    Busy,
    /// An HTTP connection past the face's connection cap.
    HttpConnections,
    /// An HTTP read that found the face's queue to the core full.
    HttpBusy,
    /// A request that would add writes while the store is `MAX_WRITE_BACKLOG` behind.
    StoreBehind,
    /// The caller's calls cost more core time or answer bytes than its budget.
    OverBudget,
    /// An HTTP connection past the cap for one address.
    HttpAddressConnections,
}

const ALL: [Refusal; 10] = [
    Refusal::ForeignReply,
    Refusal::NoReply,
    Refusal::MalformedSubject,
    Refusal::RateLimited,
    Refusal::Busy,
    Refusal::HttpConnections,
    Refusal::HttpBusy,
    Refusal::StoreBehind,
    Refusal::OverBudget,
    Refusal::HttpAddressConnections,
];

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ForeignReply => "foreign_reply",
            Refusal::NoReply => "no_reply",
            Refusal::MalformedSubject => "malformed_subject",
            Refusal::RateLimited => "rate_limited",
            Refusal::Busy => "busy",
            Refusal::HttpConnections => "http_connections",
            Refusal::HttpBusy => "http_busy",
            Refusal::StoreBehind => "store_behind",
            Refusal::OverBudget => "over_budget",
            Refusal::HttpAddressConnections => "http_address_connections",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Default)]
struct LogState {
    last: Option<Instant>,
    unlogged: u64,
}

#[derive(Default)]
pub struct Refusals {
    counts: [AtomicU64; ALL.len()],
    logs: [Mutex<LogState>; ALL.len()],
}

impl Refusals {
    /// Counts one refusal; logs it (with `detail`, made only then) unless this reason
    /// was logged within `LOG_EVERY`.
    pub fn count(&self, reason: Refusal, detail: impl FnOnce() -> String) {
        self.counts[reason.index()].fetch_add(1, Ordering::Relaxed);
        let Ok(mut log) = self.logs[reason.index()].lock() else {
            return;
        };
        let now = Instant::now();
        if log.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            log.unlogged += 1;
            return;
        }
        let unlogged = std::mem::take(&mut log.unlogged);
        log.last = Some(now);
        drop(log);
        let detail = detail();
        warn!(
            reason = reason.label(),
            unlogged_since_last = unlogged,
            "request refused: {detail}"
        );
    }

    pub fn get(&self, reason: Refusal) -> u64 {
        self.counts[reason.index()].load(Ordering::Relaxed)
    }

    /// Every reason with its count, for `/metrics`.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ALL.iter().map(|r| (r.label(), self.get(*r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_by_reason_and_logged_sparingly() {
        let r = Refusals::default();
        let mut made = 0;
        for _ in 0..1000 {
            r.count(Refusal::ForeignReply, || {
                made += 1;
                "x".into()
            });
        }
        r.count(Refusal::Busy, || "y".into());
        assert_eq!(r.get(Refusal::ForeignReply), 1000);
        assert_eq!(r.get(Refusal::Busy), 1);
        assert_eq!(r.get(Refusal::RateLimited), 0);
        assert_eq!(
            made, 1,
            "one log line within the period, not one per refusal"
        );
        let all: Vec<_> = r.all().collect();
        assert!(all.contains(&("foreign_reply", 1000)));
    }
}
