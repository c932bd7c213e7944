//! Agents fence themselves (issue 24 points 9 and 10): a job never runs twice at once
//! when its node is cut off from the bus (identity revoked) or loses its agent after
//! its guardian was killed; an agent whose heartbeats are refused as stale registers
//! again instead of retrying forever. Real nats-server, scheduler, agents and jobs.

use futures::StreamExt;
use std::path::Path;
use std::time::Duration;
use ytsched_common::codec::{decode, encode};
use ytsched_common::protocol::HeartbeatRequest;
use ytsched_tests::{is_alive, pids_with_cmdline, wait_until, Lab, NodeOpts};

fn node() -> NodeOpts {
    NodeOpts::args(&["--cpu", "2", "--memory", "2G"])
}

/// Two nodes and a scheduler that gives up on a silent node after 5 s (the lab's).
fn lab() -> Lab {
    Lab::start(vec![node(), node()]).unwrap()
}

/// One long job taking a whole node (2 cpu), the other node left free for its re-run;
/// each start adds a line under `dir`. Returns the operation, the node it runs on, and
/// the host pids of its first run (a job's own `$$` is its namespace's, not the host's).
fn submit_long_job(lab: &Lab, dir: &Path) -> (String, usize, Vec<i32>) {
    let sleep = format!("sleep {}", 600_000 + lab.slot_uid_base % 100_000);
    let op = lab
        .submit_spec(&format!(
            "tasks: {{t: {{command: 'umask 000; echo started >> {}/$YT_JOB_INDEX.start; exec {sleep}', job_count: 1, cpu_limit: 2, memory_limit: 64M}}}}",
            dir.display()
        ))
        .unwrap();
    wait_until(Duration::from_secs(30), || {
        (lab.operation(&op).ok()?["jobs"]["running"] == 1).then_some(())
    })
    .unwrap();
    wait_until(Duration::from_secs(10), || {
        (starts(dir, 0) > 0).then_some(())
    })
    .unwrap();
    let jobs = lab.jobs(&op).unwrap();
    let node = jobs
        .iter()
        .find(|j| j["state"] == "running")
        .and_then(|j| j["node_id"].as_str()?.strip_prefix("node")?.parse().ok())
        .unwrap_or_else(|| panic!("no running job: {jobs:?}"));
    let pids = wait_until(Duration::from_secs(10), || {
        let p = pids_with_cmdline(&sleep);
        (!p.is_empty()).then_some(p)
    })
    .unwrap();
    (op, node, pids)
}

/// How many times job index `index` started.
fn starts(dir: &Path, index: u32) -> usize {
    std::fs::read_to_string(dir.join(format!("{index}.start")))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Waits for index `i` to start a second time, and checks the first run was gone by
/// then: never two at once.
fn assert_rerun_without_overlap(lab: &Lab, dir: &Path, i: u32, node: usize, first: &[i32]) {
    wait_until(Duration::from_secs(40), || {
        (starts(dir, i) >= 2).then_some(())
    })
    .unwrap_or_else(|_| {
        panic!(
            "index {i} never ran again; node log:\n{}\nscheduler log:\n{}",
            lab.node_log(node),
            lab.scheduler_log()
        )
    });
    for pid in first {
        assert!(
            !is_alive(*pid),
            "the first run of index {i} (pid {pid}) still lives while its re-run started"
        );
    }
}

#[test]
fn a_revoked_node_stops_its_jobs_before_they_run_elsewhere() {
    let lab = lab();
    let dir = ytsched_tests::job_writable_dir();
    let (_, n, first) = submit_long_job(&lab, dir.path());
    // Its identity goes: nats-server closes its connection and refuses it from now on.
    lab.auth(&["revoke", &lab.node_id(n)]).unwrap();
    assert_rerun_without_overlap(&lab, dir.path(), 0, n, &first);
    let log = lab.node_log(n);
    assert!(log.contains("this node's jobs are stopped"), "{log}");
}

/// The guardian of agent `agent_pid`: the `--guardian` process whose parent it is.
fn guardian_of(agent_pid: u32) -> Option<i32> {
    pids_with_cmdline("--guardian").into_iter().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .map(|p| p.trim().to_string())
            })
            .is_some_and(|ppid| ppid == agent_pid.to_string())
    })
}

