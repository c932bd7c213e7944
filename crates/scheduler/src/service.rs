//! The NATS adapter around the core: heartbeats and API calls in, replies and nudges
//! out, a clock tick for housekeeping. Malformed messages are logged and answered with
//! an error; they never reach the core.

use crate::archive::{Archive, ArchivedOperation};
use crate::core::{
    authorize_operation_of, controls_operation_of, ClusterConfig, CoreConfig, Effects, JobPagePlan,
    SchedulerCore,
};
use crate::job_pages::{fitting_job_page, read_job_page};
use crate::lease::Lease;
use crate::rate_limits::{RateLimit, RateLimits, Verdict};
use crate::refusals::{Refusal, Refusals};
use crate::store;
use crate::writer::Writer;
use anyhow::Context;
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, error, info, warn};
use ytsched_common::api::{self, ApiError, ApiMethod, ApiRequest, ApiResponse};
use ytsched_common::codec::{decode, encode};
use ytsched_common::identity::{Caller, Role};
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{unix_now, HeartbeatReply, HeartbeatRequest, PROTOCOL_VERSION};
use ytsched_common::subjects::Subjects;
use ytsched_common::OperationId;

/// The most a page of `list_operations` may take encoded: well inside NATS's default
/// 1 MiB payload.
const MAX_PAGE_BYTES: usize = 512 * 1024;

/// How often integral volumes go to the store.
const VOLUME_SAVE_PERIOD: Duration = Duration::from_secs(5);

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
    /// Requests per second each identity may make (admission control).
    pub api_rate: RateLimit,
    /// API requests being served at once; past it callers are told "busy, retry".
    pub max_api_in_flight: usize,
    /// What each node identity was approved to offer (`ytsched auth`'s
    /// `node-approvals.json`), followed as it changes; None: the defaults for all.
    pub node_approvals: Option<std::path::PathBuf>,
}

