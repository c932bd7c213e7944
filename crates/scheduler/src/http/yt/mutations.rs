//! YTsaurus's `mutation_id` with `retry`: a retried command that changes state answers
//! what its first try answered instead of acting twice (a `create` that succeeded but
//! whose answer was lost must not then fail with "already exists"). `start_operation`'s
//! mutation id is the operation's idempotency token and outlives a failover; the other
//! commands' answers are kept here, in memory, the latest `PER_USER` per user, for
//! `KEPT_FOR`, so that no user's retries can push out another's.

use super::wire::Output;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Answers kept per user.
const PER_USER: usize = 256;
/// How long an answer is kept: YTsaurus's client retries within minutes.
const KEPT_FOR: Duration = Duration::from_secs(600);

struct Kept {
    mutation_id: String,
    command: &'static str,
    output: Output,
    at: Instant,
}

/// The answers to recent mutations, by user.
#[derive(Clone, Default)]
pub struct Mutations(Arc<Mutex<HashMap<String, VecDeque<Kept>>>>);

impl Mutations {
    /// The answer `user`'s earlier try of `command` with `mutation_id` got, if kept.
    pub fn answered(&self, user: &str, command: &str, mutation_id: &str) -> Option<Output> {
        let map = self.0.lock().ok()?;
        map.get(user)?
            .iter()
            .find(|k| {
                k.mutation_id == mutation_id && k.command == command && k.at.elapsed() < KEPT_FOR
            })
            .map(|k| k.output.clone())
    }

    /// Keeps the answer to a mutation that succeeded.
    pub fn keep(&self, user: &str, command: &'static str, mutation_id: &str, output: &Output) {
        let Ok(mut map) = self.0.lock() else { return };
        let kept = map.entry(user.to_string()).or_default();
        kept.retain(|k| k.at.elapsed() < KEPT_FOR);
        if kept.len() >= PER_USER {
            kept.pop_front();
        }
        kept.push_back(Kept {
            mutation_id: mutation_id.chars().take(128).collect(),
            command,
            output: output.clone(),
            at: Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_gets_the_first_answer_and_each_user_keeps_their_own() {
        let m = Mutations::default();
        let created = Output::Structured(serde_json::json!({"node_id": "x"}));
        m.keep("alice", "create", "m-1", &created);
        assert!(matches!(
            m.answered("alice", "create", "m-1"),
            Some(Output::Structured(_))
        ));
        assert!(
            m.answered("alice", "remove", "m-1").is_none(),
            "another command"
        );
        assert!(m.answered("bob", "create", "m-1").is_none(), "another user");
        for i in 0..PER_USER + 10 {
            m.keep("mallory", "set", &format!("f-{i}"), &Output::Nothing);
        }
        assert!(
            m.answered("alice", "create", "m-1").is_some(),
            "mallory's flood keeps to mallory"
        );
        assert!(
            m.answered("mallory", "set", "f-0").is_none(),
            "the oldest went first"
        );
        assert_eq!(m.0.lock().unwrap()["mallory"].len(), PER_USER);
    }
}
