//! SPEC §7 scenarios 2, 3, 4, 6–7, 8, 9, 10, 12 and 13, run from `scenarios/` through the
//! real `ytsched simulate` binary, with the figures of §7 asserted within 0.01.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use ytsched_tests::binary;

fn scenario_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

fn simulate_file(path: &std::path::Path) -> (Value, String) {
    let out = Command::new(binary("ytsched"))
        .arg("simulate")
        .arg(path)
        .output()
        .expect("run ytsched simulate");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "simulate {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_str(&stdout).expect("JSON output"), stdout)
}

/// The last snapshot's default tree, after checking nothing was rejected.
fn run(name: &str) -> Value {
    let (out, _) = simulate_file(&scenario_path(name));
    assert_eq!(out["errors"], serde_json::json!([]), "{name}");
    out["snapshots"].as_array().unwrap().last().unwrap()["pool_trees"]["default"].clone()
}

fn close(actual: &Value, expected: f64, what: &str) {
    let a = actual
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {actual}"));
    assert!(
        (a - expected).abs() <= 0.01,
        "{what}: expected {expected}, got {a}"
    );
}

fn op<'a>(tree: &'a Value, id: &str) -> &'a Value {
    &tree["operations"][id]
}

fn pool<'a>(tree: &'a Value, name: &str) -> &'a Value {
    &tree["pools"][name]
}

#[test]
fn scenario_02_six_equal_operations() {
    let t = run("02-six-equal-operations.yaml");
    for i in 1..=6 {
        let o = op(&t, &format!("op{i}"));
        close(&o["demand_ratio"], 0.25, "demand");
        close(&o["fair_share_ratio"], 1.0 / 6.0, "fair share");
        close(&o["usage_ratio"], 1.0 / 6.0, "usage once settled");
    }
    close(&pool(&t, "research")["demand_ratio"], 1.5, "pool demand");
}

#[test]
fn scenario_03_weights() {
    let t = run("03-weights.yaml");
    for (id, share) in [("w1", 1.0 / 6.0), ("w2", 2.0 / 6.0), ("w3", 3.0 / 6.0)] {
        close(&op(&t, id)["fair_share_ratio"], share, id);
        close(&op(&t, id)["usage_ratio"], share, id);
    }
    assert_eq!(pool(&t, "root")["is_ephemeral"], true);
}

#[test]
fn scenario_04_two_pools_split_by_weight_inside() {
    let t = run("04-two-pools.yaml");
    for p in ["a", "b"] {
        close(&pool(&t, p)["fair_share_ratio"], 0.5, p);
        for w in 1..=3 {
            let id = format!("{p}{w}");
            close(&op(&t, &id)["fair_share_ratio"], w as f64 / 12.0, &id);
        }
    }
}

#[test]
fn scenario_06_07_guaranteed_pools_take_the_cluster() {
    let t = run("06-07-guarantees.yaml");
    let cpu = |v: &Value| v["detailed_fair_share"]["total"]["cpu"].clone();
    close(&cpu(pool(&t, "production")), 16.0 / 24.0, "production");
    close(&cpu(pool(&t, "chyt")), 4.0 / 24.0, "chyt");
    close(&cpu(pool(&t, "testing")), 4.0 / 24.0, "testing");
    close(&cpu(pool(&t, "bi")), 0.0, "bi");
    close(
        &pool(&t, "company")["usage_ratio"],
        1.0,
        "the whole cluster is used",
    );
    assert_eq!(op(&t, "bi4")["running_job_count"], 0);
    assert_eq!(op(&t, "testing8")["running_job_count"], 4);
    let running: u64 = ["prod4", "prod12"]
        .iter()
        .map(|id| op(&t, id)["running_job_count"].as_u64().unwrap())
        .sum();
    assert_eq!(running, 16);
    // The guarantee part is visible in the detailed split.
    close(
        &pool(&t, "production")["detailed_fair_share"]["strong_guarantee"]["cpu"],
        16.0 / 24.0,
        "production strong guarantee part",
    );
    close(
        &pool(&t, "production")["effective_strong_guarantee_resources"]["cpu"],
        16.0,
        "effective guarantee in cpus",
    );
}

#[test]
fn scenario_08_limits_beat_demand_and_guarantees() {
    let t = run("08-limits.yaml");
    close(
        &pool(&t, "testing")["fair_share_ratio"],
        5.0 / 24.0,
        "testing fair share",
    );
    close(
        &pool(&t, "testing")["resource_usage"]["cpu"],
        5.0,
        "testing usage stays at its limit though capacity is free",
    );
    close(
        &pool(&t, "chyt")["resource_usage"]["cpu"],
        3.0,
        "limit 3 beats guarantee 4",
    );
    close(
        &op(&t, "chyt8")["fair_share_ratio"],
        3.0 / 24.0,
        "chyt op fair share",
    );
}

