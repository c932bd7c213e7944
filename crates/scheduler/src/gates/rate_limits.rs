//! Per-identity request rates (admission control): one caller's flood is turned away
//! before it takes the core's lock, a task or memory, so other callers are answered.
//! A token bucket per identity; the map of buckets is bounded, idle (full) buckets
//! being the ones forgotten when it fills.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Identities tracked at once; past it idle ones are forgotten first.
const MAX_TRACKED: usize = 10_000;
/// Refusals answered per identity per second; the rest of a flood is dropped unanswered
/// (and counted), so answering it costs no more than a trickle.
const ANSWERED_REFUSALS_PER_SECOND: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Requests per second an identity may keep up.
    pub per_second: f64,
    /// Requests it may send at once after a quiet spell.
    pub burst: f64,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// Refusals answered in the current second, and which second.
    answered: u32,
    answered_second: u64,
}

pub struct RateLimits {
    limit: RateLimit,
    started: Instant,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Over the rate: answer "busy, retry" (`answer`), or drop it unanswered.
    Limited {
        answer: bool,
    },
}

impl RateLimits {
    pub fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            started: Instant::now(),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes one request of `who` at `now`.
    pub fn check(&self, who: &str, now: Instant) -> Verdict {
        let RateLimit { per_second, burst } = self.limit;
        let Ok(mut buckets) = self.buckets.lock() else {
            return Verdict::Allowed;
        };
        if !buckets.contains_key(who) && buckets.len() >= MAX_TRACKED {
            buckets.retain(|_, b| {
                let refill = now.saturating_duration_since(b.at).as_secs_f64() * per_second;
                b.tokens + refill < burst
            });
            if buckets.len() >= MAX_TRACKED {
                // Ten thousand identities all busy at once: newcomers wait their turn.
                return Verdict::Limited { answer: true };
            }
        }
        if !buckets.contains_key(who) {
            buckets.insert(
                who.to_string(),
                Bucket {
                    tokens: burst,
                    at: now,
                    answered: 0,
                    answered_second: 0,
                },
            );
        }
        let Some(b) = buckets.get_mut(who) else {
            return Verdict::Allowed;
        };
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * per_second).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Verdict::Allowed;
        }
        let second = now.saturating_duration_since(self.started).as_secs();
        if b.answered_second != second {
            b.answered_second = second;
            b.answered = 0;
        }
        b.answered += 1;
        Verdict::Limited {
            answer: b.answered <= ANSWERED_REFUSALS_PER_SECOND,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_identity_is_held_to_its_rate_and_others_are_not() {
        let limits = RateLimits::new(RateLimit {
            per_second: 10.0,
            burst: 20.0,
        });
        let t0 = Instant::now();
        let allowed = (0..1000)
            .filter(|_| limits.check("mallory", t0) == Verdict::Allowed)
            .count();
        assert_eq!(allowed, 20, "the burst, then nothing");
        assert_eq!(limits.check("alice", t0), Verdict::Allowed);
        // A second later ten more; only a few refusals a second are answered.
        let t1 = t0 + Duration::from_secs(1);
        let verdicts: Vec<Verdict> = (0..100).map(|_| limits.check("mallory", t1)).collect();
        assert_eq!(
            verdicts.iter().filter(|v| **v == Verdict::Allowed).count(),
            10
        );
        let answered = verdicts
            .iter()
            .filter(|v| **v == Verdict::Limited { answer: true })
            .count();
        assert_eq!(answered, ANSWERED_REFUSALS_PER_SECOND as usize);
    }

    #[test]
    fn the_map_of_identities_stays_bounded() {
        let limits = RateLimits::new(RateLimit {
            per_second: 1.0,
            burst: 1.0,
        });
        let t0 = Instant::now();
        for i in 0..MAX_TRACKED {
            limits.check(&format!("u{i}"), t0);
        }
        // All busy: a newcomer is turned away rather than tracked.
        assert_eq!(limits.check("new", t0), Verdict::Limited { answer: true });
        // Once they are idle again they are forgotten to make room.
        assert_eq!(
            limits.check("new", t0 + Duration::from_secs(5)),
            Verdict::Allowed
        );
        assert!(limits.buckets.lock().unwrap().len() <= MAX_TRACKED);
    }
}
