//! Admission control (issue 24 point 8): one user's request flood is held to that
//! user's rate, while other users are answered, nodes keep heartbeating, and the
//! scheduler keeps its lease (renewed on a connection and task of its own).

use std::time::{Duration, Instant};
use ytsched_common::api::{ApiRequest, ListNodes};
use ytsched_common::codec::encode;
use ytsched_common::protocol::PROTOCOL_VERSION;
use ytsched_tests::{Lab, NodeOpts};

#[test]
fn one_users_flood_leaves_others_answered_and_the_scheduler_leading() {
    let mut lab = Lab::start_with(
        &[
            "--http",
            "127.0.0.1:0",
            "--api-rate",
            "200",
            "--api-burst",
            "400",
        ],
        vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])],
    )
    .unwrap();
    lab.add_user("alice", false).unwrap();
    lab.add_user("mallory", false).unwrap();
    lab.http_addr().expect("the scheduler serves HTTP");
    let request = encode(&ApiRequest {
        protocol_version: PROTOCOL_VERSION,
        body: ListNodes {},
    })
    .unwrap();
    let subject = format!("{}.api.mallory.list_nodes", lab.prefix);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mallory = rt.block_on(lab.client_as("mallory")).unwrap();
    let flood = rt.spawn(async move {
        let inbox = "_INBOX.u.mallory.flood".to_string();
        let started = Instant::now();
        let mut sent = 0u64;
        // 100,000 a second, in batches of 1,000 every 10 ms.
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while started.elapsed() < Duration::from_secs(8) {
            tick.tick().await;
            for _ in 0..1000 {
                if mallory
                    .publish_with_reply(subject.clone(), inbox.clone(), request.clone().into())
                    .await
                    .is_err()
                {
                    break;
                }
                sent += 1;
            }
        }
        let _ = mallory.flush().await;
        (sent, started.elapsed())
    });
    // Meanwhile alice's calls are answered, each in good time.
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..5 {
        let t = Instant::now();
        let out = lab.ytsched_as("alice", &["list-operations"]);
        if !out.status.success() {
            let metrics = lab
                .http_admin_get("/metrics")
                .map(|x| x.1)
                .unwrap_or_default();
            panic!(
                "alice was not answered during the flood: {}\n{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                metrics
                    .lines()
                    .filter(|l| l.contains("refused"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                lab.scheduler_log()
            );
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(500));
    }
    let (sent, took) = rt.block_on(flood).unwrap();
    eprintln!(
        "flood: {sent} requests in {took:?} ({:.0}/s)",
        sent as f64 / took.as_secs_f64()
    );
    // Her own calls, at her rate, still work once she stops.
    std::thread::sleep(Duration::from_secs(3));
    let out = lab.ytsched_as("mallory", &["list-nodes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(lab.scheduler_running(0), "{}", lab.scheduler_log());
    assert_eq!(lab.node_info(0).unwrap()["state"], "online");
    let (status, metrics) = lab.http_admin_get("/metrics").unwrap();
    assert_eq!(status, 200, "{metrics}");
    let limited: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ytsched_refused_requests_total{reason=\"rate_limited\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(limited > 0, "{metrics}");
    // Refusals are counted, not logged one by one.
    let log = lab.scheduler_log();
    let lines = log
        .lines()
        .filter(|l| l.contains("request refused"))
        .count();
    assert!(lines <= 5, "{lines} refusal lines logged");
}