#[test]
fn scenario_09_per_resource_fair_shares() {
    let t = run("09-vector-demands.yaml");
    let c = op(&t, "cpuheavy");
    let m = op(&t, "memheavy");
    assert_eq!(c["dominant_resource"], "cpu");
    assert_eq!(m["dominant_resource"], "memory");
    let fs = |o: &Value, r: &str| o["detailed_fair_share"]["total"][r].clone();
    close(&fs(c, "cpu"), 0.8, "cpu-heavy cpu");
    close(&fs(c, "memory"), 0.16, "cpu-heavy memory");
    close(&fs(m, "cpu"), 0.2, "memory-heavy cpu");
    close(&fs(m, "memory"), 0.8, "memory-heavy memory");
    close(&c["fair_share_ratio"], 0.8, "dominant fair share");
    close(&m["fair_share_ratio"], 0.8, "dominant fair share");
}

#[test]
fn scenario_10_vector_guarantee_gives_memory() {
    let t = run("10-vector-guarantees.yaml");
    let chyt = op(&t, "chytmem");
    close(
        &chyt["detailed_fair_share"]["total"]["memory"],
        16.0 / 60.0,
        "chyt's guaranteed memory share",
    );
    assert_eq!(chyt["running_job_count"], 4, "16 GiB fits four 4 GiB jobs");
    close(
        &pool(&t, "development")["effective_strong_guarantee_resources"]["memory"],
        (54.0 - 16.0) * (1u64 << 30) as f64,
        "development's implicit memory shrinks to what analytics leaves",
    );
    assert_eq!(op(&t, "prod")["running_job_count"], 20);
}

#[test]
fn scenario_12_fifo_in_submission_order() {
    let t = run("12-fifo.yaml");
    let expected = [5, 5, 5, 5, 4, 0];
    for (i, jobs) in expected.iter().enumerate() {
        let o = op(&t, &format!("f{}", i + 1));
        assert_eq!(o["fifo_index"], i, "f{}", i + 1);
        assert_eq!(o["running_job_count"], *jobs, "f{}", i + 1);
        close(
            &o["fair_share_ratio"],
            *jobs as f64 / 24.0,
            "fifo fair share",
        );
    }
}

#[test]
fn same_scenario_same_output_byte_for_byte() {
    let path = scenario_path("06-07-guarantees.yaml");
    let (_, a) = simulate_file(&path);
    let (_, b) = simulate_file(&path);
    assert_eq!(a, b);
}

#[test]
fn invalid_scenarios_exit_2_with_the_service_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "resources: {cpu: 4}\npool_trees: {default: {pools: {p: {weight: heavy}}}}\nuntil: 1\n",
            "weight",
        ),
        (
            "resources: {cpu: 4}\npool_trees: {default: {pools: {p: {mode: fifo, pools: {q: {}}}}}}\nuntil: 1\n",
            "FIFO",
        ),
        (
            "resources: {cpu: 4}\nevents: [{at: 1, frobnicate: x}]\nuntil: 1\n",
            "frobnicate",
        ),
        ("resources: {cpu: 4}\nuntill: 1\n", "untill"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let out = Command::new(binary("ytsched"))
            .arg("simulate")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "case {i}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "case {i}: {err}");
    }
}

