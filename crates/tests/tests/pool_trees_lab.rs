//! Several pool trees on real labs (SPEC 5.9, §7 scenario 13): node tagging through the
//! CLI, tree membership, re-tagging busy nodes, refused nodes, and a GPU tree.

use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;
use ytsched_tests::*;

fn small_node(extra: &[&str]) -> NodeOpts {
    let mut args = vec![
        "--cpu",
        "2",
        "--memory",
        "4G",
        "--nvidia-smi",
        "/nonexistent",
    ];
    args.extend_from_slice(extra);
    NodeOpts::args(&args)
}

fn tree_of(lab: &Lab, index: usize) -> Option<String> {
    lab.node_info(index)
        .and_then(|n| n["tree"].as_str().map(String::from))
}

fn wait_tree(lab: &Lab, index: usize, tree: &str) {
    wait_until(Duration::from_secs(10), || {
        (tree_of(lab, index).as_deref() == Some(tree)).then_some(())
    })
    .unwrap_or_else(|_| {
        panic!(
            "node{index} did not join tree {tree}: {:?}",
            lab.node_info(index)
        )
    });
}

/// Nodes every job of an operation ran on (all attempts).
fn job_nodes(lab: &Lab, op: &str) -> BTreeSet<String> {
    lab.jobs(op)
        .unwrap()
        .iter()
        .filter_map(|j| j["node_id"].as_str().map(String::from))
        .collect()
}