/// The HTTP face: its address, who may read it, and its connection bounds.
pub struct HttpConfig {
    pub addr: std::net::SocketAddr,
    pub access: crate::http_access::AccessChoice,
    pub bounds: crate::http_listener::Bounds,
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
    /// API requests in flight; a request that finds none free is answered "busy".
    api_slots: Arc<tokio::sync::Semaphore>,
    /// What was turned away before reaching the core, by reason.
    refusals: Arc<Refusals>,
    subjects: Subjects,
    core: Arc<Mutex<SchedulerCore>>,
    writer: Writer,
    /// Where retired operations go, and answer from.
    archive: Archive,
    /// The state bucket: finished jobs' outputs are read from it on demand.
    state: async_nats::jetstream::kv::Store,
    /// Wakes the fair-share updater early (a new operation waits for its first update).
    share_updates: Arc<tokio::sync::Notify>,
    /// For replies to heartbeats rejected before they reach the core.
    heartbeat_period_ms: u64,
    /// The most one stored record may take: the bus's payload limit less a margin.
    max_record_bytes: usize,
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
        let (result, effects, stored) = {
            let mut core = self.core.lock().expect("core lock");
            let (result, effects) = core.run(f);
            let writes = writes_of(&core, &effects);
            // Retired operations' last writes (outputs among them) may be in an earlier
            // call's batch: the archive reads them only once those are stored.
            let stored = if writes.is_empty() && !effects.retired.is_empty() {
                self.writer.barrier()
            } else {
                self.writer.submit(writes)
            };
            (result, effects, stored)
        };
        self.carry_out(effects, stored).await;
        result
    }

    /// What a core call leaves to do once its writes are queued: log its events, wait
    /// until they are stored, hand retired operations to the archive, nudge the nodes the
    /// core asked for. Every core call's effects go this one way, revival's included.
    async fn carry_out(&self, effects: Effects, stored: crate::writer::Stored) {
        let Effects {
            retired,
            nudges,
            events,
            ..
        } = effects;
        crate::event_log::log_events(&events);
        stored.wait().await;
        if !retired.is_empty() {
            // The archive writes in the background, then the state keys go.
            let archive = self.archive.clone();
            tokio::spawn(async move {
                for a in retired {
                    archive.store(a).await;
                }
            });
        }
        for node in nudges {
            let subject = self.subjects.nudge(&node);
            if let Err(e) = self.client.publish(subject, bytes::Bytes::new()).await {
                debug!(node = %node, error = %e, "cannot nudge node");
            }
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

    /// Each heartbeat is handled in its own task: the core serialises them, and a
    /// heartbeat waiting for its writes does not hold up the next one.
    async fn serve_heartbeats(self: Arc<Self>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let driver = self.clone();
            let received = std::time::Instant::now();
            tokio::spawn(async move { driver.heartbeat(msg, received).await });
        }
    }

    async fn heartbeat(self: Arc<Self>, msg: async_nats::Message, received: std::time::Instant) {
        let Some(reply_to) = msg.reply.clone() else {
            self.refusals.count(Refusal::NoReply, || {
                format!("heartbeat on {} without a reply subject", msg.subject)
            });
            return;
        };
        // nats-server let only this node publish here; its answer goes to its inbox only.
        let node = msg.subject.rsplit('.').next().unwrap_or_default();
        if !Subjects::reply_allowed(Role::Node, node, &reply_to) {
            self.refusals.count(Refusal::ForeignReply, || {
                format!(
                    "heartbeat of node '{node}' asks for its reply on '{}', not its own inbox",
                    ytsched_common::quote::quote(&reply_to, ytsched_common::quote::QUOTE_CHARS)
                )
            });
            return;
        }
        let period = self.heartbeat_period_ms;
        let reply = match decode::<HeartbeatRequest>(&msg.payload) {
            Ok(req) if msg.subject.rsplit('.').next() != Some(req.node_id.as_str()) => {
                warn!(subject = %msg.subject, node = %req.node_id, "heartbeat node id does not match its subject");
                HeartbeatReply::rejected(
                    format!(
                        "node id '{}' does not match subject '{}'",
                        req.node_id, msg.subject
                    ),
                    period,
                )
            }
            Ok(req) => {
                let patience = req.timeout_ms;
                let reply = self
                    .with_core(|core| {
                        // Checked under the lock: the wait for it is where time goes.
                        (!given_up(received, patience))
                            .then(|| core.process_heartbeat(req, unix_now()))
                    })
                    .await;
                match reply {
                    Some(reply) => reply,
                    None => {
                        debug!(subject = %msg.subject, "heartbeat dropped: its agent stopped waiting for the reply");
                        return;
                    }
                }
            }
            Err(e) => {
                warn!(subject = %msg.subject, error = %e, "malformed heartbeat");
                HeartbeatReply::rejected(format!("malformed heartbeat: {e}"), period)
            }
        };
        match encode(&reply) {
            Ok(bytes) => self.reply(reply_to, bytes, "heartbeat").await,
            Err(e) => warn!(error = %e, "cannot encode heartbeat reply"),
        }
    }

    async fn serve_api(
        self: Arc<Self>,
        mut sub: impl futures::Stream<Item = async_nats::Message> + Unpin,
    ) {
        while let Some(msg) = sub.next().await {
            let Some(reply_to) = msg.reply.clone() else {
                self.refusals.count(Refusal::NoReply, || {
                    format!("request on {} without a reply subject", msg.subject)
                });
                continue;
            };
            // nats-server let this subject through only for the user it names.
            let Some((caller, method)) = self.subjects.parse_api(msg.subject.as_str()) else {
                self.refusals.count(Refusal::MalformedSubject, || {
                    format!(
                        "request on '{}', not an API subject",
                        ytsched_common::quote::quote(
                            &msg.subject,
                            ytsched_common::quote::QUOTE_CHARS
                        )
                    )
                });
                continue;
            };
            // Answered only on the caller's own inbox: any other reply subject would
            // make the scheduler publish there for them.
            if !Subjects::reply_allowed(Role::User, caller.user.as_str(), &reply_to) {
                self.refusals.count(Refusal::ForeignReply, || {
                    format!(
                        "request of '{}' asks for its answer on '{}', not its own inbox",
                        caller.user,
                        ytsched_common::quote::quote(&reply_to, ytsched_common::quote::QUOTE_CHARS)
                    )
                });
                continue;
            }
            // Admission: the caller's own rate first, then room among requests in flight.
            if let Verdict::Limited { answer } = self
                .rate_limits
                .check(caller.user.as_str(), std::time::Instant::now())
            {
                let limit = self.rate_limits.limit();
                self.refusals.count(Refusal::RateLimited, || {
                    format!("user '{}' is over {}/s", caller.user, limit.per_second)
                });
                if answer {
                    self.busy(
                        reply_to,
                        format!(
                            "busy: user '{}' sends more than {} requests per second (burst {}); retry later",
                            caller.user, limit.per_second, limit.burst
                        ),
                    )
                    .await;
                }
                continue;
            }
            let Ok(permit) = self.api_slots.clone().try_acquire_owned() else {
                self.refusals
                    .count(Refusal::Busy, || "every API slot is taken".to_string());
                self.busy(
                    reply_to,
                    "busy: the scheduler is serving as many requests as it takes at once; retry"
                        .into(),
                )
                .await;
                continue;
            };
            let driver = self.clone();
            let method = method.to_string();
            tokio::spawn(async move {
                let _permit = permit;
                let max_record = driver.max_record_bytes;
                let answered = driver
                    .with_core(|core| {
                        (!names_archived_operation(core, &method, &msg.payload)).then(|| {
                            let mut then = None;
                            let bytes = dispatch(
                                core,
                                &caller,
                                &method,
                                &msg.payload,
                                max_record,
                                &mut then,
                            );
                            (bytes, then)
                        })
                    })
                    .await;
                if method == api::StartOperation::METHOD {
                    driver.share_updates.notify_one();
                }
                let mut bytes = match answered {
                    Some((bytes, None)) => bytes,
                    Some((_, Some(then))) => then.answer(&driver, &caller).await,
                    None => {
                        answer_from_archive(&driver.archive, &caller, &method, &msg.payload).await
                    }
                };
                let max = driver.api_client.server_info().max_payload;
                if bytes.len() > max {
                    // NATS would drop the reply and the caller would only see a timeout.
                    warn!(
                        method,
                        bytes = bytes.len(),
                        max,
                        "API reply too large for NATS"
                    );
                    bytes = encode(&ApiResponse::<()> {
                        protocol_version: PROTOCOL_VERSION,
                        result: Err(ApiError::limit_reached(format!(
                            "the answer to {method} is {} bytes, more than NATS's max_payload of {max}; ask for less (e.g. one operation with get-operation, or the web page / JSON API of --http)",
                            bytes.len()
                        ))),
                    })
                    .unwrap_or_default();
                }
                driver.api_reply(reply_to, bytes).await;
            });
        }
    }

    /// Fair-share updates, computed on the blocking pool from a snapshot taken under the
    /// core lock and swapped in under it: heartbeats never wait for one (a 10,000
    /// operation tree takes ~25 ms). Due updates are looked for every tick, and at once
    /// when an operation arrives.
    async fn update_shares(self: Arc<Self>, period: Duration) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.share_updates.notified() => {}
            }
            let due = self
                .with_core(|core| core.share_updates_due(unix_now()))
                .await;
            for update in due {
                let tree = update.tree().to_string();
                match tokio::task::spawn_blocking(move || update.compute()).await {
                    Ok(computed) => {
                        self.with_core(|core| core.apply_share_update(computed))
                            .await
                    }
                    Err(e) => {
                        error!(tree, error = %e, "fair-share update failed; it is retried");
                        self.with_core(|core| core.abandon_share_update(&tree))
                            .await;
                    }
                }
            }
        }
    }

    async fn tick(self: Arc<Self>, period: Duration) {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_volume_save = std::time::Instant::now();
        let mut bus_down = false;
        loop {
            interval.tick().await;
            // While the bus is down nodes cannot heartbeat: their silence must not count.
            if self.client.connection_state() != async_nats::connection::State::Connected {
                if !bus_down {
                    warn!("lost the NATS connection; node timeouts are paused until it is back");
                    bus_down = true;
                }
                continue;
            }
            if std::mem::take(&mut bus_down) {
                info!("NATS connection is back; node timeouts restart now");
                self.with_core(|core| core.bus_restored(unix_now())).await;
            }
            let save = last_volume_save.elapsed() >= VOLUME_SAVE_PERIOD;
            let volumes = self
                .with_core(|core| {
                    core.tick(unix_now());
                    save.then(|| store::volumes_write(&core.integral_volumes()))
                })
                .await;
            match volumes {
                Some(Ok(w)) => {
                    last_volume_save = std::time::Instant::now();
                    // Volumes are an estimate refreshed every few seconds: no one waits.
                    let _ = self.writer.submit(vec![w]);
                }
                Some(Err(e)) => warn!(error = %e, "cannot encode integral volumes"),
                None => {}
            }
        }
    }
}