#[test]
fn specs_the_service_would_refuse_are_rejected_submissions_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rejected.yaml");
    std::fs::write(
        &path,
        r#"
resources: {cpu: 4, memory: 8G}
operations:
  - {id: zero, spec: {tasks: {t: {job_count: 0}}}}
  - {id: unknown, at: 1, spec: {tasks: {t: {job_count: 1}}, colour: blue}}
  - {id: badpool, at: 2, spec: {pool: "no such pool!", tasks: {t: {job_count: 1}}}}
  - {id: negative, at: 3, spec: {tasks: {t: {job_count: 1, cpu_limit: -1}}}}
  - {id: fine, at: 3, spec: {tasks: {t: {job_count: 1}}}}
until: 5
"#,
    )
    .unwrap();
    let (out, _) = simulate_file(&path);
    let errors = out["errors"].as_array().unwrap();
    let by_op: Vec<(&str, f64, &str)> = errors
        .iter()
        .map(|e| {
            (
                e["operation"].as_str().unwrap(),
                e["time"].as_f64().unwrap(),
                e["error"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(by_op.len(), 4, "{by_op:?}");
    assert_eq!((by_op[0].0, by_op[0].1), ("zero", 0.0));
    assert!(by_op[0].2.contains("job_count"), "{by_op:?}");
    assert_eq!((by_op[1].0, by_op[1].1), ("unknown", 1.0));
    assert!(by_op[1].2.contains("colour"), "{by_op:?}");
    assert_eq!((by_op[2].0, by_op[2].1), ("badpool", 2.0));
    assert!(by_op[2].2.contains("pool"), "{by_op:?}");
    assert_eq!((by_op[3].0, by_op[3].1), ("negative", 3.0));
    assert!(by_op[3].2.contains("cpu_limit"), "{by_op:?}");
    // The run went on: the valid operation ran; the rejected ones never appear.
    let ops = &out["snapshots"][0]["pool_trees"]["default"]["operations"];
    let ids: Vec<&String> = ops.as_object().unwrap().keys().collect();
    assert_eq!(ids, vec!["fine"], "{ops}");
}

#[test]
fn rejected_submissions_and_admin_actions_are_reported_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::write(
        &path,
        r#"
resources: {cpu: 4, memory: 8G}
pool_trees:
  default:
    pools:
      small: {max_operation_count: 1, max_running_operation_count: 1}
operations:
  - {id: a, spec: {pool: small, tasks: {t: {job_count: 1, duration: 2}}}}
  - {id: b, at: 0.5, spec: {pool: small, tasks: {t: {job_count: 1}}}}
events:
  - {at: 1, set: {path: "//sys/pool_trees/default/small/@weight", value: -1}}
  - {at: 1, set: {path: "//sys/pool_trees/default/small/@weight", value: 3}}
until: 5
"#,
    )
    .unwrap();
    let (out, _) = simulate_file(&path);
    let errors = out["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    let text = serde_json::to_string(errors).unwrap();
    assert!(
        text.contains("pool 'small'") && text.contains("max_operation_count is 1"),
        "{text}"
    );
    assert!(text.contains("weight"), "{text}");
    let tree = &out["snapshots"][0]["pool_trees"]["default"];
    assert_eq!(
        tree["pools"]["small"]["weight"], 3.0,
        "the valid set applied"
    );
    let events = serde_json::to_string(&out["snapshots"][0]["events"]).unwrap();
    assert!(
        events.contains(r#""type":"operation_finished""#)
            && events.contains(r#""state":"completed""#),
        "{events}"
    );
}

#[test]
fn scenario_11_preemption_after_it_is_allowed() {
    let (out, _) = simulate_file(&scenario_path("11-preemption.yaml"));
    assert_eq!(out["errors"], serde_json::json!([]));
    let snaps = out["snapshots"].as_array().unwrap();
    let before = &snaps[0]["pool_trees"]["default"]["operations"];
    assert_eq!(before["a"]["running_job_count"], 20);
    assert_eq!(
        before["b"]["running_job_count"], 4,
        "no preemption while it is off"
    );
    assert_eq!(before["b"]["starvation_status"], "starving");
    assert_eq!(before["a"]["preemptible_job_count"], 8);
    let none_before = snaps[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["type"] != "job_aborted");
    assert!(none_before);
    let after = &snaps[1]["pool_trees"]["default"]["operations"];
    assert_eq!(after["a"]["running_job_count"], 12);
    assert_eq!(after["b"]["running_job_count"], 12);
    close(&after["b"]["fair_share_ratio"], 0.5, "b fair share");
    let aborted: Vec<&Value> = snaps[1]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "job_aborted")
        .collect();
    assert_eq!(aborted.len(), 8, "as few as needed");
    for (k, e) in aborted.iter().enumerate() {
        assert_eq!(e["reason"], "preempted");
        assert_eq!(e["operation"]["id"], "a");
        // A's newest jobs go first: a-19, a-18, ...
        assert_eq!(e["job"]["id"], format!("a-{}", 19 - k));
        assert!(e["time"].as_f64().unwrap() >= 10.0);
    }
}

#[test]
fn aggressive_preemption_only_where_aggressive_starvation_is_enabled() {
    let dir = tempfile::tempdir().unwrap();
    for (enabled, expect_jobs) in [(true, 1), (false, 0)] {
        // Two 8-cpu nodes full of small jobs that regular preemption may not take
        // (allow_regular_preemption: false); a half-node job of a third operation can
        // only get in by aggressive preemption.
        let text = format!(
            r#"
nodes:
  - {{id: n1, resources: {{cpu: 8, memory: 32G}}}}
  - {{id: n2, resources: {{cpu: 8, memory: 32G}}}}
pool_trees:
  default:
    config:
      fair_share_starvation_timeout: 1s
      fair_share_aggressive_starvation_timeout: 3s
      enable_aggressive_starvation: {enabled}
      preemptive_scheduling_backoff: 1s
    pools:
      small: {{allow_regular_preemption: false}}
      big: {{}}
operations:
  - {{id: s1, spec: {{pool: small, tasks: {{t: {{job_count: 8}}}}}}}}
  - {{id: s2, spec: {{pool: small, tasks: {{t: {{job_count: 8}}}}}}}}
  - {{id: big, at: 2, spec: {{pool: big, tasks: {{t: {{job_count: 1, cpu_limit: 4}}}}}}}}
snapshots: [20]
until: 20
"#
        );
        let path = dir.path().join(format!("aggr-{enabled}.yaml"));
        std::fs::write(&path, text).unwrap();
        let (out, _) = simulate_file(&path);
        let ops = &out["snapshots"][0]["pool_trees"]["default"]["operations"];
        assert_eq!(
            ops["big"]["running_job_count"], expect_jobs,
            "aggressive={enabled}: {ops}"
        );
        let small: u64 = ["s1", "s2"]
            .iter()
            .map(|id| ops[*id]["running_job_count"].as_u64().unwrap())
            .sum();
        if enabled {
            assert_eq!(
                small, 12,
                "four one-cpu jobs made room for one four-cpu job"
            );
        } else {
            assert_eq!(small, 16);
            assert_eq!(ops["big"]["starvation_status"], "starving");
        }
    }
}

#[test]
fn lowered_resource_limits_preempt_the_excess() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::write(
        &path,
        r#"
resources: {cpu: 24, memory: 60G}
pool_trees:
  default:
    pools:
      testing: {}
operations:
  - {id: t, spec: {pool: testing, tasks: {task: {job_count: 8}}}}
events:
  - {at: 5, set: {path: "//sys/pool_trees/default/testing/@resource_limits", value: {cpu: 5}}}
snapshots: [4, 10]
until: 10
"#,
    )
    .unwrap();
    let (out, _) = simulate_file(&path);
    let snaps = out["snapshots"].as_array().unwrap();
    assert_eq!(
        snaps[0]["pool_trees"]["default"]["operations"]["t"]["running_job_count"],
        8
    );
    let after = &snaps[1]["pool_trees"]["default"];
    assert_eq!(after["operations"]["t"]["running_job_count"], 5);
    close(
        &after["pools"]["testing"]["resource_usage"]["cpu"],
        5.0,
        "usage fits the new limit",
    );
    let aborted: Vec<&Value> = snaps[1]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "job_aborted")
        .collect();
    assert_eq!(aborted.len(), 3);
    assert!(aborted
        .iter()
        .all(|e| e["reason"] == "resource_limits_violation"));
    // The newest jobs went: t-7, t-6, t-5.
    let ids: Vec<&str> = aborted
        .iter()
        .map(|e| e["job"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["t-7", "t-6", "t-5"]);
}

#[test]
fn scenario_15_idle_relaxed_pool_accumulates_its_flow() {
    let (out, _) = simulate_file(&scenario_path("15-integral-accumulation.yaml"));
    assert_eq!(out["errors"], serde_json::json!([]));
    for snap in out["snapshots"].as_array().unwrap() {
        let t = snap["time"].as_f64().unwrap();
        let p = &snap["pool_trees"]["default"]["pools"]["integral"];
        let cpu = p["accumulated_resource_volume"]["cpu"].as_f64().unwrap();
        assert!((cpu - t).abs() <= 0.05 * t, "{cpu} cpu·s after {t} s");
        close(
            &p["accumulated_resource_ratio_volume"],
            t / 24.0,
            "ratio volume",
        );
        assert_eq!(p["integral_guarantee_type"], "relaxed");
        close(
            &p["integral_pool_capacity"]["cpu"],
            86_400.0,
            "capacity = k × flow",
        );
    }
}

/// Runs an integral scenario on a 1,000-cpu cluster (10 nodes of 100) with a small k.
fn integral_run(dir: &std::path::Path, name: &str, pools: &str, ops: &str, extra: &str) -> Value {
    let text = format!(
        r#"
cluster: {{node_count: 10, resources: {{cpu: 100, memory: 1000G}}}}
pool_trees:
  default:
    config:
      integral_guarantees: {{pool_capacity_saturation_period: 20s, smooth_period: 1s}}
    pools:
{pools}
operations:
{ops}
{extra}
"#
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let (out, _) = simulate_file(&path);
    assert_eq!(out["errors"], serde_json::json!([]), "{name}");
    out
}

fn pool_at<'a>(out: &'a Value, t: f64, pool: &str) -> &'a Value {
    let snap = out["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| (s["time"].as_f64().unwrap() - t).abs() < 1e-9)
        .unwrap_or_else(|| panic!("no snapshot at {t}"));
    &snap["pool_trees"]["default"]["pools"][pool]
}

#[test]
fn burst_pool_gets_its_burst_while_volume_lasts_then_refills() {
    let dir = tempfile::tempdir().unwrap();
    let out = integral_run(
        dir.path(),
        "burst.yaml",
        "      burst: {integral_guarantees: {guarantee_type: burst, resource_flow: {cpu: 100}, burst_guarantee_resources: {cpu: 500}}}\n      busy: {weight: 4}",
        "  - {id: b, at: 30, spec: {pool: burst, tasks: {t: {job_count: 100, cpu_limit: 10}}}}\n  - {id: x, at: 30, spec: {pool: busy, tasks: {t: {job_count: 100, cpu_limit: 10}}}}",
        "events:\n  - {at: 50, abort_operation: b}\nsnapshots: [30, 31, 33, 45, 50, 60]\nuntil: 60",
    );
    // Idle: the volume fills to capacity k × flow = 20 s × 0.1.
    close(
        &pool_at(&out, 30.0, "burst")["accumulated_resource_ratio_volume"],
        2.0,
        "full",
    );
    close(
        &pool_at(&out, 30.0, "burst")["estimated_burst_usage_duration_seconds"],
        5.0,
        "2.0 / (0.5 − 0.1)",
    );
    // With demand: the burst share, paid from the volume at (500 − 100) cpu/s, and
    // weights on top of it (SPEC 5.7): 0.5 + f + 4f = 1 → f = 0.1 → 0.6.
    for t in [31.0, 33.0] {
        let p = pool_at(&out, t, "burst");
        close(
            &p["fair_share_ratio"],
            0.6,
            "burst share while volume lasts, plus its weight's part",
        );
        close(
            &p["detailed_fair_share"]["integral_guarantee"]["cpu"],
            0.5,
            "all of it integral",
        );
    }
    let drained = pool_at(&out, 33.0, "burst")["accumulated_resource_volume"]["cpu"]
        .as_f64()
        .unwrap();
    let expected = 2000.0 - 3.0 * 400.0;
    assert!(
        (drained - expected).abs() <= 0.05 * 2000.0,
        "{drained} vs {expected}"
    );
    // Volume spent: back to what weights (and the trickle of flow) give; the integral
    // part never exceeds the burst ratio.
    let late = pool_at(&out, 45.0, "burst")["fair_share_ratio"]
        .as_f64()
        .unwrap();
    assert!((0.2..0.35).contains(&late), "{late}");
    for t in [30.0, 31.0, 33.0, 45.0, 50.0, 60.0] {
        let p = pool_at(&out, t, "burst");
        let integral = p["detailed_fair_share"]["integral_guarantee"]["cpu"]
            .as_f64()
            .unwrap();
        assert!(integral <= 0.5 + 1e-9, "{integral} at {t}");
        let fs = p["fair_share_ratio"].as_f64().unwrap();
        assert!(fs <= 0.6 + 1e-9, "{fs} at {t}");
    }
    // Idle again: it refills at the flow.
    let v50 = pool_at(&out, 50.0, "burst")["accumulated_resource_ratio_volume"]
        .as_f64()
        .unwrap();
    let v60 = pool_at(&out, 60.0, "burst")["accumulated_resource_ratio_volume"]
        .as_f64()
        .unwrap();
    assert!((v60 - v50 - 1.0).abs() < 0.1, "{v50} → {v60}");
}

#[test]
fn relaxed_pool_is_capped_at_three_flows_and_gets_its_flow_on_average() {
    let dir = tempfile::tempdir().unwrap();
    // Over a long window the volume saved up before it (2.0) matters little.
    let snapshots: Vec<String> = (21..=200).map(|t| t.to_string()).collect();
    let out = integral_run(
        dir.path(),
        "relaxed.yaml",
        "      relaxed: {integral_guarantees: {guarantee_type: relaxed, resource_flow: {cpu: 100}}}\n      busy: {weight: 9}",
        "  - {id: r, at: 20, spec: {pool: relaxed, tasks: {t: {job_count: 100, cpu_limit: 10}}}}\n  - {id: x, at: 20, spec: {pool: busy, tasks: {t: {job_count: 100, cpu_limit: 10}}}}",
        &format!("snapshots: [{}]\nuntil: 200", snapshots.join(", ")),
    );
    let mut integral = 0.0;
    let mut max_integral: f64 = 0.0;
    for t in 21..=200 {
        let p = pool_at(&out, t as f64, "relaxed");
        let part = p["detailed_fair_share"]["integral_guarantee"]["cpu"]
            .as_f64()
            .unwrap();
        integral += part;
        max_integral = max_integral.max(part);
        // Weights add on top of the integral part, within ordinary limits (SPEC 5.7):
        // at most 0.3 + f with 0.3 + f + 9f = 1.
        let fs = p["fair_share_ratio"].as_f64().unwrap();
        assert!(fs <= 0.37 + 1e-9, "{fs} at {t}");
    }
    assert!(
        max_integral <= 0.3 + 1e-9,
        "capped at 3 × flow: {max_integral}"
    );
    assert!(
        max_integral > 0.29,
        "it did use its accumulated volume: {max_integral}"
    );
    let average = integral / 180.0;
    assert!(
        (average - 0.1).abs() < 0.02,
        "average integral share {average}"
    );
}

#[test]
fn integral_share_comes_on_top_of_the_strong_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let out = integral_run(
        dir.path(),
        "strong.yaml",
        "      burst: {strong_guarantee_resources: {cpu: 200}, integral_guarantees: {guarantee_type: burst, resource_flow: {cpu: 100}, burst_guarantee_resources: {cpu: 500}}}\n      busy: {weight: 4}",
        "  - {id: b, at: 30, spec: {pool: burst, tasks: {t: {job_count: 100, cpu_limit: 10}}}}\n  - {id: x, at: 30, spec: {pool: busy, tasks: {t: {job_count: 100, cpu_limit: 10}}}}",
        "snapshots: [30, 32]\nuntil: 32",
    );
    let p = pool_at(&out, 32.0, "burst");
    close(
        &p["detailed_fair_share"]["strong_guarantee"]["cpu"],
        0.2,
        "strong part",
    );
    // The whole burst ratio, on top of the strong guarantee (SPEC 5.7).
    close(
        &p["detailed_fair_share"]["integral_guarantee"]["cpu"],
        0.5,
        "integral part",
    );
    // Weights on top: 0.7 + f + 4f = 1 → f = 0.06.
    close(&p["fair_share_ratio"], 0.76, "total");
    let v = p["accumulated_resource_ratio_volume"].as_f64().unwrap();
    // Two seconds at 0.5 − 0.1 net: 2.0 − 0.8.
    assert!((v - 1.2).abs() < 0.1, "{v}");
}

#[test]
fn seed_production_and_research_share_2000_cpus_over_a_day() {
    let (out, _) = simulate_file(&scenario_path("integral-production-research.yaml"));
    assert_eq!(out["errors"], serde_json::json!([]));
    // Day two (200 s .. 400 s): production works in its second half.
    let mut research = vec![];
    for snap in out["snapshots"].as_array().unwrap() {
        let t = snap["time"].as_f64().unwrap();
        if t >= 400.0 {
            continue;
        }
        let pools = &snap["pool_trees"]["default"]["pools"];
        let prod = pools["production"]["fair_share_ratio"].as_f64().unwrap();
        let res = pools["research"]["fair_share_ratio"].as_f64().unwrap();
        assert!(prod + res <= 1.0 + 1e-9);
        if t >= 300.0 {
            assert!(prod >= 0.99, "production's 2,000-cpu burst at {t}: {prod}");
        }
        research.push(res);
    }
    let average = research.iter().sum::<f64>() / research.len() as f64;
    assert!(
        (average - 0.5).abs() < 0.03,
        "research averages 1,000 cpus: {average}"
    );
}

#[test]
fn strong_plus_burst_above_the_cluster_are_scaled_together_with_an_alert() {
    let dir = tempfile::tempdir().unwrap();
    let out = integral_run(
        dir.path(),
        "overcommit.yaml",
        "      strong: {strong_guarantee_resources: {cpu: 600}}\n      burst: {integral_guarantees: {guarantee_type: burst, resource_flow: {cpu: 100}, burst_guarantee_resources: {cpu: 800}}}",
        "  - {id: s, spec: {pool: strong, tasks: {t: {job_count: 100, cpu_limit: 10}}}}\n  - {id: b, at: 30, spec: {pool: burst, tasks: {t: {job_count: 100, cpu_limit: 10}}}}",
        "snapshots: [31]\nuntil: 31",
    );
    let tree = &out["snapshots"][0]["pool_trees"]["default"];
    let alerts = serde_json::to_string(&tree["alerts"]).unwrap();
    assert!(
        alerts.contains("burst guarantees") && alerts.contains("exceed the cluster"),
        "{alerts}"
    );
    close(
        &tree["pools"]["burst"]["fair_share_ratio"],
        0.8 / 1.4,
        "burst scaled",
    );
    close(
        &tree["pools"]["strong"]["fair_share_ratio"],
        0.6 / 1.4,
        "strong scaled",
    );
    close(
        &tree["pools"]["strong"]["strong_guarantee_share"]["cpu"],
        0.6 / 1.4,
        "the guarantee share shows the scaling",
    );
    close(
        &tree["pools"]["strong"]["effective_strong_guarantee_resources"]["cpu"],
        600.0,
        "effective resources stay as configured (SPEC 5.1)",
    );
}

#[test]
fn scenario_13_tagged_node_serves_its_own_tree_until_untagged() {
    let (out, _) = simulate_file(&scenario_path("13-pool-trees.yaml"));
    assert_eq!(out["errors"], serde_json::json!([]));
    let snaps = out["snapshots"].as_array().unwrap();
    let (tagged, untagged) = (&snaps[0]["pool_trees"], &snaps[1]["pool_trees"]);
    close(
        &tagged["other"]["resource_limits"]["cpu"],
        8.0,
        "other holds n3",
    );
    close(
        &tagged["default"]["resource_limits"]["cpu"],
        16.0,
        "default holds n1, n2",
    );
    close(
        &op(&tagged["other"], "in_other")["resource_usage"]["cpu"],
        8.0,
        "other op",
    );
    close(
        &op(&tagged["default"], "in_default")["resource_usage"]["cpu"],
        16.0,
        "default op",
    );
    let placed_on = |events: &Value, op: &str| -> std::collections::BTreeSet<String> {
        events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "job_started" && e["operation"]["id"] == op)
            .map(|e| e["job"]["node"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        placed_on(&snaps[0]["events"], "in_other"),
        ["n3".to_string()].into()
    );
    assert!(!placed_on(&snaps[0]["events"], "in_default").contains("n3"));

    close(
        &untagged["other"]["resource_limits"]["cpu"],
        0.0,
        "other is empty",
    );
    close(
        &untagged["default"]["resource_limits"]["cpu"],
        24.0,
        "n3 is back",
    );
    close(
        &op(&untagged["default"], "in_default")["resource_usage"]["cpu"],
        24.0,
        "default op",
    );
    let aborted = snaps[1]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "job_aborted" && e["reason"] == "node_fair_share_tree_changed")
        .count();
    assert_eq!(aborted, 8, "n3's jobs of `other` were aborted when it left");
    assert_eq!(op(&untagged["other"], "in_other")["pending_job_count"], 30);
}

/// `ytsched … | head`: the reader going away ends the CLI quietly (no panic, no
/// "Broken pipe" message). The output here is far larger than a pipe's buffer, so the
/// CLI is still writing when `head` leaves.
#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    let scenario = scenario_path("integral-production-research.yaml");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' simulate '{}' | head -c 10",
            binary("ytsched").display(),
            scenario.display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.stdout.len(), 10);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn snapshot_tree(out: &Value, t: f64) -> &Value {
    &out["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| (s["time"].as_f64().unwrap() - t).abs() < 1e-9)
        .unwrap_or_else(|| panic!("no snapshot at {t}"))["pool_trees"]["default"]
}

fn events_at(out: &Value, t: f64) -> Vec<Value> {
    out["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| (s["time"].as_f64().unwrap() - t).abs() < 1e-9)
        .unwrap()["events"]
        .as_array()
        .unwrap()
        .clone()
}

/// SPEC 5.14 through `simulate` (6.3 events): a move to another pool, a refused move
/// into a pool at its limit, a suspension with its jobs aborted (its share goes to the
/// other pool, its demand is its usage), and a resume (its share back, its jobs taken
/// back by preemption down to the starvation tolerance).
#[test]
fn scenario_16_update_suspend_resume() {
    let (out, _) = simulate_file(&scenario_path("16-update-suspend-resume.yaml"));
    let errors = out["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["time"], 5.0);
    let e = errors[0]["error"].as_str().unwrap();
    assert!(
        e.contains("pool 'full'") && e.contains("max_running_operation_count is 1"),
        "{e}"
    );
    let before = snapshot_tree(&out, 9.0);
    assert_eq!(
        op(before, "a2")["pool"],
        "a",
        "the refused move changed nothing"
    );
    close(&pool(before, "b")["fair_share_ratio"], 0.0, "b empty");

    let moved = snapshot_tree(&out, 19.0);
    assert_eq!(op(moved, "a2")["pool"], "b");
    assert_eq!(op(moved, "a2")["weight"], 2.0);
    close(
        &pool(moved, "a")["fair_share_ratio"],
        0.5,
        "a after the move",
    );
    close(
        &pool(moved, "b")["fair_share_ratio"],
        0.5,
        "b after the move",
    );
    close(
        &pool(moved, "b")["usage_ratio"],
        0.5,
        "a2's jobs count in b",
    );
    let updated: Vec<_> = events_at(&out, 19.0)
        .into_iter()
        .filter(|e| e["type"] == "operation_parameters_updated")
        .collect();
    assert_eq!(updated.len(), 1, "{updated:?}");
    assert_eq!(updated[0]["parameters"], "pool=b weight=2");

    let suspended = snapshot_tree(&out, 29.0);
    let a1 = op(suspended, "a1");
    assert_eq!(a1["suspended"], true);
    assert_eq!(a1["unschedulable_reason"], "suspended");
    close(&a1["resource_demand"]["cpu"], 0.0, "demand is usage: none");
    close(&a1["fair_share_ratio"], 0.0, "no share it cannot use");
    close(
        &pool(suspended, "b")["fair_share_ratio"],
        1.0,
        "b takes it all",
    );
    close(&pool(suspended, "b")["usage_ratio"], 1.0, "and runs on it");
    let aborted = events_at(&out, 29.0)
        .into_iter()
        .filter(|e| e["type"] == "job_aborted" && e["reason"] == "suspended")
        .count();
    assert_eq!(aborted, 12, "a1's running jobs");

    let resumed = snapshot_tree(&out, 60.0);
    let a1 = op(resumed, "a1");
    assert_eq!(a1["suspended"], false);
    assert!(a1.get("unschedulable_reason").is_none(), "{a1}");
    close(&a1["fair_share_ratio"], 0.5, "its share back");
    let usage = a1["usage_ratio"].as_f64().unwrap();
    assert!(
        (0.4..=0.5).contains(&usage),
        "taken back to the starvation tolerance: {usage}"
    );
}

/// SPEC 5.3 / 6.3 through `simulate`: a graceful victim is sent its interruption signal
/// when its preemptor starves (3 s), keeps its room for `job_graceful_interrupt_timeout`
/// (5 s), exits as preempted at 8 s, and only then does the preemptor start.
#[test]
fn scenario_17_graceful_preemption() {
    let (out, _) = simulate_file(&scenario_path("17-graceful-preemption.yaml"));
    assert_eq!(out["errors"], serde_json::json!([]));
    let all: Vec<Value> = out["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["events"].as_array().unwrap().clone())
        .collect();
    let at = |pred: &dyn Fn(&Value) -> bool| -> Vec<f64> {
        all.iter()
            .filter(|e| pred(e))
            .map(|e| e["time"].as_f64().unwrap())
            .collect()
    };
    let interrupted = at(&|e| e["type"] == "job_interrupted");
    assert_eq!(interrupted.first(), Some(&3.0), "{all:?}");
    let victim_exits = at(&|e| {
        e["type"] == "job_aborted" && e["operation"]["id"] == "g" && e["reason"] == "preempted"
    });
    assert_eq!(victim_exits.first(), Some(&8.0), "{all:?}");
    let preemptor_starts = at(&|e| e["type"] == "job_started" && e["operation"]["id"] == "s");
    assert_eq!(preemptor_starts.first(), Some(&8.0), "{all:?}");
    let held = snapshot_tree(&out, 7.0);
    close(
        &op(held, "g")["usage_ratio"],
        1.0,
        "the victim still holds its room",
    );
    close(&op(held, "s")["usage_ratio"], 0.0, "nothing started in it");
    let after = snapshot_tree(&out, 12.0);
    close(
        &op(after, "s")["usage_ratio"],
        0.25,
        "one job of s after the first exit",
    );
}

/// SPEC 5.15 through `simulate`: a 4-job gang waits whole while one of two nodes is
/// busy (the orchid says `gang_does_not_fit`), then all four start at one instant.
#[test]
fn scenario_18_gang() {
    let (out, _) = simulate_file(&scenario_path("18-gang.yaml"));
    assert_eq!(out["errors"], serde_json::json!([]));
    let waiting = op(snapshot_tree(&out, 4.0), "g");
    assert_eq!(waiting["is_gang"], true);
    assert_eq!(waiting["running_job_count"], 0);
    assert_eq!(waiting["unschedulable_reason"], "gang_does_not_fit");
    let starts: Vec<f64> = events_at(&out, 8.0)
        .iter()
        .filter(|e| e["type"] == "job_started" && e["operation"]["id"] == "g")
        .map(|e| e["time"].as_f64().unwrap())
        .collect();
    assert_eq!(starts.len(), 4, "{starts:?}");
    assert!(
        starts.iter().all(|&t| t == starts[0] && t >= 5.0),
        "{starts:?}"
    );
    assert_eq!(op(snapshot_tree(&out, 8.0), "g")["running_job_count"], 4);
}

/// A scenario's node is declared, not claimed by a node key: approvals and trust on
/// first use (which would hold it to 1,024 user slots) do not bound it.
#[test]
fn a_declared_node_has_every_user_slot_it_declares() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big-node.yaml");
    std::fs::write(
        &path,
        r#"
nodes:
  - {id: big, resources: {cpu: 100000, memory: 1000T, user_slots: 100000}}
pool_trees:
  default:
    pools:
      research: {}
operations:
  - {id: one, spec: {pool: research, tasks: {task: {job_count: 1, cpu_limit: 1}}}}
snapshots: [5]
until: 5
"#,
    )
    .unwrap();
    let (out, _) = simulate_file(&path);
    let tree = &out["snapshots"][0]["pool_trees"]["default"];
    assert_eq!(tree["resource_limits"]["user_slots"], 100_000.0);
    let one = op(tree, "one");
    assert_eq!(one["running_job_count"], 1);
    let share = one["usage_share"]["user_slots"].as_f64().unwrap();
    assert!(
        (share - 1.0 / 100_000.0).abs() < 1e-12,
        "user-slot share {share}, not 1/100,000"
    );
}
