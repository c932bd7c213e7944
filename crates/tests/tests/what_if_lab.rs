//! `--dry-run` on a live lab (issue 17): the shares it predicts are the shares the
//! scheduler gives once the change is really made, and the dry run itself changes
//! nothing.

use serde_json::Value;
use std::time::Duration;
use ytsched_tests::*;

fn pool_ratio(lab: &Lab, pool: &str) -> Option<f64> {
    let path = format!(
        "//sys/scheduler/orchid/scheduler/pool_trees/default/pools/{pool}/fair_share_ratio"
    );
    let out = lab.ytsched(&["get", &path, "--format", "json"]);
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[test]
fn a_dry_run_predicts_the_shares_the_change_gives() {
    let lab = Lab::start(vec![NodeOpts::two_cpus()]).unwrap();
    for pool in ["a", "b"] {
        lab.ok(&["create", "scheduler_pool", "--name", pool]);
    }
    let mut ops = Vec::new();
    for pool in ["a", "b"] {
        ops.push(
            lab.submit_spec(&format!(
                "pool: {pool}\ntasks: {{t: {{command: 'sleep 60', job_count: 4}}}}"
            ))
            .unwrap(),
        );
    }
    wait_until(Duration::from_secs(15), || {
        let r = pool_ratio(&lab, "a")?;
        ((r - 0.5).abs() < 1e-6).then_some(())
    })
    .unwrap();

    let what_if: Value = lab
        .json(&[
            "set",
            "//sys/pool_trees/default/a/@weight",
            "3",
            "--dry-run",
            "--format",
            "json",
        ])
        .unwrap();
    let changes = what_if["changes"].as_array().unwrap();
    let row = |kind: &str, name: &str| {
        changes
            .iter()
            .find(|c| c["kind"] == kind && c["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {what_if}"))
            .clone()
    };
    let a = row("pool", "a");
    assert!((a["before"].as_f64().unwrap() - 0.5).abs() < 1e-6, "{a}");
    assert!((a["after"].as_f64().unwrap() - 0.75).abs() < 1e-6, "{a}");
    assert!((row("pool", "b")["after"].as_f64().unwrap() - 0.25).abs() < 1e-6);
    assert!(row("operation", &ops[0])["after"].as_f64().is_some());
    // Nothing changed.
    let out = lab.ytsched(&["exists", "//sys/pool_trees/default/a/@weight"]);
    let weight = lab.ok(&[
        "get",
        "//sys/pool_trees/default/a/@weight",
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    assert_ne!(weight.trim(), "3", "the dry run set nothing");
    assert!((pool_ratio(&lab, "a").unwrap() - 0.5).abs() < 1e-6);
    let table = lab.ytsched(&[
        "set",
        "//sys/pool_trees/default/a/@weight",
        "3",
        "--dry-run",
    ]);
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(
        stdout.contains("+25.00%") && stdout.contains("-25.00%"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&table.stderr).contains("nothing was changed"));

    // Made for real, the scheduler gives exactly what the dry run said.
    lab.ok(&["set", "//sys/pool_trees/default/a/@weight", "3"]);
    wait_until(Duration::from_secs(15), || {
        let r = pool_ratio(&lab, "a")?;
        ((r - a["after"].as_f64().unwrap()).abs() < 1e-9).then_some(())
    })
    .unwrap();
    let why = lab.ok(&["explain", "--pool", "a"]);
    assert!(
        why.contains("pool 'a' of tree 'default', child of '<Root>' (weight 3)")
            && why.contains("fair share 75.0%"),
        "{why}"
    );
    let out = lab.ytsched(&["explain", "--pool", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no pool 'nope' in tree 'default'"));
    for op in &ops {
        lab.ok(&["abort-operation", op]);
    }
}
