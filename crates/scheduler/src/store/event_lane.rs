//! Sends each write round's events to the event log once that round's state is stored.
//!
//! An event tells users a fact ("job completed", "operation finished"). Told before the
//! state that makes it durable, it could be false: a leader deposed before its state
//! landed, with the node that held the result lost too, runs the job again although the
//! log had said it completed (fault campaign seed 17974522020334935115). So a round's
//! events go after its state: a leader that dies in between leaves a fact stored and
//! untold (the log ends early in that epoch; no gap within it), never one told and lost.
//!
//! The log is written by one sender at a time, in rounds' order; a round's events are
//! sent while the next round's state is written, so large batches of events do not
//! hold the store up.

use crate::events::sink::EventSink;
use crate::store::write_queue::QueuedEvent;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// The counters the writer shows for the event log.
#[derive(Default)]
pub struct EventCounters {
    /// Events stored in the event log so far (the stream acknowledged them).
    pub written: AtomicU64,
    /// Events taken from the queue and not yet stored.
    pub in_flight: AtomicUsize,
}

pub(super) struct EventLane {
    sink: EventSink,
    counters: Arc<EventCounters>,
    /// The previous round's events, being sent.
    sending: Option<JoinHandle<Result<(), String>>>,
}

impl EventLane {
    pub(super) fn new(sink: EventSink, counters: Arc<EventCounters>) -> Self {
        Self {
            sink,
            counters,
            sending: None,
        }
    }

    /// Waits until the events sent so far are stored. `Err(reason)`: a later leader
    /// has written the log (this one is deposed).
    pub(super) async fn settle(&mut self) -> Result<(), String> {
        match self.sending.take() {
            None => Ok(()),
            Some(sending) => sending
                .await
                .unwrap_or_else(|e| Err(format!("the event sender stopped: {e}"))),
        }
    }

    /// Starts sending a round's events (call it once the round's state is stored),
    /// after the previous round's: `Err` if those were refused as a deposed leader's.
    pub(super) async fn tell(&mut self, events: Vec<QueuedEvent>) -> Result<(), String> {
        self.settle().await?;
        if events.is_empty() {
            return Ok(());
        }
        let (sink, counters) = (self.sink.clone(), self.counters.clone());
        self.sending = Some(tokio::spawn(async move {
            let count = events.len();
            let stored = sink.publish(events, &counters.written).await;
            counters.in_flight.fetch_sub(count, Ordering::Relaxed);
            stored
        }));
        Ok(())
    }
}
