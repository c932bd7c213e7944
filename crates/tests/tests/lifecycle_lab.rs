//! Operations as their users drive them over time (issue 27), on a live lab: real
//! nats-server, scheduler, agent and job processes.

use std::time::{Duration, Instant};
use ytsched_tests::*;

/// A `sleep` past its operation's `time_limit`: the operation fails with the reason
/// named, no sooner than the limit, and the job's process is killed.
#[test]
fn an_operation_past_its_time_limit_fails_and_its_job_is_killed() {
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "4G"])]).unwrap();
    let marker = format!("sleep 93{}", std::process::id());
    let spec = serde_json::json!({
        "time_limit": "2s",
        "tasks": {"t": {"command": marker, "cpu_limit": 0.5}},
    });
    let submitted = Instant::now();
    let id = lab.submit_spec(&spec.to_string()).unwrap();
    wait_until(Duration::from_secs(20), || {
        (!pids_with_cmdline(&marker).is_empty()).then_some(())
    })
    .expect("the job runs");
    let op = wait_until(Duration::from_secs(20), || {
        let op = lab.operation(&id).ok()?;
        (op["state"] == "failed").then_some(op)
    })
    .expect("the operation fails at its time limit");
    assert!(
        submitted.elapsed() >= Duration::from_secs(2),
        "failed after {:?}, before its limit",
        submitted.elapsed()
    );
    let error = op["error"].as_str().unwrap_or_default();
    assert!(error.contains("operation time limit exceeded"), "{op}");
    wait_until(Duration::from_secs(5), || {
        pids_with_cmdline(&marker).is_empty().then_some(())
    })
    .expect("the job's process is killed");
    let jobs = lab.jobs(&id).unwrap();
    assert_eq!(jobs[0]["state"], "aborted", "{jobs:?}");
    assert_eq!(jobs[0]["abort_reason"], "operation_aborted");
}

/// Real `sleep` jobs: a move to another pool keeps them running (same processes); a
/// user who does not control the operation is refused; a new owner suspends it with
/// `--abort-running-jobs` (the processes are killed, nothing new starts) and resumes it
/// (they run again).
#[test]
fn an_operation_moved_suspended_and_resumed_on_a_live_lab() {
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "4G"])]).unwrap();
    for pool in ["a", "b"] {
        lab.ok(&["create", "scheduler_pool", "--name", pool]);
    }
    for user in ["alice", "mallory"] {
        lab.add_user(user, false).unwrap();
    }
    let marker = format!("sleep 94{}", std::process::id());
    let spec = serde_json::json!({
        "pool": "a",
        "tasks": {"t": {"command": marker, "job_count": 4, "cpu_limit": 1}},
    });
    let id = lab.submit_spec(&spec.to_string()).unwrap();
    let running_pids = || {
        let mut p = pids_with_cmdline(&marker);
        p.sort();
        p
    };
    let running_jobs = || lab.operation(&id).unwrap()["jobs"]["running"].as_i64();
    // Each job is its shell and its `sleep`: both carry the marker.
    let before = wait_until(Duration::from_secs(20), || {
        let p = running_pids();
        (running_jobs() == Some(2) && p.len() >= 2).then_some(p)
    })
    .expect("two jobs run");

    let refused = lab.ytsched_as("mallory", &["update-op-parameters", &id, "{pool=b}"]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("mallory") && why.contains("update the parameters of"),
        "{why}"
    );
    let refused = lab.ytsched_as("mallory", &["suspend-operation", &id]);
    assert!(!refused.status.success());

    lab.ok(&[
        "update-op-parameters",
        &id,
        "{pool=b; weight=2; owners=[alice]}",
    ]);
    let op = lab.operation(&id).unwrap();
    assert_eq!(
        (op["pool"].as_str(), op["weight"].as_f64()),
        (Some("b"), Some(2.0))
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(running_pids(), before, "the same processes run on");

    let out = lab.ytsched_as("alice", &["suspend-operation", &id, "--abort-running-jobs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(Duration::from_secs(15), || {
        running_pids().is_empty().then_some(())
    })
    .expect("the jobs' processes are killed");
    let op = lab.operation(&id).unwrap();
    assert_eq!(op["state"], "running");
    assert_eq!(op["suspended"], true, "{op}");
    let jobs = lab.jobs(&id).unwrap();
    let suspended = jobs
        .iter()
        .filter(|j| j["abort_reason"] == "suspended")
        .count();
    assert_eq!(suspended, 2, "{jobs:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert!(running_pids().is_empty(), "nothing starts while suspended");

    let out = lab.ytsched_as("alice", &["resume-operation", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(Duration::from_secs(20), || {
        (running_jobs() == Some(2) && running_pids().len() >= 2).then_some(())
    })
    .expect("resumed: two jobs run again");
    let history: Vec<String> = lab.operation(&id).unwrap()["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["event"].as_str().unwrap_or_default().to_string())
        .collect();
    for event in [
        "parameters updated: pool=b weight=2 owners=[alice]",
        "suspended; 2 running job(s) aborted",
        "resumed",
    ] {
        assert!(history.iter().any(|h| h == event), "{event}: {history:?}");
    }
}
