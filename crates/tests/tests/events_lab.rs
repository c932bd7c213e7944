//! The event log (SPEC 5.16) in a live lab: real nats-server, scheduler(s), agents and
//! job processes; read back with `ytsched events` as JSON lines.

use nix::sys::signal::Signal;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use ytsched_tests::*;

fn node(cpu: &str, slots: &str) -> NodeOpts {
    NodeOpts::args(&["--cpu", cpu, "--user-slots", slots])
}

/// `ytsched events ARGS` as `who`, one JSON value per line.
fn events_as(lab: &Lab, who: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["events"];
    all.extend_from_slice(args);
    let out = lab.ytsched_as(who, &all);
    assert!(
        out.status.success(),
        "ytsched {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A child process killed (and reaped) when the test is done with it, pass or fail.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kind(e: &serde_json::Value) -> &str {
    e["event"]["type"].as_str().unwrap_or_default()
}

#[test]
fn an_operation_tells_its_whole_story_in_the_event_log() {
    let lab = Lab::start(vec![node("2", "4")]).unwrap();
    lab.add_user("alice", false).unwrap();
    // A follower started before anything happens prints events as they are written.
    let mut follower = KillOnDrop(
        std::process::Command::new(binary("ytsched"))
            .args(["--nats", &lab.nats_url, "--subject-prefix", &lab.prefix])
            .arg("--creds")
            .arg(lab.creds("alice"))
            .args(["events", "--follow", "--since", "10s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = follower.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let op = lab
        .submit_spec("title: story\ntasks: {t: {command: 'sleep 0.2', job_count: 2, cpu_limit: 1}}")
        .unwrap();
    assert_eq!(
        lab.wait_finished(&op, Duration::from_secs(30)).unwrap()["state"],
        "completed"
    );
    // The events are written with the state, which the final answer above waited for;
    // the last round may still be on its way.
    let story = wait_until(Duration::from_secs(10), || {
        // Everyone may read the log: alice reads the admin's operation.
        let story = events_as(&lab, "alice", &["--operation", &op]);
        story
            .iter()
            .any(|e| kind(e) == "operation_finished")
            .then_some(story)
    })
    .expect("the operation's finish is in the log");
    let kinds: Vec<&str> = story.iter().map(kind).collect();
    // The follower saw the same story as it happened.
    let mut followed = Vec::new();
    while !followed.iter().any(|k: &String| k == "operation_finished") {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the follower prints the operation's finish");
        let e: serde_json::Value = serde_json::from_str(&line).unwrap();
        if e["event"]["operation"]["id"] == op.as_str() {
            followed.push(kind(&e).to_string());
        }
    }
    drop(follower);
    assert_eq!(followed, kinds, "followed as it happened");
    assert_eq!(kinds.first(), Some(&"operation_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"operation_finished"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "job_started").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "job_finished").count(),
        2,
        "{kinds:?}"
    );
    let started = &story[0]["event"];
    assert_eq!(started["operation"]["id"], op.as_str());
    assert_eq!(started["operation"]["user"], "admin");
    assert_eq!(started["title"], "story");
    assert_eq!(started["jobs"], 2);
    assert!(
        started["operation"]["pools"]
            .as_object()
            .is_some_and(|p| !p.is_empty()),
        "{started}"
    );
    for e in story.iter().filter(|e| kind(e) == "job_finished") {
        let ev = &e["event"];
        assert_eq!(ev["state"], "completed", "{ev}");
        assert_eq!(ev["job"]["resources"]["cpu"], 1.0, "{ev}");
        assert_eq!(ev["job"]["node"], lab.node_id(0).as_str(), "{ev}");
        let (start, finish) = (
            ev["job"]["start_time"].as_u64().unwrap(),
            ev["finish_time"].as_u64().unwrap(),
        );
        assert!(finish >= start + 100, "ran about 0.2 s: {start}..{finish}");
    }
    // One leader wrote them all, numbered in the order they happened.
    let epochs: BTreeSet<u64> = story.iter().map(|e| e["epoch"].as_u64().unwrap()).collect();
    assert_eq!(epochs.len(), 1, "{story:?}");
    let seqs: Vec<u64> = story.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let ats: Vec<u64> = story.iter().map(|e| e["at"].as_u64().unwrap()).collect();
    assert!(ats.windows(2).all(|w| w[0] <= w[1]), "{ats:?}");
    assert!(!story.iter().any(|e| e.to_string().contains("environment")));

    // Filters: another user's events, a window after everything, an empty window.
    assert!(events_as(
        &lab,
        "admin",
        &["--operation", &op, "--filter-user", "alice"]
    )
    .is_empty());
    let later = (ats.last().unwrap() + 60_000).to_string();
    assert!(events_as(&lab, "admin", &["--since", &later]).is_empty());
    let pool = started["operation"]["pools"]
        .as_object()
        .and_then(|p| p.values().next())
        .and_then(|p| p.as_str())
        .unwrap()
        .to_string();
    let all = events_as(&lab, "admin", &["--since", "1h", "--pool", &pool]);
    let by_pool: Vec<&str> = all
        .iter()
        .filter(|e| e["event"]["operation"]["id"] == op.as_str())
        .map(kind)
        .collect();
    assert_eq!(by_pool, kinds, "the pool {pool} holds the operation");
    assert!(events_as(&lab, "admin", &["--pool", "no-such-pool"]).is_empty());
    let out = lab.ytsched(&["events", "--since", "2000", "--until", "1000"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--until"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = lab.ytsched(&["events", "--since", "last tuesday"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("'last tuesday'"));
}

#[test]
fn the_standby_continues_the_event_log_with_no_gap_and_no_duplicate() {
    let mut lab =
        Lab::start_with(&["--lease-ttl", "1s"], vec![node("2", "4"), node("2", "4")]).unwrap();
    let standby = lab.start_scheduler().unwrap();
    lab.wait_standby(standby).unwrap();
    let spec = "tasks: {t: {command: 'sleep 0.3', job_count: 3, cpu_limit: 1}}";
    let mut ops = Vec::new();
    for i in 0..8 {
        if i == 4 {
            // Events flow: operations are running and finishing as the leader dies.
            lab.kill_scheduler(0, Signal::SIGKILL);
        }
        let op = wait_until(Duration::from_secs(30), || lab.submit_spec(spec).ok())
            .expect("submitted (by the standby once it leads)");
        ops.push(op);
        std::thread::sleep(Duration::from_millis(300));
    }
    for op in &ops {
        assert_eq!(
            lab.wait_finished(op, Duration::from_secs(60)).unwrap()["state"],
            "completed"
        );
    }
    let log = wait_until(Duration::from_secs(10), || {
        let log = events_as(&lab, "admin", &[]);
        ops.iter()
            .all(|op| {
                log.iter().any(|e| {
                    kind(e) == "operation_finished" && e["event"]["operation"]["id"] == op.as_str()
                })
            })
            .then_some(log)
    })
    .expect("every operation's finish is in the log");
    let mut by_epoch: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in &log {
        by_epoch
            .entry(e["epoch"].as_u64().unwrap())
            .or_default()
            .push(e["seq"].as_u64().unwrap());
    }
    assert!(
        by_epoch.len() >= 2,
        "two leaders wrote: {:?}",
        by_epoch.keys()
    );
    for (epoch, seqs) in &by_epoch {
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(
            seqs, &expected,
            "epoch {epoch}: numbered 1.. in log order, no gap, no duplicate"
        );
    }
    // The new leader's events come after the old one's.
    let order: Vec<u64> = log.iter().map(|e| e["epoch"].as_u64().unwrap()).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    // Every job attempt that finished is told once.
    let mut finished = BTreeSet::new();
    for e in log.iter().filter(|e| kind(e) == "job_finished") {
        let id = e["event"]["job"]["id"].as_str().unwrap().to_string();
        let first_time = finished.insert((e["epoch"].as_u64(), id.clone()));
        assert!(first_time, "{id} finished twice in one epoch");
    }
}

#[test]
fn usage_by_pool_equals_the_sums_of_the_jobs_own_times() {
    let lab = Lab::start_with(&["--http", "127.0.0.1:0"], vec![node("4", "8")]).unwrap();
    for pool in ["research", "prod"] {
        let out = lab.ytsched(&[
            "create",
            "scheduler_pool",
            "--name",
            pool,
            "--pool-tree",
            "default",
            "--attributes",
            "{}",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    lab.ok(&["set", "//sys/pool_trees/default/research/@weight", "2"]);
    // Admin changes are in the log: who, where, before and after.
    let changes: Vec<serde_json::Value> = events_as(&lab, "admin", &["--filter-user", "admin"])
        .into_iter()
        .filter(|e| kind(e) == "admin_changed")
        .collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(changes[0]["event"]["new"]
        .as_str()
        .unwrap()
        .contains("research"));
    assert!(changes[0]["event"]["old"].is_null());
    let weight = &changes[2]["event"];
    assert_eq!(weight["who"], "admin");
    assert_eq!(weight["path"], "//sys/pool_trees/default/research/@weight");
    assert_eq!(weight["new"], "2.0", "{weight}");
    let mut ops: Vec<(String, &str)> = Vec::new();
    for (i, (user, pool)) in [
        ("alice", "research"),
        ("bob", "research"),
        ("carol", "prod"),
    ]
    .into_iter()
    .enumerate()
    {
        lab.add_user(user, false).unwrap();
        for k in 0..2 {
            let spec = format!(
                "pool: {pool}\ntasks: {{t: {{command: 'sleep 0.{}', job_count: 3, cpu_limit: 1}}}}",
                3 + i + k
            );
            ops.push((lab.submit_spec_as(user, &spec).unwrap(), pool));
        }
    }
    // The jobs' own times, as list-jobs gives them, summed per pool.
    let mut expected: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for (op, pool) in &ops {
        assert_eq!(
            lab.wait_finished(op, Duration::from_secs(60)).unwrap()["state"],
            "completed"
        );
        let row = expected.entry(format!("default/{pool}")).or_default();
        for j in lab.jobs(op).unwrap() {
            let ms = j["finish_time"].as_u64().unwrap() - j["start_time"].as_u64().unwrap();
            row.0 += ms as f64 / 3_600_000.0;
            row.1 += 1;
        }
    }
    let rows = wait_until(Duration::from_secs(10), || {
        let report: serde_json::Value = lab.json(&["usage", "--by", "pool"]).ok()?;
        let rows = report["rows"].as_array()?.clone();
        let done: u64 = rows
            .iter()
            .filter_map(|r| r["jobs_completed"].as_u64())
            .sum();
        (done == 18).then_some(rows)
    })
    .expect("all 18 jobs in the usage report");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        let group = r["group"].as_str().unwrap();
        let (hours, jobs) = expected[group];
        let reported = r["cpu_hours"].as_f64().unwrap();
        assert!(
            (reported - hours).abs() < 1e-9,
            "{group}: usage says {reported} cpu-hours, the jobs' own times {hours}"
        );
        assert_eq!(r["jobs_completed"].as_u64(), Some(jobs), "{r}");
        assert_eq!(
            r["operations"].as_u64(),
            Some(if group.ends_with("research") { 4 } else { 2 })
        );
        assert!(r["wait_p95_s"].as_f64().is_some(), "{r}");
    }
    // The web UI's usage page sums the same.
    let (status, body) = lab.http_admin_get("/api/usage?by=pool&since=1h").unwrap();
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let web_rows = page["rows"].as_array().unwrap();
    assert_eq!(web_rows.len(), 2, "{page}");
    for (web, cli) in web_rows.iter().zip(&rows) {
        assert_eq!(web["group"], cli["group"]);
        assert_eq!(web["jobs_completed"], cli["jobs_completed"]);
        let (a, b) = (
            web["cpu_hours"].as_f64().unwrap(),
            cli["cpu_hours"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    }
    assert!(page["series"].is_object(), "{page}");
    let (status, body) = lab.http_admin_get("/api/usage?by=team").unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("'team'"), "{body}");
    let (status, body) = lab.http_admin_get("/usage").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("/assets/app.js"), "the UI shell: {body}");
    let users: serde_json::Value = lab.json(&["usage", "--by", "user"]).unwrap();
    let names: Vec<&str> = users["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["group"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["alice", "bob", "carol"]);
    let csv = lab.ok(&["--format", "csv", "usage", "--by", "tree"]);
    let mut lines = csv.lines();
    assert!(
        lines.next().unwrap().starts_with("group,cpu_hours,"),
        "{csv}"
    );
    assert!(lines.next().unwrap().starts_with("default,"), "{csv}");
    let out = lab.ytsched(&["usage", "--by", "team"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'team'"));
}
