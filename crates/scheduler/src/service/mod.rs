//! The NATS adapter around the core: heartbeats and API calls in, replies and nudges
//! out, a clock tick for housekeeping. Malformed messages are logged and answered with
//! an error; they never reach the core.

pub mod admin_changes;
mod api_calls;
pub use api_calls::ApiPort;
mod background;
mod bus_watch;
mod dispatch;
pub(crate) use dispatch::{decode_request, encode_reply};
mod heartbeats;
pub mod job_pages;
mod start_fence;
mod startup;

use api_calls::given_up;
use dispatch::*;
use startup::{become_leader, revive, start_http, Leadership, Revived};

use crate::core::{ClusterConfig, CoreConfig, Effects, SchedulerCore};
use crate::gates::rate_limits::{RateLimit, RateLimits};
use crate::gates::refusals::Refusals;
use crate::leadership::lease_thread::LeaseThread;
use crate::store;
use crate::store::archive::Archive;
use crate::store::writer::Writer;
use anyhow::Context;
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, error, info, warn};
use ytsched_common::api::{ApiError, ApiResponse};
use ytsched_common::codec::encode;
use ytsched_common::protocol::{unix_now, PROTOCOL_VERSION};
use ytsched_common::subjects::Subjects;
use ytsched_common::OperationId;

pub struct ServiceConfig {
    /// Comma-separated NATS server URLs (a NATS cluster is several).
    pub nats_urls: String,
    /// The scheduler's store identity: JetStream, KV and the lease (None only on an
    /// --insecure loopback bus).
    pub auth: ytsched_common::transport::ConnectAuth,
    /// Its answering identity: hears heartbeats and requests, publishes only to inboxes
    /// and nudges.
    pub bus_auth: ytsched_common::transport::ConnectAuth,
    pub subject_prefix: String,
    pub core: CoreConfig,
    /// How often housekeeping (silent nodes, unplaceable operations, due fair share
    /// updates) runs; each tree's own `fair_share_update_period` decides when it updates.
    pub tick_period: Duration,
    /// Trees and pools for a fresh installation (`--config FILE`); ignored when the
    /// store already holds a configuration.
    pub initial_config: Option<ClusterConfig>,
    /// Replicas of the KV buckets (3 on a NATS cluster).
    pub kv_replicas: usize,
    /// How long a leader's lease lasts without renewal: the failover time.
    pub lease_ttl: Duration,
    /// How long a revived scheduler waits for nodes to report the jobs it restored.
    pub revival_window: Duration,
    /// Where and how to serve the web page, JSON and metrics (`--http`); only while
    /// leading.
    pub http: Option<HttpConfig>,
    /// How long the archive keeps a retired operation.
    pub archive_ttl: Duration,
    pub event_log: EventLogConfig,
    /// Requests per second each identity may make (admission control).
    pub api_rate: RateLimit,
    /// What each identity's calls may cost (core time, answer bytes) per second.
    pub api_cost: crate::gates::cost_budgets::CostBudget,
    /// API requests being served at once; past it callers are told "busy, retry".
    pub max_api_in_flight: usize,
    /// Store writes behind past which `start_operation` is answered "busy, retry".
    pub max_write_backlog: usize,
    /// What each node identity was approved to offer (`ytsched auth`'s
    /// `node-approvals.json`), followed as it changes; None: the defaults for all.
    pub node_approvals: Option<std::path::PathBuf>,
    /// The file store's bounds (SPEC 5.17).
    pub files: crate::files::FileLimits,
}

/// Bounds of the event log stream (`<prefix>_events`).
#[derive(Clone, Copy, Debug)]
pub struct EventLogConfig {
    pub max_age: Duration,
    pub max_bytes: u64,
}

impl Default for EventLogConfig {
    fn default() -> Self {
        EventLogConfig {
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_bytes: 1 << 30,
        }
    }
}

