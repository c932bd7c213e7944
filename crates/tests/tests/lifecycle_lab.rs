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
    // Each job is its shell and its `sleep`: both carry the marker. A job's `sleep` may
    // start a moment after its shell, so the set is taken once it holds still.
    let before = wait_until(Duration::from_secs(20), || {
        let p = running_pids();
        if running_jobs() != Some(2) || p.len() < 2 {
            return None;
        }
        std::thread::sleep(Duration::from_millis(500));
        (running_pids() == p).then_some(p)
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

/// Graceful preemption on real processes (SPEC 5.3): a job that traps SIGTERM writes a
/// checkpoint and exits when preempted; the preemptor starts only after it has exited;
/// the job runs again later and finds its checkpoint.
#[test]
fn a_gracefully_preempted_job_checkpoints_and_finds_its_checkpoint_when_it_runs_again() {
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "4G"])]).unwrap();
    for (attr, value) in [
        ("fair_share_starvation_timeout", "1s"),
        ("preemptive_scheduling_backoff", "0s"),
        ("job_graceful_interrupt_timeout", "30s"),
    ] {
        lab.ok(&[
            "set",
            &format!("//sys/pool_trees/default/@config/{attr}"),
            value,
        ]);
    }
    for pool in ["a", "b"] {
        lab.ok(&["create", "scheduler_pool", "--name", pool]);
    }
    let dir = job_writable_dir();
    let d = dir.path().display();
    // Resumed from a checkpoint: say so and go on; otherwise work until told to stop,
    // then checkpoint (after a moment, as real checkpoints take) and exit.
    let script = format!(
        "umask 000; i=$YT_JOB_INDEX; \
         if [ -f {d}/ckpt.$i ]; then echo $YT_JOB_ID >> {d}/found.$i; exec sleep 600; fi; \
         trap 'sleep 1; echo $YT_JOB_ID > {d}/ckpt.$i; exit 0' TERM; \
         sleep 600 & wait"
    );
    let spec = serde_json::json!({
        "pool": "a",
        "preemption_mode": "graceful",
        "tasks": {"t": {"command": script, "job_count": 2, "cpu_limit": 1}},
    });
    let graceful = lab.submit_spec(&spec.to_string()).unwrap();
    wait_until(Duration::from_secs(20), || {
        (lab.operation(&graceful).ok()?["jobs"]["running"] == 2).then_some(())
    })
    .expect("both jobs run");
    let starving = lab
        .submit_spec(r#"{"pool": "b", "tasks": {"t": {"command": "sleep 600", "cpu_limit": 1}}}"#)
        .unwrap();
    let victim = wait_until(Duration::from_secs(30), || {
        let jobs = lab.jobs(&graceful).ok()?;
        jobs.into_iter().find(|j| j["abort_reason"] == "preempted")
    })
    .expect("one job is preempted");
    let index = victim["job_index"].as_u64().unwrap();
    let ckpt = std::fs::read_to_string(dir.path().join(format!("ckpt.{index}")))
        .expect("it wrote its checkpoint before it exited");
    assert_eq!(ckpt.trim(), victim["id"].as_str().unwrap());
    let started = wait_until(Duration::from_secs(20), || {
        let jobs = lab.jobs(&starving).ok()?;
        jobs.into_iter().find(|j| j["state"] == "running")
    })
    .expect("the preemptor starts");
    assert!(
        started["start_time"].as_u64() >= victim["finish_time"].as_u64(),
        "the preemptor started only after its victim exited: {started} {victim}"
    );
    // Room again: the preempted job runs again and finds its checkpoint.
    lab.ok(&["abort-operation", &starving]);
    let found = wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(dir.path().join(format!("found.{index}"))).ok()
    })
    .expect("the job ran again and found its checkpoint");
    assert_ne!(
        found.trim(),
        victim["id"].as_str().unwrap(),
        "a new attempt"
    );
    lab.ok(&["abort-operation", &graceful]);
}

/// Gang operations on real processes (SPEC 5.15): a 4-job gang on two 2-cpu nodes
/// waits while one node is busy (no member runs), then starts all four in one decision
/// once both are free; killing one member's process restarts all four.
#[test]
fn a_gang_starts_whole_when_both_nodes_are_free_and_restarts_whole() {
    let node = || NodeOpts::args(&["--cpu", "2", "--memory", "4G"]);
    let lab = Lab::start(vec![node(), node()]).unwrap();
    let blocker = lab
        .submit_spec(r#"{"tasks": {"t": {"command": "sleep 600", "cpu_limit": 2}}}"#)
        .unwrap();
    wait_until(Duration::from_secs(20), || {
        (lab.operation(&blocker).ok()?["jobs"]["running"] == 1).then_some(())
    })
    .expect("the blocker runs");
    let marker = format!("sleep 95{}", std::process::id());
    let spec = serde_json::json!({
        "is_gang": true,
        "tasks": {"t": {"command": marker, "job_count": 4, "cpu_limit": 1}},
    });
    let gang = lab.submit_spec(&spec.to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.operation(&gang).unwrap()["jobs"]["running"], 0);
    assert!(
        pids_with_cmdline(&marker).is_empty(),
        "no member runs alone"
    );
    let why = lab.ok(&["explain", &gang]);
    assert!(
        why.contains("a gang of 4 job(s) waits to start whole"),
        "{why}"
    );

    lab.ok(&["abort-operation", &blocker]);
    let running = |lab: &Lab| -> Vec<serde_json::Value> {
        lab.jobs(&gang)
            .unwrap_or_default()
            .into_iter()
            .filter(|j| j["state"] == "running")
            .collect()
    };
    let first = wait_until(Duration::from_secs(20), || {
        let r = running(&lab);
        (r.len() == 4).then_some(r)
    })
    .expect("all four start");
    let starts: std::collections::BTreeSet<String> =
        first.iter().map(|j| j["start_time"].to_string()).collect();
    assert_eq!(starts.len(), 1, "one decision: {first:?}");
    let nodes: std::collections::BTreeSet<String> =
        first.iter().map(|j| j["node_id"].to_string()).collect();
    assert_eq!(nodes.len(), 2, "across both nodes: {first:?}");

    // Kill one member's processes: the other three are aborted and all four run again.
    let victim = first[0]["id"].as_str().unwrap().to_string();
    let pids = wait_until(Duration::from_secs(10), || {
        let p = pids_in_cgroup_matching(&victim);
        (!p.is_empty()).then_some(p)
    })
    .expect("the member's processes");
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let again = wait_until(Duration::from_secs(30), || {
        let r = running(&lab);
        (r.len() == 4 && r.iter().all(|j| first.iter().all(|f| f["id"] != j["id"]))).then_some(r)
    })
    .expect("the whole gang runs again");
    assert_eq!(again.len(), 4);
    let jobs = lab.jobs(&gang).unwrap();
    let lost = jobs
        .iter()
        .filter(|j| j["abort_reason"] == "gang_member_lost")
        .count();
    let failed = jobs.iter().filter(|j| j["state"] == "failed").count();
    assert_eq!((failed, lost), (1, 3), "{jobs:?}");
    lab.ok(&["abort-operation", &gang]);
}
