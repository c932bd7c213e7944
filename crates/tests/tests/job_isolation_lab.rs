//! Isolation between jobs of different users on one host (SPEC 5.11, issue 24 point 3),
//! on real agents as root: each job sees only its own processes, its `/tmp` is its own
//! and gone for the next job of its slot, and two agents on one host never share slot
//! uids. Without root (no slot users, no namespaces) these tests say so and skip.

use std::process::Command;
use std::time::Duration;
use ytsched_tests::{binary, is_root, Lab, NodeOpts};

/// Runs `command` as a one-job operation to its end and returns its stdout.
fn stdout_of(lab: &Lab, command: &str) -> String {
    let id = lab
        .submit_spec(&format!(
            "tasks: {{t: {{command: {command:?}, job_count: 1, cpu_limit: 0.5, memory_limit: 128M}}}}"
        ))
        .unwrap();
    let done = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let jobs = lab.jobs(&id).unwrap();
    let out = lab.ytsched(&["get-job-stdout", &id, jobs[0]["id"].as_str().unwrap()]);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A node of one slot (each job after the first runs as the same slot user as the one
/// before), its jobs in their own namespaces or the agent refuses to start.
fn one_slot_lab() -> Lab {
    Lab::start(vec![NodeOpts::args(&[
        "--cpu",
        "2",
        "--memory",
        "2G",
        "--user-slots",
        "1",
        "--job-namespaces",
        "on",
    ])])
    .unwrap()
}

#[test]
fn a_job_sees_only_its_own_processes_and_its_tmp_is_its_own() {
    if !is_root() {
        eprintln!("skipped: jobs get their own namespaces only under a root agent");
        return;
    }
    // One slot: the second job runs as the same slot user as the first.
    let lab = one_slot_lab();
    let marker = format!("leak-{}", lab.prefix);
    let seen = stdout_of(
        &lab,
        &format!(
            "echo secret > /tmp/{marker}; echo secret > /var/tmp/{marker}; echo secret > /dev/shm/{marker}; sleep 60 & ls /proc | grep -cE '^[0-9]+$'; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
        ),
    );
    let mut lines = seen.lines();
    let count: usize = lines.next().unwrap().parse().unwrap();
    let cmdlines = lines.collect::<Vec<_>>().join(" ");
    // Its shell, the background sleep, ls, grep (and whatever the shell forked).
    assert!(count <= 6, "a job saw {count} processes: {cmdlines}");
    assert!(
        !cmdlines.contains("ytsched-node") && !cmdlines.contains("creds"),
        "a job saw the agent: {cmdlines}"
    );
    // The host's /tmp never got the file, nor did the next job of that slot.
    for dir in ["/tmp", "/var/tmp", "/dev/shm"] {
        assert!(
            !std::path::Path::new(&format!("{dir}/{marker}")).exists(),
            "{dir}/{marker} reached the host"
        );
    }
    let next = stdout_of(
        &lab,
        &format!(
            "for d in /tmp /var/tmp /dev/shm; do test -e $d/{marker} && echo found-in-$d; done; echo checked"
        ),
    );
    assert_eq!(next, "checked", "the next job of the slot found: {next}");
}

#[test]
fn two_agents_on_one_host_never_share_slot_uids() {
    if !is_root() {
        eprintln!("skipped: slot users need a root agent");
        return;
    }
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "1", "--memory", "1G"])]).unwrap();
    lab.auth(&["add-node", "intruder"]).unwrap();
    let work = tempfile::tempdir().unwrap();
    // A second agent asking for uids that overlap node0's is refused, naming node0.
    let mut agent = Command::new(binary("ytsched-node"));
    agent
        .args(["--nats", &lab.nats_url, "--subject-prefix", &lab.prefix])
        .args(["--node-id", "intruder"])
        .arg("--creds")
        .arg(lab.creds("intruder"))
        .arg("--work-dir")
        .arg(work.path())
        .args(["--cgroup-root", &lab.cgroup_root])
        .args(["--slot-uid-base", &lab.slot_uid_base.to_string()])
        .args(["--cpu", "1", "--memory", "1G"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = agent.spawn().unwrap();
    // It must refuse at once; should it start instead, it is stopped here.
    let exited =
        ytsched_tests::wait_until(Duration::from_secs(20), || child.try_wait().ok().flatten());
    if exited.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second agent took node0's uids");
    assert!(
        err.contains("held by another agent on this host (node node0"),
        "{err}"
    );
    // node0 runs on unharmed.
    assert_eq!(lab.node_info(0).unwrap()["state"], "online");
}

/// A job cannot fill the node's disk (issue 24 point 3): past its `disk_request` its
/// sandbox is measured over the limit, the job is stopped and fails as "disk limit
/// exceeded"; a job within its request, and one under the node's default, complete.
/// Needs no root: the agent measures what the sandbox takes on disk.
#[test]
fn a_job_past_its_disk_space_fails_as_disk_limit_exceeded() {
    let lab = Lab::start(vec![NodeOpts::args(&[
        "--cpu",
        "2",
        "--memory",
        "2G",
        "--job-disk-space",
        "32M",
    ])])
    .unwrap();
    let writer = |mb: u32, disk: Option<&str>| {
        let request = disk
            .map(|d| format!(", disk_request: {{disk_space: {d}}}"))
            .unwrap_or_default();
        lab.submit_spec(&format!(
            "max_failed_job_count: 1\ntasks: {{t: {{command: 'head -c {mb}M /dev/zero > big && sleep 30', cpu_limit: 0.5, memory_limit: 128M{request}}}}}"
        ))
        .unwrap()
    };
    let hog = writer(64, Some("8M"));
    let default_hog = writer(64, None);
    let done = lab.wait_finished(&hog, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "failed", "{done}");
    let jobs = lab.jobs(&hog).unwrap();
    let error = jobs[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("disk limit exceeded") && error.contains("8388608"),
        "{jobs:?}"
    );
    let done = lab
        .wait_finished(&default_hog, Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        done["state"], "failed",
        "the node's default holds too: {done}"
    );
    // Within its request a job runs to its end.
    let fits = lab
        .submit_spec(
            "tasks: {t: {command: 'head -c 4M /dev/zero > small && sleep 2', cpu_limit: 0.5, memory_limit: 128M, disk_request: {disk_space: 64M}}}",
        )
        .unwrap();
    let done = lab.wait_finished(&fits, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    // A request too small to hold the output files is refused at submission.
    let e = lab
        .submit_spec("tasks: {t: {command: 'true', disk_request: {disk_space: 1K}}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("disk_request.disk_space"), "{e}");
}

/// Issue 38 point 6: the host's filesystem is read-only to a job but its sandbox,
/// private directories and the node's `--job-writable-path`; its SysV IPC objects are
/// its own, so the slot's next job finds neither files in world-writable host
/// directories nor shared memory left for it.
#[test]
fn a_job_writes_only_its_own_places_and_leaves_no_ipc_to_the_next() {
    if !is_root() {
        eprintln!("skipped: needs a root agent");
        return;
    }
    let lab = one_slot_lab();
    if lab.node_log(0).contains("no mount_setattr") {
        eprintln!("skipped: this kernel has no mount_setattr (Linux 5.12)");
        return;
    }
    let shared = ytsched_tests::job_writable_dir();
    let marker = format!("leak-{}", lab.prefix);
    let first = stdout_of(
        &lab,
        &format!(
            "for d in /run/lock /var/lock /var/crash /etc; do touch $d/{marker} 2>/dev/null && echo wrote $d; done; \
             echo x > work-file && echo sandbox ok; echo x > /tmp/x && echo tmp ok; \
             echo x > {}/from-job && echo site ok; ipcmk -M 4096 >/dev/null && ipcs -m | grep -c '^0x'",
            shared.path().display()
        ),
    );
    assert!(!first.contains("wrote"), "a job wrote to the host: {first}");
    for ok in ["sandbox ok", "tmp ok", "site ok"] {
        assert!(first.contains(ok), "{ok} missing: {first}");
    }
    assert!(first.ends_with('1'), "its own segment: {first}");
    for d in ["/run/lock", "/var/lock", "/var/crash", "/etc"] {
        assert!(!std::path::Path::new(d).join(&marker).exists(), "{d}");
    }
    assert!(shared.path().join("from-job").exists());
    // The slot's next job (the same slot user) sees no segment of the first.
    let next = stdout_of(&lab, "ipcs -m | grep -c '^0x' || true");
    assert_eq!(next, "0", "the next job found shared memory: {next}");
}

/// Issue 38 point 9: two agents on one host share one pids budget: the cgroup root they
/// share carries it (the kernel counts all their jobs' processes together), not each
/// agent a budget of its own.
#[test]
fn agents_on_one_host_share_one_pids_budget() {
    if !is_root() {
        eprintln!("skipped: cgroups need a root agent");
        return;
    }
    let node = || NodeOpts::args(&["--cpu", "1", "--memory", "1G", "--node-pids-limit", "3000"]);
    let lab = Lab::start(vec![node(), node()]).unwrap();
    let root = lab.cgroup_root.trim_matches('/');
    let shared = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .map(|m| std::path::Path::new(m).join(root).join("pids.max"))
        .find(|p| p.exists());
    let Some(shared) = shared else {
        eprintln!("skipped: no pids controller here");
        return;
    };
    assert_eq!(std::fs::read_to_string(&shared).unwrap().trim(), "3000");
    for n in 0..2 {
        assert!(
            lab.node_log(n).contains("host-wide pids limit set"),
            "{}",
            lab.node_log(n)
        );
    }
}

/// Issue 38 point 5: a sandbox is a filesystem of its disk space: an open, unlinked file
/// counts (the walk never saw it), and a write past the limit fails at once, so the job
/// fails as "disk limit exceeded" having written no more than its limit.
#[test]
fn an_unlinked_file_cannot_take_more_than_the_disk_space() {
    if !is_root() {
        eprintln!("skipped: filesystem images need a root agent");
        return;
    }
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])]).unwrap();
    if lab
        .node_log(0)
        .contains("no loop-mounted filesystem images")
    {
        eprintln!("skipped: no loop devices here");
        return;
    }
    let id = lab
        .submit_spec(
            "max_failed_job_count: 0\ntasks: {t: {command: 'exec 3>hidden; rm hidden; head -c 200M /dev/zero >&3; sleep 30', cpu_limit: 0.5, memory_limit: 128M, disk_request: {disk_space: 10M}}}",
        )
        .unwrap();
    let t = std::time::Instant::now();
    let done = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "failed", "{done}");
    // Its write past the limit failed at once, and the full sandbox (the unlinked file
    // still held open, which no walk sees) stopped it within a second or so, not after
    // its 30 s sleep.
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let jobs = lab.jobs(&id).unwrap();
    let error = jobs[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("disk limit exceeded") && error.contains("10485760"),
        "{jobs:?}"
    );
    let stderr = lab.ytsched(&["get-job-stderr", &id, jobs[0]["id"].as_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&stderr.stdout).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&stderr.stdout)
    );
}