/// The HTTP face: its address, who may read it, and its connection bounds.
pub struct HttpConfig {
    pub addr: std::net::SocketAddr,
    pub access: crate::http::access::AccessChoice,
    pub bounds: crate::http::listener::Bounds,
    /// HTTPS: the certificate and key the face serves with (`--http-tls-cert/-key`).
    pub tls: Option<crate::http::tls::TlsFiles>,
}

/// The core behind its lock plus the bus it answers on. Every way into the core goes
/// through `with_core`, so each change is stored, and its nudges and events go out.
struct Driver {
    /// The connection that answers nodes and nudges them (bus identity: it cannot
    /// publish into the store).
    client: async_nats::Client,
    /// The connection that answers API callers, the same identity apart from the
    /// nodes' so that a flood of requests never delays a heartbeat.
    api_client: async_nats::Client,
    /// Each identity's request rate.
    rate_limits: RateLimits,
    /// What each identity's calls have cost, against its budget.
    cost_budgets: crate::gates::cost_budgets::CostBudgets,
    /// API calls reach the core through it, one at a time and in turn across
    /// identities; heartbeats do not.
    api_gate: crate::gates::fair_gate::FairGate,
    /// API requests in flight; a request that finds none free is answered "busy".
    api_slots: Arc<tokio::sync::Semaphore>,
    /// Store writes behind past which new operations are turned away.
    max_write_backlog: usize,
    /// What was turned away before reaching the core, by reason.
    refusals: Arc<Refusals>,
    subjects: Subjects,
    core: Arc<Mutex<SchedulerCore>>,
    writer: Writer,
    /// Where retired operations go, and answer from.
    archive: Archive,
    /// The event log stream (`<prefix>_events`), which `list_events` reads.
    event_log: async_nats::jetstream::stream::Stream,
    /// The state bucket: finished jobs' outputs are read from it on demand.
    state: async_nats::jetstream::kv::Store,
    /// Results taken and acknowledged once stored, in a later reply.
    acks: crate::store::ack_ledger::AckLedger,
    /// Replies that start jobs wait for grown reservations to be stored.
    start_fence: start_fence::StartFence,
    /// Wakes the fair-share updater early (a new operation waits for its first update).
    share_updates: Arc<tokio::sync::Notify>,
    /// For replies to heartbeats rejected before they reach the core.
    heartbeat_period_ms: u64,
    /// The most one stored record may take: the bus's payload limit less a margin.
    max_record_bytes: usize,
    /// Job files and layers (SPEC 5.17), served outside the core.
    files: crate::files::Files,
    /// What nodes' file caches report, for `/metrics`.
    file_caches: Arc<crate::files::node_caches::NodeCaches>,
    /// Whether the leader lease surely holds: no job starts while it may not.
    lease: crate::leadership::lease_validity::LeaseGate,
}

/// A core call whose writes are queued.
struct Queued<R> {
    result: R,
    effects: Effects,
    stored: crate::store::writer::Stored,
    /// The writer's position once they were queued: everything the call changed, and
    /// everything before it, is stored when the writer is through it.
    position: u64,
}

/// The writes of a core call's effects: the configuration if it changed, then the
/// operations and jobs.
fn writes_of(core: &SchedulerCore, effects: &Effects) -> Vec<store::Write> {
    let mut writes = Vec::new();
    if effects.config_changed {
        match store::config_write(core.cluster_config()) {
            Ok(w) => writes.push(w),
            Err(e) => error!(error = %e, "cannot encode the configuration for the store"),
        }
    }
    match store::writes_of(&effects.changes) {
        Ok(w) => writes.extend(w),
        Err(e) => error!(error = %e, "cannot encode operation state for the store"),
    }
    writes
}

impl Driver {
    /// Runs `f` on the core and carries out its effects: queues what it changed for
    /// the store (in the order of changes, as the lock orders them) and returns once
    /// that is stored, so a reply never announces what a crash could lose; logs the
    /// state changes; hands retired operations to the archive (their last records are
    /// stored by then); nudges the nodes the core asked for.
    async fn with_core<R>(&self, f: impl FnOnce(&mut SchedulerCore) -> R) -> R {
        let Queued {
            result,
            effects,
            stored,
            ..
        } = self.queue_core(f);
        self.carry_out(effects, stored).await;
        result
    }

