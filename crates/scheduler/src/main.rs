use anyhow::Context;
use clap::Parser;
use std::time::Duration;
use ytsched_common::identity::Role;

/// The answering identity `ytsched auth init` makes beside the scheduler's.
const SCHEDULER_BUS_NAME: &str = "scheduler-bus";
use ytsched_common::transport::BusArgs;
use ytsched_common::units::DurationMs;
use ytsched_scheduler::core::config_file::ConfigFile;
use ytsched_scheduler::core::CoreConfig;
use ytsched_scheduler::service::{run, HttpConfig, ServiceConfig};

/// mimalloc, purging freed memory at once, gives a burst's memory back where glibc's
/// malloc kept its peak resident, and allocates faster under load (docs/performance.md,
/// has the figures measured with either).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's option enum (v2 and v3 alike), which
/// libmimalloc-sys does not name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// What a burst frees goes back to the system, and comes back in small pages.
fn keep_memory_lean() {
    // SAFETY: sets a plain integer option of the allocator, which mimalloc allows at
    // any time from any thread; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
    // Without transparent huge pages: an update's arrays, freed and purged at once, came
    // back as 2 MiB pages each zeroed whole and held resident while any part was used
    // (1,000 nodes with 10,000 operations: RSS peak 114-129 MiB with them, 94 without;
    // docs/performance.md). Where the kernel refuses, they stay on: only memory is lost.
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        tracing::warn!(error = %e, "transparent huge pages left on for this process");
    }
}

