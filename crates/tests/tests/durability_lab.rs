//! Durability and fault tolerance on real processes (SPEC 3.3, 5.10): the scheduler is
//! killed and revived, agents die or stall, NATS goes away, a standby takes over. Jobs
//! write marker files, so "ran twice" and "lost" are read from what really ran.

use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use ytsched_tests::*;

fn node(cpu: &str, slots: &str) -> NodeOpts {
    NodeOpts::args(&[
        "--cpu",
        cpu,
        "--memory",
        "8G",
        "--user-slots",
        slots,
        "--nvidia-smi",
        "/nonexistent",
    ])
}

/// A job that notes each start and each completion (by attempt id) by job index. Files
/// are made writable to all: a re-run may be another node's slot user. (A job's `$$` is
/// its own PID namespace's; its host processes are found by its cgroup.)
fn marked_job(dir: &Path, body: &str) -> String {
    let d = dir.display();
    format!("umask 000; echo $YT_JOB_ID >> {d}/$YT_JOB_INDEX.start; {body}; echo $YT_JOB_ID >> {d}/$YT_JOB_INDEX.done")
}

/// Lines per index in `<index>.<suffix>` files.
fn marks(dir: &Path, suffix: &str) -> BTreeMap<u32, Vec<String>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(index) = name
            .strip_suffix(&format!(".{suffix}"))
            .and_then(|i| i.parse::<u32>().ok())
        {
            let text = std::fs::read_to_string(e.path()).unwrap();
            out.insert(index, text.lines().map(String::from).collect());
        }
    }
    out
}

fn running(lab: &Lab, op: &str) -> i64 {
    lab.operation(op)
        .ok()
        .and_then(|o| o["jobs"]["running"].as_i64())
        .unwrap_or(-1)
}

fn wait_running(lab: &Lab, op: &str, n: i64) {
    wait_until(Duration::from_secs(30), || {
        (running(lab, op) == n).then_some(())
    })
    .unwrap_or_else(|_| panic!("{op} never had {n} running jobs: {:?}", lab.operation(op)));
}

/// Every index 0..n completed exactly once and was started exactly `starts` times.
fn assert_each_ran_once(dir: &Path, n: u32) {
    let done = marks(dir, "done");
    let starts = marks(dir, "start");
    for i in 0..n {
        assert_eq!(
            done.get(&i).map(Vec::len),
            Some(1),
            "index {i} completed {:?}",
            done.get(&i)
        );
        assert_eq!(
            starts.get(&i).map(Vec::len),
            Some(1),
            "index {i} started {:?}",
            starts.get(&i)
        );
    }
}

#[test]
fn killed_scheduler_revives_and_every_job_keeps_running() {
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start(vec![node("4", "20"), node("4", "20"), node("4", "20")]).unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 50, cpu_limit: 0.2, memory_limit: 64M}}}}",
        marked_job(marks_dir.path(), "sleep 8")
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_running(&lab, &op, 50);
    let before = wait_until(Duration::from_secs(10), || {
        let m = marks(marks_dir.path(), "start");
        (m.len() == 50 && m.values().all(|v| v.len() == 1)).then_some(m)
    })
    .unwrap();

    lab.kill_scheduler(0, Signal::SIGKILL);
    lab.restart_scheduler(0).unwrap();
    let done = lab.wait_finished(&op, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["jobs"]["completed"], 50);
    assert_eq!(
        done["jobs"]["aborted"], 0,
        "no job was lost or killed: {done}"
    );
    assert_each_ran_once(marks_dir.path(), 50);
    assert_eq!(
        marks(marks_dir.path(), "start"),
        before,
        "same processes, started once"
    );
    let history: Vec<String> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["event"].as_str().unwrap().to_string())
        .collect();
    assert!(history.iter().any(|h| h.contains("revived")), "{history:?}");
    let log = lab.scheduler_log();
    assert!(log.contains("state revived from the store"), "{log}");
    // Nothing stored their starts: the nodes' reports brought all 50 back (logged when
    // the revival window, during which nothing starts, is over).
    wait_until(Duration::from_secs(30), || {
        lab.scheduler_log()
            .contains("adopted_jobs=50")
            .then_some(())
    })
    .unwrap_or_else(|_| panic!("{}", lab.scheduler_log()));
}