    /// Runs `f` on the core and queues its writes, under the core's lock; what is left
    /// to do (`carry_out`) is the caller's.
    fn queue_core<R>(&self, f: impl FnOnce(&mut SchedulerCore) -> R) -> Queued<R> {
        let mut core = self.core.lock().expect("core lock");
        let (result, effects) = core.run(f);
        let writes = writes_of(&core, &effects);
        let now = unix_now();
        let events = crate::core::event_records::describe_all(&core, &effects, now);
        // Retired operations' last writes (outputs among them) may be in an earlier
        // call's batch: the archive reads them only once those are stored. So may what
        // a reply that waits for the store depends on (a gang's attempt numbers, booked
        // by a tick, go out in a later heartbeat's reply).
        let stored =
            if writes.is_empty() && (!effects.retired.is_empty() || effects.reply_after_store) {
                self.writer.submit_with_events(writes, events, now);
                self.writer.barrier()
            } else {
                self.writer.submit_with_events(writes, events, now)
            };
        // Still under the lock: no request finds a retired operation in neither the
        // core nor the archive, and every later call's starts see a grown reservation.
        self.archive.hand_over(&effects.retired);
        if effects.reply_after_store {
            self.start_fence.reserved(self.writer.position());
        }
        Queued {
            result,
            effects,
            stored,
            position: self.writer.position(),
        }
    }

    /// What a core call leaves to do once its writes are queued: log its events, wait
    /// until they are stored, hand retired operations to the archive, nudge the nodes the
    /// core asked for. Every core call's effects go this one way, revival's included.
    async fn carry_out(&self, effects: Effects, stored: crate::store::writer::Stored) {
        let Effects {
            retired,
            nudges,
            events,
            ..
        } = effects;
        crate::events::log_lines::log_events(&events);
        stored.wait().await;
        if !retired.is_empty() {
            // The archive writes in the background, then the state keys go; several
            // operations at once, so it keeps up with a burst of small ones (each is
            // a few round trips) while the handover answers for them meanwhile.
            let archive = self.archive.clone();
            tokio::spawn(async move {
                futures::stream::iter(retired)
                    .for_each_concurrent(ARCHIVED_AT_ONCE, |a| archive.store(a))
                    .await;
            });
        }
        for node in nudges {
            let subject = self.subjects.nudge(&node);
            if let Err(e) = self.client.publish(subject, bytes::Bytes::new()).await {
                debug!(node = %node, error = %e, "cannot nudge node");
            }
        }
    }

    /// Revival's effects, carried out before serving. A writer deposed meanwhile never
    /// confirms them (a successor, or a stale read of the state, made its writes
    /// refused), so the wait ends with the deposition: this scheduler stops, as a
    /// serving one does. Waiting on, it held the lease and served nothing (issue 42's
    /// campaign: 61 s without a start, until the chaos driver killed it).
    async fn carry_out_revival(
        &self,
        effects: Effects,
        stored: crate::store::writer::Stored,
    ) -> anyhow::Result<()> {
        tokio::select! {
            () = self.carry_out(effects, stored) => Ok(()),
            reason = self.writer.fenced() => Err(anyhow::anyhow!(
                "deposed while storing the revival: {reason}; stopping so that only one scheduler writes"
            )),
        }
    }

    async fn reply(&self, to: async_nats::Subject, bytes: Vec<u8>, what: &str) {
        if let Err(e) = self.client.publish(to, bytes.into()).await {
            warn!(error = %e, "cannot send {what} reply");
        }
    }

    async fn api_reply(&self, to: async_nats::Subject, bytes: Vec<u8>) {
        if let Err(e) = self.api_client.publish(to, bytes.into()).await {
            debug!(error = %e, "cannot send API reply");
        }
    }

