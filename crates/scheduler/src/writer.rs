//! Writes the scheduler's changes to the store in the order they were made, and tells
//! each caller when its writes are safe, so that a reply goes out only after what it
//! announces is stored (a job start, an acknowledged result, an accepted operation).
//!
//! Batches are queued under the core's lock, which fixes their order; the writer takes
//! every queued batch at once, keeps the last value of each key, and writes them in
//! phases (configuration, operations, jobs), each phase's keys concurrently. A failed
//! write is retried until it succeeds: during a NATS outage callers wait, and nothing
//! is dropped. A value larger than a record may be can never succeed: it is refused
//! with an alert instead of being retried forever in front of every later write (the
//! API refuses requests that would make one, so this is the last line).

use crate::store::{phase, Write};
use async_nats::jetstream::kv;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

struct Batch {
    writes: Vec<Write>,
    done: oneshot::Sender<()>,
}

#[derive(Clone)]
pub struct Writer {
    tx: mpsc::UnboundedSender<Batch>,
}

/// Resolves when a batch is stored. Dropped without waiting, the writes still happen.
pub struct Stored(Option<oneshot::Receiver<()>>);

impl Stored {
    pub async fn wait(self) {
        if let Some(rx) = self.0 {
            let _ = rx.await;
        }
    }
}

impl Writer {
    pub fn spawn(store: kv::Store, max_value_bytes: usize) -> Writer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, rx, max_value_bytes));
        Writer { tx }
    }

    /// Queues writes (call it while holding the lock that ordered the changes).
    pub fn submit(&self, writes: Vec<Write>) -> Stored {
        if writes.is_empty() {
            return Stored(None);
        }
        let (done, rx) = oneshot::channel();
        if self.tx.send(Batch { writes, done }).is_err() {
            return Stored(None);
        }
        Stored(Some(rx))
    }
}

const MAX_BATCHES: usize = 512;

async fn run(store: kv::Store, mut rx: mpsc::UnboundedReceiver<Batch>, max_value_bytes: usize) {
    let mut failing = false;
    while let Some(first) = rx.recv().await {
        let mut batches = vec![first];
        while batches.len() < MAX_BATCHES {
            match rx.try_recv() {
                Ok(b) => batches.push(b),
                Err(_) => break,
            }
        }
        // The last value of each key wins; keys are grouped by phase.
        let mut latest: BTreeMap<(u8, String), bytes::Bytes> = BTreeMap::new();
        for b in &mut batches {
            for (k, v) in b.writes.drain(..) {
                if v.len() > max_value_bytes {
                    error!(key = %k, bytes = v.len(), limit = max_value_bytes, "ALERT: state record too large for the store; not written");
                    continue;
                }
                latest.insert((phase(&k), k), v);
            }
        }
        for p in 0..=2u8 {
            let mut pending: Vec<(String, bytes::Bytes)> = latest
                .iter()
                .filter(|((ph, _), _)| *ph == p)
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            let mut backoff = Duration::from_millis(50);
            while !pending.is_empty() {
                let results = futures::future::join_all(
                    pending
                        .iter()
                        .map(|(k, v)| store.put(k.as_str(), v.clone())),
                )
                .await;
                let mut retry = Vec::new();
                let mut last_error = None;
                for ((k, v), r) in pending.into_iter().zip(results) {
                    if let Err(e) = r {
                        last_error = Some(e.to_string());
                        retry.push((k, v));
                    }
                }
                pending = retry;
                if let Some(e) = last_error {
                    if !failing {
                        warn!(error = %e, keys = pending.len(), "cannot write state to the store; retrying (replies wait)");
                        failing = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                } else if failing {
                    info!("writing state to the store again");
                    failing = false;
                }
            }
        }
        for b in batches {
            let _ = b.done.send(());
        }
    }
}