/// Scenario 13 as an admin does it: tag node2, filter `default` to `!custom_tag`, create
/// `other` with filter `custom_tag`.
fn scenario_13_lab() -> Lab {
    let lab = Lab::start(vec![small_node(&[]), small_node(&[]), small_node(&[])]).unwrap();
    lab.ok(&[
        "set",
        "//sys/cluster_nodes/node2/@user_tags",
        "[custom_tag]",
    ]);
    // Creating `other` now would put node2 in two trees: refused, naming it.
    let out = lab.ytsched(&[
        "create",
        "scheduler_pool_tree",
        "--name",
        "other",
        "--attributes",
        r#"{"nodes_filter": "custom_tag"}"#,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node2 (would match default and other)"),
        "{err}"
    );
    lab.ok(&[
        "set",
        "//sys/pool_trees/default/@config/nodes_filter",
        "\"!custom_tag\"",
    ]);
    lab.ok(&[
        "create",
        "scheduler_pool_tree",
        "--name",
        "other",
        "--attributes",
        "{config={nodes_filter=custom_tag}}",
    ]);
    wait_tree(&lab, 2, "other");
    lab
}

#[test]
fn scenario_13_and_retagging_a_busy_node() {
    let lab = scenario_13_lab();
    let node2 = lab.node_info(2).unwrap();
    assert_eq!(
        node2["user_tags"],
        serde_json::json!(["custom_tag"]),
        "{node2}"
    );
    assert_eq!(node2["state"], "online");
    assert_eq!(tree_of(&lab, 0).as_deref(), Some("default"));
    let table = lab.ok(&["list-nodes"]);
    assert!(
        table.contains("custom_tag") && table.contains("other"),
        "{table}"
    );
    println!("{table}");
    assert!(
        lab.node_log(2).contains("user tags set by the scheduler"),
        "the agent learns its user tags"
    );

    // Operations in `other` run only on node2; those in `default` never do.
    let other = lab
        .submit_spec("pool_trees: [other]\ntasks: {t: {command: 'sleep 0.3', job_count: 6}}")
        .unwrap();
    let default = lab
        .submit_spec("tasks: {t: {command: 'sleep 0.3', job_count: 8}}")
        .unwrap();
    for op in [&other, &default] {
        let done = lab.wait_finished(op, Duration::from_secs(30)).unwrap();
        assert_eq!(done["state"], "completed", "{done}");
    }
    assert_eq!(
        job_nodes(&lab, &other),
        BTreeSet::from(["node2".to_string()])
    );
    assert!(!job_nodes(&lab, &default).contains("node2"));
    let info = lab.operation(&other).unwrap();
    assert!(info["pool_trees"]["other"].is_string(), "{info}");

    // Retag while busy: node1 joins `other`, node2 goes back to `default`; node2's
    // `other` jobs are aborted and run again in `other` (on node1).
    let busy = lab
        .submit_spec("pool_trees: [other]\ntasks: {t: {command: 'sleep 4', job_count: 2}}")
        .unwrap();
    wait_until(Duration::from_secs(10), || {
        (lab.operation(&busy).ok()?["jobs"]["running"] == 2).then_some(())
    })
    .unwrap();
    lab.ok(&[
        "set",
        "//sys/cluster_nodes/node1/@user_tags",
        "[custom_tag]",
    ]);
    lab.ok(&["remove", "//sys/cluster_nodes/node2/@user_tags"]);
    wait_tree(&lab, 2, "default");
    wait_tree(&lab, 1, "other");
    let done = lab.wait_finished(&busy, Duration::from_secs(30)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let jobs = lab.jobs(&busy).unwrap();
    let moved: Vec<&Value> = jobs
        .iter()
        .filter(|j| j["abort_reason"] == "node_fair_share_tree_changed")
        .collect();
    assert_eq!(moved.len(), 2, "{jobs:?}");
    for j in &moved {
        assert_eq!(j["node_id"], "node2");
        assert!(
            j["error"]
                .as_str()
                .unwrap()
                .contains("moved from pool tree 'other' to 'default'"),
            "{j}"
        );
    }
    let completed: Vec<&Value> = jobs.iter().filter(|j| j["state"] == "completed").collect();
    assert_eq!(completed.len(), 2);
    assert!(
        completed.iter().all(|j| j["node_id"] == "node1"),
        "{jobs:?}"
    );
    // node2 serves `default` again.
    let back = lab
        .submit_spec("tasks: {t: {command: 'true', job_count: 6}}")
        .unwrap();
    lab.wait_finished(&back, Duration::from_secs(30)).unwrap();
    assert!(!job_nodes(&lab, &back).contains("node1"));
}

#[test]
fn node_matching_two_trees_is_refused_until_the_filter_is_fixed() {
    let mut lab = scenario_13_lab();
    lab.ok(&[
        "create",
        "scheduler_pool_tree",
        "--name",
        "fast",
        "--attributes",
        r#"{"nodes_filter": "fast"}"#,
    ]);
    let both = lab
        .add_node(small_node(&["--tag", "custom_tag", "--tag", "fast"]))
        .unwrap();
    let refused = wait_until(Duration::from_secs(10), || {
        lab.node_info(both).filter(|n| n["state"] == "refused")
    })
    .unwrap();
    let why = refused["error"].as_str().unwrap();
    assert!(
        why.contains("node matches pool trees fast and other"),
        "{why}"
    );
    assert!(lab.ok(&["list-nodes"]).contains("fast and other"));
    wait_until(Duration::from_secs(10), || {
        lab.node_log(both)
            .contains("registration refused")
            .then_some(())
    })
    .expect("the agent logs the scheduler's error");
    assert!(lab
        .node_log(both)
        .contains("node matches pool trees fast and other"));

    lab.ok(&[
        "set",
        "//sys/pool_trees/fast/@config/nodes_filter",
        "\"fast & !custom_tag\"",
    ]);
    wait_tree(&lab, both, "other");
    // Admitted without a restart: it runs `other` work beside node2.
    let op = lab
        .submit_spec("pool_trees: [other]\ntasks: {t: {command: 'sleep 1', job_count: 4}}")
        .unwrap();
    lab.wait_finished(&op, Duration::from_secs(30)).unwrap();
    assert_eq!(
        job_nodes(&lab, &op),
        BTreeSet::from(["node2".to_string(), lab.node_id(both)])
    );
}

#[test]
fn gpu_tree_holds_only_the_gpu_node() {
    let tools = tempfile::tempdir().unwrap();
    let smi = fake_nvidia_smi(
        tools.path(),
        &[
            "0, GPU-aaaa, NVIDIA A100-SXM4-40GB, 40960",
            "1, GPU-bbbb, NVIDIA A100-SXM4-40GB, 40960",
        ],
    );
    let lab = Lab::start(vec![
        small_node(&[]),
        NodeOpts::args(&[
            "--cpu",
            "2",
            "--memory",
            "4G",
            "--nvidia-smi",
            smi.to_str().unwrap(),
        ]),
    ])
    .unwrap();
    let gpu = lab.node_info(1).unwrap();
    assert!(
        gpu["system_tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "gpu"),
        "{gpu}"
    );
    lab.ok(&[
        "set",
        "//sys/pool_trees/default/@config/nodes_filter",
        "\"!gpu\"",
    ]);
    lab.ok(&[
        "create",
        "scheduler_pool_tree",
        "--name",
        "gpu",
        "--attributes",
        r#"{"nodes_filter": "gpu"}"#,
    ]);
    wait_tree(&lab, 1, "gpu");
    assert_eq!(tree_of(&lab, 0).as_deref(), Some("default"));
    let tree_cpu = lab.ok(&[
        "get",
        "//sys/scheduler/orchid/scheduler/pool_trees/gpu/resource_limits/gpu",
    ]);
    assert_eq!(
        tree_cpu.trim(),
        "2.0",
        "the gpu tree holds the node's 2 GPUs"
    );

    let op = lab
        .submit_spec(
            "pool_trees: [gpu]\ntasks: {t: {command: 'echo dev=$CUDA_VISIBLE_DEVICES; sleep 1', job_count: 2, gpu_limit: 1, cpu_limit: 0.5}}",
        )
        .unwrap();
    let done = lab.wait_finished(&op, Duration::from_secs(30)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let mut devices = BTreeSet::new();
    for j in lab.jobs(&op).unwrap() {
        assert_eq!(j["node_id"], "node1");
        let out = lab.ok(&["get-job-stdout", &op, j["id"].as_str().unwrap()]);
        devices.insert(out.trim().to_string());
    }
    assert_eq!(
        devices,
        BTreeSet::from(["dev=0".to_string(), "dev=1".to_string()]),
        "each job had its own device"
    );
}