/// The ytsched scheduler: divides the cluster between operations and answers node heartbeats.
#[derive(Parser, Debug)]
#[command(name = "ytsched-scheduler", version)]
struct Args {
    /// NATS server URL(s), comma-separated for a NATS cluster.
    #[arg(long, env = "YTSCHED_NATS", default_value = "nats://127.0.0.1:4222")]
    nats: String,
    /// Prefix of every NATS subject, so several installations can share a NATS cluster.
    #[arg(long, default_value = ytsched_common::subjects::DEFAULT_PREFIX)]
    subject_prefix: String,
    /// Heartbeat period nodes are asked to keep.
    #[arg(long, default_value = "1s")]
    heartbeat_period: DurationMs,
    /// Silence after which a node is offline and its jobs are rescheduled: the initial
    /// `node_heartbeat_timeout` of the default tree when neither the store nor --config
    /// provides trees (then each tree's own setting applies).
    #[arg(long, default_value = "30s")]
    node_heartbeat_timeout: DurationMs,
    /// YAML file with initial pool trees and pools (`default_tree`, `pool_trees`), applied
    /// only when the store holds no configuration yet.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Replicas of the scheduler's KV buckets: 1 on a single NATS server, 3 on a cluster.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    kv_replicas: u8,
    /// A leader that has not renewed its lease for this long is replaced by a standby.
    #[arg(long, default_value = "3s")]
    lease_ttl: DurationMs,
    /// After a restart, how long jobs the store says are running wait for their nodes to
    /// report them before they run again elsewhere.
    #[arg(long, default_value = "10s")]
    revival_window: DurationMs,
    /// Serve a web page, JSON (`/api/...`) and Prometheus metrics (`/metrics`) here,
    /// e.g. 127.0.0.1:8080 (port 0: any free port, logged).
    #[arg(long)]
    http: Option<std::net::SocketAddr>,
    /// Web tokens (`http-tokens.json`, made by `ytsched auth token USER`), followed as it
    /// changes. Default: beside --creds; with --insecure and no file, the face is open and
    /// must then be on loopback.
    #[arg(long, env = "YTSCHED_HTTP_TOKENS", value_name = "FILE")]
    http_tokens: Option<std::path::PathBuf>,
    /// Serve --http insecurely off loopback: without tokens where none are configured
    /// (every operation shows redacted, but anyone who reaches the port reads pools,
    /// users and commands), or with tokens over plain HTTP (they cross the network in
    /// clear text: for a TLS-terminating proxy in front).
    #[arg(long)]
    http_insecure: bool,
    /// Serve --http as HTTPS with this PEM certificate (chain); with --http-tls-key.
    /// `ytsched auth init --tls` makes `tls/http.pem`.
    #[arg(long, value_name = "FILE", requires = "http_tls_key")]
    http_tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --http-tls-cert (`tls/http-key.pem`).
    #[arg(long, value_name = "FILE", requires = "http_tls_cert")]
    http_tls_key: Option<std::path::PathBuf>,
    /// HTTP connections open at once; more are answered 503 and closed (lowered to fit
    /// the process's file descriptor limit).
    #[arg(long, default_value_t = 4096)]
    http_max_connections: usize,
    /// HTTP connections one client address may hold open at once; more are answered
    /// 503 and closed, so one address cannot shut the others out.
    #[arg(long, default_value_t = 64)]
    http_max_connections_per_address: usize,
    /// How long an HTTP client may take to send a request header, or stay idle between
    /// requests, before its connection is closed.
    #[arg(long, default_value = "10s")]
    http_header_timeout: DurationMs,
    /// How long the archive keeps an operation retired from memory (by each tree's
    /// clean_delay, soft/hard_retained_operation_count and max_operation_age).
    #[arg(long, default_value = "30d")]
    archive_ttl: DurationMs,
    /// How long the event log (`<prefix>_events`, SPEC 5.16) keeps an event.
    #[arg(long, default_value = "30d")]
    event_log_max_age: DurationMs,
    /// The most the event log may hold; past it the oldest events go.
    #[arg(long, default_value = "1GiB")]
    event_log_max_bytes: ytsched_common::ByteSize,
    /// How often each pool's fair share, usage and demand go to the event log (what
    /// usage attainment and replays measure against); at least 1s.
    #[arg(long, default_value = "1m")]
    pool_sample_period: DurationMs,
    /// Requests per second each identity (user, admin) may make; more are answered
    /// "busy, retry" (a few a second) or dropped, and counted.
    #[arg(long, default_value_t = 1000.0)]
    api_rate: f64,
    /// Requests an identity may send at once after a quiet spell.
    #[arg(long, default_value_t = 2000.0)]
    api_burst: f64,
    /// Core time each identity's API calls may take per second, kept up (4 s of it at
    /// once after a quiet spell); past it the identity is answered "busy, retry".
    #[arg(long, default_value = "250ms")]
    api_core_budget: DurationMs,
    /// Answer bytes each identity may receive per second, kept up (4 s of it at once).
    #[arg(long, default_value = "8M")]
    api_byte_budget: ytsched_common::ByteSize,
    /// API requests served at once; past it callers are answered "busy, retry".
    #[arg(long, default_value_t = 512)]
    max_api_in_flight: usize,
    /// Store writes queued and not yet stored past which new operations are answered
    /// "busy, retry" instead of queued in memory.
    #[arg(long, default_value_t = ytsched_scheduler::store::writer::MAX_WRITE_BACKLOG)]
    max_write_backlog: usize,
    /// Node approvals (`node-approvals.json` in the `ytsched auth` directory): a node
    /// offers no more than it was approved for (default: 1,024 cpu, 64 TiB, 64 gpu,
    /// 1,024 user slots). Followed as it changes.
    #[arg(long, env = "YTSCHED_NODE_APPROVALS", value_name = "FILE")]
    node_approvals: Option<std::path::PathBuf>,
    #[command(flatten)]
    files: FileArgs,
    #[command(flatten)]
    bus: BusArgs,
    #[command(flatten)]
    settings: ytsched_common::settings_file::SettingsArgs,
    /// Credentials of the scheduler's answering identity (role scheduler_bus): the
    /// connection that hears heartbeats and requests, which may publish only to inboxes
    /// and nudges. Default: `scheduler-bus.creds` beside --creds.
    #[arg(long, env = "YTSCHED_BUS_CREDS", value_name = "FILE")]
    bus_creds: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ytsched_common::logging::init("info");
    keep_memory_lean();
    let parsed = ytsched_common::settings_file::parse_or_exit::<Args>();
    if let Some(settings) = parsed.printed {
        print!("{settings}");
        return Ok(());
    }
    let args = parsed.args;
    if args.node_heartbeat_timeout.0 < ytsched_common::pool_config::MIN_NODE_HEARTBEAT_TIMEOUT_MS {
        anyhow::bail!(
            "--node-heartbeat-timeout {} is shorter than the minimum of {} ms",
            args.node_heartbeat_timeout,
            ytsched_common::pool_config::MIN_NODE_HEARTBEAT_TIMEOUT_MS
        );
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(args.api_rate) || !positive(args.api_burst) {
        anyhow::bail!(
            "--api-rate {} / --api-burst {}: both must be positive numbers",
            args.api_rate,
            args.api_burst
        );
    }
    let auth = args
        .bus
        .daemon_auth(&args.nats, &[Role::Scheduler], "ytsched-scheduler")?;
    let bus_auth = bus_identity(&args, &auth)?;
    if args.bus.insecure {
        tracing::warn!(
            "--insecure: the bus is unauthenticated, so anyone who reaches it controls the cluster"
        );
    }
    let http = http_config(&args)?;
    let initial_config = initial_config(args.config.as_deref())?;
    let config = ServiceConfig {
        nats_urls: args.nats,
        auth,
        bus_auth,
        subject_prefix: args.subject_prefix,
        core: CoreConfig {
            heartbeat_period_ms: args.heartbeat_period.0.max(1),
            node_heartbeat_timeout_ms: args.node_heartbeat_timeout.0,
            background_share_updates: true,
            pool_sample_period_ms: args.pool_sample_period.0.max(1000),
            ..Default::default()
        },
        tick_period: Duration::from_millis(50),
        initial_config,
        kv_replicas: args.kv_replicas as usize,
        lease_ttl: Duration::from_millis(args.lease_ttl.0.max(300)),
        revival_window: Duration::from_millis(args.revival_window.0),
        http,
        archive_ttl: Duration::from_millis(args.archive_ttl.0.max(1000)),
        event_log: ytsched_scheduler::service::EventLogConfig {
            max_age: Duration::from_millis(args.event_log_max_age.0.max(1000)),
            max_bytes: args.event_log_max_bytes.0.max(1 << 20),
        },
        api_rate: ytsched_scheduler::gates::rate_limits::RateLimit {
            per_second: args.api_rate,
            burst: args.api_burst.max(1.0),
        },
        api_cost: ytsched_scheduler::gates::cost_budgets::CostBudget {
            core_per_second: Duration::from_millis(args.api_core_budget.0.max(1)),
            bytes_per_second: args.api_byte_budget.0.max(64 << 10),
            ..Default::default()
        },
        max_api_in_flight: args.max_api_in_flight,
        max_write_backlog: args.max_write_backlog,
        node_approvals: args.node_approvals,
        files: args.files.limits(),
    };
    run(config, async {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate() => {}
        }
    })
    .await
}

