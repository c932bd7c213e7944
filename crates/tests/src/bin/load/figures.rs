//! The figures `ytsched-load` counts and prints: counters every simulated node adds
//! to, latency histograms, the interval line and the end-of-run summary.

use super::*;

/// Counters every simulated node adds to.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) heartbeats: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) placements: AtomicU64,
    pub(crate) completions: AtomicU64,
    pub(crate) aborts: AtomicU64,
    /// Unix ms of the latest placement, to measure the placement window.
    pub(crate) last_placement_ms: AtomicU64,
    pub(crate) latency: Mutex<Latency>,
}

pub(crate) struct Latency {
    pub(crate) interval: Histogram<u64>,
    pub(crate) total: Histogram<u64>,
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
    pub(crate) async fn all_completed(&self, jobs: u64) {
        loop {
            if jobs > 0 && self.completions.load(Relaxed) >= jobs {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn record_latency(&self, micros: u64) {
        let mut l = self.latency.lock().unwrap();
        let _ = l.interval.record(micros);
        let _ = l.total.record(micros);
    }
}

/// The end-of-run figures, printed as one JSON line.
#[derive(serde::Serialize)]
pub(crate) struct Summary {
    pub(crate) nodes: usize,
    pub(crate) ops: u64,
    pub(crate) jobs: u64,
    pub(crate) duration_s: f64,
    pub(crate) submissions_per_s: f64,
    pub(crate) heartbeats: u64,
    pub(crate) heartbeats_per_s: f64,
    pub(crate) reply_p50_ms: f64,
    pub(crate) reply_p99_ms: f64,
    pub(crate) reply_max_ms: f64,
    pub(crate) timeouts: u64,
    pub(crate) errors: u64,
    pub(crate) jobs_placed: u64,
    pub(crate) placements_per_s: f64,
    pub(crate) jobs_completed: u64,
    pub(crate) completions_per_s: f64,
    pub(crate) jobs_aborted_on_nodes: u64,
    /// Attempts the scheduler counts aborted (lost ones included), summed over operations.
    pub(crate) jobs_aborted_by_scheduler: Option<u64>,
    pub(crate) scheduler_rss_mib: Option<f64>,
    pub(crate) scheduler_rss_peak_mib: Option<f64>,
    pub(crate) scheduler_cpu_pct: Option<f64>,
    /// The scheduler's own CPU time (user + system) over the run: unlike rates and
    /// latencies, it does not depend on what else shares the machine's cores.
    pub(crate) scheduler_cpu_s: Option<f64>,
    /// That CPU time per heartbeat answered, and per job placed, in microseconds.
    pub(crate) scheduler_cpu_us_per_heartbeat: Option<f64>,
    pub(crate) scheduler_cpu_us_per_placed_job: Option<f64>,
    pub(crate) load_tool_cpu_pct: Option<f64>,
    /// With --list-pages: operations the archive lists (its list stream's messages).
    pub(crate) archived_operations: Option<u64>,
    pub(crate) list_page_p50_ms: Option<f64>,
    pub(crate) list_page_max_ms: Option<f64>,
    pub(crate) operations_listed: Option<u64>,
    /// Writes to the state bucket from before the submissions to the end of the run
    /// (puts, deletes and purges: its stream's sequence numbers).
    pub(crate) state_writes: Option<u64>,
    pub(crate) state_writes_per_operation: Option<f64>,
    /// The same over the state bucket, the archive bucket and the archive's list: what an
    /// operation costs the store from submission to archive (once the archive has taken
    /// the run's operations over: `--list-pages` waits for that).
    pub(crate) store_writes: Option<u64>,
    pub(crate) store_writes_per_operation: Option<f64>,
    /// Every submitted operation asked for at the end.
    pub(crate) audit: crate::audit::Audit,
}

/// What `--list-pages` measured.
#[derive(Default)]
pub(crate) struct ListFigures {
    pub(crate) archived: Option<u64>,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) max_ms: Option<f64>,
    pub(crate) listed: Option<u64>,
}

/// Counters at the last report, to print rates per interval.
pub(crate) struct Snapshot {
    pub(crate) heartbeats: u64,
    pub(crate) placements: u64,
    pub(crate) completions: u64,
    pub(crate) scheduler_ticks: Option<u64>,
    pub(crate) at: Instant,
}

/// Prints one interval's line; returns the counters it started from next time.
pub(crate) fn report(
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
pub(crate) fn proc_stat(pid: u32) -> Option<(u64, u64, u64)> {
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

pub(crate) fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// Waits until the archive's list stream stops growing, then walks `pages` pages of
/// `list_operations`, timing each.
pub(crate) async fn measure_list_pages(
    target: &Target,
    pages: usize,
) -> anyhow::Result<ListFigures> {
    let mut figures = ListFigures::default();
    if pages == 0 {
        return Ok(figures);
    }
    // The scheduler's identity may read its streams; an installation's admin may not.
    if let Ok(auth) = creds(&target.auth_dir, "scheduler") {
        let client = connect(&target.nats, "ytsched-load archive", false, &auth).await?;
        let js = async_nats::jetstream::new(client);
        let name = format!("KV_{}_archive", target.subjects.prefix().replace('.', "_"));
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
