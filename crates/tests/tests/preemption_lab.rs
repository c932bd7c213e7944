//! SPEC §7 scenario 11 on a real 24-slot lab with short timeouts (starvation 2 s,
//! backoff 1 s): B stays at 4 jobs while preemption is off; once it is allowed both reach
//! 12, A's newest jobs are the ones killed (their processes are gone), and both
//! operations complete with every job done.

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use ytsched_tests::*;

fn running(lab: &Lab, op: &str) -> i64 {
    lab.operation(op)
        .ok()
        .and_then(|o| o["jobs"]["running"].as_i64())
        .unwrap_or(-1)
}

/// A job that records its PID and waits until the test releases it.
fn held_job(dir: &Path) -> String {
    let d = dir.display();
    format!("echo $$ > {d}/$YT_JOB_ID.pid; while [ ! -f {d}/release ]; do sleep 0.2; done")
}

#[test]
fn scenario_11_preemption_on_a_real_lab() {
    let lab = Lab::start(vec![NodeOpts::args(&[
        "--cpu",
        "24",
        "--memory",
        "60G",
        "--user-slots",
        "48",
    ])])
    .unwrap();
    lab.ok(&[
        "set",
        "//sys/pool_trees/default/@config/fair_share_starvation_timeout",
        "2s",
    ]);
    lab.ok(&[
        "set",
        "//sys/pool_trees/default/@config/preemptive_scheduling_backoff",
        "1s",
    ]);
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "testing",
        "--pool-tree",
        "default",
        "--attributes",
        "{allow_regular_preemption=%false}",
    ]);
    let work = lab.job_dir("jobs");
    let spec = |jobs: u32| {
        serde_json::json!({"pool": "testing", "tasks": {"task": {
            "command": held_job(&work), "job_count": jobs, "memory_limit": "64M"}}})
        .to_string()
    };
    let a = lab.submit_spec(&spec(20)).unwrap();
    wait_until(Duration::from_secs(20), || {
        (running(&lab, &a) == 20).then_some(())
    })
    .unwrap();
    let b = lab.submit_spec(&spec(12)).unwrap();
    wait_until(Duration::from_secs(20), || {
        (running(&lab, &b) == 4).then_some(())
    })
    .unwrap();

    // Starving, but preemption is off: B stays at 4.
    let orchid_b = format!("//sys/scheduler/orchid/scheduler/pool_trees/default/operations/{b}");
    wait_until(Duration::from_secs(20), || {
        let s: Value = lab
            .json(&["get", &format!("{orchid_b}/starvation_status")])
            .ok()?;
        (s == "starving").then_some(())
    })
    .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(running(&lab, &b), 4);
    assert_eq!(running(&lab, &a), 20);

    lab.ok(&[
        "set",
        "//sys/pool_trees/default/testing/@allow_regular_preemption",
        "%true",
    ]);
    wait_until(Duration::from_secs(60), || {
        (running(&lab, &a) == 12 && running(&lab, &b) == 12).then_some(())
    })
    .unwrap_or_else(|_| panic!("did not reach 12/12; logs in {}", lab.dir.path().display()));

    // The preempted jobs are A's newest, aborted as `preempted` with a reason that
    // names B, and their processes are gone.
    let jobs = lab.jobs(&a).unwrap();
    let preempted: Vec<&Value> = jobs
        .iter()
        .filter(|j| j["abort_reason"] == "preempted")
        .collect();
    assert_eq!(preempted.len(), 8, "{jobs:?}");
    let newest_kept = jobs
        .iter()
        .filter(|j| j["state"] == "running")
        .map(|j| j["job_index"].as_u64().unwrap())
        .max()
        .unwrap();
    for j in &preempted {
        assert!(j["job_index"].as_u64().unwrap() > newest_kept, "{j}");
        assert!(
            j["error"].as_str().unwrap_or("").contains(b.as_str()),
            "{j}"
        );
        let id = j["id"].as_str().unwrap();
        ytsched_tests::wait_job_processes_gone(id, Duration::from_secs(15)).unwrap();
    }

    // Released, both complete; preempted jobs ran again and count once, not as failures.
    std::fs::write(work.join("release"), "").unwrap();
    for op in [&a, &b] {
        let info = lab.wait_finished(op, Duration::from_secs(60)).unwrap();
        assert_eq!(info["state"], "completed", "{info}");
        assert_eq!(info["jobs"]["failed"], 0);
    }
    assert_eq!(lab.operation(&a).unwrap()["jobs"]["completed"], 20);
    assert_eq!(lab.operation(&b).unwrap()["jobs"]["completed"], 12);
}
