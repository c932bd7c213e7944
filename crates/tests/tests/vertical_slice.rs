//! Issue 2 acceptance: real nats-server, scheduler, agents and job processes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use ytsched_tests::*;

/// Prints the job's cgroup path and its cpu quota / memory limit from inside the job,
/// on cgroup v1 or v2, whichever the host runs.
const SHOW_LIMITS: &str = r#"
cat /proc/self/cgroup
mem=$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
if [ -n "$mem" ]; then
  echo "memory_limit=$(cat /sys/fs/cgroup/memory$mem/memory.limit_in_bytes)"
  cpu=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/{print $3}' /proc/self/cgroup)
  for d in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
    if [ -f "$d$cpu/cpu.cfs_quota_us" ]; then echo "cpu_quota=$(cat $d$cpu/cpu.cfs_quota_us)/$(cat $d$cpu/cpu.cfs_period_us)"; fi
  done
else
  cg=$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
  echo "memory_limit=$(cat /sys/fs/cgroup$cg/memory.max)"
  echo "cpu_quota=$(cut -d' ' -f1 /sys/fs/cgroup$cg/cpu.max)/$(cut -d' ' -f2 /sys/fs/cgroup$cg/cpu.max)"
fi
"#;

fn two_cpu_node() -> NodeOpts {
    NodeOpts::args(&["--cpu", "2", "--memory", "4G", "--user-slots", "4"])
}

#[test]
fn two_agent_lab_runs_six_jobs_each_in_its_own_limited_cgroup() {
    let lab = Lab::start(vec![two_cpu_node(), two_cpu_node()]).unwrap();
    let command = format!("echo index=$YT_JOB_INDEX; sleep 1; cat; echo; {SHOW_LIMITS}");
    let spec = serde_json::json!({
        "tasks": {"main": {
            "command": command, "job_count": 6, "cpu_limit": 0.5, "memory_limit": "256M",
            "stdin": "stdin-text-42",
        }}
    });
    let id = lab.submit_spec(&spec.to_string()).unwrap();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "completed", "{op}");
    assert_eq!(op["jobs"]["completed"], 6);

    let jobs = lab.jobs(&id).unwrap();
    let nodes: BTreeSet<String> = jobs
        .iter()
        .map(|j| j["node_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(nodes.len(), 2, "both agents ran jobs: {nodes:?}");
    let mut indices = BTreeSet::new();
    for j in &jobs {
        let job_id = j["id"].as_str().unwrap();
        let out = lab.ytsched(&["get-job-stdout", &id, job_id]);
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let index = j["job_index"].as_u64().unwrap();
        assert!(stdout.contains(&format!("index={index}\n")), "{stdout}");
        assert!(stdout.contains("stdin-text-42"), "{stdout}");
        indices.insert(index);
        if is_root() {
            assert!(
                stdout.contains(&format!("/{}/", lab.cgroup_root)),
                "job ran in the lab's cgroup: {stdout}"
            );
            assert!(stdout.contains(job_id), "the job's own cgroup: {stdout}");
            assert!(
                stdout.contains(&format!("memory_limit={}\n", 256 << 20)),
                "{stdout}"
            );
            assert!(stdout.contains("cpu_quota=50000/100000"), "{stdout}");
            let stats = &j["statistics"];
            assert!(stats["wall_time_ms"].as_u64().unwrap() >= 1000, "{stats}");
            assert!(stats["peak_memory_bytes"].as_u64().unwrap() > 0, "{stats}");
            assert!(stats["user_cpu_seconds"].as_f64().is_some(), "{stats}");
            assert_eq!(stats["exit_code"], 0);
        }
    }
    assert_eq!(indices, (0..6).collect::<BTreeSet<u64>>());
    // Sandboxes go once results are acknowledged.
    wait_until(Duration::from_secs(5), || {
        let left: usize = (0..2)
            .map(|i| {
                std::fs::read_dir(lab.node_work_dir(i).join("sandboxes"))
                    .map(|d| d.count())
                    .unwrap_or(0)
            })
            .sum();
        (left == 0).then_some(())
    })
    .expect("sandbox directories removed after acknowledgement");
}

#[test]
fn memory_hog_fails_with_memory_limit_exceeded_and_fails_the_operation() {
    if !is_root() {
        eprintln!("skipped: memory limits need cgroups (root)");
        return;
    }
    let lab = Lab::start(vec![two_cpu_node()]).unwrap();
    let spec = r#"
max_failed_job_count: 1
tasks:
  hog:
    command: "head -c 400M /dev/zero | tail"
    memory_limit: 64M
"#;
    let id = lab.submit_spec(spec).unwrap();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "failed", "{op}");
    let error = op["error"].as_str().unwrap();
    assert!(error.contains("memory limit exceeded"), "{error}");
    assert!(error.contains("max_failed_job_count"), "{error}");
    let jobs = lab.jobs(&id).unwrap();
    assert_eq!(
        jobs.len(),
        2,
        "tried once, retried once, then the operation failed"
    );
    for j in jobs {
        assert_eq!(j["state"], "failed");
        assert_eq!(j["error"], "memory limit exceeded");
    }
    let out = lab.ytsched(&["get-operation", &id]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("memory limit exceeded"));
}

