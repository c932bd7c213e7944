//! The way API calls reach the core: one at a time, taken in turn across identities.
//! Heartbeats, the lease and the store writer never pass through it, so at most one
//! user call stands between a heartbeat and the core's lock, however many are waiting;
//! and a user with a hundred calls queued waits behind each other user's next one, not
//! ahead of it. Waiting is asynchronous: a queued call holds no worker thread.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

#[derive(Default)]
struct State {
    held: bool,
    /// Each waiting identity's calls, first come first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<()>>>,
    /// Identities with calls waiting, in turn order.
    turns: VecDeque<String>,
}

#[derive(Clone, Default)]
pub struct FairGate {
    state: Arc<Mutex<State>>,
}

/// Passage through the gate; the next identity's call goes when it is dropped.
pub struct Pass {
    state: Arc<Mutex<State>>,
}

impl FairGate {
    /// Waits for `who`'s turn. The number waiting is bounded by the caller (the API
    /// slots).
    pub async fn enter(&self, who: &str) -> Pass {
        let rx = {
            let mut s = self.state.lock().expect("gate lock");
            if !s.held {
                s.held = true;
                return self.pass();
            }
            let (tx, rx) = oneshot::channel();
            let queue = s.waiting.entry(who.to_string()).or_default();
            queue.push_back(tx);
            if queue.len() == 1 {
                s.turns.push_back(who.to_string());
            }
            rx
        };
        match rx.await {
            Ok(()) => self.pass(),
            // The gate went away (the driver is shutting down): nothing to guard.
            Err(_) => self.pass(),
        }
    }

    fn pass(&self) -> Pass {
        Pass {
            state: self.state.clone(),
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let Ok(mut s) = self.state.lock() else { return };
        // Hand over to the next identity in turn whose caller is still waiting.
        while let Some(who) = s.turns.pop_front() {
            let Some(queue) = s.waiting.get_mut(&who) else {
                continue;
            };
            let next = queue.pop_front();
            if queue.is_empty() {
                s.waiting.remove(&who);
            } else {
                s.turns.push_back(who);
            }
            if let Some(tx) = next {
                if tx.send(()).is_ok() {
                    return;
                }
            }
        }
        s.held = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn identities_take_turns_whatever_one_of_them_queued() {
        let gate = FairGate::default();
        let first = gate.enter("mallory").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let mut spawn = |who: &'static str| {
            let (gate, order) = (gate.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _pass = gate.enter(who).await;
                order.lock().unwrap().push(who);
            }));
        };
        for _ in 0..5 {
            spawn("mallory");
        }
        tokio::task::yield_now().await;
        spawn("alice");
        spawn("bob");
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let pos = |w: &str| order.iter().position(|o| *o == w).unwrap();
        assert!(pos("alice") <= 1 && pos("bob") <= 2, "{order:?}");
        assert_eq!(order.len(), 7);
    }

    #[tokio::test]
    async fn a_caller_that_gave_up_does_not_hold_the_gate() {
        let gate = FairGate::default();
        let first = gate.enter("a").await;
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _p = gate.enter("b").await;
            })
        };
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        drop(first);
        // Free again: this enters at once.
        let again = tokio::time::timeout(std::time::Duration::from_secs(1), gate.enter("c")).await;
        assert!(again.is_ok());
    }
}
