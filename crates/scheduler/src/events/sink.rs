//! The event log's side of a write round (SPEC 5.16): a round's events, already
//! numbered and encoded (`write_queue.rs`), cut into as few stream messages as fit and
//! stored in order, each retried until the stream takes it. The writer calls it after
//! the epoch step and before the state, so events are "written with the state they
//! describe" and a leader that dies leaves a prefix of its events.

use crate::store::write_queue::QueuedEvent;
use async_nats::jetstream;
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::{error, info, warn};
use ytsched_common::event_record::{batch_message, BATCH_ENVELOPE_BYTES};

/// Where the event log goes: the `<prefix>_events` stream, through the same fenced
/// rounds as the state (SPEC 5.16: "written with the state they describe").
#[derive(Clone)]
pub struct EventSink {
    pub js: jetstream::Context,
    /// The stream's subject.
    pub subject: String,
    /// The most bytes one message may carry (the server's payload limit, less room).
    pub max_message_bytes: usize,
}

/// Messages sent before the first of them is acknowledged: a round's events are not held
/// up by one round trip to the stream per message.
const IN_FLIGHT: usize = 16;

/// A message's id in the stream (`<epoch>-<first seq>`), for deduplication and chaining.
fn message_id(batch: &[QueuedEvent]) -> String {
    batch
        .first()
        .map(|e| format!("{}-{}", e.epoch, e.seq))
        .unwrap_or_default()
}

impl EventSink {
    /// Stores events in the event log in order, as few messages as fit, each retried
    /// until the stream takes it (its message id, `<epoch>-<first seq>`, makes a retry of
    /// one the stream already took a no-op).
    ///
    /// Up to `IN_FLIGHT` messages are sent before their acknowledgements are awaited.
    /// Each after the first of a window names the one before it as the stream's last
    /// (`Nats-Expected-Last-Msg-Id`), so the stream refuses it unless that one is stored:
    /// when one fails, none after it is stored, and the log keeps its order. The first
    /// of a window names none: either the message before it is stored (acknowledged),
    /// or, on a retry, it is itself already stored (deduplicated) or nothing after it is.
    pub async fn publish(&self, events: Vec<QueuedEvent>, written: &AtomicU64) {
        let batches = event_batches(&events, self.max_message_bytes);
        // Logged once per stretch of failures, not once per retry.
        let mut failing = false;
        let mut backoff = Duration::from_millis(50);
        let mut next = 0;
        while next < batches.len() {
            let window = &batches[next..(next + IN_FLIGHT).min(batches.len())];
            let mut acks = Vec::with_capacity(window.len());
            let mut sent_error = None;
            for (i, batch) in window.iter().enumerate() {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", message_id(batch).as_str());
                if i > 0 {
                    headers.insert(
                        "Nats-Expected-Last-Msg-Id",
                        message_id(window[i - 1]).as_str(),
                    );
                }
                let parts: Vec<&[u8]> = batch.iter().map(|e| e.bytes.as_slice()).collect();
                let payload: Bytes = batch_message(&parts).into();
                match self
                    .js
                    .publish_with_headers(self.subject.clone(), headers, payload)
                    .await
                {
                    Ok(ack) => acks.push(ack),
                    Err(e) => {
                        sent_error = Some(e.to_string());
                        break;
                    }
                }
            }
            // Acknowledged in order up to the first failure; those after it are
            // refused by the stream (or, if it was stored after all, retried as
            // duplicates), so only the ones before count.
            let mut failed = None;
            let mut stored = 0;
            for ack in acks {
                let result = ack.await;
                if failed.is_some() {
                    continue;
                }
                match result {
                    Ok(_) => {
                        written.fetch_add(window[stored].len() as u64, Ordering::Relaxed);
                        stored += 1;
                    }
                    Err(e) => failed = Some(e.to_string()),
                }
            }
            let error = failed.or(sent_error);
            next += stored;
            match error {
                None => {
                    if failing {
                        info!("writing events to the event log again");
                        failing = false;
                    }
                    backoff = Duration::from_millis(50);
                }
                Some(e) => {
                    if !failing {
                        warn!(error = %e, "cannot write events to the event log; retrying");
                        failing = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

/// Events cut into batches of at most `max_bytes` encoded, in order. An event larger
/// than that (it cannot be: its texts are bounded) is left out with an alert, not
/// retried forever in front of every later one.
fn event_batches(events: &[QueuedEvent], max_bytes: usize) -> Vec<&[QueuedEvent]> {
    let room = max_bytes.saturating_sub(BATCH_ENVELOPE_BYTES);
    let mut batches = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    for (i, e) in events.iter().enumerate() {
        if e.bytes.len() > room {
            error!(
                epoch = e.epoch,
                seq = e.seq,
                bytes = e.bytes.len(),
                "ALERT: an event too large for the event log; not written"
            );
            if start < i {
                batches.push(&events[start..i]);
            }
            start = i + 1;
            bytes = 0;
            continue;
        }
        if start < i && bytes + e.bytes.len() > room {
            batches.push(&events[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += e.bytes.len();
    }
    if start < events.len() {
        batches.push(&events[start..]);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(seq: u64, len: usize) -> QueuedEvent {
        QueuedEvent {
            epoch: 1,
            seq,
            bytes: vec![0; len],
        }
    }

    #[test]
    fn events_are_cut_into_messages_in_order_and_an_oversized_one_left_out() {
        let events: Vec<QueuedEvent> = [40, 40, 40, 200, 10, 60]
            .iter()
            .enumerate()
            .map(|(i, &len)| queued(i as u64 + 1, len))
            .collect();
        let cut: Vec<Vec<u64>> = event_batches(&events, 100 + BATCH_ENVELOPE_BYTES)
            .iter()
            .map(|b| b.iter().map(|e| e.seq).collect())
            .collect();
        assert_eq!(cut, vec![vec![1, 2], vec![3], vec![5, 6]]);
    }
}
