//! SPEC §7 scenario 14 on a real 2-node lab: a one-job task with
//! `job_speculation_timeout: 5000` whose first attempt hangs gets a copy on the other
//! node after 5 s; the copy finishes, the hanging attempt is killed as
//! `speculative_lost`, the job counts once and the operation completes.

use serde_json::Value;
use std::time::{Duration, Instant};
use ytsched_tests::*;

#[test]
fn scenario_14_speculative_copy_wins_and_the_hanging_attempt_is_killed() {
    let node = || NodeOpts::args(&["--cpu", "2", "--memory", "4G", "--user-slots", "4"]);
    let lab = Lab::start(vec![node(), node()]).unwrap();
    let dir = lab.job_dir("spec14");
    let d = dir.display();
    let command = format!(
        "if mkdir {d}/first 2>/dev/null; then echo $$ > {d}/hang.pid; exec sleep 600; fi; echo done"
    );
    let spec = serde_json::json!({"tasks": {"task": {
        "command": command, "job_count": 1, "memory_limit": "64M",
        "job_speculation_timeout": 5000}}});
    let started = Instant::now();
    let id = lab.submit_spec(&spec.to_string()).unwrap();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "completed", "{op}");
    assert_eq!(op["jobs"]["completed"], 1, "the job counts once");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the copy waited for the timeout"
    );

    let jobs: Vec<Value> = lab.jobs(&id).unwrap();
    assert_eq!(jobs.len(), 2, "one attempt and one copy: {jobs:?}");
    let winner = jobs.iter().find(|j| j["state"] == "completed").unwrap();
    let loser = jobs.iter().find(|j| j["state"] == "aborted").unwrap();
    assert_eq!(loser["abort_reason"], "speculative_lost");
    assert_ne!(
        winner["node_id"], loser["node_id"],
        "the copy ran on the other node"
    );
    assert_eq!(winner["job_index"], loser["job_index"]);
    let out = lab.ytsched(&["get-job-stdout", &id, winner["id"].as_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");

    ytsched_tests::wait_job_processes_gone(loser["id"].as_str().unwrap(), Duration::from_secs(15))
        .unwrap();
}
