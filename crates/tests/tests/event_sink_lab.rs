//! The event sink against a real stream (nats-server, the lab's `<prefix>_events`, the
//! scheduler's own identity): a round's messages sent many at a time still land in
//! order, the stream refuses a message whose predecessor it does not hold, which is
//! what keeps the order when one of them fails, and a deposed leader's messages are
//! refused once its successor has written (one writer of the log at a time).

use nix::sys::signal::Signal;
use std::sync::atomic::AtomicU64;
use ytsched_common::codec::{decode, encode};
use ytsched_common::event_record::{Event, EventBatch, EventRecord, EVENT_SCHEMA_VERSION};
use ytsched_common::NodeId;
use ytsched_scheduler::events::sink::EventSink;
use ytsched_scheduler::store::write_queue::QueuedEvent;
use ytsched_tests::*;

fn queued(epoch: u64, seq: u64) -> QueuedEvent {
    let record = EventRecord {
        version: EVENT_SCHEMA_VERSION,
        epoch,
        seq,
        at: seq,
        event: Event::NodeRestarted {
            node: NodeId(format!("node-{seq:04}")),
        },
    };
    QueuedEvent {
        epoch,
        seq,
        bytes: encode(&record).unwrap(),
    }
}

/// A writer of the lab's event log, as the scheduler makes it.
fn sink_of(
    js: &async_nats::jetstream::Context,
    prefix: &str,
    max_message_bytes: usize,
) -> EventSink {
    EventSink {
        js: js.clone(),
        stream: format!("{prefix}_events"),
        subject: format!("{prefix}.events"),
        max_message_bytes,
        fence: Default::default(),
    }
}

/// A lab whose scheduler is stopped, so that nothing else writes its event log, made
/// again empty; the scheduler's own JetStream context, and the log's stream.
fn event_log_alone() -> (
    Lab,
    tokio::runtime::Runtime,
    async_nats::jetstream::Context,
    async_nats::jetstream::stream::Stream,
) {
    let mut lab = Lab::start(vec![]).unwrap();
    lab.kill_scheduler(0, Signal::SIGKILL);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (js, stream) = rt.block_on(async {
        let client = lab.client_as("scheduler").await.unwrap();
        let js = async_nats::jetstream::new(client);
        // Made again, empty: a log no one has written yet (as a new cluster's).
        let name = format!("{}_events", lab.prefix);
        let mut stream = js.get_stream(&name).await.unwrap();
        let config = stream.info().await.unwrap().config.clone();
        js.delete_stream(&name).await.unwrap();
        let stream = js.create_stream(config).await.unwrap();
        (js, stream)
    });
    (lab, rt, js, stream)
}

#[test]
fn a_deposed_leaders_events_are_refused_once_its_successor_has_written() {
    let (lab, rt, js, mut stream) = event_log_alone();
    rt.block_on(async {
        let written = AtomicU64::new(0);
        let (old, new) = (
            sink_of(&js, &lab.prefix, 4096),
            sink_of(&js, &lab.prefix, 4096),
        );
        old.publish((1..=3).map(|s| queued(99, s)).collect(), &written)
            .await
            .unwrap();
        // Its successor (a later epoch) writes...
        new.publish((1..=2).map(|s| queued(100, s)).collect(), &written)
            .await
            .unwrap();
        let last = stream.info().await.unwrap().state.last_sequence;
        // ...and the old leader wakes from a pause and sends what it had: refused.
        let refused = old
            .publish((4..=5).map(|s| queued(99, s)).collect(), &written)
            .await;
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("deposed")),
            "{refused:?}"
        );
        // So is a writer of an earlier epoch that had not written yet.
        let late = sink_of(&js, &lab.prefix, 4096)
            .publish(vec![queued(98, 1)], &written)
            .await;
        assert!(late.is_err(), "{late:?}");
        assert_eq!(stream.info().await.unwrap().state.last_sequence, last);
        assert_eq!(written.load(std::sync::atomic::Ordering::Relaxed), 5);
        // The successor goes on where it was.
        new.publish(vec![queued(100, 3)], &written).await.unwrap();
        assert_eq!(stream.info().await.unwrap().state.last_sequence, last + 1);
    });
}

#[test]
fn a_rounds_messages_sent_many_at_a_time_land_in_order() {
    let (lab, rt, js, mut stream) = event_log_alone();
    rt.block_on(async {
        let subject = format!("{}.events", lab.prefix);
        let before = stream.info().await.unwrap().state.last_sequence;
        // Messages of about two events each: 500 events in about 250 messages, sent 16
        // at a time.
        let sink = sink_of(&js, &lab.prefix, 2 * queued(99, 1).bytes.len() + 40);
        let written = AtomicU64::new(0);
        sink.publish((1..=500).map(|s| queued(99, s)).collect(), &written)
            .await
            .unwrap();
        assert_eq!(written.load(std::sync::atomic::Ordering::Relaxed), 500);
        let last = stream.info().await.unwrap().state.last_sequence;
        let mut seqs = Vec::new();
        for n in before + 1..=last {
            let m = stream.get_raw_message(n).await.unwrap();
            let batch: EventBatch = decode(&m.payload).unwrap();
            seqs.extend(batch.events.iter().filter(|r| r.epoch == 99).map(|r| r.seq));
        }
        assert_eq!(seqs, (1..=500).collect::<Vec<u64>>(), "in order, once each");
        // Sent again (a retried round): every message is a duplicate, nothing is added.
        sink.publish((1..=500).map(|s| queued(99, s)).collect(), &written)
            .await
            .unwrap();
        assert_eq!(stream.info().await.unwrap().state.last_sequence, last);
        // A message naming a predecessor the stream does not end with is refused.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "99-1000");
        headers.insert("Nats-Expected-Last-Msg-Id", "99-998");
        let refused = js
            .publish_with_headers(subject.clone(), headers, "x".into())
            .await
            .unwrap()
            .await;
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(stream.info().await.unwrap().state.last_sequence, last);
    });
}