/// The scheduler's answering identity (`--bus-creds`, by default beside `--creds`): it
/// must exist and differ from the store identity.
fn bus_identity(
    args: &Args,
    auth: &ytsched_common::transport::ConnectAuth,
) -> anyhow::Result<ytsched_common::transport::ConnectAuth> {
    Ok(match &args.bus.creds {
        None if args.bus_creds.is_some() => {
            anyhow::bail!("--bus-creds goes with --creds (the store identity), not --insecure")
        }
        None => auth.clone(),
        Some(store_creds) => {
            let path = args.bus_creds.clone().unwrap_or_else(|| {
                store_creds.with_file_name(format!("{SCHEDULER_BUS_NAME}.creds"))
            });
            if !path.exists() {
                anyhow::bail!(
                    "ytsched-scheduler needs its bus identity too: {} does not exist (pass --bus-creds FILE; `ytsched auth init` makes {SCHEDULER_BUS_NAME}.creds)",
                    path.display()
                );
            }
            let bus = BusArgs {
                creds: Some(path),
                tls: args.bus.tls.clone(),
                insecure: false,
            };
            let bus_auth = bus.daemon_auth(
                &args.nats,
                &[Role::SchedulerBus],
                "ytsched-scheduler --bus-creds",
            )?;
            if bus_auth.creds.as_ref().map(|c| &c.name) == auth.creds.as_ref().map(|c| &c.name) {
                anyhow::bail!("--bus-creds names the same identity as --creds");
            }
            bus_auth
        }
    })
}

