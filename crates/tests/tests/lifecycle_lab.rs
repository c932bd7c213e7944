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
