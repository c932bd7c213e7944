//! What waits for the state writer: the last value of each key, not every write made.
//!
//! The writer only ever stores a key's latest value (a round keeps the last of each
//! key), so folding writes into one value per key as they are queued changes nothing
//! stored, and it bounds the queue by the store's key space (live operations, their
//! unsettled attempts, the configuration) instead of by how fast the core changes them:
//! a burst that rewrites an operation's record five times holds it once. The gates on
//! `backlog` (submissions refused, starts paused) keep that key space small while the
//! store is behind.

use crate::store::{phase, Write};
use bytes::Bytes;
use std::collections::BTreeMap;
use ytsched_common::codec::encode;
use ytsched_common::event_record::{Event, EventRecord, EVENT_SCHEMA_VERSION};
use ytsched_common::protocol::UnixMillis;

/// The most events queued before new ones are dropped (and counted): the event log may
/// fall behind with the store, but never takes the scheduler's memory with it.
pub const MAX_QUEUED_EVENTS: usize = 200_000;

/// A key's place in a round: its phase first (configuration, operations, jobs), so a
/// round written in key order writes phase by phase.
pub type RoundKey = (u8, String);

/// A key's latest value (empty: purge) and whether nothing but its purge follows it.
pub type Latest = (Bytes, bool);

#[derive(Default)]
pub struct PendingWrites {
    latest: BTreeMap<RoundKey, Latest>,
    /// The place of the last call that queued writes: what a caller queued at position
    /// `p` is stored once a round taken at `p` or later has been written.
    position: u64,
    /// Events for the event log, numbered as queued (`seq` of this leader's `epoch`), in
    /// the order the core made them; unlike writes they are appended, never folded.
    events: Vec<QueuedEvent>,
    epoch: u64,
    last_seq: u64,
    dropped_events: u64,
}

/// What `push` did with a call's writes.
#[derive(Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The call's place in the queue.
    pub position: u64,
    /// Keys the queue did not hold before (an overwrite adds nothing to the backlog).
    pub new_keys: usize,
    /// Writes refused because their value can never fit a record, with their key and size.
    pub too_large: Vec<(String, usize)>,
}

impl PendingWrites {
    /// A queue whose events are numbered in this leader's `epoch`.
    pub fn new(epoch: u64) -> Self {
        PendingWrites {
            epoch,
            ..Default::default()
        }
    }

    /// Queues one call's events, numbered on from the last; past `MAX_QUEUED_EVENTS`
    /// they are dropped unnumbered (so the numbering keeps no gap) and counted.
    pub fn push_events(&mut self, at: UnixMillis, events: Vec<Event>) {
        for event in events {
            if self.events.len() >= MAX_QUEUED_EVENTS {
                self.dropped_events += 1;
                continue;
            }
            let record = EventRecord {
                version: EVENT_SCHEMA_VERSION,
                epoch: self.epoch,
                seq: self.last_seq + 1,
                at,
                event,
            };
            // Encoded once, here: the record's parts go back to the allocator at once
            // and a round only cuts bytes into messages.
            let Ok(bytes) = encode(&record) else {
                self.dropped_events += 1;
                continue;
            };
            self.last_seq += 1;
            self.events.push(QueuedEvent {
                epoch: self.epoch,
                seq: self.last_seq,
                bytes,
            });
        }
    }

    /// Events dropped so far because too many were queued.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Events queued and not yet taken by a round.
    pub fn queued_events(&self) -> usize {
        self.events.len()
    }

    /// Queues one call's writes, each replacing what the queue held for its key.
    pub fn push(&mut self, writes: Vec<Write>, max_value_bytes: usize) -> Pushed {
        let mut new_keys = 0;
        let mut too_large = Vec::new();
        for w in writes {
            if w.value.len() > max_value_bytes {
                too_large.push((w.key, w.value.len()));
                continue;
            }
            let key = (phase(&w.key), w.key);
            if self.latest.insert(key, (w.value, w.last)).is_none() {
                new_keys += 1;
            }
        }
        self.position += 1;
        Pushed {
            position: self.position,
            new_keys,
            too_large,
        }
    }

    /// The place of the last call queued.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Everything queued so far, and the position it covers; the queue starts empty.
    /// Takes only the events queued so far (their writes come in a later round): what
    /// the writer stores while a round's state is being written.
    pub fn take_events(&mut self) -> Vec<QueuedEvent> {
        std::mem::take(&mut self.events)
    }

