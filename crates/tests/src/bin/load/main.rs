//! `ytsched-load`: N simulated node agents in one process against a real scheduler over a
//! real nats-server, plus a submitter of operations (SPEC §8 scale figures).
//!
//! Each simulated node has its own NATS identity and speaks the real wire protocol: it
//! registers by heartbeating, heartbeats at the period the reply asks, "runs" the jobs it
//! is given for `--job-time` and reports them finished, honours aborts, and reacts to
//! nudges as the real agent does (one heartbeat per wake-up however many nudges queued).
//!
//! ```text
//! cargo build --release --workspace --bins
//! target/release/ytsched-load --lab --nodes 2000 --ops 10000 --jobs 100000 --duration 60
//! ```
//!
//! Every 5 s it prints one line of figures; at the end one JSON line (see `Summary`).

use anyhow::{bail, Context};
use clap::Parser;
use futures::StreamExt;
use hdrhistogram::Histogram;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ytsched_common::api::{ListOperations, OperationPage, StartOperation};
use ytsched_common::codec::{decode, encode};
use ytsched_common::identity::Caller;
use ytsched_common::protocol::{
    unix_now, FinishedJob, HeartbeatReply, HeartbeatRequest, JobStatistics, Registration,
    RunningJob, PROTOCOL_VERSION,
};
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::JobState;
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::{call, connect, ConnectAuth, TlsFiles};
use ytsched_common::{IncarnationId, JobId, NodeId, OperationId};
use ytsched_tests::Lab;

mod audit;
mod figures;
mod phases;
mod sim_node;
use figures::*;
use sim_node::*;

/// How long a simulated node waits for a heartbeat reply, as the real agent does.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Submissions in flight at once.
const SUBMIT_CONCURRENCY: usize = 64;
/// Pools the operations are spread over (`p0`…), created by `--lab`.
const POOLS: usize = 100;

#[derive(Parser, Debug, Clone)]
#[command(name = "ytsched-load", version)]
struct Args {
    /// Simulated nodes.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Seconds the nodes run (the run also ends once every job has completed).
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// One-cpu jobs in all, spread over `--ops` operations.
    #[arg(long, default_value_t = 0)]
    jobs: u64,
    /// Operations, all submitted before the nodes start.
    #[arg(long, default_value_t = 0)]
    ops: u64,
    /// How long each job "runs" on its simulated node, in ms.
    #[arg(long, default_value_t = 1000)]
    job_time_ms: u64,
    /// Cores (and job slots) of each simulated node.
    #[arg(long, default_value_t = 16)]
    node_cpu: u32,
    /// Start a nats-server and a scheduler of this build (release binaries beside this one).
    #[arg(long)]
    lab: bool,
    /// With --lab: the heartbeat period the scheduler asks of nodes, in ms.
    #[arg(long, default_value_t = 1000)]
    heartbeat_period_ms: u64,
    /// Without --lab: the running installation's NATS URL(s).
    #[arg(long)]
    nats: Option<String>,
    /// Without --lab: its identities directory; node identities `load-<i>` missing from it
    /// are added (`ytsched auth add-node`), and `admin.creds` submits.
    #[arg(long)]
    auth_dir: Option<PathBuf>,
    /// Without --lab: its subject prefix.
    #[arg(long, default_value = ytsched_common::subjects::DEFAULT_PREFIX)]
    subject_prefix: String,
    /// Without --lab: the scheduler's pid, for its RSS and CPU.
    #[arg(long)]
    scheduler_pid: Option<u32>,
    /// After the run: wait for the archive to settle (no operation archived for 5 s),
    /// then time this many `list_operations` pages of 100, each going on from the last.
    #[arg(long, default_value_t = 0)]
    list_pages: usize,
    /// With --lab: serve the web UI and hold this many idle (or half-sent) HTTP
    /// connections on it through the run, reopened as its header timeout closes them,
    /// while a reader polls what the UI pages read (`/api/operations`, `/api/orchid`) twice a second with the admin's token.
    #[arg(long, default_value_t = 0)]
    idle_http: usize,
    /// Of the `--ops` operations, this many are gangs (`is_gang`, SPEC 5.15): their jobs
    /// are placed whole by the scheduler's tick instead of one per node.
    #[arg(long, default_value_t = 0)]
    gangs: u64,
}

/// Where the run happens: a lab this tool started, or an installation given by flags.
struct Target {
    lab: Option<Lab>,
    /// The lab scheduler's `--config`, kept while it may still read it.
    _lab_config: Option<tempfile::NamedTempFile>,
    nats: String,
    subjects: Subjects,
    auth_dir: PathBuf,
    scheduler_pid: Option<u32>,
}