/// A scheduler that dies with heartbeats in flight to it never answers them, not even
/// with "no responders". Shortly before its fence each agent probes and hears that no
/// scheduler listens, so none fences its jobs over a mere restart (issue 42's CI run:
/// waiting out a 5 s request let the 3 s fence stop 38 jobs).
#[test]
fn a_scheduler_killed_with_heartbeats_in_flight_stops_no_job() {
    use nix::unistd::Pid;
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start(vec![node("4", "20"), node("4", "20"), node("4", "20")]).unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 12, cpu_limit: 0.2, memory_limit: 64M}}}}",
        marked_job(marks_dir.path(), "sleep 10")
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_running(&lab, &op, 12);
    // Stopped, it still holds its subscription: every agent's next heartbeat goes to it
    // and waits. Killed then, it takes those heartbeats with it.
    let pid = Pid::from_raw(lab.scheduler_pid(0).unwrap() as i32);
    nix::sys::signal::kill(pid, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    lab.kill_scheduler(0, Signal::SIGKILL);
    // Past the agents' 3 s fence, counted from their last answer, before any scheduler
    // is back to answer them.
    std::thread::sleep(Duration::from_secs(4));
    lab.restart_scheduler(0).unwrap();
    let done = lab.wait_finished(&op, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["jobs"]["aborted"], 0, "no job was stopped: {done}");
    assert_each_ran_once(marks_dir.path(), 12);
    for i in 0..3 {
        let log = lab.node_log(i);
        assert!(!log.contains("jobs are stopped"), "node {i} fenced: {log}");
    }
}

#[test]
fn lost_agent_jobs_run_elsewhere_and_nothing_stale_survives_its_return() {
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start(vec![node("2", "4"), node("2", "4"), node("2", "4")]).unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 4, cpu_limit: 1}}}}",
        marked_job(marks_dir.path(), "sleep 12")
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_running(&lab, &op, 4);
    wait_until(Duration::from_secs(10), || {
        (marks(marks_dir.path(), "start").len() == 4).then_some(())
    })
    .unwrap();
    let jobs = lab.jobs(&op).unwrap();
    let node_of = |i: usize| format!("node{i}");
    let busy: Vec<usize> = (0..3)
        .filter(|&i| jobs.iter().any(|j| j["node_id"] == node_of(i).as_str()))
        .collect();
    assert_eq!(busy.len(), 2, "{jobs:?}");
    let (stalled, killed) = (busy[0], busy[1]);
    let pids_on = |i: usize| -> Vec<i32> {
        jobs.iter()
            .filter(|j| j["node_id"] == node_of(i).as_str())
            .flat_map(|j| ytsched_tests::pids_in_cgroup_matching(j["id"].as_str().unwrap()))
            .collect()
    };
    let (stalled_pids, killed_pids) = (pids_on(stalled), pids_on(killed));

    // One agent stalls (its guardian stops its jobs at the fence deadline), one dies
    // (the kernel ends its jobs with it).
    let stalled_pid = nix::unistd::Pid::from_raw(lab.node_pid(stalled).unwrap() as i32);
    nix::sys::signal::kill(stalled_pid, Signal::SIGSTOP).unwrap();
    lab.kill_node(killed, Signal::SIGKILL);
    // After the 5 s node timeout the four jobs run again on the one free node and the
    // others as they free up; the stalled and dead nodes are offline.
    wait_until(Duration::from_secs(30), || {
        let n = lab.node_info(stalled)?;
        (n["state"] == "offline").then_some(())
    })
    .unwrap();
    // The stalled agent wakes up: it is told to abort the jobs given away.
    nix::sys::signal::kill(stalled_pid, Signal::SIGCONT).unwrap();
    wait_until(Duration::from_secs(20), || {
        stalled_pids.iter().all(|p| !is_alive(*p)).then_some(())
    })
    .expect("the returning node killed the jobs the scheduler gave away");
    // Stopped by its guardian while the agent stalled (issue 38: it heard nothing past
    // the fence deadline), told by the scheduler, or, having heard nothing for nearly
    // the node timeout, by the agent on its own (agents fence themselves).
    let log = lab.node_log(stalled);
    assert!(
        log.contains("past its fence deadline")
            || log.contains("aborting job")
            || log.contains("this node's jobs are stopped"),
        "{log}"
    );
    // The dead agent comes back: it removes its stale jobs and runs nothing old.
    lab.restart_node(killed).unwrap();
    wait_until(Duration::from_secs(20), || {
        killed_pids.iter().all(|p| !is_alive(*p)).then_some(())
    })
    .expect("the restarted agent removed its stale jobs");

    let done = lab.wait_finished(&op, Duration::from_secs(90)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let jobs = lab.jobs(&op).unwrap();
    let lost: Vec<&serde_json::Value> = jobs
        .iter()
        .filter(|j| j["abort_reason"] == "node_lost")
        .collect();
    assert_eq!(lost.len(), 4, "the four first attempts were lost: {jobs:?}");
    assert!(lost
        .iter()
        .all(|j| j["node_id"] == node_of(stalled).as_str()
            || j["node_id"] == node_of(killed).as_str()));
    let completions = marks(marks_dir.path(), "done");
    for i in 0..4 {
        assert_eq!(completions[&i].len(), 1, "index {i}: {:?}", completions[&i]);
    }
}

