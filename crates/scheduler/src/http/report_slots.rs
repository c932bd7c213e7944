//! Usage reports are made one at a time (each may read a million events), shared fairly
//! between users: each user has at most one report made or waiting, and waiting users
//! take their turns in order (`FairGate`), so one user looping on `/api/usage` waits
//! behind every other user's next report instead of holding the slot.

use crate::gates::fair_gate::{FairGate, Pass};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub struct ReportSlots {
    gate: FairGate,
    /// Users with a report made or waiting.
    asking: Arc<Mutex<HashSet<String>>>,
}

/// A user's turn to make a report; the next user's comes when it is dropped.
pub struct ReportTurn {
    _pass: Pass,
    _asking: Asking,
}

/// `who` has a report made or waiting, until dropped (also when its caller gives up
/// while waiting).
struct Asking {
    asking: Arc<Mutex<HashSet<String>>>,
    who: String,
}

impl Drop for Asking {
    fn drop(&mut self) {
        if let Ok(mut a) = self.asking.lock() {
            a.remove(&self.who);
        }
    }
}

impl ReportSlots {
    /// Waits for `who`'s turn; None at once when `who` has a report made or waiting.
    pub async fn take(&self, who: &str) -> Option<ReportTurn> {
        if !self.asking.lock().ok()?.insert(who.to_string()) {
            return None;
        }
        let asking = Asking {
            asking: self.asking.clone(),
            who: who.to_string(),
        };
        let pass = self.gate.enter(who).await;
        Some(ReportTurn {
            _pass: pass,
            _asking: asking,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_user_has_one_report_at_a_time_and_others_still_get_theirs() {
        let slots = ReportSlots::default();
        let mallory = slots.take("mallory").await.expect("first");
        assert!(slots.take("mallory").await.is_none(), "a second of hers");
        let alice = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take("alice").await.is_some() })
        };
        tokio::task::yield_now().await;
        drop(mallory);
        assert!(alice.await.unwrap(), "alice's turn came");
        assert!(
            slots.take("mallory").await.is_some(),
            "hers again once done"
        );
    }
}