/// `--http` with its access (tokens, or open where allowed) and connection bounds.
fn http_config(args: &Args) -> anyhow::Result<Option<HttpConfig>> {
    Ok(match args.http {
        None => None,
        Some(addr) => {
            let tls = match (&args.http_tls_cert, &args.http_tls_key) {
                (Some(cert), Some(key)) => Some(ytsched_scheduler::http::tls::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            };
            let access = ytsched_scheduler::http::access::choose(
                addr,
                args.http_insecure,
                tls.is_some(),
                args.http_tokens.clone(),
                args.bus.creds.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!(e))?;
            Some(HttpConfig {
                addr,
                access,
                tls,
                bounds: ytsched_scheduler::http::listener::Bounds {
                    max_connections: fitting_connection_cap(args.http_max_connections),
                    max_per_address: args.http_max_connections_per_address.max(1),
                    header_timeout: Duration::from_millis(args.http_header_timeout.0.max(100)),
                },
            })
        }
    })
}

/// `--config FILE`: pool trees to start from when the store has none.
fn initial_config(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Option<ytsched_scheduler::core::ClusterConfig>> {
    Ok(match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --config {}", path.display()))?;
            let file: ConfigFile = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("--config {}", path.display()))?;
            Some(
                file.build()
                    .with_context(|| format!("--config {}", path.display()))?,
            )
        }
        None => None,
    })
}

/// Raises the file descriptor limit to what the system allows, and keeps the HTTP
/// connection cap below it with room for NATS connections, stores and the log: a flood
/// of web clients must never leave the scheduler unable to open what it needs.
fn fitting_connection_cap(asked: usize) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    const RESERVE: u64 = 512;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return asked;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let fits = limit.saturating_sub(RESERVE).max(16) as usize;
    if fits < asked {
        tracing::warn!(
            asked,
            cap = fits,
            nofile = limit,
            "--http-max-connections lowered to fit the file descriptor limit"
        );
    }
    asked.min(fits)
}

async fn terminate() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

/// The file store's bounds (SPEC 5.17); each refusal names its flag.
#[derive(clap::Args, Debug)]
struct FileArgs {
    /// The largest file one upload may carry.
    #[arg(long, default_value = "1GiB")]
    file_size_limit: ytsched_common::ByteSize,
    /// Bytes of stored files one user may own.
    #[arg(long, default_value = "4GiB")]
    file_quota_per_user: ytsched_common::ByteSize,
    /// Files one user may own.
    #[arg(long, default_value_t = 1000)]
    max_files_per_user: usize,
    /// How long a file that no live operation names stays stored.
    #[arg(long, default_value = "7d")]
    file_ttl: DurationMs,
    /// The most the file store may hold in all: JetStream reserves it when the store
    /// is made.
    #[arg(long, default_value = "8GiB")]
    file_store_size: ytsched_common::ByteSize,
}

impl FileArgs {
    fn limits(&self) -> ytsched_scheduler::files::FileLimits {
        ytsched_scheduler::files::FileLimits {
            max_file_size: self.file_size_limit.0,
            user_quota: self.file_quota_per_user.0,
            max_files_per_user: self.max_files_per_user.max(1),
            ttl: Duration::from_millis(self.file_ttl.0.max(1000)),
            store_bytes: self.file_store_size.0.max(1 << 20),
            ..Default::default()
        }
    }
}