#[test]
fn a_nats_outage_loses_nothing() {
    let marks_dir = ytsched_tests::job_writable_dir();
    // A node timeout longer than the outage: agents stop their jobs only when silent for
    // nearly that long (agents fence themselves), which a 10 s outage is not.
    let mut lab = Lab::start_with(
        &["--node-heartbeat-timeout", "30s"],
        vec![node("2", "4"), node("2", "4"), node("2", "4")],
    )
    .unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 12, cpu_limit: 1}}}}",
        marked_job(marks_dir.path(), "sleep 4")
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_running(&lab, &op, 6);
    lab.stop_nats();
    std::thread::sleep(Duration::from_secs(10));
    lab.start_nats().unwrap();
    let done = lab.wait_finished(&op, Duration::from_secs(90)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["jobs"]["completed"], 12);
    // A start whose reply the outage swallowed shows as an aborted attempt that never
    // ran; no index ran twice or went missing.
    assert_each_ran_once(marks_dir.path(), 12);
    assert!(lab.scheduler_log().contains("NATS connection is back"));
}

#[test]
fn standby_takes_over_when_the_leader_dies() {
    let mut lab = Lab::start(vec![node("2", "4"), node("2", "4")]).unwrap();
    let standby = lab.start_scheduler().unwrap();
    lab.wait_standby(standby).unwrap();

    // A synchronous run-vanilla started before the leader dies.
    let follower = std::process::Command::new(binary("ytsched"))
        .args(["--nats", &lab.nats_url, "--subject-prefix", &lab.prefix])
        .arg("--creds")
        .arg(lab.creds("admin"))
        .args(["run-vanilla", "--command", "sleep 3", "--job-count", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), || {
        let ops: Vec<serde_json::Value> = lab.json(&["list-operations"]).ok()?;
        (ops.first()?["jobs"]["running"] == 4).then_some(())
    })
    .unwrap();
    let killed = Instant::now();
    lab.kill_scheduler(0, Signal::SIGKILL);
    wait_until(Duration::from_secs(20), || {
        lab.json::<Vec<serde_json::Value>>(&["list-nodes"]).ok()
    })
    .expect("the standby serves");
    println!(
        "failover: the standby answered {:?} after the leader died",
        killed.elapsed()
    );
    let out = follower.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "run-vanilla across the failover: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = lab.scheduler_log_of(standby);
    assert!(log.contains("leader lease acquired"), "{log}");
    assert!(log.contains("state revived from the store"), "{log}");
}

