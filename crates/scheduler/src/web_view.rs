//! What the HTTP face reads, kept away from the core lock. Lists (operations, nodes, the
//! orchid) come from one snapshot, rebuilt at most once per `FRESHNESS` and only while
//! someone reads: a thousand readers cost one build a second, not a thousand lock holds.
//! Reads of one operation go through one bounded queue to one task that answers them in
//! batches under a single lock hold; a full queue is answered "busy, retry". No handler
//! ever takes the core lock, so no number of readers can delay a heartbeat by more than
//! one batch.

use crate::core::{JobPagePlan, SchedulerCore};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use ytsched_common::api::{ApiError, ListJobs, NodeInfo, OperationInfo};
use ytsched_common::explain::Explanation;
use ytsched_common::OperationId;

/// How old a snapshot may be when it is read.
pub const FRESHNESS: Duration = Duration::from_secs(1);
/// Reads of single operations waiting for the core at once.
const QUERY_QUEUE: usize = 256;
/// Reads answered per lock hold.
const BATCH: usize = 32;
/// How long a reader waits for a fresh snapshot or an answer before being told busy.
const WAIT: Duration = Duration::from_secs(5);

/// One published view of the cluster.
pub struct WebSnapshot {
    pub built: Option<Instant>,
    /// Newest first: by start time, then id.
    pub operations: Vec<OperationInfo>,
    /// By id.
    pub nodes: Vec<NodeInfo>,
    /// The orchid, serialised once per snapshot.
    pub orchid_json: Bytes,
    /// Per pool and tree: (tree, pool, fair share, usage, demand ratios), for `/metrics`.
    pub pool_ratios: Vec<(String, String, [Option<f64>; 3])>,
}

impl WebSnapshot {
    fn empty() -> Self {
        WebSnapshot {
            built: None,
            operations: vec![],
            nodes: vec![],
            orchid_json: Bytes::from_static(b"{}"),
            pool_ratios: vec![],
        }
    }

    /// Takes the lists from the core (under its lock, by the caller).
    fn take(core: &SchedulerCore) -> (Vec<OperationInfo>, Vec<NodeInfo>, serde_json::Value) {
        (core.list_operations(), core.list_nodes(), core.orchid())
    }

    /// Sorts and serialises what `take` took, outside the lock.
    fn build(
        (mut operations, mut nodes, orchid): (Vec<OperationInfo>, Vec<NodeInfo>, serde_json::Value),
    ) -> Self {
        operations
            .sort_by(|a, b| (b.start_time, b.id.as_str()).cmp(&(a.start_time, a.id.as_str())));
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        let mut pool_ratios = vec![];
        if let Some(trees) = orchid["scheduler"]["pool_trees"].as_object() {
            for (tree, t) in trees {
                for (pool, p) in t["pools"].as_object().into_iter().flatten() {
                    let r = |k: &str| p[k].as_f64();
                    pool_ratios.push((
                        tree.clone(),
                        pool.clone(),
                        [r("fair_share_ratio"), r("usage_ratio"), r("demand_ratio")],
                    ));
                }
            }
        }
        WebSnapshot {
            built: Some(Instant::now()),
            operations,
            nodes,
            orchid_json: serde_json::to_vec(&orchid).unwrap_or_default().into(),
            pool_ratios,
        }
    }
}

/// A read of one operation, answered by the core.
pub enum Query {
    Operation(
        OperationId,
        oneshot::Sender<Result<OperationInfo, ApiError>>,
    ),
    Explain(OperationId, oneshot::Sender<Result<Explanation, ApiError>>),
    History(OperationId, oneshot::Sender<Vec<crate::core::ShareSample>>),
    JobPage(ListJobs, oneshot::Sender<Result<JobPagePlan, ApiError>>),
}

impl Query {
    fn answer(self, core: &SchedulerCore) {
        // A reader that gave up is not an error.
        match self {
            Query::Operation(id, tx) => drop(tx.send(core.operation_info(&id))),
            Query::Explain(id, tx) => drop(tx.send(core.explain_operation(&id))),
            Query::History(id, tx) => drop(tx.send(core.share_history(&id))),
            Query::JobPage(req, tx) => drop(tx.send(core.list_jobs_page(&req))),
        }
    }
}

/// Why a read got no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum ViewBusy {
    /// The queue to the core is full.
    Full,
    /// The core did not answer in time.
    Late,
}

/// The handlers' side.
#[derive(Clone)]
pub struct WebView {
    snapshot: watch::Receiver<Arc<WebSnapshot>>,
    wanted: Arc<Notify>,
    queries: mpsc::Sender<Query>,
}

impl WebView {
    /// Starts the task that builds snapshots and answers queries from `core`.
    pub fn start(core: Arc<Mutex<SchedulerCore>>) -> WebView {
        let (tx, rx) = watch::channel(Arc::new(WebSnapshot::empty()));
        let (queries, query_rx) = mpsc::channel(QUERY_QUEUE);
        let wanted = Arc::new(Notify::new());
        tokio::spawn(publish(core, tx, wanted.clone(), query_rx));
        WebView {
            snapshot: rx,
            wanted,
            queries,
        }
    }

    /// A snapshot no older than `FRESHNESS` (or the newest there is, if a build takes
    /// longer than a reader waits).
    pub async fn snapshot(&self) -> Arc<WebSnapshot> {
        let mut rx = self.snapshot.clone();
        let current = rx.borrow_and_update().clone();
        if current.built.is_some_and(|b| b.elapsed() < FRESHNESS) {
            return current;
        }
        self.wanted.notify_one();
        match tokio::time::timeout(WAIT, rx.changed()).await {
            Ok(Ok(())) => rx.borrow().clone(),
            _ => current,
        }
    }

    /// Asks the core one question and waits for its answer.
    pub async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Query,
    ) -> Result<T, ViewBusy> {
        let (tx, rx) = oneshot::channel();
        self.queries
            .try_send(make(tx))
            .map_err(|_| ViewBusy::Full)?;
        match tokio::time::timeout(WAIT, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            _ => Err(ViewBusy::Late),
        }
    }
}

async fn publish(
    core: Arc<Mutex<SchedulerCore>>,
    snapshots: watch::Sender<Arc<WebSnapshot>>,
    wanted: Arc<Notify>,
    mut queries: mpsc::Receiver<Query>,
) {
    let mut last_built: Option<Instant> = None;
    loop {
        tokio::select! {
            q = queries.recv() => {
                let Some(first) = q else { return };
                let mut batch = vec![first];
                while batch.len() < BATCH {
                    match queries.try_recv() {
                        Ok(q) => batch.push(q),
                        Err(_) => break,
                    }
                }
                let c = core.lock().expect("core lock");
                for q in batch {
                    q.answer(&c);
                }
            }
            _ = wanted.notified() => {
                // Readers who asked while a build was under way share the next one.
                if last_built.is_some_and(|b| b.elapsed() < FRESHNESS / 2) {
                    snapshots.send_modify(|_| {});
                    continue;
                }
                let taken = {
                    let c = core.lock().expect("core lock");
                    WebSnapshot::take(&c)
                };
                let built = tokio::task::spawn_blocking(move || WebSnapshot::build(taken)).await;
                match built {
                    Ok(s) => {
                        last_built = s.built;
                        let _ = snapshots.send(Arc::new(s));
                    }
                    Err(e) => tracing::error!(error = %e, "cannot build the web snapshot"),
                }
            }
        }
    }
}
