//! What each identity's API calls cost the scheduler, held to a budget: the time they
//! hold the core and the bytes answered. The request rate alone counts calls, not what
//! they cost, and one costly call repeated at an allowed rate stalled everyone. A call
//! is charged once answered; an identity in debt is answered "busy, retry", naming the
//! budget it is over, until its budget refills.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Identities tracked at once; past it those out of debt are forgotten first.
const MAX_TRACKED: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostBudget {
    /// Core time an identity's calls may take per second, kept up.
    pub core_per_second: Duration,
    /// Answer bytes an identity may receive per second, kept up.
    pub bytes_per_second: u64,
    /// How many seconds' worth may be spent at once after a quiet spell.
    pub burst_seconds: f64,
}

impl Default for CostBudget {
    /// A quarter of a core and 8 MiB/s per identity: dozens of users at full tilt still
    /// leave heartbeats the rest, while no ordinary session comes near it.
    fn default() -> Self {
        Self {
            core_per_second: Duration::from_millis(250),
            bytes_per_second: 8 << 20,
            burst_seconds: 4.0,
        }
    }
}

/// Which budget an identity is over, and when it is out of debt again.
#[derive(Debug, PartialEq)]
pub struct OverBudget {
    pub what: &'static str,
    pub retry_after: Duration,
}

struct Balance {
    /// Seconds of core time left (negative: owed).
    core: f64,
    /// Bytes left (negative: owed).
    bytes: f64,
    at: Instant,
}

pub struct CostBudgets {
    budget: CostBudget,
    balances: Mutex<HashMap<String, Balance>>,
}

impl CostBudgets {
    pub fn new(budget: CostBudget) -> Self {
        Self {
            budget,
            balances: Mutex::new(HashMap::new()),
        }
    }

    pub fn budget(&self) -> CostBudget {
        self.budget
    }

    fn core_rate(&self) -> f64 {
        self.budget.core_per_second.as_secs_f64()
    }

    fn byte_rate(&self) -> f64 {
        self.budget.bytes_per_second as f64
    }

    fn refill(&self, b: &mut Balance, now: Instant) {
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        let burst = self.budget.burst_seconds;
        b.core = (b.core + elapsed * self.core_rate()).min(burst * self.core_rate());
        b.bytes = (b.bytes + elapsed * self.byte_rate()).min(burst * self.byte_rate());
        b.at = now;
    }

    /// Whether `who` may make a call now: refused while it owes either budget.
    pub fn check(&self, who: &str, now: Instant) -> Result<(), OverBudget> {
        let Ok(mut balances) = self.balances.lock() else {
            return Ok(());
        };
        let Some(b) = balances.get_mut(who) else {
            return Ok(());
        };
        self.refill(b, now);
        let owed = |left: f64, rate: f64| Duration::from_secs_f64((-left / rate).max(0.0));
        if b.core < 0.0 {
            return Err(OverBudget {
                what: "core time",
                retry_after: owed(b.core, self.core_rate()),
            });
        }
        if b.bytes < 0.0 {
            return Err(OverBudget {
                what: "answer bytes",
                retry_after: owed(b.bytes, self.byte_rate()),
            });
        }
        Ok(())
    }

    /// Charges `who` for a call answered at `now`.
    pub fn charge(&self, who: &str, now: Instant, core: Duration, bytes: usize) {
        let Ok(mut balances) = self.balances.lock() else {
            return;
        };
        if !balances.contains_key(who) && balances.len() >= MAX_TRACKED {
            let full = |b: &Balance| {
                let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
                b.core + elapsed * self.core_rate() >= 0.0
                    && b.bytes + elapsed * self.byte_rate() >= 0.0
            };
            balances.retain(|_, b| !full(b));
            if balances.len() >= MAX_TRACKED {
                // Ten thousand identities all in debt: this one is not tracked, and
                // the rate limit and the API slots still hold it.
                return;
            }
        }
        let burst = self.budget.burst_seconds;
        let b = balances.entry(who.to_string()).or_insert(Balance {
            core: burst * self.core_rate(),
            bytes: burst * self.byte_rate(),
            at: now,
        });
        self.refill(b, now);
        b.core -= core.as_secs_f64();
        b.bytes -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets() -> CostBudgets {
        CostBudgets::new(CostBudget {
            core_per_second: Duration::from_millis(100),
            bytes_per_second: 1000,
            burst_seconds: 2.0,
        })
    }

    #[test]
    fn costly_calls_are_refused_once_the_budget_is_spent_and_others_are_not() {
        let b = budgets();
        let t0 = Instant::now();
        // The burst (200 ms of core) lets two 120 ms calls in, not a third.
        assert!(b.check("mallory", t0).is_ok());
        b.charge("mallory", t0, Duration::from_millis(120), 10);
        assert!(b.check("mallory", t0).is_ok());
        b.charge("mallory", t0, Duration::from_millis(120), 10);
        let over = b.check("mallory", t0).unwrap_err();
        assert_eq!(over.what, "core time");
        assert!(over.retry_after > Duration::from_millis(300), "{over:?}");
        assert!(b.check("alice", t0).is_ok(), "others keep theirs");
        // Out of debt once it has refilled.
        let later = t0 + Duration::from_millis(450);
        assert!(b.check("mallory", later).is_ok());
    }

    #[test]
    fn large_answers_spend_the_byte_budget() {
        let b = budgets();
        let t0 = Instant::now();
        b.charge("bob", t0, Duration::ZERO, 2500);
        assert_eq!(b.check("bob", t0).unwrap_err().what, "answer bytes");
        assert!(b.check("bob", t0 + Duration::from_millis(600)).is_ok());
    }

    #[test]
    fn the_map_of_identities_stays_bounded() {
        let b = budgets();
        let t0 = Instant::now();
        for i in 0..MAX_TRACKED + 10 {
            b.charge(&format!("u{i}"), t0, Duration::from_secs(1), 0);
        }
        assert!(b.balances.lock().unwrap().len() <= MAX_TRACKED);
        // Once they are out of debt they make room.
        b.charge(
            "new",
            t0 + Duration::from_secs(60),
            Duration::from_secs(1),
            0,
        );
        assert!(b.balances.lock().unwrap().contains_key("new"));
    }
}