    /// Tells a caller to come back later (`ErrorKind::Unavailable`; the CLI retries).
    async fn busy(&self, to: async_nats::Subject, message: String) {
        let bytes = encode(&ApiResponse::<()> {
            protocol_version: PROTOCOL_VERSION,
            result: Err(ApiError::unavailable(message)),
        })
        .unwrap_or_default();
        self.api_reply(to, bytes).await;
    }
}

/// Retired operations one call's archiving writes at once.
const ARCHIVED_AT_ONCE: usize = 32;

/// One connection per duty, each under the identity that duty needs.
async fn connect_as(
    config: &ServiceConfig,
    name: &'static str,
    auth: &ytsched_common::transport::ConnectAuth,
) -> anyhow::Result<async_nats::Client> {
    Ok(ytsched_common::transport::connect(&config.nats_urls, name, true, auth).await?)
}

/// The one line that says the state is revived and the revival window begins.
fn log_revived(
    summary: &crate::core::records::RevivalSummary,
    window: Duration,
    started: std::time::Instant,
) {
    info!(
        operations = summary.operations,
        unfinished = summary.unfinished,
        running_jobs = summary.running_jobs,
        window_ms = window.as_millis() as u64,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "state revived from the store; waiting for nodes to report running jobs"
    );
}

/// Becomes the leader (a standby waits here), revives the state from the store, then
/// serves until the process stops or the lease is lost.
pub async fn run(
    mut config: ServiceConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let leader = become_leader(&config).await?;
    let Revived {
        core,
        writer,
        archive,
        event_log,
        summary,
        effects,
        stored: revival_stored,
        approvals_seen,
        max_record_bytes,
        started,
        files,
    } = revive(&mut config, &leader).await?;
    let leader_client = leader.client.clone();
    let Leadership { state, lease, .. } = leader;
    let Listening {
        bus,
        api_bus,
        subjects,
        api_calls,
    } = listen(&config, leader_client).await?;
    // Shared, not cloned, by every task: a clone of its stores and archive cost more
    // than a whole heartbeat in the core.
    let refusals = Arc::new(Refusals::default());
    let driver = Arc::new(Driver {
        client: bus,
        api_client: api_bus,
        rate_limits: RateLimits::new(config.api_rate),
        cost_budgets: crate::gates::cost_budgets::CostBudgets::new(config.api_cost),
        api_gate: Default::default(),
        api_slots: Arc::new(tokio::sync::Semaphore::new(config.max_api_in_flight.max(1))),
        max_write_backlog: config.max_write_backlog,
        refusals: refusals.clone(),
        subjects,
        heartbeat_period_ms: core.config().heartbeat_period_ms,
        max_record_bytes,
        core: Arc::new(Mutex::new(core)),
        writer,
        archive,
        event_log,
        state,
        share_updates: Arc::new(tokio::sync::Notify::new()),
        acks: Default::default(),
        start_fence: Default::default(),
        files: Arc::new(files),
        file_caches: Default::default(),
        lease: crate::leadership::lease_validity::LeaseGate::new(lease.validity.clone()),
    });
    // Revival's effects go the way every call's do: stored, its retired operations
    // archived, its nodes nudged.
    driver.carry_out_revival(effects, revival_stored).await?;
    let window = config.revival_window.as_millis() as u64;
    driver
        .with_core(|c| c.begin_serving(unix_now(), window))
        .await;
    log_revived(&summary, config.revival_window, started);
    if let Some(http) = config.http.take() {
        start_http(http, &driver, refusals.clone())?;
    }
    if let Some(path) = config.node_approvals.clone() {
        driver.follow_approvals(path, approvals_seen);
    }
    let (lease_lost, released) = lease.split();
    let writer_fenced = driver.writer.clone();
    tokio::select! {
        r = tokio::spawn(driver.clone().serve_heartbeats()) => r??,
        r = tokio::spawn(driver.clone().serve_api(api_calls)) => r?,
        r = tokio::spawn(driver.clone().update_shares(config.tick_period)) => r?,
        r = tokio::spawn(driver.clone().sweep_files()) => r?,
        r = tokio::spawn(driver.tick(config.tick_period)) => r?,
        e = lease_lost.wait() => return Err(e),
        reason = writer_fenced.fenced() => {
            return Err(anyhow::anyhow!("deposed: {reason}; stopping so that only one scheduler writes"))
        }
        _ = shutdown => {
            // Everything acknowledged is already stored; a successor may start at once.
            released.release().await;
            info!("scheduler stopped; leader lease released");
        }
    }
    Ok(())
}

