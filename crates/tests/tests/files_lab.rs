//! Files and layers shipped with operations (SPEC 5.17, issue 41), on a real lab: the
//! file store in JetStream, real agents with their caches, real job processes.

use std::path::{Path, PathBuf};
use std::time::Duration;
use ytsched_tests::{wait_until, Lab, NodeOpts};

/// One-core agents, so that two one-core jobs run on two nodes.
fn one_core(extra: &[&str]) -> NodeOpts {
    let mut args = vec![
        "--cpu",
        "1",
        "--memory",
        "2G",
        "--nvidia-smi",
        "/nonexistent",
    ];
    args.extend_from_slice(extra);
    NodeOpts::args(&args)
}

/// A metric's value on `/metrics`.
fn metric(lab: &Lab, name: &str) -> u64 {
    let (status, text) = lab.http_admin_get("/metrics").unwrap();
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

/// Waits until `name` is at least `at_least` (nodes tell their counters in heartbeats).
fn metric_reaches(lab: &Lab, name: &str, at_least: u64) -> u64 {
    wait_until(Duration::from_secs(10), || {
        let v = metric(lab, name);
        (v >= at_least).then_some(v)
    })
    .unwrap_or_else(|_| panic!("{name} stayed below {at_least}: {}", metric(lab, name)))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn sha256_of(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    ytsched_common::files::Sha256Digest::of(&bytes)
        .as_str()
        .to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs the two-job script operation as alice and returns its id and its jobs.
fn run_script(lab: &Lab, script: &Path) -> (String, Vec<serde_json::Value>, String) {
    let file = format!("{}:run.py", script.display());
    let out = lab.ytsched_as(
        "alice",
        &[
            "run-vanilla",
            "--async",
            "--command",
            "python3 run.py",
            "--job-count",
            "2",
            "--cpu-limit",
            "1",
            "--memory-limit",
            "256M",
            "--file",
            &file,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "completed", "{op}");
    (id.clone(), lab.jobs(&id).unwrap(), stderr(&out))
}

#[test]
fn a_script_ships_with_its_operation_is_cached_per_node_and_checked() {
    let lab = Lab::start_with(
        &["--http", "127.0.0.1:0", "--file-size-limit", "4M"],
        vec![one_core(&[]), one_core(&[])],
    )
    .unwrap();
    lab.add_user("alice", false).unwrap();
    lab.add_user("mallory", false).unwrap();
    let script = write(
        lab.dir.path(),
        "script.py",
        "import os\nprint('job', os.environ['YT_JOB_INDEX'], 'ran', open(__file__).read().count('\\n'), 'lines')\nassert not os.access('run.py', os.W_OK)\n",
    );
    let digest = sha256_of(&script);

    // Uploaded once, fetched once per node: both nodes ran a job.
    let (first, jobs, said) = run_script(&lab, &script);
    assert!(said.contains("uploaded"), "{said}");
    let nodes: std::collections::BTreeSet<String> =
        jobs.iter().map(|j| j["node_id"].to_string()).collect();
    assert_eq!(nodes.len(), 2, "the two jobs ran on two nodes: {jobs:?}");
    for j in &jobs {
        let out = lab.ok(&["get-job-stdout", &first, j["id"].as_str().unwrap()]);
        assert!(out.contains("ran 3 lines"), "{out}");
        assert!(
            j["statistics"]["bytes_fetched"].as_u64().unwrap() > 0,
            "{j}"
        );
    }
    let misses = metric_reaches(&lab, "ytsched_file_cache_misses_total", 2);
    let fetched = metric(&lab, "ytsched_file_cache_fetched_bytes_total");
    let events = lab.ok(&["events", "--operation", &first]);
    assert!(events.contains("\"job_preparing\""), "{events}");

    // The same file again: nothing sent, nothing fetched, two cache hits.
    let hits = metric(&lab, "ytsched_file_cache_hits_total");
    let (_, jobs, said) = run_script(&lab, &script);
    assert!(!said.contains("uploaded"), "sent again: {said}");
    metric_reaches(&lab, "ytsched_file_cache_hits_total", hits + 2);
    assert_eq!(metric(&lab, "ytsched_file_cache_misses_total"), misses);
    assert_eq!(
        metric(&lab, "ytsched_file_cache_fetched_bytes_total"),
        fetched
    );
    assert!(
        jobs.iter().all(|j| j["statistics"]["bytes_fetched"] == 0),
        "{jobs:?}"
    );

    // A corrupted cache entry is found and fetched again; the job gets the right bytes.
    for node in 0..2 {
        let cached = lab
            .node_work_dir(node)
            .join("file-cache/files")
            .join(&digest);
        let len = std::fs::metadata(&cached).unwrap().len() as usize;
        std::fs::write(&cached, "#".repeat(len)).unwrap();
    }
    let (third, jobs, _) = run_script(&lab, &script);
    for j in &jobs {
        let out = lab.ok(&["get-job-stdout", &third, j["id"].as_str().unwrap()]);
        assert!(out.contains("ran 3 lines"), "{out}");
    }
    metric_reaches(&lab, "ytsched_file_cache_corrupt_total", 2);

    // Over the size limit: refused at upload, naming the bound.
    let big = lab.dir.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 5 << 20]).unwrap();
    let out = lab.ytsched_as("alice", &["file", "upload", big.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("more than the file size limit of 4M (--file-size-limit)"),
        "{}",
        stderr(&out)
    );

    // mallory cannot name alice's file, and is told exactly what a made-up digest gets.
    let refused = |digest: &str| {
        let spec = format!(
            "tasks:\n  main:\n    command: cat run.py\n    file_paths:\n      - {{digest: {digest}, file_name: run.py}}\n"
        );
        lab.submit_spec_as("mallory", &spec)
            .unwrap_err()
            .to_string()
    };
    let theirs = refused(&digest);
    assert!(
        theirs.contains(&format!(
            "no stored file sha256:{digest} that user 'mallory' may read"
        )),
        "{theirs}"
    );
    let made_up = "ab".repeat(32);
    assert_eq!(refused(&made_up), theirs.replace(&digest, &made_up));
    // Nor does alice's operation tell her which files it named.
    let seen: serde_json::Value = serde_json::from_slice(
        &lab.ytsched_as("mallory", &["--format", "json", "get-operation", &first])
            .stdout,
    )
    .unwrap();
    assert!(
        seen["spec"]["tasks"]["task"].get("file_paths").is_none(),
        "{seen}"
    );
    // Once an admin shares it, she may.
    lab.ok(&["file", "share", &digest, "mallory"]);
    let spec = format!("tasks:\n  main:\n    command: cat run.py\n    file_paths:\n      - {{digest: {digest}, file_name: run.py}}\n");
    let id = lab.submit_spec_as("mallory", &spec).unwrap();
    assert_eq!(
        lab.wait_finished(&id, Duration::from_secs(60)).unwrap()["state"],
        "completed"
    );
}

#[test]
fn unreferenced_files_leave_the_store_after_their_ttl_and_a_full_cache_names_the_file() {
    let lab = Lab::start_with(
        &[
            "--http",
            "127.0.0.1:0",
            "--file-ttl",
            "2s",
            "--file-quota-per-user",
            "3M",
        ],
        vec![one_core(&["--file-cache-size", "1M"])],
    )
    .unwrap();
    lab.add_user("alice", false).unwrap();
    // Two files of 2 MiB would pass the user's quota: the second is refused, naming it
    // (the first goes with its TTL, before the rest of the test needs the room).
    for (i, fill) in [1u8, 2].into_iter().enumerate() {
        let path = lab.dir.path().join(format!("quota-{i}.bin"));
        std::fs::write(&path, vec![fill; 2 << 20]).unwrap();
        let out = lab.ytsched_as("alice", &["file", "upload", path.to_str().unwrap()]);
        let refused = stderr(&out).contains("would pass the quota of 3M (--file-quota-per-user)");
        assert_eq!(
            (out.status.success(), refused),
            (i == 0, i == 1),
            "{}",
            stderr(&out)
        );
    }
    let idle = write(lab.dir.path(), "idle.txt", "nobody names me");
    let used = write(lab.dir.path(), "used.txt", "a live operation names me");
    let upload = |p: &Path| {
        let out = lab.ytsched_as("alice", &["file", "upload", p.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        printed.trim_start_matches("sha256:").to_string()
    };
    let idle_digest = upload(&idle);
    let out = lab.ytsched_as(
        "alice",
        &[
            "run-vanilla",
            "--async",
            "--command",
            "sleep 60",
            "--file",
            used.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let live = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let listed = || -> String {
        String::from_utf8_lossy(
            &lab.ytsched_as("alice", &["--format", "json", "file", "list"])
                .stdout,
        )
        .into_owned()
    };
    let used_digest = sha256_of(&used);
    assert!(listed().contains(&idle_digest) && listed().contains(&used_digest));
    wait_until(Duration::from_secs(15), || {
        (!listed().contains(&idle_digest)).then_some(())
    })
    .expect("the unreferenced file outlived its TTL");
    assert!(
        listed().contains(&used_digest),
        "a file a live operation names was removed"
    );
    lab.ok(&["abort-operation", &live]);
    wait_until(Duration::from_secs(15), || {
        (!listed().contains(&used_digest)).then_some(())
    })
    .expect("the file outlived its TTL once its operation ended");

    // A file larger than the node's cache fails its job, naming the file and the bound.
    let big = lab.dir.path().join("two-megs.bin");
    std::fs::write(&big, vec![1u8; 2 << 20]).unwrap();
    let out = lab.ytsched_as(
        "alice",
        &[
            "run-vanilla",
            "--async",
            "--command",
            "true",
            "--file",
            big.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "failed", "{op}");
    let jobs = lab.jobs(&id).unwrap();
    let error = jobs[0]["error"].as_str().unwrap_or_default();
    let big_digest = sha256_of(&big);
    assert!(
        error.contains("the node's file cache is full")
            && error.contains(&big_digest)
            && error.contains("--file-cache-size"),
        "{error}"
    );
}

/// A root filesystem made here from Debian's static busybox.
fn busybox_layer(dir: &Path) -> Option<PathBuf> {
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        return None;
    }
    let root = dir.join("layer-root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    for tool in ["sh", "cat", "sleep"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    std::fs::write(
        root.join("etc/os-release"),
        "ID=ytsched-layer\nNAME=\"busybox layer\"\n",
    )
    .unwrap();
    let tar = dir.join("layer.tar");
    let ok = std::process::Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap()
        .success();
    ok.then_some(tar)
}

#[test]
fn a_layer_is_the_jobs_root_and_its_job_is_still_killed_on_abort() {
    if !ytsched_tests::is_root() {
        eprintln!("skipped: layers need job namespaces, which need root");
        return;
    }
    let lab = Lab::start(vec![one_core(&[])]).unwrap();
    let Some(layer) = busybox_layer(lab.dir.path()) else {
        eprintln!("skipped: no /bin/busybox (Debian's busybox-static; scripts/install-deps.sh installs it)");
        return;
    };
    // The job sees the layer's files, not the host's.
    let out = lab.ytsched(&[
        "run-vanilla",
        "--async",
        "--command",
        "cat /etc/os-release",
        "--layer",
        layer.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "completed", "{op}");
    let stdout = lab.ok(&["get-job-stdout", &id, &format!("{id}-0")]);
    assert!(
        stdout.contains("ID=ytsched-layer"),
        "the job saw the host's root: {stdout}"
    );
    // Its processes die with an abort, as without a layer.
    let out = lab.ytsched(&[
        "run-vanilla",
        "--async",
        "--command",
        "exec sleep 120",
        "--layer",
        layer.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let job = wait_until(Duration::from_secs(30), || {
        let jobs = lab.jobs(&id).ok()?;
        let j = jobs.into_iter().find(|j| j["state"] == "running")?;
        let job_id = j["id"].as_str()?.to_string();
        (!ytsched_tests::pids_in_cgroup_matching(&job_id).is_empty()).then_some(job_id)
    })
    .expect("the layer job runs");
    lab.ok(&["abort-operation", &id]);
    ytsched_tests::wait_job_processes_gone(&job, Duration::from_secs(20)).unwrap();
    let op = lab.wait_finished(&id, Duration::from_secs(30)).unwrap();
    assert_eq!(op["state"], "aborted");

    // Not an archive: the job fails, saying so.
    let junk = write(lab.dir.path(), "junk.tar", &"not a tar archive ".repeat(64));
    let out = lab.ytsched(&[
        "run-vanilla",
        "--async",
        "--command",
        "true",
        "--layer",
        junk.to_str().unwrap(),
    ]);
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let op = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(op["state"], "failed", "{op}");
    let error = lab.jobs(&id).unwrap()[0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains("is not a valid tar archive"), "{error}");
}
