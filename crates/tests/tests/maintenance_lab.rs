//! Node maintenance on a live lab (SPEC 5.13): `drain --wait` lets running jobs finish
//! and returns once the node is empty; a banned node's jobs are aborted and run again
//! elsewhere; both survive a scheduler restart (kept in the stored configuration).

use serde_json::Value;
use std::time::{Duration, Instant};
use ytsched_tests::*;

fn running(lab: &Lab, op: &str) -> i64 {
    lab.operation(op)
        .map_or(0, |o| o["jobs"]["running"].as_i64().unwrap_or(0))
}

fn attempts_on<'a>(jobs: &'a [Value], node: &str) -> Vec<&'a Value> {
    jobs.iter().filter(|j| j["node_id"] == node).collect()
}

#[test]
fn drain_waits_for_running_jobs_and_a_banned_node_gives_its_jobs_back() {
    let mut lab = Lab::start(vec![NodeOpts::two_cpus(), NodeOpts::two_cpus()]).unwrap();

    // Four 3-second jobs fill both nodes.
    let first = lab
        .submit_spec("tasks: {t: {command: 'sleep 3', job_count: 4}}")
        .unwrap();
    wait_until(Duration::from_secs(15), || {
        (running(&lab, &first) == 4).then_some(())
    })
    .unwrap();

    // drain --wait returns once node1's jobs have finished, not before, and kills none.
    let started = Instant::now();
    let out = lab.ytsched(&["drain", "node1", "--wait", "--timeout", "30"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("node node1 is empty"), "{stderr}");
    let on_node1 = lab.jobs(&first).unwrap();
    let on_node1 = attempts_on(&on_node1, "node1");
    assert_eq!(on_node1.len(), 2, "{on_node1:?}");
    assert!(
        on_node1.iter().all(|j| j["state"] == "completed"),
        "decommissioned: running jobs finish ({on_node1:?})"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "drain waited for the jobs"
    );
    let info = lab.node_info(1).unwrap();
    assert_eq!(info["maintenance"]["decommissioned"], true, "{info}");
    let table = lab.ok(&["list-nodes"]);
    assert!(table.contains("decommissioned"), "{table}");

    // New work avoids node1.
    let second = lab
        .submit_spec("tasks: {t: {command: 'sleep 30', job_count: 2}}")
        .unwrap();
    wait_until(Duration::from_secs(15), || {
        (running(&lab, &second) == 2).then_some(())
    })
    .unwrap();
    let jobs = lab.jobs(&second).unwrap();
    assert!(attempts_on(&jobs, "node1").is_empty(), "{jobs:?}");

    // Banning node0 aborts its jobs; back in service, node1 runs them again.
    lab.ok(&["set", "//sys/cluster_nodes/node0/@banned", "true"]);
    wait_until(Duration::from_secs(15), || {
        let jobs = lab.jobs(&second).ok()?;
        (jobs
            .iter()
            .filter(|j| j["abort_reason"] == "node_banned")
            .count()
            == 2)
            .then_some(())
    })
    .unwrap();
    assert_eq!(
        running(&lab, &second),
        0,
        "nowhere to run: node1 is decommissioned"
    );
    // explain says why, in words and in JSON, once node0 has said the aborted jobs
    // stopped (until then their indexes are held, so that they never run twice).
    let why = wait_until(Duration::from_secs(15), || {
        let why = lab.ok(&["explain", &second]);
        why.contains("no node of tree 'default' taking jobs can fit a job")
            .then_some(why)
    });
    assert!(why.is_ok(), "{}", lab.ok(&["explain", &second]));
    let why: Value = lab.json(&["explain", &second, "--format", "json"]).unwrap();
    assert_eq!(why["reasons"][0]["kind"], "no_node_fits", "{why}");
    assert_eq!(why["trees"][0]["pool"], "admin", "{why}");
    lab.ok(&["remove", "//sys/cluster_nodes/node1/@decommissioned"]);
    wait_until(Duration::from_secs(15), || {
        (running(&lab, &second) == 2).then_some(())
    })
    .unwrap();
    let jobs = lab.jobs(&second).unwrap();
    let live: Vec<&Value> = jobs.iter().filter(|j| j["state"] == "running").collect();
    assert!(live.iter().all(|j| j["node_id"] == "node1"), "{jobs:?}");
    for j in jobs.iter().filter(|j| j["abort_reason"] == "node_banned") {
        assert_eq!(j["node_id"], "node0");
        assert!(
            j["error"].as_str().unwrap().contains("node0 is banned"),
            "{j}"
        );
    }

    // Kept in the store: a restarted scheduler still knows node0 is banned.
    lab.restart_scheduler(0).unwrap();
    wait_until(Duration::from_secs(20), || {
        let out = lab.ytsched(&[
            "get",
            "//sys/cluster_nodes/node0/@banned",
            "--format",
            "json",
        ]);
        (out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "true")
            .then_some(())
    })
    .unwrap();
    lab.ok(&["abort-operation", &second]);
}
