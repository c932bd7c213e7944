//! Writes the scheduler's changes to the store in the order they were made, and tells
//! each caller when its writes are safe, so that a reply goes out only after what it
//! announces is stored (a job start, an acknowledged result, an accepted operation).
//!
//! Writes are queued under the core's lock, which fixes their order, folded into the
//! last value of each key (`write_queue.rs`); the writer takes everything queued at
//! once and writes it in phases (configuration, operations, jobs), each phase's keys
//! concurrently. A failed write is retried until it succeeds: during a NATS outage
//! callers wait, and nothing is dropped. A value larger than a record may be can never succeed: it is refused
//! with an alert instead of being retried forever in front of every later write (the
//! API refuses requests that would make one, so this is the last line).
//!
//! Writes are fenced. Each round first moves the `epoch` key on from the revision this
//! leader last saw (a new leader claims it before it reads the state), then writes
//! every key as a compare-and-set on the revision this leader last saw of it (create
//! for a key it never saw). Deposition is decided by the epoch alone: a round whose epoch
//! step fails, or a key conflict found while the epoch has moved on, means another
//! scheduler leads; this one stops writing, reports it (`fenced`), and the service steps
//! down. A key that holds a revision this leader did not write while the epoch is still
//! its own is a stale record (left by a crash, a bug, or an older version): it is
//! overwritten with an alert, never taken for another leader, so no stale key can stop
//! the cluster.

pub use crate::events::sink::EventSink;
use crate::store::write_queue::{Latest, PendingWrites, QueuedEvent, Round, RoundKey};
use crate::store::{Write, EPOCH_KEY};
use async_nats::jetstream::kv;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn};
use ytsched_common::event_record::Event;
use ytsched_common::protocol::UnixMillis;

/// What the `Writer` handles and the writer task share.
struct Shared {
    /// Bounded by the store's key space: one value per key (`write_queue.rs`).
    pending: Mutex<PendingWrites>,
    /// Wakes the writer task when writes are queued (a permit is kept if it is busy).
    wake: Notify,
    max_value_bytes: usize,
    /// Keys queued and not yet stored, the round being written included. The queue
    /// cannot refuse (the core has already made the changes it carries); callers that
    /// add work read this and push back instead (`MAX_WRITE_BACKLOG`).
    backlog: AtomicUsize,
    /// Events stored in the event log so far (the stream acknowledged them).
    events_written: AtomicU64,
    /// Events in the round being written.
    events_in_flight: AtomicUsize,
}

/// How the event log is doing, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventLogCounts {
    pub written: u64,
    pub dropped: u64,
    /// Queued or being written: how far the log is behind the scheduler.
    pub lag: u64,
}

#[derive(Clone)]
pub struct Writer {
    shared: Arc<Shared>,
    /// The place of the last call stored: what was queued at position `p` is stored
    /// once it is `>= p`, without anyone waiting on it (results are acknowledged that
    /// way, in a later heartbeat's reply). Never moves once the writer is fenced.
    stored: watch::Receiver<u64>,
    fenced: watch::Receiver<Option<String>>,
}

/// The most keys the store may be behind before requests that make more are answered
/// "busy, retry": a few seconds of the store's pace, so memory stays bounded whatever
/// the offered load, while heartbeats (bounded by the nodes) are never refused.
pub const MAX_WRITE_BACKLOG: usize = 20_000;

/// Resolves when a call's writes are stored. Dropped without waiting, the writes still
/// happen.
pub struct Stored(Option<(u64, watch::Receiver<u64>)>);