    pub fn take(&mut self) -> Round {
        Round {
            writes: std::mem::take(&mut self.latest),
            events: std::mem::take(&mut self.events),
            position: self.position,
        }
    }
}

/// An event as queued: numbered and encoded (`EventRecord`).
#[derive(Debug)]
pub struct QueuedEvent {
    pub epoch: u64,
    pub seq: u64,
    pub bytes: Vec<u8>,
}

/// What one round of the writer stores: events first, then each key's last value.
pub struct Round {
    pub writes: BTreeMap<RoundKey, Latest>,
    pub events: Vec<QueuedEvent>,
    /// The position of the last call it covers.
    pub position: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Write {
        Write {
            key: key.into(),
            value: Bytes::from(value.to_string()),
            last: false,
        }
    }

    #[test]
    fn a_key_rewritten_is_held_once_with_its_last_value() {
        let mut q = PendingWrites::default();
        let first = q.push(vec![put("op.a", "1"), put("job.a.0", "x")], 100);
        assert_eq!((first.position, first.new_keys), (1, 2));
        let second = q.push(vec![put("op.a", "2"), put("op.a", "3")], 100);
        assert_eq!((second.position, second.new_keys), (2, 0));
        let Round {
            writes: round,
            position,
            ..
        } = q.take();
        assert_eq!(position, 2);
        assert_eq!(round.len(), 2);
        assert_eq!(round[&(phase("op.a"), "op.a".into())].0, Bytes::from("3"));
        let after = q.take();
        assert!(after.writes.is_empty() && after.events.is_empty());
        // What comes after a take starts a new round at the next position.
        let third = q.push(vec![put("op.a", "4")], 100);
        assert_eq!((third.position, third.new_keys), (3, 1));
    }

    #[test]
    fn a_round_is_ordered_configuration_then_operations_then_jobs() {
        let mut q = PendingWrites::default();
        q.push(
            vec![put("job.a.0", "j"), put("op.a", "o"), put("config", "c")],
            100,
        );
        let round = q.take().writes;
        let phases: Vec<u8> = round.keys().map(|(p, _)| *p).collect();
        assert_eq!(phases, vec![0, 1, 2]);
    }

    #[test]
    fn a_value_that_can_never_fit_is_refused_by_key_and_size() {
        let mut q = PendingWrites::default();
        let pushed = q.push(vec![put("op.big", "0123456789"), put("op.ok", "1")], 5);
        assert_eq!(pushed.too_large, vec![("op.big".to_string(), 10)]);
        assert_eq!(pushed.new_keys, 1);
        let round = q.take().writes;
        assert!(round.keys().all(|(_, k)| k == "op.ok"));
    }

    #[test]
    fn events_are_numbered_in_order_and_past_the_bound_dropped_unnumbered() {
        use ytsched_common::NodeId;
        let restarted = |n: usize| Event::NodeRestarted {
            node: NodeId(format!("n{n}")),
        };
        let mut q = PendingWrites::new(9);
        q.push_events(5, vec![restarted(1), restarted(2)]);
        q.push_events(6, vec![restarted(3)]);
        let events = q.take().events;
        let seqs: Vec<(u64, u64, u64)> = events
            .iter()
            .map(|e| {
                let r: EventRecord = ytsched_common::codec::decode(&e.bytes).unwrap();
                assert_eq!((r.epoch, r.seq), (e.epoch, e.seq));
                (r.epoch, r.seq, r.at)
            })
            .collect();
        assert_eq!(seqs, vec![(9, 1, 5), (9, 2, 5), (9, 3, 6)]);
        // Numbering goes on across rounds.
        q.push_events(7, (0..MAX_QUEUED_EVENTS + 2).map(restarted).collect());
        assert_eq!(q.dropped_events(), 2);
        let events = q.take().events;
        assert_eq!(events.len(), MAX_QUEUED_EVENTS);
        assert_eq!(events[0].seq, 4);
        assert_eq!(events.last().unwrap().seq, 3 + MAX_QUEUED_EVENTS as u64);
        // Room again once a round took them; the numbering has no gap.
        q.push_events(8, vec![restarted(0)]);
        assert_eq!(q.take().events[0].seq, 4 + MAX_QUEUED_EVENTS as u64);
    }
}
