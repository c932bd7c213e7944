//! The core's calls open spans that name what they act on (operation, job, node, pool
//! path), so a line logged inside one says whose it was without each log call repeating it.
//!
//! A test binary of its own: tracing caches per call site whether any subscriber wants
//! it, and other tests' threads, running with none, raced that cache in the library's
//! test binary (a span missed now and then).

use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use ytsched_common::states::JobState;
use ytsched_scheduler_core::harness::{spec, Harness};

/// Records every span opened as "name field=value ...".
#[derive(Clone, Default)]
struct SpanLog(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
}

impl<S: tracing::Subscriber> Layer<S> for SpanLog {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut f = Fields(attrs.metadata().name().to_string());
        attrs.record(&mut f);
        self.0.lock().unwrap().push(f.0);
    }
}

#[test]
fn core_calls_open_spans_naming_their_operation_job_and_pool() {
    let log = SpanLog::default();
    let subscriber = tracing_subscriber::registry().with(log.clone());
    let (op, job) = tracing::subscriber::with_default(subscriber, || {
        let mut h = Harness::new();
        h.node("n1", 4.0, &[]);
        h.run(|core| core.admin_set("//sys/pool_trees/default/research", serde_json::json!({})))
            .expect_err("no such pool: a refusal still has its span");
        let op = h.submit("alice", spec(1, 1.0));
        h.advance(500).heartbeat_all();
        let job = h.running_on("n1")[0].job_id.clone();
        h.finish_all("n1", JobState::Completed);
        h.advance(500).heartbeat_all();
        (op, job)
    });
    let spans = log.0.lock().unwrap().clone();
    let has = |want: &str| spans.iter().any(|s| s.contains(want));
    assert!(
        has(&format!("admit operation={op} user=\"alice\"")),
        "{spans:#?}"
    );
    assert!(
        has(&format!("apply_result job={job} operation={op}")),
        "{spans:#?}"
    );
    assert!(
        has(&format!("finish_operation operation={op} state=completed")),
        "{spans:#?}"
    );
    assert!(
        has("admin_set path=\"//sys/pool_trees/default/research\""),
        "{spans:#?}"
    );
}