#[test]
fn crashing_the_scheduler_at_random_points_never_duplicates_or_loses_a_job() {
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start_with(
        &["--lease-ttl", "1s"],
        vec![node("2", "4"), node("2", "4"), node("2", "4")],
    )
    .unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 60, cpu_limit: 1}}}}",
        marked_job(marks_dir.path(), "sleep 0.5")
    );
    let op = lab.submit_spec(&spec).unwrap();
    // A small deterministic generator: the points differ per iteration, not per run.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let pause = 100 + (seed >> 33) % 500;
        std::thread::sleep(Duration::from_millis(pause));
        lab.kill_scheduler(0, Signal::SIGKILL);
        lab.restart_scheduler(0).unwrap();
    }
    let done = lab.wait_finished(&op, Duration::from_secs(120)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["jobs"]["completed"], 60);
    let completions = marks(marks_dir.path(), "done");
    for i in 0..60 {
        assert_eq!(
            completions.get(&i).map(Vec::len),
            Some(1),
            "index {i}: {:?}",
            completions.get(&i)
        );
    }
    // A start stored but never delivered is run again by the revived scheduler before
    // any process exists, so no index ever starts twice either.
    assert_each_ran_once(marks_dir.path(), 60);
}

#[test]
fn a_deposed_leader_cannot_write_and_steps_down() {
    let mut lab = Lab::start(vec![]).unwrap();
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "before",
        "--pool-tree",
        "default",
    ]);
    // Another scheduler claims the state's epoch, as a new leader does before it reads
    // the state (this one still believes it leads: its lease has not run out).
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(lab.client_as("scheduler").await.unwrap());
        let state = js
            .get_key_value(format!("{}_state", lab.prefix))
            .await
            .unwrap();
        // Read again on a race with the leader's own epoch steps, as a new leader's
        // claim does.
        loop {
            let epoch = state.entry("epoch").await.unwrap().expect("an epoch");
            if state
                .update("epoch", "usurper".into(), epoch.revision)
                .await
                .is_ok()
            {
                break;
            }
        }
    });
    // Its next write is refused by the store: the change is never acknowledged, and
    // the scheduler stops.
    let out = lab.ytsched(&[
        "create",
        "scheduler_pool",
        "--name",
        "after",
        "--pool-tree",
        "default",
    ]);
    assert!(!out.status.success(), "a fenced write is not acknowledged");
    wait_until(Duration::from_secs(15), || {
        (!lab.scheduler_running(0)).then_some(())
    })
    .expect("the deposed scheduler steps down");
    let log = lab.scheduler_log();
    assert!(log.contains("deposed"), "{log}");
    // What it could not write is not in the store; what it wrote before is.
    lab.restart_scheduler(0).unwrap();
    let exists = |pool: &str| -> bool {
        wait_until(Duration::from_secs(20), || {
            lab.json::<bool>(&["exists", &format!("//sys/pool_trees/default/{pool}")])
                .ok()
        })
        .unwrap()
    };
    assert!(exists("before"));
    assert!(!exists("after"));
}

