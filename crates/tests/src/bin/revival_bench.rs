//! Load tool for the durability figures (SPEC 5.10): how long a scheduler takes to
//! revive with 10,000 operations in JetStream KV, and how long a standby takes to serve
//! after the leader is killed. Real nats-server and scheduler processes.
//!
//! `cargo build --release --workspace --bins`, then `target/release/ytsched-revival-bench`.

use anyhow::Context;
use futures::StreamExt;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use ytsched_common::api::{ListNodes, StartOperation};
use ytsched_common::identity::Caller;
use ytsched_common::spec::{TaskSpec, VanillaSpec};
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::call;
use ytsched_common::ByteSize;
use ytsched_tests::Lab;

const OPERATIONS: usize = 10_000;
/// Pools hold 50 operations by default: the operations are spread over users, each
/// with an ephemeral pool of their own.
const PER_USER: usize = 50;
const FAILOVERS: usize = 3;

fn one_job() -> VanillaSpec {
    VanillaSpec::single_task(TaskSpec::new("true", 1, 1.0, ByteSize(64 << 20)))
}

/// Time from now until the scheduler API answers.
async fn until_serving(client: &async_nats::Client, s: &Subjects) -> Duration {
    let t0 = Instant::now();
    loop {
        if call(client, s, &Caller::admin("admin"), ListNodes {})
            .await
            .is_ok()
        {
            return t0.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The load time the scheduler itself logged for its last revival.
fn logged_revival_ms(log: &str) -> Option<u64> {
    log.lines()
        .rfind(|l| l.contains("state revived from the store"))?
        .split("elapsed_ms=")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut lab = Lab::start_with(&["--lease-ttl", "2s"], vec![])?;
    // Many users, each with its own identity (a caller is answered only on its own
    // inbox, so no one identity can play them all).
    let mut clients = Vec::new();
    for u in 0..OPERATIONS.div_ceil(PER_USER) {
        let name = format!("user{u}");
        lab.add_user(&name, false)?;
        clients.push(lab.client_as(&name).await?);
    }
    let s = Subjects::new(&lab.prefix);
    let client = lab.client_as("admin").await?;

    let t0 = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..OPERATIONS)
        .map(|i| {
            let (client, s) = (clients[i / PER_USER].clone(), s.clone());
            async move {
                let user = Caller::user(&format!("user{}", i / PER_USER));
                let start = StartOperation {
                    spec: one_job().try_into().expect("a valid spec"),
                    idempotency_token: None,
                };
                call(&client, &s, &user, start)
                    .await
                    .map(|_| ())
                    .context("submit")
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let submit = t0.elapsed();
    println!(
        "submitted {OPERATIONS} operations in {:.2} s ({:.0}/s, each stored before its reply)",
        submit.as_secs_f64(),
        OPERATIONS as f64 / submit.as_secs_f64()
    );

    // Clean stop (the lease is released), then a fresh process revives from KV.
    lab.kill_scheduler(0, Signal::SIGTERM);
    lab.restart_scheduler(0)?;
    let serve = until_serving(&client, &s).await;
    println!(
        "revival with {OPERATIONS} stored operations: serving {:.0} ms after the process started; loading and rebuilding took {} ms",
        serve.as_secs_f64() * 1000.0,
        logged_revival_ms(&lab.scheduler_log())
            .map(|m| m.to_string())
            .unwrap_or_else(|| "?".into())
    );

    // Failover: a standby waits; the leader is killed (no clean release).
    let standby_lines = |lab: &Lab, i: usize| lab.scheduler_log_of(i).matches("standby:").count();
    let mut leader = 0;
    let mut standby = lab.start_scheduler()?;
    let mut seen = 0;
    for round in 0..FAILOVERS {
        ytsched_tests::wait_until(Duration::from_secs(30), || {
            (standby_lines(&lab, standby) > seen).then_some(())
        })?;
        lab.kill_scheduler(leader, Signal::SIGKILL);
        let serve = until_serving(&client, &s).await;
        println!(
            "failover {}: standby serving {:.0} ms after the leader was killed (lease 2 s)",
            round + 1,
            serve.as_secs_f64() * 1000.0
        );
        seen = standby_lines(&lab, leader);
        lab.restart_scheduler(leader)?;
        std::mem::swap(&mut leader, &mut standby);
    }
    Ok(())
}
