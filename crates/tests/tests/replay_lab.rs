//! Issue 28's live lab: three users in two pools keep a four-cpu cluster full for a
//! while, with preemption (real nats-server, scheduler, agents and job processes). What
//! `ytsched usage` sums equals the jobs' own times, `ytsched events --operation` tells
//! an operation's story, and `ytsched simulate --replay` (SPEC 5.16) runs the recorded
//! log again through the core in virtual time: as observed with no change, with a
//! shorter wait for a pool whose weight is doubled.

use std::collections::BTreeMap;
use std::time::Duration;
use ytsched_tests::*;

fn node() -> NodeOpts {
    NodeOpts::args(&["--cpu", "2", "--user-slots", "4"])
}

/// A pool's figure on one side of a replay report.
fn figure(report: &serde_json::Value, pool: &str, side: &str, field: &str) -> f64 {
    report["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == pool)
        .and_then(|p| p[side][field].as_f64())
        .unwrap_or_else(|| panic!("no {side} {field} for {pool} in {report:#}"))
}

#[test]
fn a_replay_of_a_recorded_log_matches_what_was_observed() {
    let lab = Lab::start_with(&["--pool-sample-period", "1s"], vec![node(), node()]).unwrap();
    for (path, value) in [
        ("fair_share_starvation_timeout", "1s"),
        ("preemptive_scheduling_backoff", "1s"),
    ] {
        lab.ok(&[
            "set",
            &format!("//sys/pool_trees/default/@config/{path}"),
            value,
        ]);
    }
    for pool in ["a", "b"] {
        lab.create_pool("default", pool);
    }
    for user in ["alice", "bob", "carol"] {
        lab.add_user(user, false).unwrap();
    }
    let spec = |pool: &str, jobs: u32, secs: f64| {
        format!("pool: {pool}\ntasks: {{t: {{command: 'sleep {secs}', job_count: {jobs}, cpu_limit: 1}}}}")
    };
    // Bob fills the cluster; Alice's pool starves and takes its share back by
    // preemption; then all three keep both pools' demand above their shares.
    let mut ops = vec![(lab.submit_spec_as("bob", &spec("b", 8, 5.0)).unwrap(), "b")];
    std::thread::sleep(Duration::from_millis(1500));
    ops.push((
        lab.submit_spec_as("alice", &spec("a", 4, 3.0)).unwrap(),
        "a",
    ));
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(1500));
        let (who, pool) = [("alice", "a"), ("carol", "b")][i % 2];
        let secs = 1.5 + (i % 3) as f64 * 0.5;
        ops.push((lab.submit_spec_as(who, &spec(pool, 3, secs)).unwrap(), pool));
        if i % 2 == 0 {
            ops.push((lab.submit_spec_as("bob", &spec("b", 2, 2.0)).unwrap(), "b"));
        }
    }
    // The jobs' own times, preempted attempts included, summed per pool.
    let mut expected: BTreeMap<String, f64> = BTreeMap::new();
    for (op, pool) in &ops {
        assert_eq!(
            lab.wait_finished(op, Duration::from_secs(120)).unwrap()["state"],
            "completed"
        );
        for j in lab.jobs(op).unwrap() {
            // An attempt preempted as its node started it can end (by the scheduler's
            // clock) before it began (by the node's): it ran no time, as usage counts.
            let ms = j["finish_time"]
                .as_u64()
                .unwrap()
                .saturating_sub(j["start_time"].as_u64().unwrap());
            *expected.entry(format!("default/{pool}")).or_default() += ms as f64 / 3_600_000.0;
        }
    }
    let usage: serde_json::Value = lab.json(&["usage", "--by", "pool"]).unwrap();
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{usage:#}");
    for r in rows {
        let group = r["group"].as_str().unwrap();
        let reported = r["cpu_hours"].as_f64().unwrap();
        // A preempted attempt ends, for the log, when the scheduler takes it away; its
        // record later takes the time its node reports the process gone, a few
        // milliseconds on.
        let slack = r["jobs_preempted"].as_f64().unwrap() * 0.5 / 3600.0;
        assert!(
            (reported - expected[group]).abs() <= 1e-9 + slack,
            "{group}: usage says {reported} cpu-hours, the jobs' own times {}",
            expected[group]
        );
    }
    // Some of Bob's first jobs were preempted for Alice, and his operation's story
    // in the log says so.
    let preempted: u64 = rows
        .iter()
        .filter_map(|r| r["jobs_preempted"].as_u64())
        .sum();
    assert!(preempted > 0, "no preemption: {usage:#}");
    let story = lab.ok(&["events", "--operation", &ops[0].0]);
    let kinds: Vec<String> = story
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            e["event"]["type"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("operation_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("operation_finished"));
    assert!(
        story.contains(&format!("\"preempted_by\":\"{}\"", ops[1].0)),
        "{story}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "job_finished").count(),
        8,
        "{kinds:?}"
    );
    // A last pool sample after the last job ended, then the log as a file.
    std::thread::sleep(Duration::from_millis(2500));
    let log = lab.ok(&["events"]);
    let path = lab.job_dir("replay").join("events.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &log).unwrap();
    let path = path.to_str().unwrap();

    let plain: serde_json::Value = lab
        .json(&["simulate", "--replay", path])
        .expect("replay with no change");
    assert_eq!(plain["errors"], serde_json::json!([]), "{plain:#}");
    assert_eq!(plain["operations"].as_u64(), Some(ops.len() as u64));
    assert_eq!(plain["nodes"].as_u64(), Some(2));
    for pool in ["default/a", "default/b"] {
        let observed = figure(&plain, pool, "observed", "fair_share_attainment");
        let replayed = figure(&plain, pool, "replayed", "fair_share_attainment");
        assert!(
            (replayed - observed).abs() <= 0.10 * observed,
            "{pool}: attainment replayed {replayed}, observed {observed}: {plain:#}"
        );
        assert_eq!(
            figure(&plain, pool, "observed", "operations"),
            figure(&plain, pool, "replayed", "operations")
        );
    }
    // Doubling pool a's weight shortens its operations' wait.
    let doubled: serde_json::Value = lab
        .json(&[
            "simulate",
            "--replay",
            path,
            "--set",
            "//sys/pool_trees/default/a/@weight=2",
        ])
        .expect("replay with pool a's weight doubled");
    let before = figure(&plain, "default/a", "replayed", "wait_mean_s");
    let after = figure(&doubled, "default/a", "replayed", "wait_mean_s");
    assert!(
        after < before,
        "pool a waits {after} s with weight 2, {before} s with weight 1: {doubled:#}"
    );
    assert_eq!(
        doubled["changes"][0]["path"],
        "//sys/pool_trees/default/a/@weight"
    );
    // The table people read names both pools, observed beside replayed.
    let table = lab.ok(&["simulate", "--replay", path]);
    eprintln!("{table}");
    assert!(
        table.contains("default/a") && table.contains("→"),
        "{table}"
    );
    // Refusals name what is wrong.
    for (args, says) in [
        (
            vec!["--set", "//sys/pool_trees/default/nope/@weight=2"],
            "nope",
        ),
        (vec!["--set", "weight"], "PATH=VALUE"),
    ] {
        let mut all = vec!["simulate", "--replay", path];
        all.extend(args);
        let out = lab.ytsched(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{all:?}: {err}");
    }
}