impl Driver {
    /// Reloads `--node-approvals` whenever the file changes.
    fn follow_approvals(&self, path: std::path::PathBuf, seen: Option<std::time::SystemTime>) {
        let core = self.core.clone();
        tokio::spawn(crate::watched_files::approvals_file::follow(
            path,
            seen,
            move |a| core.lock().expect("core lock").set_node_approvals(a),
        ));
    }
}

/// The service's two connections, subscribed.
struct Listening {
    bus: async_nats::Client,
    api_bus: async_nats::Client,
    subjects: Subjects,
    api_calls: futures::stream::Select<async_nats::Subscriber, async_nats::Subscriber>,
}

/// Connects the bus and API connections and subscribes to API calls (heartbeats are
/// subscribed to once the scheduler serves, `serve_heartbeats`). Callers are heard and
/// answered on the bus identity's connection, which cannot publish into the store
/// whatever reply subject a caller names; API callers on a connection of their own, so
/// their traffic never queues in front of a heartbeat.
/// Both are shown to hear the cluster, by probes from the `store` connection, before
/// they serve, and watched after (`bus_watch.rs`).
async fn listen(config: &ServiceConfig, store: async_nats::Client) -> anyhow::Result<Listening> {
    let bus = connect_as(config, "ytsched-scheduler bus", &config.bus_auth).await?;
    let api_bus = connect_as(config, "ytsched-scheduler api", &config.bus_auth).await?;
    let subjects = Subjects::new(&config.subject_prefix);
    let [user_api, admin_api] = subjects.api_wildcards();
    let api_calls = futures::stream::select(
        api_bus.subscribe(user_api).await?,
        api_bus.subscribe(admin_api).await?,
    );
    let probes = vec![
        bus_watch::Listener::new(&bus, &subjects.bus_probe(), "scheduler bus").await?,
        bus_watch::Listener::new(&api_bus, &subjects.bus_probe(), "scheduler api").await?,
    ];
    bus.flush().await?;
    api_bus.flush().await?;
    let mut watch = bus_watch::BusWatch::new(store, subjects.bus_probe());
    let probes = watch.first_probes(probes).await;
    tokio::spawn(watch.watch(probes));
    info!(nats = %config.nats_urls, prefix = %config.subject_prefix, "scheduler connections hear the cluster; API calls are taken");
    Ok(Listening {
        bus,
        api_bus,
        subjects,
        api_calls,
    })
}

/// Moves a record this version cannot use to `damaged.<key>`, with an alert: an admin can
/// inspect it, and it no longer stands in the way of the rest of the state.
async fn set_aside(
    state: &async_nats::jetstream::kv::Store,
    d: &store::Damaged,
) -> anyhow::Result<()> {
    error!(key = %d.key, error = %d.error, kept_as = %store::damaged_key(&d.key), "ALERT: a stored record cannot be read; it is set aside");
    state
        .put(store::damaged_key(&d.key), d.value.clone())
        .await
        .with_context(|| format!("cannot set aside damaged record {}", d.key))?;
    state
        .delete(&d.key)
        .await
        .with_context(|| format!("cannot remove damaged record {}", d.key))?;
    Ok(())
}

/// The most one stored record may take, given the bus's payload limit: what a KV put
/// can carry, less room for the message's headers.
fn record_limit(max_payload: usize) -> usize {
    max_payload.max(128 * 1024) - 16 * 1024
}
