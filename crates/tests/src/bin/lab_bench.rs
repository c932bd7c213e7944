//! Load tool for the SPEC §8 lab figures on a 1-node lab of real processes:
//! submit → first job process running (p50/p99 over 100 one-job operations),
//! throughput of 1,000 jobs of `true`, and the agent's idle RSS and CPU.
//!
//! Build everything in release first: `cargo build --release --workspace --bins`, then
//! `target/release/ytsched-lab-bench` (or `cargo run --release -p ytsched-tests --bin ytsched-lab-bench`).

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use ytsched_common::api::{GetJobOutput, GetOperation, ListJobs, OutputStream, StartOperation};
use ytsched_common::identity::Caller;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::OperationState;
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::call;
use ytsched_common::OperationId;
use ytsched_tests::{Lab, NodeOpts};

const LATENCY_SAMPLES: usize = 100;
const THROUGHPUT_JOBS: u32 = 1000;

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

async fn wait_done(
    client: &async_nats::Client,
    s: &Subjects,
    id: &OperationId,
    poll: Duration,
) -> anyhow::Result<()> {
    loop {
        let info = call(
            client,
            s,
            &bench(),
            GetOperation {
                operation_id: id.clone(),
            },
        )
        .await?;
        if info.state.is_finished() {
            if info.state != OperationState::Completed {
                bail!("operation {id} {}: {:?}", info.state, info.error);
            }
            return Ok(());
        }
        tokio::time::sleep(poll).await;
    }
}

/// The bench submits as the lab's first admin.
fn bench() -> Caller {
    Caller::admin("admin")
}

fn spec(yaml: &str) -> anyhow::Result<VanillaSpec> {
    let s: VanillaSpec = serde_json::from_str(yaml)?;
    s.validate()?;
    Ok(s)
}

fn proc_stat(pid: u32) -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(") ").context("stat format")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok((ticks, rss_kib))
}

/// 1. Submit → first job process running.
async fn submit_latency(client: &async_nats::Client, s: &Subjects) -> anyhow::Result<()> {
    //    (date inside the job's own shell), compared with the time just before submit.
    let mut hist = Histogram::<u64>::new(3)?;
    for _ in 0..LATENCY_SAMPLES {
        let sp = spec(
            r#"{"tasks": {"t": {"command": "date +%s%N", "cpu_limit": 0.1, "memory_limit": "64M"}}}"#,
        )?;
        let t0 = unix_nanos();
        let id = call(
            client,
            s,
            &bench(),
            StartOperation {
                spec: sp.try_into().expect("a valid spec"),
                idempotency_token: None,
            },
        )
        .await?;
        wait_done(client, s, &id, Duration::from_millis(5)).await?;
        let jobs = call(
            client,
            s,
            &bench(),
            ListJobs {
                operation_id: id.clone(),
                limit: Some(1),
                cursor: None,
                state: None,
            },
        )
        .await?
        .jobs;
        let out = call(
            client,
            s,
            &bench(),
            GetJobOutput {
                operation_id: id.clone(),
                job_id: jobs[0].id.clone(),
                stream: OutputStream::Stdout,
            },
        )
        .await?;
        let started: u128 = out
            .trim()
            .parse()
            .with_context(|| format!("job printed {out:?}"))?;
        hist.record(((started.saturating_sub(t0)) / 1000) as u64)?;
    }
    println!(
        "submit -> first job process running ({LATENCY_SAMPLES} one-job operations): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.max() as f64 / 1000.0
    );

    Ok(())
}

/// 2. Throughput: one operation of many jobs of `true`.
async fn throughput(client: &async_nats::Client, s: &Subjects) -> anyhow::Result<()> {
    let sp = spec(&format!(
        r#"{{"tasks": {{"t": {{"command": "true", "job_count": {THROUGHPUT_JOBS}, "cpu_limit": 0.05, "memory_limit": "16M"}}}}}}"#
    ))?;
    let t0 = Instant::now();
    let id = call(
        client,
        s,
        &bench(),
        StartOperation {
            spec: sp.try_into().expect("a valid spec"),
            idempotency_token: None,
        },
    )
    .await?;
    wait_done(client, s, &id, Duration::from_millis(20)).await?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{THROUGHPUT_JOBS} jobs of `true` (cpu_limit 0.05 → up to 32 concurrent): {secs:.2} s, {:.0} jobs/s",
        THROUGHPUT_JOBS as f64 / secs
    );

    Ok(())
}

/// 3. Agent idle footprint at 1 heartbeat/s.
async fn idle_footprint(lab: &Lab) -> anyhow::Result<()> {
    let pid = lab.node_pid(0).context("agent pid")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (t_before, _) = proc_stat(pid)?;
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let (t_after, rss_kib) = proc_stat(pid)?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as f64;
    let cpu_pct = (t_after - t_before) as f64 / hz / window.as_secs_f64() * 100.0;
    println!(
        "agent idle: RSS {:.1} MiB, CPU {cpu_pct:.2} % over {}s",
        rss_kib as f64 / 1024.0,
        window.as_secs()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let lab = tokio::task::spawn_blocking(|| {
        Lab::start(vec![NodeOpts::args(&[
            "--cpu",
            "2",
            "--memory",
            "4G",
            "--user-slots",
            "32",
        ])])
    })
    .await??;
    let s = Subjects::new(&lab.prefix);
    let client = lab.client_as("admin").await?;
    println!(
        "lab: 1 node (cpu 2, memory 4G, user_slots 32), nats {}, {} cores on this machine",
        lab.nats_url,
        std::thread::available_parallelism()?.get()
    );

    submit_latency(&client, &s).await?;
    throughput(&client, &s).await?;
    idle_footprint(&lab).await?;
    drop(client);
    tokio::task::spawn_blocking(move || drop(lab)).await?;
    Ok(())
}