#[test]
fn abort_kills_every_process_of_a_double_forking_job_and_removes_its_cgroup() {
    let lab = Lab::start(vec![two_cpu_node()]).unwrap();
    // Unique sleep durations mark this test's processes.
    let marker = format!("sleep 91{}", std::process::id());
    let command = format!("({marker}1 & ) ; (setsid {marker}2 & ) ; {marker}3");
    let spec = serde_json::json!({"tasks": {"t": {"command": command, "cpu_limit": 0.5}}});
    let id = lab.submit_spec(&spec.to_string()).unwrap();
    let job_id = wait_until(Duration::from_secs(20), || {
        let jobs = lab.jobs(&id).ok()?;
        let j = jobs.first()?;
        (j["state"] == "running" && pids_with_cmdline(&marker).len() >= 3)
            .then(|| j["id"].as_str().unwrap().to_string())
    })
    .unwrap();
    if is_root() {
        wait_until(Duration::from_secs(5), || {
            (pids_in_cgroup_matching(&job_id).len() >= 3).then_some(())
        })
        .expect("the job's three sleeps run in its cgroup");
        assert!(!lab.cgroup_dirs_of(&job_id).is_empty());
    }

    let out = lab.ytsched(&["abort-operation", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let aborted_at = Instant::now();
    // kill grace (1 s) + 1 s
    wait_until(Duration::from_secs(2), || {
        let gone = pids_with_cmdline(&marker).is_empty()
            && (!is_root()
                || (pids_in_cgroup_matching(&job_id).is_empty()
                    && lab.cgroup_dirs_of(&job_id).is_empty()));
        gone.then_some(())
    })
    .unwrap_or_else(|_| {
        panic!(
            "job processes or cgroup remain {:?} after abort",
            aborted_at.elapsed()
        )
    });

    let op = lab.operation(&id).unwrap();
    assert_eq!(op["state"], "aborted");
    let jobs = lab.jobs(&id).unwrap();
    assert_eq!(jobs[0]["state"], "aborted");
    assert_eq!(jobs[0]["abort_reason"], "operation_aborted");
}

#[test]
fn job_larger_than_every_node_fails_the_operation_naming_cpu() {
    let lab = Lab::start(vec![two_cpu_node()]).unwrap();
    let out = lab.ytsched(&["run-vanilla", "--command", "true", "--cpu-limit", "64"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("failed") && stderr.contains("cpu = 64"),
        "{stderr}"
    );
}

#[test]
fn bad_specs_are_refused_naming_the_field() {
    let lab = Lab::start(vec![]).unwrap();
    let cases = [
        ("tasks: {t: {command: x, colour: red}}", "colour"),
        (
            "tasks: {t: {command: x, cpu_limit: -1}}",
            "tasks.t.cpu_limit",
        ),
        ("tasks: {t: {command: ''}}", "tasks.t.command"),
        (
            "tasks: {t: {command: x, job_count: 0}}",
            "tasks.t.job_count",
        ),
        ("tasks: {t: {command: x, memory_limit: lots}}", "lots"),
    ];
    for (i, (spec, field)) in cases.iter().enumerate() {
        let path = lab.dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(&path, spec).unwrap();
        let out = lab.ytsched(&["run-vanilla", "--spec", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{spec} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(field), "{spec}: {stderr}");
    }
    let out = lab.ytsched(&["run-vanilla", "--command", "true", "--job-count", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("job_count"));
    assert!(lab
        .json::<Vec<serde_json::Value>>(&["list-operations"])
        .unwrap()
        .is_empty());
}

#[test]
fn garbage_on_heartbeat_and_api_subjects_is_logged_and_the_scheduler_keeps_serving() {
    let lab = Lab::start(vec![two_cpu_node()]).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Each identity sends garbage on the subjects it may publish on.
        let node = lab.client_as("node0").await.unwrap();
        let admin = lab.client_as("admin").await.unwrap();
        let garbage: Vec<u8> = (0..512u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for (client, subject) in [
            (&node, "heartbeat.node0"),
            (&admin, "admin.admin.start_operation"),
            (&admin, "admin.admin.list_nodes"),
            (&admin, "admin.admin.no_such_method"),
        ] {
            let subject = format!("{}.{subject}", lab.prefix);
            let reply = tokio::time::timeout(
                Duration::from_secs(5),
                client.request(subject.clone(), garbage.clone().into()),
            )
            .await
            .expect("scheduler answers garbage")
            .expect("a reply");
            assert!(!reply.payload.is_empty(), "{subject}");
        }
    });
    let log = lab.scheduler_log();
    assert!(log.contains("malformed heartbeat"), "{log}");
    assert!(log.contains("malformed API request"), "{log}");
    let out = lab.ytsched(&["run-vanilla", "--command", "echo still-here"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_failed_synchronous_run_prints_the_stderr_tail_of_its_failed_jobs() {
    let lab = Lab::start(vec![two_cpu_node()]).unwrap();
    let out = lab.ytsched(&[
        "run-vanilla",
        "--command",
        "echo line-one >&2; echo the-real-reason >&2; exit 3",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stderr, last 2 line(s):"), "{stderr}");
    let reason = stderr
        .find("the-real-reason")
        .expect("the job's stderr is shown");
    assert!(stderr[..reason].contains("line-one"), "{stderr}");
    // Not a terminal: plain progress lines, no bar drawing.
    assert!(stderr.contains("· completed 0/1"), "{stderr}");
    assert!(!stderr.contains('\r'), "{stderr}");
}

#[test]
fn agent_killed_mid_job_takes_its_job_along_and_the_restart_cleans_up() {
    let mut lab = Lab::start(vec![two_cpu_node()]).unwrap();
    let marker = format!("sleep 92{}", std::process::id());
    let spec = serde_json::json!({"tasks": {"t": {"command": format!("{marker}1")}}});
    let id = lab.submit_spec(&spec.to_string()).unwrap();
    let job_id = wait_until(Duration::from_secs(20), || {
        let jobs = lab.jobs(&id).ok()?;
        let j = jobs.first()?;
        (j["state"] == "running" && !pids_with_cmdline(&marker).is_empty())
            .then(|| j["id"].as_str().unwrap().to_string())
    })
    .unwrap();
    let sandbox = lab.node_work_dir(0).join("sandboxes").join(&job_id);
    assert!(sandbox.exists());
    let old_pids = pids_with_cmdline(&marker);

    lab.kill_node(0, nix::sys::signal::Signal::SIGKILL);
    assert!(sandbox.exists(), "a SIGKILLed agent leaves its sandbox");
    // The job dies with its agent (the agent's guardian kills it), so it cannot run on
    // unsupervised while the scheduler runs it again elsewhere.
    wait_until(Duration::from_secs(5), || {
        old_pids.iter().all(|p| !is_alive(*p)).then_some(())
    })
    .expect("the job dies with its SIGKILLed agent");
    lab.restart_node(0).unwrap();
    wait_until(Duration::from_secs(10), || {
        let clean = !sandbox.exists()
            && (!is_root() || lab.cgroup_dirs_of(&job_id).is_empty())
            && (!is_root() || old_pids.iter().all(|p| !is_alive(*p)));
        clean.then_some(())
    })
    .expect("restarted agent removed the stale cgroup, its processes and the sandbox");
    let _ = lab.ytsched(&["abort-operation", &id]);
}

#[test]
fn fake_nvidia_smi_gives_two_gpus_handed_out_exclusively() {
    let tools = tempfile::tempdir().unwrap();
    fake_nvidia_smi(
        tools.path(),
        &[
            "0, GPU-11111111, NVIDIA H100 80GB HBM3, 81559",
            "1, GPU-22222222, NVIDIA H100 80GB HBM3, 81559",
        ],
    );
    let path = format!(
        "{}:{}",
        tools.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let gpu_node = NodeOpts {
        args: vec!["--cpu".into(), "2".into(), "--memory".into(), "4G".into()],
        env: vec![("PATH".into(), path)],
    };
    let plain_node = NodeOpts::args(&[
        "--cpu",
        "2",
        "--memory",
        "4G",
        "--nvidia-smi",
        "/nonexistent/nvidia-smi",
    ]);
    let lab = Lab::start(vec![gpu_node, plain_node]).unwrap();

    let nodes: Vec<serde_json::Value> = lab.json(&["list-nodes"]).unwrap();
    let gpu = nodes.iter().find(|n| n["id"] == "node0").unwrap();
    let plain = nodes.iter().find(|n| n["id"] == "node1").unwrap();
    assert_eq!(gpu["resource_limits"]["gpu"], 2, "{gpu}");
    let tags: Vec<&str> = gpu["system_tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tags.contains(&"gpu"), "{tags:?}");
    assert!(
        tags.contains(&"gpu_model:NVIDIA_H100_80GB_HBM3"),
        "{tags:?}"
    );
    assert_eq!(plain["resource_limits"]["gpu"], 0, "{plain}");
    assert!(!plain["system_tags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "gpu"));

    let spec = r#"
tasks:
  train:
    command: "echo devices=$CUDA_VISIBLE_DEVICES/$NVIDIA_VISIBLE_DEVICES; sleep 2"
    job_count: 2
    gpu_limit: 1
    cpu_limit: 0.5
"#;
    let id = lab.submit_spec(spec).unwrap();
    let op = lab.wait_finished(&id, Duration::from_secs(30)).unwrap();
    assert_eq!(op["state"], "completed", "{op}");
    let jobs = lab.jobs(&id).unwrap();
    let mut devices = BTreeSet::new();
    let mut windows = vec![];
    for j in &jobs {
        assert_eq!(j["node_id"], "node0");
        let out = lab.ytsched(&["get-job-stdout", &id, j["id"].as_str().unwrap()]);
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let d = line.strip_prefix("devices=").unwrap().to_string();
        let (cuda, nvidia) = d.split_once('/').unwrap();
        assert_eq!(cuda, nvidia);
        devices.insert(cuda.to_string());
        windows.push((
            j["start_time"].as_u64().unwrap(),
            j["finish_time"].as_u64().unwrap(),
        ));
    }
    assert_eq!(devices, BTreeSet::from(["0".to_string(), "1".to_string()]));
    assert!(
        windows[0].0 < windows[1].1 && windows[1].0 < windows[0].1,
        "the two jobs overlapped: {windows:?}"
    );
}

#[test]
fn list_operations_pages_transparently_newest_first_with_filters() {
    let lab = Lab::start(vec![two_cpu_node()]).unwrap();
    lab.wait_for_nodes(1).unwrap();
    // A pool holds at most 50 operations by default: spread them over three.
    for p in ["p0", "p1", "p2"] {
        lab.ok(&[
            "create",
            "scheduler_pool",
            "--name",
            p,
            "--pool-tree",
            "default",
        ]);
    }
    let mut submitted = vec![];
    for i in 0..130 {
        let pool = format!("p{}", i % 3);
        let out = lab.ok(&[
            "run-vanilla",
            "--command",
            "sleep 600",
            "--async",
            "--pool",
            &pool,
        ]);
        submitted.push(out.trim().to_string());
    }
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["list-operations"];
        all.extend_from_slice(args);
        lab.json::<Vec<serde_json::Value>>(&all)
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap().to_string())
            .collect()
    };
    // More than one page (100) comes back whole, newest first.
    let all = ids(&[]);
    assert_eq!(all.len(), 130);
    let newest_first: Vec<String> = submitted.iter().rev().cloned().collect();
    assert_eq!(all, newest_first);
    assert_eq!(ids(&["--limit", "5"]), newest_first[..5]);
    assert_eq!(ids(&["--limit", "120"]).len(), 120);
    // Filters run on the scheduler.
    assert_eq!(ids(&["--filter-user", "admin"]).len(), 130);
    assert!(ids(&["--filter-user", "nobody"]).is_empty());
    assert!(ids(&["--state", "completed"]).is_empty());
    assert_eq!(ids(&["--pool", "p1"]).len(), 43);
    // The error's kind is the exit status: 3 for what does not exist.
    let out = lab.ytsched(&["get-operation", "no-such-operation"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such operation"));
    // A bad filter value is refused by the CLI, naming it.
    let out = lab.ytsched(&["list-operations", "--state", "sleeping"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sleeping"));
}

/// The scheduler runs without transparent huge pages: an update's arrays, freed and
/// purged at once, would otherwise come back as whole 2 MiB pages (docs/performance.md).
#[test]
fn the_scheduler_runs_without_transparent_huge_pages() {
    let lab = Lab::start(vec![]).unwrap();
    let pid = lab.scheduler_pid(0).expect("scheduler running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) else {
        eprintln!("skipped: this kernel does not show THP_enabled (before Linux 5.0)");
        return;
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}
