//! Pieces of becoming the leader: the configuration restored from the store (what no
//! longer reads or validates set aside, with an alert), and the HTTP face started
//! beside the bus.

use super::*;
use crate::gates::refusals::Refusals;

/// Sets aside the damaged records `snapshot` found and loads the stored configuration
/// into `core` (or `initial`, `--config`, when none was stored or it no longer
/// validates). Returns whether the store's configuration was taken.
pub(super) async fn restore_configuration(
    core: &mut SchedulerCore,
    state: &async_nats::jetstream::kv::Store,
    snapshot: &mut store::Snapshot,
    initial: Option<crate::core::ClusterConfig>,
) -> anyhow::Result<bool> {
    for d in &snapshot.damaged {
        set_aside(state, d).await?;
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
    if let Some(saved) = snapshot.config.take() {
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
                set_aside(state, &damaged).await?;
                snapshot.revisions.remove(store::CONFIG_KEY);
            }
        }
    }
    if !stored_config {
        if let Some(initial) = initial {
            core.set_cluster_config(initial)
                .map_err(|e| anyhow::anyhow!("--config: {e}"))?;
            info!("pool tree configuration taken from --config");
        }
    }
    Ok(stored_config)
}

/// Serves the web UI, JSON and metrics beside the bus (`--http`).
pub(super) fn start_http(
    http: HttpConfig,
    driver: &Arc<Driver>,
    refusals: Arc<Refusals>,
) -> anyhow::Result<()> {
    let addr = http.addr;
    let listener = crate::http::listener::listen(addr)
        .with_context(|| format!("--http {addr}: cannot listen"))?;
    let access = crate::http::access::HttpAccess::start(http.access)?;
    let tls = match &http.tls {
        Some(files) => Some(crate::http::tls::acceptor(files)?),
        None => None,
    };
    let face = crate::http::Face {
        view: crate::http::web_view::WebView::start(driver.core.clone()),
        state: driver.state.clone(),
        writer: driver.writer.clone(),
        refusals: refusals.clone(),
        event_log: driver.event_log.clone(),
        usage_reports: Default::default(),
        api: crate::service::ApiPort::new(driver.clone()),
        yt_counts: Default::default(),
        files: driver.files.clone(),
        file_caches: driver.file_caches.clone(),
    };
    let router = crate::http::router(face, access);
    tokio::spawn(async move {
        let served = crate::http::listener::serve(listener, router, http.bounds, tls, refusals);
        if let Err(e) = served.await {
            error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(())
}

/// What becoming the leader leaves: the store's connection, its state bucket, the
/// lease held and the epoch claimed.
pub(super) struct Leadership {
    pub(super) client: async_nats::Client,
    pub(super) js: async_nats::jetstream::Context,
    pub(super) state: async_nats::jetstream::kv::Store,
    pub(super) lease: LeaseThread,
    pub(super) holder: String,
    pub(super) epoch: u64,
}

/// Connects under the store identity, opens the state bucket, waits for the leader
/// lease (a standby waits here) and claims the next epoch.
pub(super) async fn become_leader(config: &ServiceConfig) -> anyhow::Result<Leadership> {
    let client = connect_as(config, "ytsched-scheduler", &config.auth).await?;
    let js = async_nats::jetstream::new(client.clone());
    let prefix = &config.subject_prefix;
    let state = store::open_bucket(
        &js,
        &store::bucket_name(prefix, "state"),
        config.kv_replicas,
        Duration::ZERO,
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
    // The lease has a thread, runtime and connection of its own: no load on the
    // others (a request flood, a slow consumer, a backlog of writes, a busy core) can
    // delay its renewal (see `lease_thread.rs`).
    let open = {
        let (urls, auth) = (config.nats_urls.clone(), config.auth.clone());
        let (bucket, replicas, ttl) = (
            store::bucket_name(prefix, "leader"),
            config.kv_replicas,
            config.lease_ttl,
        );
        move || async move {
            let client =
                ytsched_common::transport::connect(&urls, "ytsched-scheduler lease", true, &auth)
                    .await?;
            store::open_bucket(&async_nats::jetstream::new(client), &bucket, replicas, ttl).await
        }
    };
    let lease = LeaseThread::acquire(open, holder.clone(), config.lease_ttl).await?;
    // Claimed before the state is read: a previous leader's next write round fails.
    let epoch = crate::store::writer::claim_epoch(&state, &holder).await?;

    Ok(Leadership {
        client,
        js,
        state,
        lease,
        holder,
        epoch,
    })
}

/// The state revived from the store: the core, its writer and archive, and what
/// revival changed, queued for the store.
pub(super) struct Revived {
    pub(super) core: SchedulerCore,
    pub(super) writer: Writer,
    /// The event log stream, read by `list_events`.
    pub(super) event_log: async_nats::jetstream::stream::Stream,
    pub(super) archive: Archive,
    pub(super) summary: crate::core::records::RevivalSummary,
    pub(super) effects: Effects,
    pub(super) stored: crate::store::writer::Stored,
    pub(super) approvals_seen: Option<std::time::SystemTime>,
    pub(super) max_record_bytes: usize,
    pub(super) started: std::time::Instant,
    pub(super) files: crate::files::FileStore,
}

/// The stored state, read again every second until it reads (a store still electing
/// its leader answers errors for a while).
async fn read_state(
    client: &async_nats::Client,
    state: &async_nats::jetstream::kv::Store,
) -> store::Snapshot {
    let mut stuck = store::stuck_server::StuckServer::new(client.clone(), "state reader");
    loop {
        match store::load(state).await {
            Ok(s) => return s,
            Err(e) => {
                stuck.failed().await;
                warn!(error = %format!("{e:#}"), "cannot read the state yet; reading it again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The `--node-approvals` file into the core; returns when it was last changed, for
/// the follower that reloads it.
fn load_approvals(
    config: &ServiceConfig,
    core: &mut SchedulerCore,
) -> anyhow::Result<Option<std::time::SystemTime>> {
    let Some(path) = &config.node_approvals else {
        return Ok(None);
    };
    let (approvals, seen) = crate::watched_files::approvals_file::read(path)?;
    info!(nodes = approvals.nodes.len(), "node approvals loaded");
    core.set_node_approvals(approvals);
    Ok(seen)
}

/// Reads the state (again until it reads), restores the configuration and every
/// operation and job into a new core, and queues what revival changed.
pub(super) async fn revive(
    config: &mut ServiceConfig,
    leader: &Leadership,
) -> anyhow::Result<Revived> {
    let Leadership {
        client,
        js,
        state,
        epoch,
        ..
    } = leader;
    let (state, epoch) = (state.clone(), *epoch);
    let prefix = &config.subject_prefix;
    let started = std::time::Instant::now();
    let mut snapshot = read_state(client, &state).await;
    config.core.max_record_bytes = record_limit(client.server_info().max_payload);
    let mut core = SchedulerCore::new(config.core.clone());
    core.set_start_key(crate::core::StartKey::new(store::start_key(&state).await?));
    let approvals_seen = load_approvals(config, &mut core)?;
    let stored_config = restore_configuration(
        &mut core,
        &state,
        &mut snapshot,
        config.initial_config.take(),
    )
    .await?;
    let fresh = !stored_config;
    let max_record_bytes = record_limit(client.server_info().max_payload);
    let subjects = ytsched_common::subjects::Subjects::new(prefix);
    let event_log = open_event_log(config, js, &subjects).await?;
    let revisions = {
        let mut keys = std::mem::take(&mut snapshot.revisions);
        // The epoch as this leader claimed it, before the read.
        keys.insert(store::EPOCH_KEY.to_string(), epoch);
        keys
    };
    let writer = spawn_writer(config, leader, &subjects, revisions, max_record_bytes).await?;
    let archive = Archive::open(
        js,
        &store::bucket_name(prefix, "archive"),
        config.kv_replicas,
        config.archive_ttl,
        max_record_bytes,
        state.clone(),
        writer.clone(),
    )
    .await?;
    let files = crate::files::open(js, &subjects, config.kv_replicas, config.files.clone()).await?;
    core.set_integral_volumes(snapshot.volumes);
    core.restore_node_trust(snapshot.trust);
    let (summary, mut effects) = core.run(|core| {
        let now = unix_now();
        let summary = core.restore(
            snapshot.operations,
            snapshot.jobs,
            now,
            config.revival_window.as_millis() as u64,
        );
        // Each leader's log starts with the configuration it schedules by.
        core.note_configuration(now);
        summary
    });
    // A configuration that was never stored is stored now, with what revival wrote.
    effects.config_changed |= fresh;
    let now = unix_now();
    let revival_stored = writer.submit_with_events(
        writes_of(&core, &effects),
        crate::core::event_records::describe_all(&core, &effects, now),
        now,
    );
    Ok(Revived {
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
    })
}

/// The state's one writer, with the revisions the read found and a connection of its
/// own for events: a round's megabyte messages of events never queue ahead of the
/// state's small writes on one socket.
async fn spawn_writer(
    config: &ServiceConfig,
    leader: &Leadership,
    subjects: &ytsched_common::subjects::Subjects,
    keys: std::collections::HashMap<String, u64>,
    max_record_bytes: usize,
) -> anyhow::Result<Writer> {
    let events = connect_as(config, "ytsched-scheduler events", &config.auth).await?;
    Ok(Writer::spawn(
        leader.client.clone(),
        leader.state.clone(),
        max_record_bytes,
        crate::store::writer::Revisions {
            keys,
            holder: leader.holder.clone().into(),
        },
        crate::store::writer::EventSink {
            js: async_nats::jetstream::new(events),
            stream: subjects.bucket("events"),
            subject: subjects.events(),
            max_message_bytes: max_record_bytes,
            fence: Default::default(),
        },
    ))
}

/// The event log's stream, made or brought to the configured retention.
async fn open_event_log(
    config: &ServiceConfig,
    js: &async_nats::jetstream::Context,
    subjects: &ytsched_common::subjects::Subjects,
) -> anyhow::Result<async_nats::jetstream::stream::Stream> {
    store::open_event_log(
        js,
        &subjects.bucket("events"),
        &subjects.events(),
        config.kv_replicas,
        config.event_log.max_age,
        config.event_log.max_bytes,
    )
    .await
}