impl Stored {
    /// Waits until the writes are stored. Writes the writer gave up on (it was fenced:
    /// another scheduler leads) are never stored, so nothing they announce is ever
    /// confirmed; the deposed scheduler is stopping meanwhile.
    pub async fn wait(self) {
        if let Some((position, mut stored)) = self.0 {
            if stored.wait_for(|s| *s >= position).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Where the writer starts from: the revision of every key as this leader read it, the
/// epoch it claimed among them.
pub struct Revisions {
    pub keys: HashMap<String, u64>,
    /// This leader's name: the epoch's value while it leads.
    pub holder: Bytes,
}

impl Writer {
    /// Starts the writer of a leader whose epoch is `revisions`' epoch key; its events
    /// go to `events`.
    pub fn spawn(
        client: async_nats::Client,
        store: kv::Store,
        max_value_bytes: usize,
        revisions: Revisions,
        events: EventSink,
    ) -> Writer {
        let epoch = revisions.keys.get(EPOCH_KEY).copied().unwrap_or(0);
        let shared = Arc::new(Shared {
            pending: Mutex::new(PendingWrites::new(epoch)),
            wake: Notify::new(),
            max_value_bytes,
            backlog: AtomicUsize::new(0),
            events_written: AtomicU64::new(0),
            events_in_flight: AtomicUsize::new(0),
        });
        let (stored_tx, stored) = watch::channel(0);
        let (fenced_tx, fenced) = watch::channel(None);
        tokio::spawn(run(
            RoundWriter {
                store,
                revisions,
                events,
                failing: false,
                stuck: super::stuck_server::StuckServer::new(client, "state writer"),
            },
            shared.clone(),
            fenced_tx,
            stored_tx,
        ));
        Writer {
            shared,
            stored,
            fenced,
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, PendingWrites> {
        // Nothing panics while holding it; a poisoned queue still holds valid writes.
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The place of the last call queued (call it under the lock that orders them).
    pub fn position(&self) -> u64 {
        self.pending().position()
    }

    /// The place of the last call stored: every call up to it is stored.
    pub fn stored_through(&self) -> u64 {
        *self.stored.borrow()
    }

    /// Keys queued and not yet stored.
    pub fn backlog(&self) -> usize {
        self.shared.backlog.load(Ordering::Relaxed)
    }

    /// Events written, dropped and not yet written.
    pub fn event_counts(&self) -> EventLogCounts {
        let (dropped, queued) = {
            let p = self.pending();
            (p.dropped_events(), p.queued_events())
        };
        EventLogCounts {
            written: self.shared.events_written.load(Ordering::Relaxed),
            dropped,
            lag: (queued + self.shared.events_in_flight.load(Ordering::Relaxed)) as u64,
        }
    }

    /// Queues writes (call it while holding the lock that ordered the changes).
    pub fn submit(&self, writes: Vec<Write>) -> Stored {
        self.submit_with_events(writes, Vec::new(), 0)
    }

    /// Queues writes and the events that tell of them (made at `at`), in one place in
    /// the order of changes: a round stores the events first, then the state.
    pub fn submit_with_events(
        &self,
        writes: Vec<Write>,
        events: Vec<Event>,
        at: UnixMillis,
    ) -> Stored {
        if !events.is_empty() {
            self.pending().push_events(at, events);
            self.shared.wake.notify_one();
        }
        if writes.is_empty() {
            return Stored(None);
        }
        let pushed = self.pending().push(writes, self.shared.max_value_bytes);
        for (key, bytes) in &pushed.too_large {
            error!(key = %key, bytes, limit = self.shared.max_value_bytes, "ALERT: state record too large for the store; not written");
        }
        self.shared
            .backlog
            .fetch_add(pushed.new_keys, Ordering::Relaxed);
        self.shared.wake.notify_one();
        Stored(Some((pushed.position, self.stored.clone())))
    }

    /// Resolves once everything queued before it is stored: for what must follow
    /// earlier writes without writing anything itself (the archive reads what they
    /// stored).
    pub fn barrier(&self) -> Stored {
        self.stored_at(self.position())
    }

    /// Resolves once everything queued through `position` is stored.
    pub fn stored_at(&self, position: u64) -> Stored {
        Stored(Some((position, self.stored.clone())))
    }

    /// Resolves, with why, once a write found that another scheduler wrote the state.
    pub async fn fenced(&self) -> String {
        let mut rx = self.fenced.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the state writer stopped".into(),
        };
        reason
    }
}

/// Claims the epoch for a new leader, before it reads the state: any later write round
/// of a previous leader then fails its first step.
pub async fn claim_epoch(store: &kv::Store, holder: &str) -> anyhow::Result<u64> {
    loop {
        // A replicated bucket whose stream is still electing its leader (a cluster just
        // formed, or a server just lost) answers "no responders" for a while: read again.
        let current = match store.entry(EPOCH_KEY).await {
            Ok(current) => current,
            Err(e) => {
                warn!(error = %e, "cannot read the state epoch yet; reading it again");
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        let result = match current {
            Some(e) if e.operation == kv::Operation::Put => store
                .update(EPOCH_KEY, holder.to_string().into(), e.revision)
                .await
                .map_err(|e| e.to_string()),
            _ => store
                .create(EPOCH_KEY, holder.to_string().into())
                .await
                .map_err(|e| e.to_string()),
        };
        match result {
            Ok(revision) => return Ok(revision),
            // Raced with another claimant: read again.
            Err(e) => warn!(error = %e, "claiming the state epoch; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How one fenced write ended.
enum Outcome {
    Written(Option<u64>),
    /// The key holds revision `now` (None: absent), not the one this leader last saw.
    /// Whether that means deposition is the epoch's to say.
    Conflict {
        now: Option<u64>,
        reason: String,
    },
    Retry(String),
}

/// Writes (or, for an empty value, purges) `key` as a compare-and-set on `known`.
async fn write_fenced(store: &kv::Store, key: &str, value: &Bytes, known: Option<u64>) -> Outcome {
    let attempt = if value.is_empty() {
        store
            .purge_expect_revision(key, known)
            .await
            .map(|()| None)
            .map_err(|e| e.to_string())
    } else {
        match known {
            Some(r) => store
                .update(key, value.clone(), r)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            None => store
                .create(key, value.clone())
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    };
    let error = match attempt {
        Ok(revision) => return Outcome::Written(revision),
        Err(e) => e,
    };
    // The write may have happened with its acknowledgement lost, or another scheduler
    // may have written: what the key holds now tells which.
    match store.entry(key).await {
        Ok(entry) => {
            let now = entry.as_ref().filter(|e| e.operation == kv::Operation::Put);
            match (now, value.is_empty()) {
                (None, true) => Outcome::Written(None),
                // A purge of a key whose revision was let go (see `Write::last`): it is
                // still there, so the purge did not happen; nothing else writes it.
                (Some(_), true) if known.is_none() => Outcome::Retry(error),
                (Some(e), false) if e.value == *value => Outcome::Written(Some(e.revision)),
                (now, _) if now.map(|e| e.revision) != known => Outcome::Conflict {
                    now: now.map(|e| e.revision),
                    reason: format!(
                        "key {key} is at revision {:?}, not {known:?} as this leader last wrote it",
                        now.map(|e| e.revision)
                    ),
                },
                _ => Outcome::Retry(error),
            }
        }
        Err(e) => Outcome::Retry(format!("{error}; then cannot read {key}: {e}")),
    }
}

/// Whether the epoch is still at the revision this leader last moved it to, with its
/// name: the one test of deposition.
async fn still_ours(store: &kv::Store, known: Option<u64>, holder: &Bytes) -> anyhow::Result<bool> {
    let entry = store.entry(EPOCH_KEY).await?;
    Ok(entry.is_some_and(|e| {
        e.operation == kv::Operation::Put && Some(e.revision) == known && e.value == *holder
    }))
}

/// Writes of one phase in flight at once: pipelined, but not a round's every key at
/// once (a round may hold tens of thousands while the store is behind).
const MAX_WRITES_IN_FLIGHT: usize = 1024;

/// Keys with their value and whether it is the key's last write before its purge.
type Pending = Vec<(String, Latest)>;

/// The writer task: takes everything queued at once, writes it behind the epoch (events
/// first, then the state phase by phase), and moves `stored` to the position the round
/// covered. Stops for good when another scheduler wrote the epoch (fenced).
async fn run(
    mut w: RoundWriter,
    shared: Arc<Shared>,
    fenced: watch::Sender<Option<String>>,
    stored: watch::Sender<u64>,
) {
    loop {
        let Round {
            writes,
            events,
            position,
        } = shared
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if writes.is_empty() && events.is_empty() && position == *stored.borrow() {
            shared.wake.notified().await;
            continue;
        }
        let taken = writes.len();
        shared
            .events_in_flight
            .store(events.len(), Ordering::Relaxed);
        if taken > 0 || !events.is_empty() {
            if let Err(reason) = w.write_round(events, writes, &shared).await {
                error!(
                    reason,
                    "ALERT: another scheduler wrote the state; this one is deposed and stops writing"
                );
                let _ = fenced.send(Some(reason));
                return;
            }
        }
        shared.events_in_flight.store(0, Ordering::Relaxed);
        shared.backlog.fetch_sub(taken, Ordering::Relaxed);
        stored.send_replace(position);
    }
}

/// How often events queued during a round are looked for.
const EVENTS_MEANWHILE_EVERY: Duration = Duration::from_millis(5);

/// Stores the events queued while a round's state is written, until `stop` says the
/// state is done (what is queued after that goes with the next round).
/// `Err(reason)`: a later leader has written the event log (this one is deposed).
async fn store_events_meanwhile(
    sink: &EventSink,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let events = shared
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take_events();
        if events.is_empty() {
            tokio::select! {
                _ = tokio::time::sleep(EVENTS_MEANWHILE_EVERY) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let count = events.len();
        shared.events_in_flight.fetch_add(count, Ordering::Relaxed);
        let stored = sink.publish(events, &shared.events_written).await;
        shared.events_in_flight.fetch_sub(count, Ordering::Relaxed);
        stored?;
    }
}

/// What the writer keeps between rounds.
struct RoundWriter {
    store: kv::Store,
    revisions: Revisions,
    events: EventSink,
    /// Writes are failing (logged once when they start and once when they stop).
    failing: bool,
    /// Moves the store's connection off a server that keeps failing its writes.
    stuck: super::stuck_server::StuckServer,
}

impl RoundWriter {
    /// Writes one round: the epoch first, alone (a deposed leader's round stops there),
    /// then configuration, operations and jobs, each phase's keys concurrently, then the
    /// epoch again (a leader deposed meanwhile learns it before anything is confirmed).
    /// `Err(reason)` when this leader has been deposed.
    async fn write_round(
        &mut self,
        events: Vec<QueuedEvent>,
        round: BTreeMap<RoundKey, Latest>,
        shared: &Shared,
    ) -> Result<(), String> {
        self.write_phase(vec![(
            EPOCH_KEY.to_string(),
            (self.revisions.holder.clone(), false),
        )])
        .await?;
        // Events before the state they tell of: a leader that dies in between leaves
        // events its successor may tell again (as it re-learns the same facts), never
        // stored state that no event tells.
        self.events.publish(events, &shared.events_written).await?;
        // While the state is written, events made meanwhile are stored as they come:
        // their writes are in the next round, which then finds them stored rather
        // than storing them first (a burst's events held up every round, and with it
        // the store, until starts paused on the backlog). One writer of events at a
        // time, in order; a leader deposed during this round may so store the events
        // of its last moments after its successor's first ones.
        let had_state = !round.is_empty();
        let (done, stop) = watch::channel(false);
        let sink = self.events.clone();
        let state = async {
            let result = self.write_state(round).await;
            let _ = done.send(true);
            result
        };
        let (result, events) = futures::join!(state, store_events_meanwhile(&sink, shared, stop));
        result?;
        events?;
        // The epoch again, after the state: a successor that claimed it while this
        // round's writes were in flight (this leader paused between its epoch step and
        // its writes) may have read the state before they landed; this round then fails
        // here, so nothing it wrote is acknowledged.
        if had_state {
            self.write_phase(vec![(
                EPOCH_KEY.to_string(),
                (self.revisions.holder.clone(), false),
            )])
            .await?;
        }
        Ok(())
    }

    /// The round's keys, phase by phase.
    async fn write_state(&mut self, round: BTreeMap<RoundKey, Latest>) -> Result<(), String> {
        let mut phase = None;
        let mut pending: Pending = Vec::new();
        for ((p, key), latest) in round {
            if phase != Some(p) && !pending.is_empty() {
                self.write_phase(std::mem::take(&mut pending)).await?;
            }
            phase = Some(p);
            pending.push((key, latest));
        }
        self.write_phase(pending).await
    }

    /// Writes every key of one phase, retrying with backoff until all are stored;
    /// `Err(reason)` when this leader has been deposed.
    async fn write_phase(&mut self, mut pending: Pending) -> Result<(), String> {
        let mut backoff = Duration::from_millis(50);
        while !pending.is_empty() {
            let mut results = Vec::with_capacity(pending.len());
            for chunk in pending.chunks(MAX_WRITES_IN_FLIGHT) {
                results.extend(
                    futures::future::join_all(chunk.iter().map(|(k, (v, _))| {
                        let known = self.revisions.keys.get(k).copied();
                        write_fenced(&self.store, k, v, known)
                    }))
                    .await,
                );
            }
            let mut retry = Vec::new();
            let mut last_error = None;
            for ((k, v), r) in pending.into_iter().zip(results) {
                if let Some(e) = self.settle(&k, v.1, r).await? {
                    last_error = Some(e);
                    retry.push((k, v));
                }
            }
            pending = retry;
            if let Some(e) = last_error {
                self.stuck.failed().await;
                if !self.failing {
                    warn!(error = %e, keys = pending.len(), "cannot write state to the store; retrying (replies wait)");
                    self.failing = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            } else if self.failing {
                self.stuck.succeeded();
                info!("writing state to the store again");
                self.failing = false;
            }
        }
        Ok(())
    }

    /// Takes one write's outcome: `Ok(None)` stored, `Ok(Some(why))` to retry,
    /// `Err(reason)` deposed.
    async fn settle(
        &mut self,
        key: &str,
        last: bool,
        outcome: Outcome,
    ) -> Result<Option<String>, String> {
        let keys = &mut self.revisions.keys;
        match outcome {
            // A key's last write before its purge: its revision is not kept.
            Outcome::Written(Some(_)) if last => {
                keys.remove(key);
            }
            Outcome::Written(Some(rev)) => {
                keys.insert(key.to_string(), rev);
            }
            Outcome::Written(None) => {
                keys.remove(key);
            }
            Outcome::Conflict { reason, .. } if key == EPOCH_KEY => return Err(reason),
            Outcome::Conflict { now, reason } => {
                let epoch = keys.get(EPOCH_KEY).copied();
                return match still_ours(&self.store, epoch, &self.revisions.holder).await {
                    Ok(true) => {
                        error!(key = %key, reason, "ALERT: a stored record was not this leader's last write; the epoch is still this leader's, so it is stale and is overwritten");
                        match now {
                            Some(r) => self.revisions.keys.insert(key.to_string(), r),
                            None => self.revisions.keys.remove(key),
                        };
                        Ok(Some(reason))
                    }
                    Ok(false) => Err(reason),
                    Err(e) => Ok(Some(format!("{reason}; cannot read the epoch: {e}"))),
                };
            }
            Outcome::Retry(e) => return Ok(Some(e)),
        }
        Ok(None)
    }
}