#[test]
fn a_stale_key_is_overwritten_and_never_taken_for_another_leader() {
    let mut lab = Lab::start(vec![]).unwrap();
    // The scheduler stores an operation (pending: no nodes), then its key is changed
    // behind its back, as a crash, an older version or a bug could leave it; the epoch
    // is untouched, so no other scheduler leads.
    let op = lab
        .submit_spec(
            "tasks: {t: {command: 'true', job_count: 1, cpu_limit: 0.1, memory_limit: 64M}}",
        )
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = format!("op.{op}");
    let state = rt.block_on(async {
        let js = async_nats::jetstream::new(lab.client_as("scheduler").await.unwrap());
        let state = js
            .get_key_value(format!("{}_state", lab.prefix))
            .await
            .unwrap();
        state.put(&key, "stale".into()).await.unwrap();
        state
    });
    // The next write of that key finds a revision it did not write: an alert, an
    // overwrite, and the scheduler goes on leading.
    lab.ok(&["abort-operation", &op]);
    assert_eq!(lab.operation(&op).unwrap()["state"], "aborted");
    let stored = rt.block_on(async { state.get(&key).await.unwrap().unwrap() });
    assert_ne!(&stored[..], b"stale", "the stale record was overwritten");
    assert!(lab.scheduler_running(0), "{}", lab.scheduler_log());
    let log = lab.scheduler_log();
    assert!(log.contains("it is stale and is overwritten"), "{log}");
    assert!(!log.contains("deposed"), "{log}");
    // What it wrote is what a restarted scheduler reads.
    lab.kill_scheduler(0, nix::sys::signal::Signal::SIGKILL);
    lab.restart_scheduler(0).unwrap();
    let revived = wait_until(Duration::from_secs(20), || lab.operation(&op).ok()).unwrap();
    assert_eq!(revived["state"], "aborted", "{revived}");
}

#[test]
fn losing_one_nats_server_of_three_loses_nothing_and_it_rejoins() {
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start_cluster(
        &["--kv-replicas", "3"],
        vec![node("4", "20"), node("4", "20")],
    )
    .unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 20, cpu_limit: 0.2, memory_limit: 64M}}}}",
        marked_job(marks_dir.path(), "sleep 4")
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_running(&lab, &op, 20);

    // A server is lost mid-operation: clients move to the other two, the KV buckets
    // (3 replicas) keep their quorum.
    lab.kill_nats_server(0);
    let done = lab.wait_finished(&op, Duration::from_secs(90)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["jobs"]["completed"], 20, "{done}");
    assert_each_ran_once(marks_dir.path(), 20);
    // New work still runs on the two that are left.
    let second = lab
        .submit_spec(
            "tasks: {t: {command: 'true', job_count: 4, cpu_limit: 0.1, memory_limit: 64M}}",
        )
        .unwrap();
    let d = lab.wait_finished(&second, Duration::from_secs(60)).unwrap();
    assert_eq!(d["state"], "completed", "{d}");

    // The lost server comes back and rejoins (both routes, JetStream healthy).
    lab.restart_nats_server(0).unwrap();
    // Nothing stored was lost, and the rejoined server holds it: with another server
    // down, a restarted scheduler revives both operations from the two that are left.
    lab.kill_nats_server(1);
    lab.kill_scheduler(0, Signal::SIGKILL);
    // The two left elect their leaders again (seconds, more on a loaded machine).
    lab.wait_jetstream_healthy(0).unwrap();
    lab.wait_jetstream_healthy(2).unwrap();
    lab.restart_scheduler(0).unwrap();
    for (id, jobs) in [(&op, 20), (&second, 4)] {
        let info = wait_until(Duration::from_secs(120), || lab.operation(id).ok())
            .unwrap_or_else(|e| panic!("{e}; scheduler log:\n{}", lab.scheduler_log()));
        assert_eq!(info["state"], "completed", "{info}");
        assert_eq!(info["jobs"]["completed"], jobs, "{info}");
    }
    assert_each_ran_once(marks_dir.path(), 20);
}

