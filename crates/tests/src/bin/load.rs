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
use ytsched_common::{IncarnationId, JobId, NodeId};
use ytsched_tests::Lab;

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
}

/// Counters every simulated node adds to.
#[derive(Default)]
struct Counters {
    heartbeats: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    placements: AtomicU64,
    completions: AtomicU64,
    aborts: AtomicU64,
    /// Unix ms of the latest placement, to measure the placement window.
    last_placement_ms: AtomicU64,
    latency: Mutex<Latency>,
}

struct Latency {
    interval: Histogram<u64>,
    total: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        let h = || Histogram::new(3).expect("3 significant figures is valid");
        Latency {
            interval: h(),
            total: h(),
        }
    }
}

impl Counters {
    /// Resolves once `jobs` jobs have completed; never when `jobs` is 0.
    async fn all_completed(&self, jobs: u64) {
        loop {
            if jobs > 0 && self.completions.load(Relaxed) >= jobs {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn record_latency(&self, micros: u64) {
        let mut l = self.latency.lock().unwrap();
        let _ = l.interval.record(micros);
        let _ = l.total.record(micros);
    }
}

/// The end-of-run figures, printed as one JSON line.
#[derive(serde::Serialize)]
struct Summary {
    nodes: usize,
    ops: u64,
    jobs: u64,
    duration_s: f64,
    submissions_per_s: f64,
    heartbeats: u64,
    heartbeats_per_s: f64,
    reply_p50_ms: f64,
    reply_p99_ms: f64,
    reply_max_ms: f64,
    timeouts: u64,
    errors: u64,
    jobs_placed: u64,
    placements_per_s: f64,
    jobs_completed: u64,
    completions_per_s: f64,
    jobs_aborted_on_nodes: u64,
    /// Attempts the scheduler counts aborted (lost ones included), summed over operations.
    jobs_aborted_by_scheduler: Option<u64>,
    scheduler_rss_mib: Option<f64>,
    scheduler_rss_peak_mib: Option<f64>,
    scheduler_cpu_pct: Option<f64>,
    load_tool_cpu_pct: Option<f64>,
    /// With --list-pages: operations the archive lists (its list stream's messages).
    archived_operations: Option<u64>,
    list_page_p50_ms: Option<f64>,
    list_page_max_ms: Option<f64>,
    operations_listed: Option<u64>,
}

/// What `--list-pages` measured.
#[derive(Default)]
struct ListFigures {
    archived: Option<u64>,
    p50_ms: Option<f64>,
    max_ms: Option<f64>,
    listed: Option<u64>,
}

/// Waits until the archive's list stream stops growing, then walks `pages` pages of
/// `list_operations`, timing each.
async fn measure_list_pages(target: &Target, pages: usize) -> anyhow::Result<ListFigures> {
    let mut figures = ListFigures::default();
    if pages == 0 {
        return Ok(figures);
    }
    // The scheduler's identity may read its streams; an installation's admin may not.
    if let Ok(auth) = creds(&target.auth_dir, "scheduler") {
        let client = connect(&target.nats, "ytsched-load archive", false, &auth).await?;
        let js = async_nats::jetstream::new(client);
        let name = format!(
            "{}_archive_list",
            target.subjects.prefix().replace('.', "_")
        );
        let mut last = (u64::MAX, Instant::now());
        let settle_deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let n = match js.get_stream(&name).await {
                Ok(mut s) => s.info().await?.state.messages,
                Err(_) => 0,
            };
            if n != last.0 {
                println!("archive lists {n} operations");
                last = (n, Instant::now());
            } else if last.1.elapsed() >= Duration::from_secs(5)
                || Instant::now() >= settle_deadline
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        figures.archived = Some(last.0);
    }
    let (client, caller) = admin_client(target, "ytsched-load lister").await?;
    let mut times = Histogram::<u64>::new(3)?;
    let mut cursor = None;
    let mut listed = 0u64;
    for _ in 0..pages {
        let t0 = Instant::now();
        let page: OperationPage = call(
            &client,
            &target.subjects,
            &caller,
            ListOperations {
                limit: Some(100),
                cursor: cursor.clone(),
                filter: Default::default(),
            },
        )
        .await?;
        times.record(t0.elapsed().as_micros() as u64)?;
        listed += page.operations.len() as u64;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    figures.p50_ms = Some(times.value_at_quantile(0.5) as f64 / 1000.0);
    figures.max_ms = Some(times.max() as f64 / 1000.0);
    figures.listed = Some(listed);
    println!(
        "list_operations: {} pages of 100, {listed} operations, p50 {:.1} ms, max {:.1} ms",
        times.len(),
        times.value_at_quantile(0.5) as f64 / 1000.0,
        times.max() as f64 / 1000.0
    );
    Ok(figures)
}

/// One simulated agent's state.
struct SimNode {
    id: NodeId,
    incarnation: IncarnationId,
    seq: u64,
    /// The newest heartbeat whose reply this node read, as the real agent reports it.
    last_reply_seq: u64,
    limits: ResourceVector,
    /// Each running job and when its simulated run ends.
    running: HashMap<JobId, (RunningJob, Instant)>,
    finished: HashMap<JobId, FinishedJob>,
    seen: HashSet<JobId>,
}

impl SimNode {
    fn request(&mut self) -> HeartbeatRequest {
        self.seq += 1;
        let running_jobs: Vec<RunningJob> = self.running.values().map(|r| r.0.clone()).collect();
        HeartbeatRequest {
            protocol_version: PROTOCOL_VERSION,
            node_id: self.id.clone(),
            incarnation_id: self.incarnation.clone(),
            seq: self.seq,
            hostname: self.id.to_string(),
            system_tags: vec![],
            tags: vec![],
            resource_limits: self.limits,
            resource_usage: running_jobs.iter().map(|r| r.resource_usage).sum(),
            running_jobs,
            finished_jobs: self.finished.values().cloned().collect(),
            timeout_ms: REQUEST_TIMEOUT.as_millis() as u64,
            last_reply_seq: Some(self.last_reply_seq),
        }
    }

    fn apply(&mut self, reply: HeartbeatReply, job_time: Duration, c: &Counters) {
        for id in &reply.acknowledged_jobs {
            self.finished.remove(id);
        }
        for abort in reply.jobs_to_abort {
            if let Some((job, _)) = self.running.remove(&abort.job_id) {
                c.aborts.fetch_add(1, Relaxed);
                self.finished
                    .insert(job.job_id.clone(), finished(&job, JobState::Aborted));
            }
        }
        let now = Instant::now();
        for spec in reply.jobs_to_start {
            if !self.seen.insert(spec.job_id.clone()) {
                continue;
            }
            c.placements.fetch_add(1, Relaxed);
            c.last_placement_ms.fetch_max(unix_now(), Relaxed);
            let job = RunningJob {
                job_id: spec.job_id.clone(),
                operation_id: spec.operation_id.clone(),
                state: JobState::Running,
                resource_usage: spec.resources,
                start_time: unix_now(),
            };
            self.running.insert(spec.job_id, (job, now + job_time));
        }
    }

    /// Moves jobs whose time is up to the finished list; returns how many.
    fn finish_due(&mut self, c: &Counters) -> usize {
        let now = Instant::now();
        let due: Vec<JobId> = self
            .running
            .iter()
            .filter(|(_, r)| r.1 <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            if let Some((job, _)) = self.running.remove(id) {
                c.completions.fetch_add(1, Relaxed);
                self.finished
                    .insert(id.clone(), finished(&job, JobState::Completed));
            }
        }
        due.len()
    }

    fn next_finish(&self) -> Option<Instant> {
        self.running.values().map(|r| r.1).min()
    }
}

fn finished(job: &RunningJob, state: JobState) -> FinishedJob {
    let now = unix_now();
    FinishedJob {
        job_id: job.job_id.clone(),
        operation_id: job.operation_id.clone(),
        state,
        error: None,
        start_time: job.start_time,
        finish_time: now,
        statistics: JobStatistics {
            wall_time_ms: now.saturating_sub(job.start_time),
            exit_code: Some(0),
            ..Default::default()
        },
        stdout_tail: String::new(),
        stderr_tail: String::new(),
    }
}

/// One simulated agent's heartbeat loop, as `ytsched-node`'s: heartbeat, apply the reply,
/// sleep until the period, a job's end or a nudge, drain queued nudges, repeat.
async fn run_node(
    client: async_nats::Client,
    subjects: Subjects,
    mut node: SimNode,
    job_time: Duration,
    counters: Arc<Counters>,
    stop: stop::Stop,
) -> anyhow::Result<()> {
    let mut nudges = client.subscribe(subjects.nudge(&node.id)).await?;
    let subject = subjects.heartbeat(&node.id);
    let mut period = Duration::from_secs(1);
    while !stop.is_set() {
        let bytes = encode(&node.request())?;
        let t0 = Instant::now();
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            client.request(subject.clone(), bytes.into()),
        )
        .await
        {
            Err(_) => {
                counters.timeouts.fetch_add(1, Relaxed);
            }
            Ok(Err(_)) => {
                counters.errors.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Ok(msg)) => match decode::<HeartbeatReply>(&msg.payload) {
                Ok(reply) => {
                    counters.heartbeats.fetch_add(1, Relaxed);
                    counters.record_latency(t0.elapsed().as_micros() as u64);
                    if let Registration::Refused { error }
                    | Registration::Rejected { error }
                    | Registration::Stale { error } = &reply.registration
                    {
                        bail!("node {} was refused: {error}", node.id);
                    }
                    period = Duration::from_millis(reply.heartbeat_period_ms.clamp(10, 60_000));
                    node.apply(reply, job_time, &counters);
                    node.last_reply_seq = node.seq;
                }
                Err(_) => {
                    counters.errors.fetch_add(1, Relaxed);
                }
            },
        }
        if node.finish_due(&counters) == 0 {
            let deadline = match node.next_finish() {
                Some(t) => t.min(Instant::now() + period),
                None => Instant::now() + period,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {}
                Some(_) = nudges.next() => {}
                _ = stop.wait() => break,
            }
            node.finish_due(&counters);
        }
        // As the real agent: nudges queued meanwhile are answered by the next heartbeat.
        while let Some(Some(_)) = futures::FutureExt::now_or_never(nudges.next()) {}
    }
    Ok(())
}

/// A stop flag many tasks wait on.
mod stop {
    use std::sync::Arc;
    use tokio::sync::watch;

    #[derive(Clone)]
    pub struct Stop(Arc<watch::Sender<bool>>, watch::Receiver<bool>);

    impl Stop {
        pub fn new() -> Self {
            let (tx, rx) = watch::channel(false);
            Stop(Arc::new(tx), rx)
        }
        pub fn set(&self) {
            let _ = self.0.send(true);
        }
        pub fn is_set(&self) -> bool {
            *self.1.borrow()
        }
        pub async fn wait(&self) {
            let mut rx = self.1.clone();
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

/// Counters at the last report, to print rates per interval.
struct Snapshot {
    heartbeats: u64,
    placements: u64,
    completions: u64,
    scheduler_ticks: Option<u64>,
    at: Instant,
}

/// Prints one interval's line; returns the counters it started from next time.
fn report(
    counters: &Counters,
    prev: &Snapshot,
    scheduler_pid: Option<u32>,
    hz: f64,
    start: Instant,
) -> Snapshot {
    let now = Snapshot {
        heartbeats: counters.heartbeats.load(Relaxed),
        placements: counters.placements.load(Relaxed),
        completions: counters.completions.load(Relaxed),
        scheduler_ticks: None,
        at: Instant::now(),
    };
    let secs = now.at.duration_since(prev.at).as_secs_f64().max(0.001);
    let (p50, p99, max) = {
        let mut l = counters.latency.lock().unwrap();
        let r = (
            l.interval.value_at_quantile(0.5),
            l.interval.value_at_quantile(0.99),
            l.interval.max(),
        );
        l.interval.reset();
        r
    };
    let sched = scheduler_pid.and_then(proc_stat);
    let sched_text = match (sched, prev.scheduler_ticks) {
        (Some((ticks, rss, _)), Some(before)) => format!(
            ", scheduler RSS {:.1} MiB CPU {:.0}%",
            rss as f64 / 1024.0,
            ticks.saturating_sub(before) as f64 / hz / secs * 100.0
        ),
        _ => String::new(),
    };
    println!(
        "[{:>5.1}s] heartbeats {:.0}/s, reply p50 {:.1} ms p99 {:.1} ms max {:.1} ms, placements {:.0}/s, completions {:.0}/s, timeouts {}{sched_text}",
        start.elapsed().as_secs_f64(),
        (now.heartbeats - prev.heartbeats) as f64 / secs,
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0,
        max as f64 / 1000.0,
        (now.placements - prev.placements) as f64 / secs,
        (now.completions - prev.completions) as f64 / secs,
        counters.timeouts.load(Relaxed),
    );
    Snapshot {
        scheduler_ticks: sched.map(|s| s.0),
        ..now
    }
}

/// /proc figures of one process: CPU ticks (user + system) and RSS in KiB.
fn proc_stat(pid: u32) -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some((ticks, kib("VmRSS:"), kib("VmHWM:")))
}

fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
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

/// Submits `ops` operations holding `jobs` one-cpu jobs between them; returns the rate.
async fn submit(target: &Target, ops: u64, jobs: u64, pooled: bool) -> anyhow::Result<f64> {
    if ops == 0 {
        return Ok(0.0);
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
            let text = format!(
                r#"{{{pool}"tasks": {{"t": {{"command": "true", "job_count": {}, "cpu_limit": 1, "memory_limit": "64M"}}}}}}"#,
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
                        spec,
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
    Ok(ops as f64 / secs)
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
    if args.ops == 0 && args.jobs > 0 {
        bail!(
            "--jobs {} needs --ops (how many operations hold them)",
            args.jobs
        );
    }
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
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
    let submissions_per_s = submit(&target, args.ops, args.jobs, pooled).await?;
    if args.ops > 0 {
        println!(
            "submitted {} operations: {submissions_per_s:.0}/s",
            args.ops
        );
    }

    // Connect every simulated node before any heartbeats, so connecting is not measured.
    let connected: Vec<anyhow::Result<async_nats::Client>> = futures::stream::iter(0..args.nodes)
        .map(|i| {
            let (nats, dir) = (&target.nats, &target.auth_dir);
            async move {
                let name = node_name(i);
                let auth = creds(dir, &name)?;
                // nats-server takes new identities on a reload it does in the background.
                let mut tries = 0;
                loop {
                    match connect(nats, &name, false, &auth).await {
                        Ok(c) => return Ok(c),
                        Err(e) if tries >= 50 => return Err(anyhow::Error::from(e)),
                        Err(_) => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
        })
        .buffered(32)
        .collect()
        .await;
    let counters = Arc::new(Counters::default());
    let stop = stop::Stop::new();
    let limits = ResourceVector {
        cpu: args.node_cpu as f64,
        memory: args.node_cpu as f64 * 1024.0 * 1024.0 * 1024.0,
        gpu: 0.0,
        user_slots: args.node_cpu as f64,
    };
    let job_time = Duration::from_millis(args.job_time_ms);
    let mut tasks = Vec::new();
    let start = Instant::now();
    let start_ms = unix_now();
    for (i, client) in connected.into_iter().enumerate() {
        let node = SimNode {
            id: NodeId::parse(&node_name(i))?,
            incarnation: IncarnationId::random(),
            seq: 0,
            last_reply_seq: 0,
            limits,
            running: HashMap::new(),
            finished: HashMap::new(),
            seen: HashSet::new(),
        };
        tasks.push(tokio::spawn(run_node(
            client?,
            target.subjects.clone(),
            node,
            job_time,
            counters.clone(),
            stop.clone(),
        )));
    }

    let ui_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ui = match (&target.lab, args.idle_http) {
        (Some(lab), n) if n > 0 => {
            raise_nofile();
            let (addr, token) = (lab.http_addr()?, lab.web_token());
            let stop = ui_stop.clone();
            Some(std::thread::spawn(move || {
                ytsched_tests::idle_http::run(addr, token, n, stop)
            }))
        }
        (None, n) if n > 0 => bail!("--idle-http needs --lab"),
        _ => None,
    };
    let hz = clock_ticks();
    let me = std::process::id();
    let first_sched = target.scheduler_pid.and_then(proc_stat);
    let first_me = proc_stat(me);
    let mut prev = Snapshot {
        heartbeats: 0,
        placements: 0,
        completions: 0,
        scheduler_ticks: first_sched.map(|s| s.0),
        at: Instant::now(),
    };
    let deadline = start + Duration::from_secs(args.duration);
    let mut ticker = tokio::time::interval_at(
        (Instant::now() + Duration::from_secs(5)).into(),
        Duration::from_secs(5),
    );
    loop {
        let reached = tokio::select! {
            _ = ticker.tick() => false,
            _ = tokio::time::sleep_until(deadline.into()) => true,
            _ = counters.all_completed(args.jobs) => true,
        };
        prev = report(&counters, &prev, target.scheduler_pid, hz, start);
        if reached {
            break;
        }
    }
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
    let sched = target.scheduler_pid.and_then(proc_stat);
    let mine = proc_stat(me);
    let list = match measure_list_pages(&target, args.list_pages).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot measure list_operations pages: {e:#}");
            ListFigures::default()
        }
    };
    let placed = counters.placements.load(Relaxed);
    let placement_window = (counters
        .last_placement_ms
        .load(Relaxed)
        .saturating_sub(start_ms) as f64
        / 1000.0)
        .max(0.001);
    let (p50, p99, max) = {
        let l = counters.latency.lock().unwrap();
        (
            l.total.value_at_quantile(0.5),
            l.total.value_at_quantile(0.99),
            l.total.max(),
        )
    };
    let heartbeats = counters.heartbeats.load(Relaxed);
    let completed = counters.completions.load(Relaxed);
    let cpu_pct = |a: Option<(u64, u64, u64)>, b: Option<(u64, u64, u64)>| {
        Some((b?.0 - a?.0) as f64 / hz / elapsed * 100.0)
    };
    let summary = Summary {
        nodes: args.nodes,
        ops: args.ops,
        jobs: args.jobs,
        duration_s: elapsed,
        submissions_per_s,
        heartbeats,
        heartbeats_per_s: heartbeats as f64 / elapsed,
        reply_p50_ms: p50 as f64 / 1000.0,
        reply_p99_ms: p99 as f64 / 1000.0,
        reply_max_ms: max as f64 / 1000.0,
        timeouts: counters.timeouts.load(Relaxed),
        errors: counters.errors.load(Relaxed),
        jobs_placed: placed,
        placements_per_s: if placed > 0 {
            placed as f64 / placement_window
        } else {
            0.0
        },
        jobs_completed: completed,
        completions_per_s: completed as f64 / elapsed,
        jobs_aborted_on_nodes: counters.aborts.load(Relaxed),
        jobs_aborted_by_scheduler: if args.ops > 0 {
            match scheduler_aborts(&target).await {
                Ok(n) => Some(n),
                Err(e) => {
                    eprintln!("cannot count the scheduler's aborted jobs: {e:#}");
                    None
                }
            }
        } else {
            None
        },
        scheduler_rss_mib: sched.map(|s| s.1 as f64 / 1024.0),
        scheduler_rss_peak_mib: sched.map(|s| s.2 as f64 / 1024.0),
        scheduler_cpu_pct: cpu_pct(first_sched, sched),
        load_tool_cpu_pct: cpu_pct(first_me, mine),
        archived_operations: list.archived,
        list_page_p50_ms: list.p50_ms,
        list_page_max_ms: list.max_ms,
        operations_listed: list.listed,
    };
    println!("{}", serde_json::to_string(&summary)?);
    if let Some(lab) = target.lab {
        tokio::task::spawn_blocking(move || drop(lab)).await?;
    }
    Ok(())
}
