//! What the HTTP face reads, kept away from long holds of the core lock. No handler
//! takes the lock; one task does, briefly, for everyone:
//! - the lists (operations, nodes, pool ratios for `/metrics`) are one snapshot, rebuilt
//!   at most once per `FRESHNESS` and only while someone reads them; operations are
//!   taken `CHUNK` at a time with the lock let go between chunks, so a heartbeat never
//!   waits behind more than one chunk;
//! - the orchid (every fair share figure of every operation, costly at 10,000
//!   operations) is built only while `/api/orchid` is read: its facts are taken under
//!   the lock a chunk of operations at a time too, its maps made outside it, and no
//!   more often than every ten times the whole build's cost;
//! - reads of one operation go through one bounded queue and are answered in batches
//!   under one hold; a full queue is answered "busy, retry".

use crate::core::{JobPagePlan, SchedulerCore};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use ytsched_common::api::{ApiError, ListJobs, ListOperations, NodeInfo, OperationInfo};
use ytsched_common::explain::Explanation;
use ytsched_common::OperationId;

/// How old the lists may be when they are read.
pub const FRESHNESS: Duration = Duration::from_secs(1);
/// Operations taken per hold of the core lock.
const CHUNK: u32 = 500;
/// The orchid is rebuilt no more often than this many times its own build time.
const ORCHID_DUTY: u32 = 10;
/// Reads of single operations waiting for the core at once.
const QUERY_QUEUE: usize = 256;
/// Reads answered per lock hold.
const BATCH: usize = 32;
/// How long a reader waits for a fresh snapshot or an answer before being told busy.
const WAIT: Duration = Duration::from_secs(5);

/// One published view of the lists.
pub struct WebSnapshot {
    pub built: Option<Instant>,
    /// Newest first (by submission).
    pub operations: Vec<OperationInfo>,
    /// By id.
    pub nodes: Vec<NodeInfo>,
    /// Per pool and tree: fair share, usage and demand ratios, for `/metrics`.
    pub pool_ratios: Vec<(String, String, [f64; 3])>,
}

/// One published orchid, serialised.
pub struct OrchidSnapshot {
    pub built: Option<Instant>,
    /// How long it took to build: the next is at least `ORCHID_DUTY` times later.
    pub cost: Duration,
    pub json: Bytes,
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
            Query::Operation(id, tx) => drop(tx.send(core.reads().operation_info(&id))),
            Query::Explain(id, tx) => drop(tx.send(core.reads().explain_operation(&id))),
            Query::History(id, tx) => drop(tx.send(core.reads().share_history(&id))),
            Query::JobPage(req, tx) => drop(tx.send(core.reads().list_jobs_page(&req))),
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
    lists: watch::Receiver<Arc<WebSnapshot>>,
    orchid: watch::Receiver<Arc<OrchidSnapshot>>,
    lists_wanted: Arc<Notify>,
    orchid_wanted: Arc<Notify>,
    queries: mpsc::Sender<Query>,
}

impl WebView {
    /// Starts the task that builds snapshots and answers queries from `core`.
    pub fn start(core: Arc<Mutex<SchedulerCore>>) -> WebView {
        let (lists_tx, lists) = watch::channel(Arc::new(WebSnapshot {
            built: None,
            operations: vec![],
            nodes: vec![],
            pool_ratios: vec![],
        }));
        let (orchid_tx, orchid) = watch::channel(Arc::new(OrchidSnapshot {
            built: None,
            cost: Duration::ZERO,
            json: Bytes::from_static(b"{}"),
        }));
        let (queries, query_rx) = mpsc::channel(QUERY_QUEUE);
        let view = WebView {
            lists,
            orchid,
            lists_wanted: Arc::new(Notify::new()),
            orchid_wanted: Arc::new(Notify::new()),
            queries,
        };
        tokio::spawn(publish(Publisher {
            core,
            lists: lists_tx,
            orchid: orchid_tx,
            lists_wanted: view.lists_wanted.clone(),
            orchid_wanted: view.orchid_wanted.clone(),
            queries: query_rx,
        }));
        view
    }

    /// The lists, no older than `FRESHNESS` (or the newest there are, if a build takes
    /// longer than a reader waits).
    pub async fn snapshot(&self) -> Arc<WebSnapshot> {
        fresh(&self.lists, &self.lists_wanted, |s| {
            s.built.is_some_and(|b| b.elapsed() < FRESHNESS)
        })
        .await
    }