/// Issue 26 point 3: while the store is behind (here: JetStream lost its quorum, so
/// nothing stores), new operations are answered "busy, retry" instead of queued in
/// memory; once the store catches up they are taken again.
#[test]
fn submissions_are_answered_busy_while_the_store_is_behind() {
    let mut lab = Lab::start_cluster(
        &["--kv-replicas", "3", "--max-write-backlog", "0"],
        vec![node("4", "20")],
    )
    .unwrap();
    let quick = "tasks: {t: {command: 'true', job_count: 1, cpu_limit: 0.1, memory_limit: 64M}}";
    let first = lab.submit_spec(quick).unwrap();
    lab.wait_finished(&first, Duration::from_secs(60)).unwrap();

    // Two of three servers gone: no write can be stored, so the first submission's
    // writes stay queued (its reply waits for them) and the store falls behind.
    lab.kill_nats_server(1);
    lab.kill_nats_server(2);
    let refused = std::thread::scope(|s| {
        s.spawn(|| lab.submit_spec(quick));
        wait_until(Duration::from_secs(60), || {
            std::thread::sleep(Duration::from_millis(500));
            match lab.submit_spec(quick) {
                Err(e) if e.to_string().contains("writes behind") => Some(e.to_string()),
                _ => None,
            }
        })
    })
    .unwrap_or_else(|e| panic!("{e}; scheduler log:\n{}", lab.scheduler_log()));
    assert!(refused.contains("busy"), "{refused}");

    // The servers come back, the queued writes are stored, and new work is taken again.
    lab.restart_nats_servers(&[1, 2]).unwrap();
    let again = wait_until(Duration::from_secs(120), || lab.submit_spec(quick).ok())
        .unwrap_or_else(|e| panic!("{e}; scheduler log:\n{}", lab.scheduler_log()));
    let done = lab.wait_finished(&again, Duration::from_secs(120)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let log = lab.scheduler_log();
    assert!(
        log.contains("store_behind"),
        "the refusal is logged with its reason"
    );
    // Heartbeats in the outage started nothing (each start brings a result to store),
    // and starts came back with the store.
    assert!(
        log.contains("no job starts until it catches up") && log.contains("jobs start again"),
        "{log}"
    );
}

/// A burst of one-job operations (what scripts send) while the scheduler is killed
/// twice in the middle of placing it: every operation completes, and every job ran
/// exactly once. Nothing stores a start, so each restart relies on the nodes' reports
/// to adopt what runs, and on the reserved attempt numbers never to reuse one.
#[test]
fn killing_the_scheduler_during_a_burst_of_one_job_operations_runs_each_job_once() {
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start_with(
        &["--lease-ttl", "1s"],
        vec![node("4", "20"), node("4", "20"), node("4", "20")],
    )
    .unwrap();
    // Two standbys, one for each kill.
    lab.start_scheduler().unwrap();
    lab.start_scheduler().unwrap();
    let d = marks_dir.path().display();
    let spec = format!(
        "tasks: {{t: {{command: 'umask 000; echo $YT_JOB_ID >> {d}/$YT_OPERATION_ID.start; sleep 0.4; echo $YT_JOB_ID >> {d}/$YT_OPERATION_ID.done', job_count: 1, cpu_limit: 0.5, memory_limit: 64M}}}}"
    );
    const SUBMITTERS: usize = 4;
    const EACH: usize = 40;
    let accepted = std::sync::atomic::AtomicUsize::new(0);
    let ids: Vec<String> = std::thread::scope(|s| {
        let submitters: Vec<_> = (0..SUBMITTERS)
            .map(|_| {
                s.spawn(|| {
                    (0..EACH)
                        .map(|_| {
                            // The CLI retries an unanswered submission under its token;
                            // a full pool (50 operations) is waited out as a script would.
                            let id = wait_until(Duration::from_secs(120), || {
                                match lab.submit_spec(&spec) {
                                    Ok(id) => Some(id),
                                    Err(e) if e.to_string().contains("max_operation_count") => {
                                        std::thread::sleep(Duration::from_millis(200));
                                        None
                                    }
                                    Err(e) => panic!("{e}"),
                                }
                            })
                            .expect("submitted");
                            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            id
                        })
                        .collect::<Vec<String>>()
                })
            })
            .collect();
        for at in [40, 100] {
            wait_until(Duration::from_secs(120), || {
                (accepted.load(std::sync::atomic::Ordering::SeqCst) >= at).then_some(())
            })
            .unwrap();
            // The leader dies mid-burst; a standby takes over from the store.
            let leader = wait_until(Duration::from_secs(30), || {
                (0..3)
                    .filter(|&i| lab.scheduler_log_of(i).contains("leader lease acquired"))
                    .find_map(|i| lab.scheduler_pid(i).filter(|&p| is_alive(p as i32)))
            })
            .expect("a leader runs");
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(leader as i32), Signal::SIGKILL)
                .unwrap();
        }
        submitters
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        SUBMITTERS * EACH,
        "one operation per submission"
    );
    for id in &ids {
        let done = lab.wait_finished(id, Duration::from_secs(180)).unwrap();
        assert_eq!(done["state"], "completed", "{done}");
    }
    let lines = |suffix: &str| -> BTreeMap<String, usize> {
        std::fs::read_dir(marks_dir.path())
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let op = name.strip_suffix(&format!(".{suffix}"))?.to_string();
                let text = std::fs::read_to_string(e.path()).ok()?;
                Some((op, text.lines().count()))
            })
            .collect()
    };
    let (starts, dones) = (lines("start"), lines("done"));
    for id in &ids {
        assert_eq!(
            starts.get(id),
            Some(&1),
            "{id} started {:?} times",
            starts.get(id)
        );
        assert_eq!(
            dones.get(id),
            Some(&1),
            "{id} completed {:?} times",
            dones.get(id)
        );
    }
    assert_eq!(
        starts.len(),
        ids.len(),
        "no job of an unknown operation ran"
    );
    let revived = (0..3)
        .filter(|&i| lab.scheduler_log_of(i).contains("jobs start again"))
        .count();
    assert_eq!(revived, 2, "both standbys revived unfinished operations");
}