/// Becomes the leader (a standby waits here), revives the state from the store, then
/// serves until the process stops or the lease is lost.
pub async fn run(
    config: ServiceConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    // One connection per duty, each under the identity that duty needs.
    let connect = |name: &'static str, auth| {
        ytsched_common::transport::connect(&config.nats_urls, name, true, auth)
    };
    let client = connect("ytsched-scheduler", &config.auth).await?;
    let js = async_nats::jetstream::new(client.clone());
    let prefix = &config.subject_prefix;
    let state = store::open_bucket(
        &js,
        &store::bucket_name(prefix, "state"),
        config.kv_replicas,
        Duration::ZERO,
    )
    .await?;
    // The lease has a connection of its own: no load on the others (a request flood,
    // a slow consumer, a backlog of writes) can delay its renewal.
    let lease_client = connect("ytsched-scheduler lease", &config.auth).await?;
    let leases = store::open_bucket(
        &async_nats::jetstream::new(lease_client),
        &store::bucket_name(prefix, "leader"),
        config.kv_replicas,
        config.lease_ttl,
    )
    .await?;
    let holder = format!(
        "{}/pid {}/{}",
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let lease = Lease::acquire(leases, holder.clone(), config.lease_ttl).await;
    // Claimed before the state is read: a previous leader's next write round fails.
    let epoch = crate::writer::claim_epoch(&state, &holder).await?;

    let started = std::time::Instant::now();
    let mut snapshot = loop {
        match store::load(&state).await {
            Ok(s) => break s,
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot read the state yet; reading it again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let mut core = SchedulerCore::new(config.core);
    let approvals_seen = match &config.node_approvals {
        Some(path) => {
            let (approvals, seen) = crate::approvals_file::read(path)?;
            info!(nodes = approvals.nodes.len(), "node approvals loaded");
            core.set_node_approvals(approvals);
            seen
        }
        None => None,
    };
    for d in &snapshot.damaged {
        set_aside(&state, d).await?;
        snapshot.revisions.remove(&d.key);
        if let Some(id) = d.key.strip_prefix(store::OPERATION_PREFIX) {
            if let Ok(id) = OperationId::parse(id) {
                core.note_damaged_operation(id, d.error.clone());
            }
        }
    }
    // A stored configuration that no longer validates (limits tightened since it was
    // written) is set aside like an unreadable one: the scheduler starts regardless.
    let mut stored_config = false;
    if let Some(saved) = snapshot.config {
        let raw = store::config_write(&saved)?.value;
        match core.set_cluster_config(saved) {
            Ok(()) => {
                stored_config = true;
                info!("pool tree configuration loaded from the store");
            }
            Err(e) => {
                let damaged = store::Damaged {
                    key: store::CONFIG_KEY.to_string(),
                    value: raw,
                    error: format!("invalid: {e}"),
                };
                set_aside(&state, &damaged).await?;
                snapshot.revisions.remove(store::CONFIG_KEY);
            }
        }
    }
    if !stored_config {
        if let Some(initial) = config.initial_config {
            core.set_cluster_config(initial)
                .map_err(|e| anyhow::anyhow!("--config: {e}"))?;
            info!("pool tree configuration taken from --config");
        }
    }
    let fresh = !stored_config;
    let max_record_bytes = record_limit(client.server_info().max_payload);
    let writer = Writer::spawn(
        state.clone(),
        max_record_bytes,
        crate::writer::Revisions {
            keys: {
                let mut keys = std::mem::take(&mut snapshot.revisions);
                // The epoch as this leader claimed it, before the read.
                keys.insert(store::EPOCH_KEY.to_string(), epoch);
                keys
            },
            holder: holder.into(),
        },
    );
    let archive = Archive::open(
        &js,
        &store::bucket_name(prefix, "archive"),
        config.kv_replicas,
        config.archive_ttl,
        state.clone(),
        writer.clone(),
    )
    .await?;
    core.set_integral_volumes(snapshot.volumes);
    let (summary, mut effects) = core.run(|core| {
        core.restore(
            snapshot.operations,
            snapshot.jobs,
            unix_now(),
            config.revival_window.as_millis() as u64,
        )
    });
    // A configuration that was never stored is stored now, with what revival wrote.
    effects.config_changed |= fresh;
    let revival_stored = writer.submit(writes_of(&core, &effects));

    // Callers are heard and answered on the bus identity's connection, which cannot
    // publish into the store whatever reply subject a caller names.
    let bus = connect("ytsched-scheduler bus", &config.bus_auth).await?;
    // API callers on a connection of their own: their traffic never queues in front of
    // a heartbeat.
    let api_bus = connect("ytsched-scheduler api", &config.bus_auth).await?;
    let subjects = Subjects::new(prefix);
    let heartbeats = bus.subscribe(subjects.heartbeat_wildcard()).await?;
    let [user_api, admin_api] = subjects.api_wildcards();
    let api_calls = futures::stream::select(
        api_bus.subscribe(user_api).await?,
        api_bus.subscribe(admin_api).await?,
    );
    bus.flush().await?;
    api_bus.flush().await?;
    info!(nats = %config.nats_urls, prefix = %config.subject_prefix, "scheduler is serving");
    // Shared, not cloned, by every task: a clone of its stores and archive cost more
    // than a whole heartbeat in the core.
    let refusals = Arc::new(Refusals::default());
    let driver = Arc::new(Driver {
        client: bus,
        api_client: api_bus,
        rate_limits: RateLimits::new(config.api_rate),
        api_slots: Arc::new(tokio::sync::Semaphore::new(config.max_api_in_flight.max(1))),
        refusals: refusals.clone(),
        subjects,
        heartbeat_period_ms: core.config().heartbeat_period_ms,
        max_record_bytes,
        core: Arc::new(Mutex::new(core)),
        writer,
        archive,
        state,
        share_updates: Arc::new(tokio::sync::Notify::new()),
    });
    // Revival's effects go the way every call's do: stored, its retired operations
    // archived, its nodes nudged.
    driver.carry_out(effects, revival_stored).await;
    info!(
        operations = summary.operations,
        unfinished = summary.unfinished,
        running_jobs = summary.running_jobs,
        window_ms = config.revival_window.as_millis() as u64,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "state revived from the store; waiting for nodes to report running jobs"
    );
    if let Some(http) = config.http {
        let addr = http.addr;
        let listener = crate::http_listener::listen(addr)
            .with_context(|| format!("--http {addr}: cannot listen"))?;
        let access = crate::http_access::HttpAccess::start(http.access)?;
        let face = crate::http::Face {
            view: crate::web_view::WebView::start(driver.core.clone()),
            state: driver.state.clone(),
            refusals: refusals.clone(),
        };
        let router = crate::http::router(face, access);
        let refusals = refusals.clone();
        tokio::spawn(async move {
            if let Err(e) =
                crate::http_listener::serve(listener, router, http.bounds, refusals).await
            {
                error!(error = %e, "HTTP server stopped");
            }
        });
    }
    if let Some(path) = config.node_approvals.clone() {
        let core = driver.core.clone();
        tokio::spawn(crate::approvals_file::follow(
            path,
            approvals_seen,
            move |a| core.lock().expect("core lock").set_node_approvals(a),
        ));
    }
    let released = lease.releaser();
    let writer_fenced = driver.writer.clone();
    tokio::select! {
        r = tokio::spawn(driver.clone().serve_heartbeats(heartbeats)) => r?,
        r = tokio::spawn(driver.clone().serve_api(api_calls)) => r?,
        r = tokio::spawn(driver.clone().update_shares(config.tick_period)) => r?,
        r = tokio::spawn(driver.tick(config.tick_period)) => r?,
        e = tokio::spawn(lease.hold()) => return Err(e?),
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

/// Room an operation's record needs beyond its spec (pools, history, counters).
const OPERATION_RECORD_OVERHEAD: usize = 64 * 1024;

/// Decodes one API call, checks the caller may make it, runs it against the core, and
/// encodes the response.
fn dispatch(
    core: &mut SchedulerCore,
    caller: &Caller,
    method: &str,
    payload: &[u8],
    max_record: usize,
    then: &mut Option<Continuation>,
) -> Vec<u8> {
    let now = unix_now();
    match method {
        api::StartOperation::METHOD => respond::<api::StartOperation>(payload, |req| {
            let spec_limit = max_record.saturating_sub(OPERATION_RECORD_OVERHEAD);
            if payload.len() > spec_limit {
                return Err(ApiError::limit_reached(format!(
                    "spec: {} bytes is more than the limit of {spec_limit} (the store's record limit less room for the operation's state)",
                    payload.len()
                )));
            }
            // The id is always the scheduler's: no request can name an existing,
            // archived, retired or damaged record.
            core.start_operation_as(
                OperationId::random(),
                caller,
                req.body.spec,
                req.body.idempotency_token,
                now,
            )
        }),
        // Metadata is everyone's; environment values and stdin only their owners'.
        api::GetOperation::METHOD => respond::<api::GetOperation>(payload, |req| {
            let info = core.operation_info(&req.body.operation_id)?;
            Ok(visible_to(core, caller, info))
        }),
        // Like metadata, everyone's: it names pools and operations, not their contents.
        api::ExplainOperation::METHOD => respond::<api::ExplainOperation>(payload, |req| {
            core.explain_operation(&req.body.operation_id)
        }),
        api::ExplainPool::METHOD => respond::<api::ExplainPool>(payload, |req| {
            core.explain_pool(
                req.body.pool_tree.as_ref().map(TreeName::as_str),
                req.body.pool.as_str(),
            )
        }),
        api::ListOperations::METHOD => respond::<api::ListOperations>(payload, |req| {
            let mut body = req.body;
            let limit = crate::core::page_limit(body.limit)?;
            let page = match archive_cursor(&body.cursor)? {
                // Past every operation in memory: only the archive has more.
                Some(before) => {
                    *then = Some(Continuation::ListArchive {
                        page: api::OperationPage::default(),
                        filter: body.filter,
                        before,
                        room: limit,
                    });
                    return Ok(api::OperationPage::default());
                }
                None => fitting_page(body.limit, |limit| {
                    body.limit = limit;
                    let mut page = core.list_operations_page(&body)?;
                    page.operations = page
                        .operations
                        .into_iter()
                        .map(|info| visible_to(core, caller, info))
                        .collect();
                    Ok(page)
                })?,
            };
            let room = limit.saturating_sub(page.operations.len());
            match (&page.next_cursor, room) {
                (Some(_), _) => Ok(page),
                // Memory filled the page exactly: the next one starts in the archive.
                (None, 0) => Ok(api::OperationPage {
                    next_cursor: Some("a".into()),
                    ..page
                }),
                (None, room) => {
                    *then = Some(Continuation::ListArchive {
                        page,
                        filter: body.filter,
                        before: None,
                        room,
                    });
                    Ok(api::OperationPage::default())
                }
            }
        }),
        api::AbortOperation::METHOD => respond::<api::AbortOperation>(payload, |req| {
            core.authorize_operation(caller, &req.body.operation_id, "abort")?;
            core.abort_operation(&req.body.operation_id, now)
        }),
        api::ListJobs::METHOD => respond::<api::ListJobs>(payload, |req| {
            match core.list_jobs_page(&req.body)?.into_held() {
                Ok((held, next)) => Ok(fitting_job_page(held, next, MAX_PAGE_BYTES)),
                Err(plan) => {
                    // Settled attempts are read from the store outside the core lock.
                    *then = Some(Continuation::JobPage(plan));
                    Ok(api::JobPage::default())
                }
            }
        }),
        api::GetJobOutput::METHOD => respond::<api::GetJobOutput>(payload, |req| {
            core.authorize_operation(caller, &req.body.operation_id, "read the job output of")?;
            core.job_output_ready(&req.body.operation_id, &req.body.job_id)?;
            // The output itself is in the store: read outside the core lock.
            *then = Some(Continuation::JobOutput {
                job: req.body.job_id,
                stream: req.body.stream,
            });
            Ok(String::new())
        }),
        api::ListNodes::METHOD => respond::<api::ListNodes>(payload, |_| Ok(core.list_nodes())),
        api::AdminGet::METHOD => respond::<api::AdminGet>(payload, |req| {
            core.admin_get(&req.body.path)
                .map(|v| v.to_string())
                .map_err(crate::admin_changes::admin_error)
        }),
        api::AdminList::METHOD => respond::<api::AdminList>(payload, |req| {
            core.admin_list(&req.body.path)
                .map_err(crate::admin_changes::admin_error)
        }),
        api::AdminExists::METHOD => respond::<api::AdminExists>(payload, |req| {
            core.admin_exists(&req.body.path)
                .map_err(crate::admin_changes::admin_error)
        }),
        api::AdminSet::METHOD => respond::<api::AdminSet>(payload, |req| {
            crate::admin_changes::apply(core, caller, api::AdminChange::Set(req.body), max_record)
        }),
        api::AdminRemove::METHOD => respond::<api::AdminRemove>(payload, |req| {
            crate::admin_changes::apply(
                core,
                caller,
                api::AdminChange::Remove(req.body),
                max_record,
            )
        }),
        api::AdminCreate::METHOD => respond::<api::AdminCreate>(payload, |req| {
            crate::admin_changes::apply(
                core,
                caller,
                api::AdminChange::Create(req.body),
                max_record,
            )
        }),
        // The same checks and the same code as the change itself, on a copy.
        api::AdminWhatIf::METHOD => respond::<api::AdminWhatIf>(payload, |req| {
            core.what_if(now, |copy| {
                crate::admin_changes::apply(copy, caller, req.body.change, max_record)
            })
        }),
        other => {
            warn!(method = other, "unknown API method");
            encode(&ApiResponse::<()> {
                protocol_version: PROTOCOL_VERSION,
                result: Err(ApiError::not_found(format!("unknown API method '{other}'"))),
            })
            .unwrap_or_default()
        }
    }
}

/// Whether a `get_operation`, `list_jobs` or `get_job_output` request names an
/// operation the core no longer holds (it was retired to the archive).
fn names_archived_operation(core: &SchedulerCore, method: &str, payload: &[u8]) -> bool {
    let id = || -> Option<OperationId> {
        Some(match method {
            api::GetOperation::METHOD => {
                decode::<ApiRequest<api::GetOperation>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            api::ExplainOperation::METHOD => {
                decode::<ApiRequest<api::ExplainOperation>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            api::ListJobs::METHOD => {
                decode::<ApiRequest<api::ListJobs>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            api::GetJobOutput::METHOD => {
                decode::<ApiRequest<api::GetJobOutput>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            _ => return None,
        })
    };
    id().is_some_and(|id| {
        core.operation(&id)
            .is_err_and(|e| e.kind == api::ErrorKind::NotFound)
    })
}

/// A `list_operations` cursor into the archive: `a` (from its newest) or `a<sequence>`
/// (below that list-stream sequence); `None` for a cursor into the operations in memory.
fn archive_cursor(cursor: &Option<String>) -> Result<Option<Option<u64>>, ApiError> {
    let Some(rest) = cursor.as_deref().and_then(|c| c.strip_prefix('a')) else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Ok(Some(None));
    }
    rest.parse::<u64>()
        .map(|s| Some(Some(s)))
        .map_err(|_| ApiError::new(format!("cursor 'a{rest}' is not one this scheduler gave")))
}

/// What an API answer still needs from the store or the archive once the core has
/// decided it: read outside the core lock.
enum Continuation {
    /// A finished job of a live operation the caller may read: its output is in the
    /// store, where its result put it.
    JobOutput {
        job: ytsched_common::JobId,
        stream: api::OutputStream,
    },
    /// A `list-jobs` page naming attempts the core let go of: their records are read
    /// from the store.
    JobPage(JobPagePlan),
    /// `list_operations` lists the operations in memory first, then goes on into the
    /// archive, most recently archived first: `room` more go on `page` from below
    /// list-stream sequence `before` (from the newest if `None`).
    ListArchive {
        page: api::OperationPage,
        filter: api::OperationFilter,
        before: Option<u64>,
        room: usize,
    },
}

impl Continuation {
    async fn answer(self, driver: &Driver, caller: &Caller) -> Vec<u8> {
        fn reply<T: serde::Serialize>(result: Result<T, ApiError>) -> Vec<u8> {
            encode(&ApiResponse {
                protocol_version: PROTOCOL_VERSION,
                result,
            })
            .unwrap_or_default()
        }
        match self {
            Continuation::JobOutput { job, stream } => {
                reply(match store::job_output(&driver.state, &job).await {
                    Ok(output) => Ok(output
                        .map(|o| o.stream(stream).to_string())
                        .unwrap_or_default()),
                    Err(e) => Err(ApiError::of(
                        api::ErrorKind::Unavailable,
                        format!("the output of job {job} cannot be read: {e}"),
                    )),
                })
            }
            Continuation::JobPage(plan) => {
                reply(read_job_page(&driver.state, plan, MAX_PAGE_BYTES).await)
            }
            Continuation::ListArchive {
                mut page,
                filter,
                before,
                room,
            } => {
                let used = encode(&page).map_or(MAX_PAGE_BYTES, |b| b.len());
                let budget = MAX_PAGE_BYTES.saturating_sub(used).max(1);
                let archived = match driver
                    .archive
                    .list_page(&filter, before, room, budget)
                    .await
                {
                    Ok(a) => a,
                    Err(e) => return reply::<()>(Err(e)),
                };
                page.operations
                    .extend(archived.operations.into_iter().map(|info| {
                        if controls_operation_of(caller, &info.user, &info.spec.owners) {
                            info
                        } else {
                            info.redacted()
                        }
                    }));
                page.next_cursor = archived.next_before.map(|s| format!("a{s}"));
                reply(Ok(page))
            }
        }
    }
}

/// Answers a read of an operation the core no longer holds from the archive, with the
/// same access rules as for a live one.
async fn answer_from_archive(
    archive: &Archive,
    caller: &Caller,
    method: &str,
    payload: &[u8],
) -> Vec<u8> {
    fn reply<T: serde::Serialize>(result: Result<T, ApiError>) -> Vec<u8> {
        encode(&ApiResponse {
            protocol_version: PROTOCOL_VERSION,
            result,
        })
        .unwrap_or_default()
    }
    async fn find(archive: &Archive, id: &OperationId) -> Result<ArchivedOperation, ApiError> {
        archive
            .operation(id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no such operation: {id}")))
    }
    match method {
        api::GetOperation::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::GetOperation>>(payload) else {
                return reply::<()>(Err(ApiError::new("malformed get_operation request")));
            };
            reply(find(archive, &req.body.operation_id).await.map(|a| {
                if controls_operation_of(caller, &a.info.user, &a.info.spec.owners) {
                    a.info
                } else {
                    a.info.redacted()
                }
            }))
        }
        api::ExplainOperation::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::ExplainOperation>>(payload) else {
                return reply::<()>(Err(ApiError::new("malformed explain_operation request")));
            };
            reply(find(archive, &req.body.operation_id).await.map(|a| {
                ytsched_common::explain::Explanation::ended(
                    a.info.id,
                    a.info.state,
                    a.info.error,
                    unix_now(),
                )
            }))
        }
        api::ListJobs::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::ListJobs>>(payload) else {
                return reply::<()>(Err(ApiError::new("malformed list_jobs request")));
            };
            reply(
                async {
                    let a = find(archive, &req.body.operation_id).await?;
                    archive.job_page(&a, &req.body).await
                }
                .await,
            )
        }
        api::GetJobOutput::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::GetJobOutput>>(payload) else {
                return reply::<()>(Err(ApiError::new("malformed get_job_output request")));
            };
            let b = req.body;
            reply(
                async {
                    let a = find(archive, &b.operation_id).await?;
                    let owners = &a.info.spec.owners;
                    let action = "read the job output of";
                    authorize_operation_of(caller, &b.operation_id, &a.info.user, owners, action)?;
                    archive
                        .job_output(&b.operation_id, &b.job_id, b.stream)
                        .await
                }
                .await,
            )
        }
        other => reply::<()>(Err(ApiError::not_found(format!(
            "unknown API method '{other}'"
        )))),
    }
}

fn visible_to(
    core: &SchedulerCore,
    caller: &Caller,
    info: api::OperationInfo,
) -> api::OperationInfo {
    if core.may_see_secrets_of(caller, &info.id) {
        info
    } else {
        info.redacted()
    }
}

fn respond<M: ApiMethod>(
    payload: &[u8],
    handle: impl FnOnce(ApiRequest<M>) -> Result<M::Response, ApiError>,
) -> Vec<u8> {
    let result = match decode::<ApiRequest<M>>(payload) {
        Ok(req) if req.protocol_version != PROTOCOL_VERSION => Err(ApiError::new(format!(
            "protocol version {} is not supported (scheduler speaks {PROTOCOL_VERSION})",
            req.protocol_version
        ))),
        Ok(req) => handle(req),
        Err(e) => {
            warn!(method = M::METHOD, error = %e, "malformed API request");
            Err(ApiError::new(format!(
                "malformed {} request: {e}",
                M::METHOD
            )))
        }
    };
    encode(&ApiResponse {
        protocol_version: PROTOCOL_VERSION,
        result,
    })
    .unwrap_or_default()
}

/// A page that fits one NATS message: one of large items is asked for again with half
/// the limit (its cursor still says where the next page starts).
fn fitting_page<P: serde::Serialize>(
    limit: Option<u32>,
    mut page: impl FnMut(Option<u32>) -> Result<P, ApiError>,
) -> Result<P, ApiError> {
    let mut limit = limit;
    loop {
        let p = page(limit)?;
        let size = encode(&p).map(|b| b.len()).unwrap_or(usize::MAX);
        let asked = limit.unwrap_or(api::ListOperations::DEFAULT_PAGE);
        if size <= MAX_PAGE_BYTES || asked <= 1 {
            return Ok(p);
        }
        limit = Some(asked / 2);
    }
}

/// Whether a requester that waits `timeout_ms` (0: not said) for its reply has given up on
/// a request received at `received`. A margin keeps the reply from being sent just as it
/// stops listening.
fn given_up(received: std::time::Instant, timeout_ms: u64) -> bool {
    const MARGIN: std::time::Duration = std::time::Duration::from_millis(250);
    timeout_ms > 0 && received.elapsed() + MARGIN >= std::time::Duration::from_millis(timeout_ms)
}

#[cfg(test)]
mod given_up_tests {
    use super::given_up;
    use std::time::{Duration, Instant};

    #[test]
    fn a_request_past_its_requesters_patience_is_dropped() {
        let now = Instant::now();
        assert!(!given_up(now, 5_000), "fresh");
        assert!(!given_up(now, 0), "no patience said: always answered");
        let old = now - Duration::from_secs(6);
        assert!(given_up(old, 5_000), "waited longer than the agent does");
        assert!(!given_up(old, 0));
        let nearly = now - Duration::from_millis(4_900);
        assert!(
            given_up(nearly, 5_000),
            "too close to the end to be read in time"
        );
    }
}
