//! The phases of a load run after submission: nodes connected and started, the run
//! watched, and its figures read at the end.

use super::*;

/// One connection per simulated node; nats-server takes new identities on a reload it
/// does in the background, so a refused connection is tried again for a while.
pub(crate) async fn connect_nodes(
    target: &Target,
    nodes: usize,
) -> Vec<anyhow::Result<async_nats::Client>> {
    futures::stream::iter(0..nodes)
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
        .await
}

/// Each simulated node's heartbeat loop, started.
pub(crate) fn start_nodes(
    args: &Args,
    target: &Target,
    connected: Vec<anyhow::Result<async_nats::Client>>,
    counters: &Arc<Counters>,
    stop: &stop::Stop,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<anyhow::Result<()>>>> {
    let limits = ResourceVector {
        cpu: args.node_cpu as f64,
        memory: args.node_cpu as f64 * 1024.0 * 1024.0 * 1024.0,
        gpu: 0.0,
        user_slots: args.node_cpu as f64,
    };
    let job_time = Duration::from_millis(args.job_time_ms);
    let mut tasks = Vec::new();
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
    Ok(tasks)
}

/// What the store holds after the run: list pages, writes, and every operation found.
pub(crate) async fn store_figures(
    target: &Target,
    list_pages: usize,
    submitted: &[OperationId],
    first_write: Option<audit::StoreSequences>,
) -> (ListFigures, Option<(u64, u64)>, audit::Audit) {
    let list = match measure_list_pages(target, list_pages).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot measure list_operations pages: {e:#}");
            ListFigures::default()
        }
    };
    let store_writes = match (first_write, audit::store_sequences(target).await) {
        (Some(a), Some(b)) => Some(a.writes_until(&b)),
        _ => None,
    };
    let audit = audit::audit(target, submitted).await.unwrap_or_else(|e| {
        eprintln!("cannot audit the submitted operations: {e:#}");
        Default::default()
    });
    if let Some(first) = &audit.first_missing {
        eprintln!(
            "AUDIT: {} operation(s) not found, first {first}",
            audit.missing
        );
    }
    (list, store_writes, audit)
}

/// The jobs the scheduler aborted, by its own count.
pub(crate) async fn aborted_by_scheduler(args: &Args, target: &Target) -> Option<u64> {
    if args.ops > 0 {
        match scheduler_aborts(target).await {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("cannot count the scheduler's aborted jobs: {e:#}");
                None
            }
        }
    } else {
        None
    }
}

/// The run's measured start, length and first readings.
pub(crate) struct Window {
    pub(crate) start_ms: u64,
    pub(crate) elapsed: f64,
    pub(crate) hz: f64,
    pub(crate) first_sched: Option<(u64, u64, u64)>,
    pub(crate) first_me: Option<(u64, u64, u64)>,
    pub(crate) submissions_per_s: f64,
    pub(crate) first_write: Option<audit::StoreSequences>,
}

/// The figures of the run, read at its end.
pub(crate) async fn summarize(
    args: &Args,
    target: &Target,
    counters: &Counters,
    submitted: &[OperationId],
    window: Window,
) -> Summary {
    let Window {
        start_ms,
        elapsed,
        hz,
        first_sched,
        first_me,
        submissions_per_s,
        first_write,
    } = window;
    let sched = target.scheduler_pid.and_then(proc_stat);
    let mine = proc_stat(std::process::id());
    let (list, store_writes, audit) =
        store_figures(target, args.list_pages, submitted, first_write).await;
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
    let (cpu_s, per) = cpu_figures(first_sched, sched, hz);
    Summary {
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
        jobs_aborted_by_scheduler: aborted_by_scheduler(args, target).await,
        scheduler_rss_mib: sched.map(|s| s.1 as f64 / 1024.0),
        scheduler_rss_peak_mib: sched.map(|s| s.2 as f64 / 1024.0),
        scheduler_cpu_pct: cpu_pct(first_sched, sched),
        scheduler_cpu_s: cpu_s,
        scheduler_cpu_us_per_heartbeat: per(heartbeats),
        scheduler_cpu_us_per_placed_job: per(placed),
        load_tool_cpu_pct: cpu_pct(first_me, mine),
        archived_operations: list.archived,
        list_page_p50_ms: list.p50_ms,
        list_page_max_ms: list.max_ms,
        operations_listed: list.listed,
        state_writes: store_writes.map(|w| w.0),
        state_writes_per_operation: store_writes
            .filter(|_| args.ops > 0)
            .map(|w| w.0 as f64 / args.ops as f64),
        store_writes: store_writes.map(|w| w.1),
        store_writes_per_operation: store_writes
            .filter(|_| args.ops > 0)
            .map(|w| w.1 as f64 / args.ops as f64),
        audit,
    }
}

/// The scheduler's CPU seconds between two /proc readings, and a function giving them
/// in microseconds per unit of work.
fn cpu_figures(
    first: Option<(u64, u64, u64)>,
    last: Option<(u64, u64, u64)>,
    hz: f64,
) -> (Option<f64>, impl Fn(u64) -> Option<f64>) {
    let cpu_s = match (first, last) {
        (Some(a), Some(b)) => Some(b.0.saturating_sub(a.0) as f64 / hz),
        _ => None,
    };
    (cpu_s, move |n: u64| {
        cpu_s.filter(|_| n > 0).map(|s| s * 1e6 / n as f64)
    })
}

/// `--idle-http N`: N idle web connections held through the run, with reads timed.
pub(crate) fn start_idle_http(
    target: &Target,
    idle: usize,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<Option<std::thread::JoinHandle<ytsched_tests::idle_http::UiFigures>>> {
    Ok(match (&target.lab, idle) {
        (Some(lab), n) if n > 0 => {
            raise_nofile();
            let (addr, token) = (lab.http_addr()?, lab.web_token());
            let stop = stop.clone();
            Some(std::thread::spawn(move || {
                ytsched_tests::idle_http::run(addr, token, n, stop)
            }))
        }
        (None, n) if n > 0 => bail!("--idle-http needs --lab"),
        _ => None,
    })
}

/// Reports every five seconds until the run's time is up or every job completed.
pub(crate) async fn watch(
    args: &Args,
    target: &Target,
    counters: &Counters,
    first_sched: Option<(u64, u64, u64)>,
    hz: f64,
    start: Instant,
) {
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
        prev = report(counters, &prev, target.scheduler_pid, hz, start);
        if reached {
            break;
        }
    }
}