/// A leader paused (SIGSTOP) for longer than its lease while its jobs run wakes with its
/// subscriptions open and its memory as it was, while a standby has taken over: it must
/// start no job from that memory (its successor may start the same ones: issue 42's
/// campaign saw it) and must stop. Every job
/// runs once, and the operation completes under the successor.
#[test]
fn a_leader_woken_from_a_pause_longer_than_its_lease_stops_and_every_job_runs_once() {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    let marks_dir = ytsched_tests::job_writable_dir();
    let mut lab = Lab::start_with(
        // A node timeout well past the pause: no agent fences its jobs meanwhile.
        &["--lease-ttl", "2s", "--node-heartbeat-timeout", "30s"],
        vec![node("2", "4"), node("2", "4")],
    )
    .unwrap();
    let standby = lab.start_scheduler().unwrap();
    lab.wait_standby(standby).unwrap();
    let spec = format!(
        "tasks: {{t: {{command: '{}', job_count: 12, cpu_limit: 1}}}}",
        marked_job(marks_dir.path(), "sleep 1")
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_until(Duration::from_secs(20), || {
        (!marks(marks_dir.path(), "start").is_empty()).then_some(())
    })
    .expect("jobs start");
    let leader = Pid::from_raw(lab.scheduler_pid(0).unwrap() as i32);
    kill(leader, Signal::SIGSTOP).unwrap();
    wait_until(Duration::from_secs(30), || {
        lab.scheduler_log_of(standby)
            .contains("leader lease acquired")
            .then_some(())
    })
    .expect("the standby takes over");
    std::thread::sleep(Duration::from_secs(2));
    kill(leader, Signal::SIGCONT).unwrap();
    wait_until(Duration::from_secs(20), || {
        (!lab.scheduler_running(0)).then_some(())
    })
    .expect("the woken leader stops");
    let done = lab.wait_finished(&op, Duration::from_secs(120)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    assert_each_ran_once(marks_dir.path(), 12);
    // It stops on whichever it learns first: its lease lost, or its next write round
    // refused because the successor moved the epoch on (CI saw both).
    let log = lab.scheduler_log();
    assert!(
        log.contains("lost the leader lease") || log.contains("this one is deposed"),
        "{log}"
    );
    println!(
        "woken leader held its starts before it stopped: {}",
        log.contains("no job starts until it is")
    );
}
