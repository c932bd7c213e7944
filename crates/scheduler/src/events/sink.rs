//! The event log's side of a write round (SPEC 5.16): a round's events, already
//! numbered and encoded (`write_queue.rs`), cut into as few stream messages as fit and
//! stored in order, each retried until the stream takes it. The writer calls it after
//! the epoch step and before the state, so events are "written with the state they
//! describe" and a leader that dies leaves a prefix of its events.

use crate::events::fence::{epoch_of_message_id, EndUnknown, EventFence};
use crate::store::stuck_server::StuckServer;
use crate::store::write_queue::QueuedEvent;
use async_nats::jetstream;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
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
    /// The stream's name.
    pub stream: String,
    /// The stream's subject.
    pub subject: String,
    /// The most bytes one message may carry (the server's payload limit, less room).
    pub max_message_bytes: usize,
    /// Where the stream ended when this writer last stored or looked (`fence.rs`).
    pub fence: EventFence,
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

/// How one window of messages fared: how many, from its first, were stored, and the
/// error that stopped the rest.
struct WindowOutcome {
    stored: usize,
    error: Option<PublishError>,
}

impl EventSink {
    /// Stores events in the event log in order, as few messages as fit, each retried
    /// until the stream takes it (its message id, `<epoch>-<first seq>`, makes a retry of
    /// one the stream already took a no-op). `Err(reason)`: a later epoch's leader has
    /// written the log, so this one is deposed and stores none of the rest.
    ///
    /// Up to `IN_FLIGHT` messages are sent before their acknowledgements are awaited.
    /// The first of a window names where the stream ends (`Nats-Expected-Last-Sequence`,
    /// `fence.rs`); each after it names the one before it as the stream's last
    /// (`Nats-Expected-Last-Msg-Id`). So the stream refuses a message unless everything
    /// before it is stored and nobody else wrote in between: when one fails, none after
    /// it is stored, and the log keeps its order.
    pub async fn publish(
        &self,
        events: Vec<QueuedEvent>,
        written: &AtomicU64,
    ) -> Result<(), String> {
        let Some(epoch) = events.first().map(|e| e.epoch) else {
            return Ok(());
        };
        let batches = event_batches(&events, self.max_message_bytes);
        let mut retry = Retry::new(self.js.client());
        let mut next = 0;
        while next < batches.len() {
            let base = match self.fence.known() {
                Some(seq) => seq,
                None => match self.read_end(epoch).await {
                    Ok(seq) => seq,
                    Err(EndUnknown::Unreadable(e)) => {
                        retry.failed(&e).await;
                        continue;
                    }
                    Err(deposed) => return Err(deposed.to_string()),
                },
            };
            let window = &batches[next..(next + IN_FLIGHT).min(batches.len())];
            let out = self.send_window(window, base, written).await;
            next += out.stored;
            match out.error {
                None => retry.succeeded(),
                Some(e) => {
                    if e.kind() == PublishErrorKind::WrongLastSequence {
                        self.fence.forget();
                    }
                    retry.failed(&e.to_string()).await;
                }
            }
        }
        Ok(())
    }

    /// Sends one window, its first message expecting the stream to end at `base`, and
    /// awaits the acknowledgements: only those before the first failure count (the ones
    /// after it are refused by the stream, or, if stored after all, retried as
    /// duplicates).
    async fn send_window(
        &self,
        window: &[&[QueuedEvent]],
        base: u64,
        written: &AtomicU64,
    ) -> WindowOutcome {
        let mut acks = Vec::with_capacity(window.len());
        let mut sent_error = None;
        for (i, batch) in window.iter().enumerate() {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", message_id(batch).as_str());
            match i {
                0 => headers.insert("Nats-Expected-Last-Sequence", base.to_string().as_str()),
                _ => headers.insert(
                    "Nats-Expected-Last-Msg-Id",
                    message_id(window[i - 1]).as_str(),
                ),
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
                    sent_error = Some(e);
                    break;
                }
            }
        }
        let mut failed = None;
        let mut stored = 0;
        for ack in acks {
            let result = ack.await;
            if failed.is_some() {
                continue;
            }
            match result {
                Ok(ack) => {
                    self.fence.stored(ack.sequence);
                    written.fetch_add(window[stored].len() as u64, Ordering::Relaxed);
                    stored += 1;
                }
                Err(e) => failed = Some(e),
            }
        }
        WindowOutcome {
            stored,
            error: failed.or(sent_error),
        }
    }

    /// Reads where the stream ends, and whose message ends it: a later epoch's means
    /// this writer is deposed.
    async fn read_end(&self, ours: u64) -> Result<u64, EndUnknown> {
        let unreadable = |e: &dyn std::fmt::Display| EndUnknown::Unreadable(e.to_string());
        let stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| unreadable(&e))?;
        let last = stream.cached_info().state.last_sequence;
        // Empty: nobody has written (a read of message 0 is a bad request).
        let theirs = match last {
            0 => 0,
            _ => match stream.get_raw_message(last).await {
                Ok(m) => m
                    .headers
                    .get("Nats-Msg-Id")
                    .and_then(|id| epoch_of_message_id(id.as_str()))
                    .unwrap_or(0),
                // Its last message gone with the log's age limit: nobody wrote since.
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => 0,
                Err(e) => return Err(unreadable(&e)),
            },
        };
        if theirs > ours {
            return Err(EndUnknown::Deposed { ours, theirs });
        }
        self.fence.ends_at(last);
        Ok(last)
    }
}

/// The back-off between tries, and one log line per stretch of failures (not one per
/// retry).
struct Retry {
    failing: bool,
    backoff: Duration,
    /// Moves the event log's connection off a server that keeps failing its writes.
    stuck: StuckServer,
}

impl Retry {
    fn new(client: async_nats::Client) -> Self {
        Retry {
            failing: false,
            backoff: Duration::from_millis(50),
            stuck: StuckServer::new(client, "event log writer"),
        }
    }

    fn succeeded(&mut self) {
        self.stuck.succeeded();
        if self.failing {
            info!("writing events to the event log again");
            self.failing = false;
        }
        self.backoff = Duration::from_millis(50);
    }

    async fn failed(&mut self, error: &str) {
        self.stuck.failed().await;
        if !self.failing {
            warn!(error, "cannot write events to the event log; retrying");
            self.failing = true;
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(2));
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