    /// The orchid, as fresh as its cost allows.
    pub async fn orchid(&self) -> Arc<OrchidSnapshot> {
        fresh(&self.orchid, &self.orchid_wanted, |s| {
            s.built
                .is_some_and(|b| b.elapsed() < FRESHNESS.max(s.cost * ORCHID_DUTY))
        })
        .await
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

/// The current value of `rx` if `is_fresh`, else the next one (asked for through
/// `wanted`), or the current one if none comes in time.
async fn fresh<T>(
    rx: &watch::Receiver<Arc<T>>,
    wanted: &Notify,
    is_fresh: impl Fn(&T) -> bool,
) -> Arc<T> {
    let mut rx = rx.clone();
    let current = rx.borrow_and_update().clone();
    if is_fresh(&current) {
        return current;
    }
    wanted.notify_one();
    match tokio::time::timeout(WAIT, rx.changed()).await {
        Ok(Ok(())) => rx.borrow().clone(),
        _ => current,
    }
}

struct Publisher {
    core: Arc<Mutex<SchedulerCore>>,
    lists: watch::Sender<Arc<WebSnapshot>>,
    orchid: watch::Sender<Arc<OrchidSnapshot>>,
    lists_wanted: Arc<Notify>,
    orchid_wanted: Arc<Notify>,
    queries: mpsc::Receiver<Query>,
}

impl Publisher {
    fn lock(&self) -> std::sync::MutexGuard<'_, SchedulerCore> {
        self.core.lock().expect("core lock")
    }

    /// Takes the lists, a chunk of operations per hold of the lock.
    async fn build_lists(&self) -> WebSnapshot {
        let (nodes, pool_ratios) = {
            let c = self.lock();
            (c.reads().list_nodes(), c.reads().pool_ratios())
        };
        let mut operations = vec![];
        let mut cursor = None;
        loop {
            let req = ListOperations {
                limit: Some(CHUNK),
                cursor: cursor.take(),
                ..Default::default()
            };
            let page = self.lock().reads().list_operations_page(&req);
            let Ok(page) = page else { break };
            operations.extend(page.operations);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
            // Heartbeats waiting for the lock go first.
            tokio::task::yield_now().await;
        }
        let mut nodes = nodes;
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        // By start time then id, as the face's cursors count.
        operations
            .sort_by(|a, b| (b.start_time, b.id.as_str()).cmp(&(a.start_time, a.id.as_str())));
        WebSnapshot {
            built: Some(Instant::now()),
            operations,
            nodes,
            pool_ratios,
        }
    }

    /// Takes the orchid's facts a chunk of operations per hold of the lock, like the
    /// lists (a 10,000-operation orchid used to hold it 24–48 ms at once).
    async fn build_orchid(&self) -> Option<OrchidSnapshot> {
        let started = Instant::now();
        let mut facts = self.lock().reads().orchid_facts_heads();
        let mut held = Duration::ZERO;
        for tree in &mut facts {
            loop {
                let at = Instant::now();
                let more = self.lock().reads().add_facts(tree, CHUNK as usize);
                held = held.max(at.elapsed());
                if !more {
                    break;
                }
                // Heartbeats waiting for the lock go first.
                tokio::task::yield_now().await;
            }
        }
        // The maps and their text are made outside the lock, off the async workers.
        let json = tokio::task::spawn_blocking(move || {
            serde_json::to_vec(&crate::core::orchid::orchid_of(&facts))
        })
        .await
        .ok()?
        .ok()?;
        let cost = started.elapsed();
        tracing::debug!(
            longest_hold_ms = held.as_secs_f64() * 1e3,
            built_ms = cost.as_secs_f64() * 1e3,
            "orchid built"
        );
        Some(OrchidSnapshot {
            built: Some(Instant::now()),
            cost,
            json: json.into(),
        })
    }
}

async fn publish(mut p: Publisher) {
    loop {
        tokio::select! {
            q = p.queries.recv() => {
                let Some(first) = q else { return };
                let mut batch = vec![first];
                while batch.len() < BATCH {
                    match p.queries.try_recv() {
                        Ok(q) => batch.push(q),
                        Err(_) => break,
                    }
                }
                let c = p.lock();
                for q in batch {
                    q.answer(&c);
                }
            }
            _ = p.lists_wanted.notified() => {
                // Readers who asked while a build was under way share the last one.
                let last = p.lists.borrow().built;
                if last.is_some_and(|b| b.elapsed() < FRESHNESS / 2) {
                    p.lists.send_modify(|_| {});
                    continue;
                }
                let s = p.build_lists().await;
                let _ = p.lists.send(Arc::new(s));
            }
            _ = p.orchid_wanted.notified() => {
                let (last, cost) = {
                    let o = p.orchid.borrow();
                    (o.built, o.cost)
                };
                if last.is_some_and(|b| b.elapsed() < FRESHNESS.max(cost * ORCHID_DUTY)) {
                    p.orchid.send_modify(|_| {});
                    continue;
                }
                match p.build_orchid().await {
                    Some(o) => { let _ = p.orchid.send(Arc::new(o)); }
                    None => tracing::error!("cannot build the orchid for the web face"),
                }
            }
        }
    }
}