fn node_name(i: usize) -> String {
    format!("load-{i}")
}

/// The lab's trees: room for every operation, spread over `POOLS` pools.
fn lab_config() -> String {
    let mut s = String::from(
        "pool_trees:\n  default:\n    config:\n      max_operation_count: 1000000\n      max_operation_count_per_pool: 1000000\n      max_running_operation_count: 1000000\n      max_running_operation_count_per_pool: 1000000\n    pools:\n",
    );
    for p in 0..POOLS {
        s.push_str(&format!("      p{p}: {{}}\n"));
    }
    s
}

fn add_missing_nodes(auth_dir: &std::path::Path, nodes: usize) -> anyhow::Result<()> {
    let missing: Vec<String> = (0..nodes)
        .map(node_name)
        .filter(|n| !auth_dir.join(format!("{n}.creds")).exists())
        .collect();
    for chunk in missing.chunks(2000) {
        let out = std::process::Command::new(ytsched_tests::binary("ytsched"))
            .args(["auth", "add-node", "--dir"])
            .arg(auth_dir)
            .args(chunk)
            .output()?;
        if !out.status.success() {
            bail!(
                "ytsched auth add-node: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

fn prepare(args: &Args) -> anyhow::Result<Target> {
    if args.lab {
        let cfg = tempfile::NamedTempFile::new()?;
        std::fs::write(cfg.path(), lab_config())?;
        let cfg_path = cfg.path().to_str().context("temp path")?.to_string();
        let period = format!("{}ms", args.heartbeat_period_ms);
        // One submitter plays every user: its rate is the scheduler's capacity under
        // test, not a per-identity admission limit.
        let mut scheduler_args = vec![
            "--config",
            &cfg_path,
            "--heartbeat-period",
            &period,
            "--api-rate",
            "1000000",
            "--api-burst",
            "1000000",
        ];
        if args.idle_http > 0 {
            scheduler_args.extend(["--http", "127.0.0.1:0"]);
        }
        let lab = Lab::start_with(&scheduler_args, vec![])?;
        let auth_dir = lab.dir.path().join("auth");
        add_missing_nodes(&auth_dir, args.nodes)?;
        Ok(Target {
            nats: lab.nats_url.clone(),
            subjects: Subjects::new(&lab.prefix),
            scheduler_pid: lab.scheduler_pid(0),
            auth_dir,
            lab: Some(lab),
            _lab_config: Some(cfg),
        })
    } else {
        let nats = args
            .nats
            .clone()
            .context("give --nats URL (and --auth-dir), or --lab")?;
        let auth_dir = args
            .auth_dir
            .clone()
            .context("--auth-dir is needed with --nats: simulated nodes need identities")?;
        add_missing_nodes(&auth_dir, args.nodes)?;
        Ok(Target {
            lab: None,
            _lab_config: None,
            nats,
            subjects: Subjects::new(&args.subject_prefix),
            auth_dir,
            scheduler_pid: args.scheduler_pid,
        })
    }
}

fn creds(auth_dir: &std::path::Path, name: &str) -> anyhow::Result<ConnectAuth> {
    Ok(ConnectAuth::from_flags(
        Some(&auth_dir.join(format!("{name}.creds"))),
        TlsFiles::default(),
    )?)
}

/// A connection as the installation's first admin, who submits and reads.
async fn admin_client(target: &Target, name: &str) -> anyhow::Result<(async_nats::Client, Caller)> {
    let auth = creds(&target.auth_dir, "admin")?;
    let client = connect(&target.nats, name, false, &auth).await?;
    Ok((client, Caller::admin("admin")))
}

/// Submits `ops` operations holding `jobs` one-cpu jobs between them; returns the rate
/// and the operations' ids.
async fn submit(
    target: &Target,
    ops: u64,
    jobs: u64,
    pooled: bool,
    gangs: u64,
) -> anyhow::Result<(f64, Vec<OperationId>)> {
    if ops == 0 {
        return Ok((0.0, vec![]));
    }
    let (client, caller) = admin_client(target, "ytsched-load submitter").await?;
    let t0 = Instant::now();
    let results = futures::stream::iter(0..ops)
        .map(|i| {
            let count = jobs / ops + u64::from(i < jobs % ops);
            let pool = if pooled {
                format!(r#""pool": "p{}", "#, i as usize % POOLS)
            } else {
                String::new()
            };
            let gang = if i < gangs { r#""is_gang": true, "# } else { "" };
            let text = format!(
                r#"{{{pool}{gang}"tasks": {{"t": {{"command": "true", "job_count": {}, "cpu_limit": 1, "memory_limit": "64M"}}}}}}"#,
                count.max(1)
            );
            let (client, subjects, caller) = (&client, &target.subjects, &caller);
            async move {
                let spec: VanillaSpec = serde_json::from_str(&text)?;
                call(
                    client,
                    subjects,
                    caller,
                    StartOperation {
                        spec: spec.try_into().expect("a valid spec"),
                        idempotency_token: None,
                    },
                )
                .await
                .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(SUBMIT_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let secs = t0.elapsed().as_secs_f64();
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    if let Some(first) = failed.first() {
        bail!(
            "{} of {ops} submissions failed, first: {first}",
            failed.len()
        );
    }
    let ids = results.into_iter().filter_map(Result::ok).collect();
    Ok((ops as f64 / secs, ids))
}

/// Aborted attempts the scheduler counts over every operation (lost ones included).
async fn scheduler_aborts(target: &Target) -> anyhow::Result<u64> {
    let (client, caller) = admin_client(target, "ytsched-load reader").await?;
    let mut cursor = None;
    let mut aborted = 0;
    loop {
        let page: OperationPage = call(
            &client,
            &target.subjects,
            &caller,
            ListOperations {
                limit: Some(ListOperations::MAX_PAGE),
                cursor,
                filter: Default::default(),
            },
        )
        .await?;
        aborted += page.operations.iter().map(|o| o.jobs.aborted).sum::<u64>();
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(aborted),
        }
    }
}

impl Args {
    /// Options that make no run together.
    fn check(&self) -> anyhow::Result<()> {
        if self.ops == 0 && self.jobs > 0 {
            bail!(
                "--jobs {} needs --ops (how many operations hold them)",
                self.jobs
            );
        }
        if self.nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        Ok(())
    }
}

/// Raises this process's open-file limit to the hard limit, for `--idle-http`.
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.check()?;
    let target = {
        let a = args.clone();
        tokio::task::spawn_blocking(move || prepare(&a)).await??
    };
    let pooled = target.lab.is_some();
    println!(
        "ytsched-load: {} nodes (cpu {} each), {} operations with {} jobs of {} ms, nats {}, {} cores here",
        args.nodes,
        args.node_cpu,
        args.ops,
        args.jobs,
        args.job_time_ms,
        target.nats,
        std::thread::available_parallelism()?.get()
    );
    let first_write = audit::store_sequences(&target).await;
    let (submissions_per_s, submitted) =
        submit(&target, args.ops, args.jobs, pooled, args.gangs).await?;
    if args.ops > 0 {
        println!(
            "submitted {} operations: {submissions_per_s:.0}/s",
            args.ops
        );
    }

    // Connect every simulated node before any heartbeats, so connecting is not measured.
    let connected = phases::connect_nodes(&target, args.nodes).await;
    let counters = Arc::new(Counters::default());
    let stop = stop::Stop::new();
    let start = Instant::now();
    let start_ms = unix_now();
    let tasks = phases::start_nodes(&args, &target, connected, &counters, &stop)?;

    let ui_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ui = phases::start_idle_http(&target, args.idle_http, &ui_stop)?;
    let hz = clock_ticks();
    let me = std::process::id();
    let first_sched = target.scheduler_pid.and_then(proc_stat);
    let first_me = proc_stat(me);
    phases::watch(&args, &target, &counters, first_sched, hz, start).await;
    let elapsed = start.elapsed().as_secs_f64();
    stop.set();
    ui_stop.store(true, Relaxed);
    let ui = match ui.map(|t| t.join()) {
        Some(Ok(f)) => Some(f),
        Some(Err(_)) => bail!("the idle HTTP clients panicked"),
        None => None,
    };
    if let Some(f) = &ui {
        println!(
            "web UI with {} idle HTTP connections held: {} reads answered (p50 {:.1} ms, max {:.1} ms), {} failed",
            f.idle_held, f.reads, f.p50_ms, f.max_ms, f.failures
        );
    }
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("simulated node: {e:#}"),
            Err(e) => eprintln!("simulated node panicked: {e}"),
        }
    }
    let window = phases::Window {
        start_ms,
        elapsed,
        hz,
        first_sched,
        first_me,
        submissions_per_s,
        first_write,
    };
    let summary = phases::summarize(&args, &target, &counters, &submitted, window).await;
    println!("{}", serde_json::to_string(&summary)?);
    if let Some(lab) = target.lab {
        tokio::task::spawn_blocking(move || drop(lab)).await?;
    }
    Ok(())
}