#[test]
fn killing_the_guardian_then_the_agent_runs_no_job_twice() {
    let mut lab = lab();
    let dir = ytsched_tests::job_writable_dir();
    let (_, n, first) = submit_long_job(&lab, dir.path());
    let i = 0;
    let agent = lab.node_pid(n).unwrap();
    let old = guardian_of(agent).expect("a guardian");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let new = wait_until(Duration::from_secs(10), || {
        guardian_of(agent).filter(|g| *g != old && is_alive(*g))
    })
    .unwrap_or_else(|_| panic!("no new guardian; log:\n{}", lab.node_log(n)));
    assert!(lab.node_log(n).contains("a new one watches"));
    assert!(
        first.iter().all(|p| is_alive(*p)),
        "the job survived the swap"
    );
    // Now the agent dies: the new guardian kills its job, which then runs elsewhere once.
    lab.kill_node(n, nix::sys::signal::Signal::SIGKILL);
    wait_until(Duration::from_secs(10), || {
        first.iter().all(|p| !is_alive(*p)).then_some(())
    })
    .expect("the guardian killed the orphaned job");
    assert!(!is_alive(new) || guardian_of(agent).is_none());
    assert_rerun_without_overlap(&lab, dir.path(), i, n, &first);
}

#[test]
fn an_agent_refused_as_stale_registers_again_and_keeps_its_jobs() {
    let lab = Lab::start(vec![node()]).unwrap();
    let dir = ytsched_tests::job_writable_dir();
    let op = lab
        .submit_spec(&format!(
            "tasks: {{t: {{command: 'echo started >> {}/$YT_JOB_INDEX.start; sleep 600', job_count: 1, cpu_limit: 1, memory_limit: 64M}}}}",
            dir.path().display()
        ))
        .unwrap();
    wait_until(Duration::from_secs(30), || {
        (lab.operation(&op).ok()?["jobs"]["running"] == 1).then_some(())
    })
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // What node0 sent, heard as the scheduler's answering identity hears it...
        let bus = lab.client_as("scheduler-bus").await.unwrap();
        let mut heard = bus
            .subscribe(format!("{}.heartbeat.node0", lab.prefix))
            .await
            .unwrap();
        let msg = tokio::time::timeout(Duration::from_secs(10), heard.next())
            .await
            .unwrap()
            .unwrap();
        let mut req: HeartbeatRequest = decode(&msg.payload).unwrap();
        // ...sent again by someone holding node0's key, numbered far ahead: every real
        // heartbeat of that incarnation is stale from now on.
        req.seq += 10_000;
        let node0 = lab.client_as("node0").await.unwrap();
        node0
            .request(
                format!("{}.heartbeat.node0", lab.prefix),
                encode(&req).unwrap().into(),
            )
            .await
            .unwrap();
    });
    wait_until(Duration::from_secs(15), || {
        lab.node_log(0)
            .contains("registering again with a new incarnation")
            .then_some(())
    })
    .unwrap_or_else(|_| panic!("{}", lab.node_log(0)));
    // Back online, heartbeating, with its job still running and never run twice.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.node_info(0).unwrap()["state"], "online");
    let info = lab.operation(&op).unwrap();
    assert_eq!(info["jobs"]["running"], 1, "{info}");
    assert_eq!(starts(dir.path(), 0), 1);
}

/// Issue 38 point 8: the agent and its guardian killed together (an OOM kill of both,
/// `kill -9` of the process group): the kernel ends the job with its agent, so it never
/// runs on beside its re-run elsewhere.
#[test]
fn a_job_dies_with_its_agent_even_without_its_guardian() {
    let mut lab = lab();
    let dir = ytsched_tests::job_writable_dir();
    let (_, n, first) = submit_long_job(&lab, dir.path());
    let agent = lab.node_pid(n).unwrap();
    let guardian = guardian_of(agent).expect("a guardian");
    let kill = |pid: i32| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    // Guardian first, then at once the agent: no guardian lives to clean up.
    kill(guardian);
    kill(agent as i32);
    lab.kill_node(n, nix::sys::signal::Signal::SIGKILL);
    wait_until(Duration::from_secs(5), || {
        first.iter().all(|p| !is_alive(*p)).then_some(())
    })
    .unwrap_or_else(|_| panic!("the job outlived its agent and guardian: {first:?}"));
    assert_rerun_without_overlap(&lab, dir.path(), 0, n, &first);
}

/// Issue 38 point 11: an agent stopped mid-job (`kill -STOP`) cannot fence itself; its
/// guardian, hearing nothing past the fence deadline, stops the job before the scheduler
/// declares the node lost, so the re-run elsewhere never overlaps it.
#[test]
fn a_stopped_agents_guardian_fences_its_jobs() {
    let mut lab = lab();
    let dir = ytsched_tests::job_writable_dir();
    let (_, n, first) = submit_long_job(&lab, dir.path());
    let agent = lab.node_pid(n).unwrap();
    let pid = nix::unistd::Pid::from_raw(agent as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    assert_rerun_without_overlap(&lab, dir.path(), 0, n, &first);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(
        lab.node_log(n).contains("past its fence deadline"),
        "{}",
        lab.node_log(n)
    );
    lab.kill_node(n, nix::sys::signal::Signal::SIGKILL);
}
