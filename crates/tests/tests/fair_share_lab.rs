//! SPEC §7 scenarios 3 and 6–7 on a real lab: one agent overriding its resources to the
//! seeds' 24 CPU / 60 GB, real `sleep` jobs, pools made with the admin CLI. Once settled,
//! each operation's usage equals its fair share within one job.

use serde_json::Value;
use std::time::Duration;
use ytsched_tests::*;

fn seed_cluster_node() -> NodeOpts {
    NodeOpts::args(&["--cpu", "24", "--memory", "60G", "--user-slots", "48"])
}

fn operations_orchid(lab: &Lab) -> Value {
    lab.json(&[
        "get",
        "//sys/scheduler/orchid/scheduler/pool_trees/default/operations",
    ])
    .unwrap_or(Value::Null)
}

/// `ytsched create scheduler_pool` in the default tree, which must succeed.
fn create_pool(lab: &Lab, name: &str, parent: Option<&str>, attributes: &str) {
    let mut args = vec![
        "create",
        "scheduler_pool",
        "--name",
        name,
        "--pool-tree",
        "default",
    ];
    if let Some(p) = parent {
        args.extend(["--parent-name", p]);
    }
    args.extend(["--attributes", attributes]);
    let out = lab.ytsched(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn submit(lab: &Lab, pool: Option<&str>, weight: f64, jobs: u32, command: &str) -> String {
    let mut spec = serde_json::json!({
        "weight": weight,
        "tasks": {"task": {"command": command, "job_count": jobs, "memory_limit": "64M"}},
    });
    if let Some(p) = pool {
        spec["pool"] = Value::String(p.into());
    }
    lab.submit_spec(&spec.to_string()).unwrap()
}

/// Waits until every listed operation runs `expected` jobs (within one) and its fair
/// share in cpus matches too, twice in a row; returns the orchid then.
fn wait_settled(lab: &Lab, expected: &[(&str, f64)], timeout: Duration) -> Value {
    let mut streak = 0;
    wait_until(timeout, || {
        let ops = operations_orchid(lab);
        let ok = expected.iter().all(|(id, jobs)| {
            let o = &ops[*id];
            let running = o["running_job_count"].as_f64().unwrap_or(-10.0);
            let fs_cpu = o["detailed_fair_share"]["total"]["cpu"]
                .as_f64()
                .unwrap_or(-1.0)
                * 24.0;
            (running - jobs).abs() <= 1.0 && (fs_cpu - jobs).abs() <= 0.25
        });
        streak = if ok { streak + 1 } else { 0 };
        std::thread::sleep(Duration::from_millis(200));
        (streak >= 2).then_some(ops)
    })
    .unwrap_or_else(|_| {
        panic!(
            "did not settle to {expected:?}; orchid: {}; logs in {}",
            operations_orchid(lab),
            lab.dir.path().display()
        )
    })
}

#[test]
fn scenario_03_weights_on_a_real_lab() {
    let lab = Lab::start(vec![seed_cluster_node()]).unwrap();
    lab.wait_for_nodes(1).unwrap();
    // Short jobs and many of them: the first operation takes the idle cluster, and as
    // jobs end, freed slots go to the least satisfied operation until usage follows
    // fair share (preemption is not needed to get there).
    let ids: Vec<String> = (1..=3)
        .map(|w| submit(&lab, None, w as f64, 200, "sleep 1"))
        .collect();
    let expected = [
        (ids[0].as_str(), 4.0),
        (ids[1].as_str(), 8.0),
        (ids[2].as_str(), 12.0),
    ];
    let ops = wait_settled(&lab, &expected, Duration::from_secs(60));
    for (id, share) in [
        (&ids[0], 1.0 / 6.0),
        (&ids[1], 2.0 / 6.0),
        (&ids[2], 3.0 / 6.0),
    ] {
        let ratio = ops[id.as_str()]["fair_share_ratio"].as_f64().unwrap();
        assert!((ratio - share).abs() < 0.01, "{id}: {ratio} vs {share}");
    }
    for id in &ids {
        lab.ytsched(&["abort-operation", id]);
    }
}

#[test]
fn scenario_06_07_guarantees_on_a_real_lab() {
    let lab = Lab::start(vec![seed_cluster_node()]).unwrap();
    lab.wait_for_nodes(1).unwrap();
    // Pools made the way an admin would, values in YSON and JSON.
    let pools: [(&str, Option<&str>, &str); 7] = [
        ("company", None, "{strong_guarantee_resources={cpu=24}}"),
        (
            "development",
            Some("company"),
            r#"{"strong_guarantee_resources": {"cpu": 20}}"#,
        ),
        (
            "production",
            Some("development"),
            "{strong_guarantee_resources={cpu=16}}",
        ),
        (
            "testing",
            Some("development"),
            "{strong_guarantee_resources={cpu=4}}",
        ),
        (
            "analytics",
            Some("company"),
            "{strong_guarantee_resources={cpu=4}}",
        ),
        (
            "chyt",
            Some("analytics"),
            "{strong_guarantee_resources={cpu=4}}",
        ),
        ("bi", Some("analytics"), "{}"),
    ];
    for (name, parent, attrs) in pools {
        create_pool(&lab, name, parent, attrs);
    }
    // An overcommitting guarantee is refused and changes nothing.
    let out = lab.ytsched(&[
        "set",
        "//sys/pool_trees/default/company/analytics/bi/@strong_guarantee_resources",
        "{cpu=1}",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("analytics") && err.contains("cpu = 5"),
        "{err}"
    );
    let bi_attrs: Value = lab
        .json(&["get", "//sys/pool_trees/default/company/analytics/bi/@"])
        .unwrap();
    assert!(
        bi_attrs.get("strong_guarantee_resources").is_none(),
        "{bi_attrs}"
    );

    let long = "sleep 300";
    let prod4 = submit(&lab, Some("production"), 1.0, 4, long);
    let chyt4 = submit(&lab, Some("chyt"), 1.0, 4, long);
    let prod12 = submit(&lab, Some("production"), 1.0, 12, long);
    let testing8 = submit(&lab, Some("testing"), 1.0, 8, long);
    let bi4 = submit(&lab, Some("bi"), 1.0, 4, long);
    let expected = [
        (prod4.as_str(), 4.0),
        (chyt4.as_str(), 4.0),
        (prod12.as_str(), 12.0),
        (testing8.as_str(), 4.0),
        (bi4.as_str(), 0.0),
    ];
    wait_settled(&lab, &expected, Duration::from_secs(30));
    let pool_cpu = |p: &str| -> f64 {
        lab.json::<Value>(&[
            "get",
            &format!(
                "//sys/scheduler/orchid/scheduler/pool_trees/default/pools/{p}/resource_usage/cpu"
            ),
        ])
        .unwrap()
        .as_f64()
        .unwrap()
    };
    assert_eq!(pool_cpu("production"), 16.0);
    assert_eq!(pool_cpu("chyt"), 4.0);
    assert_eq!(pool_cpu("testing"), 4.0);
    assert_eq!(pool_cpu("bi"), 0.0);
    for id in [prod4, chyt4, prod12, testing8, bi4] {
        lab.ytsched(&["abort-operation", &id]);
    }
}

#[test]
fn scheduler_config_file_sets_up_trees_and_pools() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trees.yaml");
    std::fs::write(
        &path,
        r#"
pool_trees:
  default:
    config: {max_running_operation_count_per_pool: 2}
    pools:
      company:
        strong_guarantee_resources: {cpu: 24}
        pools:
          development: {weight: 2, mode: fifo}
"#,
    )
    .unwrap();
    let lab = Lab::start_with(&["--config", path.to_str().unwrap()], vec![]).unwrap();
    let cpu: Value = lab
        .json(&[
            "get",
            "//sys/pool_trees/default/company/@strong_guarantee_resources/cpu",
        ])
        .unwrap();
    assert_eq!(cpu, 24.0);
    let mode: Value = lab
        .json(&["get", "//sys/pool_trees/default/company/development/@mode"])
        .unwrap();
    assert_eq!(mode, "fifo");
    let limit: Value = lab
        .json(&[
            "get",
            "//sys/pool_trees/default/company/development/@max_running_operation_count",
        ])
        .unwrap();
    assert_eq!(limit, 2, "the tree's per-pool default applies");

    // A broken config file stops the scheduler with a message naming the problem.
    std::fs::write(&path, "pool_trees: {default: {pools: {a: {weight: 0}}}}\n").unwrap();
    let out = std::process::Command::new(binary("ytsched-scheduler"))
        .args(["--nats", &lab.nats_url, "--subject-prefix", "unused-prefix"])
        .arg("--creds")
        .arg(lab.creds("scheduler"))
        .args(["--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pool 'a'") && err.contains("weight"), "{err}");
}

#[test]
fn scenario_15_integral_volume_accumulates_on_a_real_lab() {
    let lab = Lab::start(vec![seed_cluster_node()]).unwrap();
    create_pool(
        &lab,
        "example",
        None,
        "{integral_guarantees={resource_flow={cpu=1}}}",
    );
    create_pool(
        &lab,
        "integral",
        Some("example"),
        "{integral_guarantees={guarantee_type=relaxed;resource_flow={cpu=1}}}",
    );
    let path = "//sys/scheduler/orchid/scheduler/pool_trees/default/pools/integral";
    let sample = || -> (std::time::Instant, f64, f64) {
        let p: Value = lab.json(&["get", path]).unwrap();
        (
            std::time::Instant::now(),
            p["accumulated_resource_volume"]["cpu"].as_f64().unwrap(),
            p["accumulated_resource_ratio_volume"].as_f64().unwrap(),
        )
    };
    wait_until(Duration::from_secs(10), || {
        let p: Value = lab.json(&["get", path]).ok()?;
        p.get("accumulated_resource_volume").map(|_| ())
    })
    .unwrap();
    let (t0, cpu0, ratio0) = sample();
    std::thread::sleep(Duration::from_secs(5));
    let (t1, cpu1, ratio1) = sample();
    let seconds = (t1 - t0).as_secs_f64();
    let rate = (cpu1 - cpu0) / seconds;
    // The orchid is as of the last update (every 200 ms): allow that much of slack.
    assert!(
        (rate - 1.0).abs() <= 0.05 + 0.2 / seconds,
        "{rate} cpu·s per second"
    );
    let ratio_rate = (ratio1 - ratio0) / seconds;
    assert!(
        (ratio_rate * 24.0 - 1.0).abs() <= 0.05 + 0.2 / seconds,
        "{ratio_rate}"
    );
}
