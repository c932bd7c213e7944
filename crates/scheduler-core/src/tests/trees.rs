//! Several pool trees (SPEC 5.9): node membership by `nodes_filter`, re-tagging at run
//! time, refused nodes, operations in several trees and `scheduling_tag_filter`.

use crate::harness::{spec, Harness};
use crate::*;
use serde_json::json;
use ytsched_common::names::{PoolName, TreeName};
use ytsched_common::protocol::*;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{AbortReason, OperationState};

fn op(id: &str) -> OperationId {
    OperationId(id.into())
}

fn in_trees(trees: &[&str], jobs: u32) -> ytsched_common::spec::VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.pool = Some(PoolName::parse("p").unwrap());
    s.pool_trees = Some(trees.iter().map(|t| TreeName::parse(t).unwrap()).collect());
    s
}

fn node_info(core: &SchedulerCore, id: &str) -> ytsched_common::api::NodeInfo {
    core.reads()
        .list_nodes()
        .into_iter()
        .find(|n| n.id.as_str() == id)
        .unwrap()
}

/// SPEC §7 scenario 13 set up through admin paths, as an admin would.
fn scenario_13() -> Harness {
    let mut h = Harness::starting_at(0);
    for n in ["n1", "n2", "n3"] {
        h.node(n, 4.0, &[]);
    }
    h.core
        .admin_set("//sys/cluster_nodes/n3/@user_tags", json!(["custom_tag"]))
        .unwrap();
    // `other` first would put n3 in two trees: refused, naming the node.
    let e = h
        .core
        .create_pool_tree("other", json!({"nodes_filter": "custom_tag"}))
        .unwrap_err();
    assert!(
        e.message.contains("n3 (would match default and other)"),
        "{}",
        e.message
    );
    h.core
        .admin_set(
            "//sys/pool_trees/default/@config/nodes_filter",
            json!("!custom_tag"),
        )
        .unwrap();
    assert_eq!(node_info(&h.core, "n3").state, "idle");
    h.core
        .create_pool_tree("other", json!({"config": {"nodes_filter": "custom_tag"}}))
        .unwrap();
    for tree in ["default", "other"] {
        h.core.create_pool(tree, "p", None, json!({})).unwrap();
    }
    h
}

#[test]
fn scenario_13_tagged_node_serves_only_its_tree() {
    let mut h = scenario_13();
    let n3 = node_info(&h.core, "n3");
    assert_eq!(
        (n3.state.as_str(), n3.tree.as_deref()),
        ("online", Some("other"))
    );
    assert_eq!(n3.user_tags, vec!["custom_tag"]);
    assert_eq!(node_info(&h.core, "n1").tree.as_deref(), Some("default"));
    assert_eq!(
        h.core.tree_resources("other").cpu,
        4.0,
        "each tree's total follows its nodes"
    );
    assert_eq!(h.core.tree_resources("default").cpu, 8.0);
    assert_eq!(
        h.core
            .reads()
            .admin_get("//sys/cluster_nodes/n3/@pool_tree")
            .unwrap(),
        json!("other")
    );

    h.core
        .start_operation(op("o"), "u", in_trees(&["other"], 10), 1)
        .unwrap();
    h.core
        .start_operation(op("d"), "u", in_trees(&["default"], 20), 1)
        .unwrap();
    for n in ["n1", "n2", "n3"] {
        let r = h.at(2).heartbeat(n);
        let tree = if n == "n3" { "other" } else { "default" };
        assert_eq!(
            r.registration,
            Registration::Registered { tree: tree.into() }
        );
    }
    assert!(h.ops_on("n3").iter().all(|o| o == "o"));
    assert_eq!(h.running_on("n3").len(), 4);
    for n in ["n1", "n2"] {
        assert_eq!(h.running_on(n).len(), 4);
        assert!(h.ops_on(n).iter().all(|o| o == "d"), "{:?}", h.ops_on(n));
    }
}

#[test]
fn untagging_a_busy_node_moves_it_back_and_its_jobs_run_again_in_their_tree() {
    let mut h = scenario_13();
    h.core
        .start_operation(op("o"), "u", in_trees(&["other"], 4), 1)
        .unwrap();
    h.at(2).heartbeat("n3");
    assert_eq!(h.running_on("n3").len(), 4);

    h.core
        .admin_remove("//sys/cluster_nodes/n3/@user_tags")
        .unwrap();
    assert_eq!(node_info(&h.core, "n3").tree.as_deref(), Some("default"));
    assert_eq!(h.core.tree_resources("other").cpu, 0.0);
    assert!(h.core.outbox.take_nudges().contains(&NodeId("n3".into())));
    let r = h.at(3).heartbeat("n3");
    assert_eq!(r.jobs_to_abort.len(), 4);
    for a in &r.jobs_to_abort {
        assert_eq!(a.reason, AbortReason::NodeFairShareTreeChanged);
        assert!(
            a.message
                .contains("moved from pool tree 'other' to 'default'"),
            "{}",
            a.message
        );
    }
    assert!(r.jobs_to_start.is_empty(), "nothing of default waits");
    let info = h.core.reads().operation_info(&op("o")).unwrap();
    assert_eq!((info.jobs.waiting, info.jobs.aborted), (4, 4));
    assert_eq!(info.state, OperationState::Running);

    // Tagged again, it takes the jobs back in `other`.
    h.core
        .admin_set("//sys/cluster_nodes/n3/@user_tags", json!(["custom_tag"]))
        .unwrap();
    let r = h.at(4).heartbeat("n3");
    assert_eq!(r.user_tags, vec!["custom_tag"]);
    assert_eq!(r.jobs_to_start.len(), 4);
    assert_eq!(
        h.core
            .reads()
            .operation_info(&op("o"))
            .unwrap()
            .jobs
            .running,
        4
    );
}

#[test]
fn node_matching_two_trees_is_refused_until_a_filter_is_fixed() {
    let mut h = scenario_13();
    h.core
        .create_pool_tree("fast", json!({"nodes_filter": "fast"}))
        .unwrap();
    h.add_node("n4", 2.0, &["custom_tag", "fast"]);
    let r = h.at(1).heartbeat("n4");
    match &r.registration {
        Registration::Refused { error } => assert!(
            error.contains("node matches pool trees fast and other"),
            "{error}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let info = node_info(&h.core, "n4");
    assert_eq!(info.state, "refused");
    assert!(info.error.unwrap().contains("fast and other"));
    assert_eq!(
        h.core.tree_resources("other").cpu,
        4.0,
        "a refused node adds nothing"
    );

    h.core
        .start_operation(op("o"), "u", in_trees(&["other"], 8), 1)
        .unwrap();
    assert!(h.at(2).heartbeat("n4").jobs_to_start.is_empty());
    h.at(2).heartbeat("n3");

    // Changing a filter so that it no longer overlaps admits the node at once.
    h.core
        .admin_set(
            "//sys/pool_trees/fast/@config/nodes_filter",
            json!("fast & !custom_tag"),
        )
        .unwrap();
    assert_eq!(node_info(&h.core, "n4").tree.as_deref(), Some("other"));
    let r = h.at(3).heartbeat("n4");
    assert_eq!(
        r.registration,
        Registration::Registered {
            tree: "other".into()
        }
    );
    assert_eq!(r.jobs_to_start.len(), 2);
}

#[test]
fn bad_filters_and_user_tags_are_refused_with_reasons() {
    let mut h = scenario_13();
    let e = h
        .core
        .admin_set(
            "//sys/pool_trees/other/@config/nodes_filter",
            json!("a & | b"),
        )
        .unwrap_err();
    assert!(e.message.contains("at column 5"), "{}", e.message);
    let e = h
        .core
        .admin_set("//sys/cluster_nodes/n3/@user_tags", json!(["ok", "not ok"]))
        .unwrap_err();
    assert!(
        e.message.contains("tag 'not ok' is invalid"),
        "{}",
        e.message
    );
    let e = h
        .core
        .admin_set("//sys/cluster_nodes/nope/@user_tags", json!(["x"]))
        .unwrap_err();
    assert!(e.message.contains("no such node: 'nope'"), "{}", e.message);
    let e = h
        .core
        .admin_set("//sys/cluster_nodes/n3/@tags", json!(["x"]))
        .unwrap_err();
    assert!(
        e.message.contains("only @user_tags, @banned"),
        "{}",
        e.message
    );
    // Nothing changed.
    assert_eq!(node_info(&h.core, "n3").tree.as_deref(), Some("other"));
    assert_eq!(
        h.core
            .reads()
            .admin_get("//sys/pool_trees/other/@config/nodes_filter")
            .unwrap(),
        json!("custom_tag")
    );
}

#[test]
fn operation_in_two_trees_runs_in_both_with_a_share_and_usage_per_tree() {
    let mut h = scenario_13();
    h.core
        .create_pool("other", "research", None, json!({}))
        .unwrap();
    let mut s = in_trees(&["default", "other"], 20);
    s.scheduling_options_per_pool_tree.insert(
        TreeName::parse("other").unwrap(),
        ytsched_common::spec::TreeSchedulingOptions {
            pool: Some(PoolName::parse("research").unwrap()),
            weight: Some(3.0),
            resource_limits: Some(ytsched_common::spec::ResourceAmounts {
                cpu: Some(3.0),
                ..Default::default()
            }),
        },
    );
    h.core.start_operation(op("both"), "u", s, 1).unwrap();
    h.at(2).heartbeat_all();
    assert_eq!(h.running_on("n1").len() + h.running_on("n2").len(), 8);
    assert_eq!(
        h.running_on("n3").len(),
        3,
        "the per-tree limit holds in other"
    );
    h.core.update_all_shares(3);
    let default = h
        .core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/default/operations/both")
        .unwrap();
    let other = h
        .core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/other/operations/both")
        .unwrap();
    assert_eq!(default["pool"], json!("p"));
    assert_eq!(other["pool"], json!("research"));
    assert_eq!(other["weight"], json!(3.0));
    // Each tree's orchid shows the operation's limit there (SPEC 4.3).
    assert_eq!(other["resource_limits"]["cpu"], json!(3.0), "{other}");
    assert!(default.get("resource_limits").is_none(), "{default}");
    let cpu = |v: &serde_json::Value| v["resource_usage"]["cpu"].as_f64().unwrap();
    assert!((cpu(&default) - 8.0).abs() < 1e-6, "{default}");
    assert!((cpu(&other) - 3.0).abs() < 1e-6, "{other}");
    let info = h.core.reads().operation_info(&op("both")).unwrap();
    assert_eq!(info.resource_usage.cpu, 11.0);
    assert_eq!(info.pool_trees["other"], "research");

    // Jobs finished in either tree count toward the same operation, once.
    let mut now = 4;
    while h.core.reads().operation_info(&op("both")).unwrap().state == OperationState::Running {
        for n in ["n1", "n2", "n3"] {
            h.finish_at(n, now);
        }
        now += 1;
        assert!(now < 20, "the operation should complete");
    }
    let info = h.core.reads().operation_info(&op("both")).unwrap();
    assert_eq!(info.state, OperationState::Completed);
    assert_eq!((info.jobs.completed, info.jobs.total), (20, 20));
}

#[test]
fn scheduling_tag_filter_keeps_jobs_off_other_nodes() {
    let mut h = Harness::starting_at(0);
    h.add_node("n1", 4.0, &[]);
    h.add_node("n2", 4.0, &["ssd"]);
    h.at(0).heartbeat("n1");
    h.at(0).heartbeat("n2");
    let mut s = spec(6, 1.0);
    s.scheduling_tag_filter =
        Some(ytsched_common::tag_filter::TagFilter::parse("ssd & !slow").unwrap());
    h.core.start_operation(op("f"), "u", s, 1).unwrap();
    assert!(h.at(2).heartbeat("n1").jobs_to_start.is_empty());
    assert_eq!(h.at(2).heartbeat("n2").jobs_to_start.len(), 4);
    assert_eq!(
        h.core
            .reads()
            .operation_info(&op("f"))
            .unwrap()
            .jobs
            .waiting,
        2
    );
}

#[test]
fn a_node_with_no_matching_tree_is_idle_and_offers_nothing() {
    let mut h = Harness::starting_at(0);
    h.core
        .admin_set(
            "//sys/pool_trees/default/@config/nodes_filter",
            json!("ssd"),
        )
        .unwrap();
    h.add_node("n1", 4.0, &[]);
    let r = h.at(0).heartbeat("n1");
    assert_eq!(r.registration, Registration::Idle);
    assert_eq!(node_info(&h.core, "n1").state, "idle");
    h.core
        .start_operation(op("x"), "u", spec(1, 1.0), 1)
        .unwrap();
    assert!(h.at(2).heartbeat("n1").jobs_to_start.is_empty());
    assert_eq!(h.core.tree_resources("default"), ResourceVector::ZERO);
}

#[test]
fn a_pools_scheduling_tag_filter_keeps_its_subtree_on_matching_nodes() {
    let mut h = Harness::starting_at(0);
    h.add_node("n1", 4.0, &[]);
    h.add_node("n2", 4.0, &["ssd"]);
    h.at(0).heartbeat("n1");
    h.at(0).heartbeat("n2");
    h.core
        .create_pool(
            "default",
            "fast",
            None,
            json!({"scheduling_tag_filter": "ssd"}),
        )
        .unwrap();
    h.core
        .create_pool("default", "team", Some("fast"), json!({}))
        .unwrap();
    let mut s = spec(6, 1.0);
    s.pool = Some(PoolName::parse("team").unwrap());
    h.core.start_operation(op("f"), "u", s, 1).unwrap();
    // The operation names no filter; its grandparent's applies.
    assert!(h.at(2).heartbeat("n1").jobs_to_start.is_empty());
    assert_eq!(h.at(2).heartbeat("n2").jobs_to_start.len(), 4);
    // Its limits share is the matching nodes' share of the tree: 4 of 8 cpu.
    h.core.update_all_shares(3);
    let pool = h
        .core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/default/pools/fast")
        .unwrap();
    assert_eq!(pool["limits_share"]["cpu"], 0.5);
    assert!(pool["fair_share_ratio"].as_f64().unwrap() <= 0.5 + 1e-9);
    // Untagging the node takes the subtree's room away.
    h.core
        .admin_set(
            "//sys/pool_trees/default/fast/@scheduling_tag_filter",
            json!("ssd & !ssd"),
        )
        .unwrap();
    h.core.update_all_shares(4);
    let pool = h
        .core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/default/pools/fast")
        .unwrap();
    assert_eq!(pool["limits_share"]["cpu"], 0.0);
}

/// A pool's filter is parsed as it arrives: one that does not parse is refused, naming
/// the attribute, and the pool keeps the filter it had (before, it was stored as text
/// and silently read as "no filter").
#[test]
fn a_pools_scheduling_tag_filter_that_does_not_parse_is_refused() {
    let mut h = Harness::starting_at(0);
    let e = h
        .core
        .create_pool(
            "default",
            "fast",
            None,
            json!({"scheduling_tag_filter": "ssd &"}),
        )
        .unwrap_err();
    assert!(e.message.contains("scheduling_tag_filter"), "{e}");
    assert!(e.message.contains("at column 6"), "{e}");
    h.core
        .create_pool(
            "default",
            "fast",
            None,
            json!({"scheduling_tag_filter": "ssd"}),
        )
        .unwrap();
    let e = h
        .core
        .admin_set(
            "//sys/pool_trees/default/fast/@scheduling_tag_filter",
            json!("(ssd"),
        )
        .unwrap_err();
    assert!(e.message.contains("scheduling_tag_filter"), "{e}");
    assert_eq!(
        h.core
            .reads()
            .admin_get("//sys/pool_trees/default/fast/@scheduling_tag_filter")
            .unwrap(),
        json!("ssd")
    );
}

#[test]
fn tree_totals_follow_each_node_joining_changing_and_leaving() {
    let mut h = scenario_13();
    let timeout = h.core.config().node_heartbeat_timeout_ms;
    assert_eq!(h.core.tree_resources("default").cpu, 8.0);
    // A node that grows (and an admin approved for more than its first offer) counts
    // its new limits, in its tree only.
    h.set_cpu("n1", 6.0);
    let n1 = ytsched_common::NodeId::parse("n1").unwrap();
    h.run(|c| c.approve_node(&n1, Some(crate::harness::limits(6.0))))
        .unwrap();
    h.at(10).heartbeat("n1");
    assert_eq!(h.core.tree_resources("default").cpu, 10.0);
    assert_eq!(h.core.tree_resources("other").cpu, 4.0);
    // n1 and n3 keep beating; n2 goes silent and leaves its tree's total.
    let later = 10 + timeout + 1;
    h.at(later).heartbeat("n1");
    h.at(later).heartbeat("n3");
    h.core.tick(later);
    assert_eq!(node_info(&h.core, "n2").state, "offline");
    assert_eq!(h.core.tree_resources("default").cpu, 6.0);
    assert_eq!(h.core.tree_resources("other").cpu, 4.0);
    // It comes back, and moves to `other` when its tags say so.
    h.at(later + 1).heartbeat("n2");
    assert_eq!(h.core.tree_resources("default").cpu, 10.0);
    h.core
        .admin_set("//sys/cluster_nodes/n2/@user_tags", json!(["custom_tag"]))
        .unwrap();
    assert_eq!(h.core.tree_resources("default").cpu, 6.0);
    assert_eq!(h.core.tree_resources("other").cpu, 8.0);
    let orchid = h.core.reads().tree_orchid("other").unwrap();
    assert_eq!(orchid["node_count"], json!(2));
}

/// Two 4-cpu nodes in the default tree, both busy with one operation of `jobs` jobs.
fn two_busy_nodes(jobs: u32) -> Harness {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]).node("n2", 4.0, &[]);
    h.core
        .start_operation(op("o"), "u", spec(jobs, 1.0), 1)
        .unwrap();
    h.at(2).heartbeat_all();
    for n in ["n1", "n2"] {
        assert_eq!(h.running_on(n).len(), 4);
    }
    h
}

#[test]
fn a_banned_node_gives_its_jobs_back_and_they_run_elsewhere() {
    let mut h = two_busy_nodes(8);
    h.core
        .admin_set("//sys/cluster_nodes/n1/@banned", json!(true))
        .unwrap();
    assert!(node_info(&h.core, "n1").maintenance.banned);
    assert_eq!(
        h.core
            .reads()
            .admin_get("//sys/cluster_nodes/n1/@banned")
            .unwrap(),
        json!(true)
    );
    assert_eq!(
        h.core.tree_resources("default").cpu,
        4.0,
        "a banned node offers nothing"
    );
    assert!(h.core.outbox.take_nudges().contains(&NodeId("n1".into())));
    let r = h.at(3).heartbeat("n1");
    assert_eq!(r.jobs_to_abort.len(), 4);
    assert!(r.jobs_to_start.is_empty());
    for a in &r.jobs_to_abort {
        assert_eq!(a.reason, AbortReason::NodeBanned);
        assert!(a.message.contains("n1 is banned"), "{}", a.message);
    }
    let info = h.core.reads().operation_info(&op("o")).unwrap();
    assert_eq!((info.jobs.waiting, info.jobs.aborted), (4, 4));
    // The aborted jobs run on n2 once n1 has said they stopped and n2 has room; n1
    // gets none of them.
    assert!(h.at(4).heartbeat("n1").jobs_to_start.is_empty());
    h.finish_at("n2", 4);
    assert_eq!(h.running_on("n2").len(), 4);
    assert!(h.at(5).heartbeat("n1").jobs_to_start.is_empty());
    // Back in service, it takes work again.
    h.core
        .admin_remove("//sys/cluster_nodes/n1/@banned")
        .unwrap();
    assert!(h.core.cluster_config().node_maintenance.is_empty());
    h.core
        .start_operation(op("more"), "u", spec(2, 1.0), 6)
        .unwrap();
    assert_eq!(h.at(7).heartbeat("n1").jobs_to_start.len(), 2);
}

#[test]
fn a_decommissioned_node_finishes_its_jobs_and_takes_no_new_ones() {
    for flag in ["decommissioned", "disable_scheduler_jobs"] {
        let mut h = two_busy_nodes(12);
        h.core
            .admin_set(&format!("//sys/cluster_nodes/n1/@{flag}"), json!(true))
            .unwrap();
        let r = h.at(3).heartbeat("n1");
        assert!(r.jobs_to_abort.is_empty(), "{flag}: running jobs finish");
        assert_eq!(h.running_on("n1").len(), 4);
        let r = h.finish_at("n1", 4);
        assert!(
            r.jobs_to_start.is_empty(),
            "{flag}: 4 jobs wait, none comes here"
        );
        assert_eq!(
            h.core
                .reads()
                .operation_info(&op("o"))
                .unwrap()
                .jobs
                .waiting,
            4
        );
        assert_eq!(node_info(&h.core, "n1").running_job_count, 0);
        assert_eq!(h.finish_at("n2", 5).jobs_to_start.len(), 4);
        assert_eq!(
            h.core
                .reads()
                .admin_get(&format!("//sys/cluster_nodes/n1/@{flag}"))
                .unwrap(),
            json!(true)
        );
    }
}

#[test]
fn maintenance_is_kept_with_the_configuration_and_bad_values_are_refused() {
    let mut h = two_busy_nodes(8);
    h.core
        .admin_set("//sys/cluster_nodes/n2/@decommissioned", json!(true))
        .unwrap();
    for (path, value, says) in [
        (
            "//sys/cluster_nodes/n2/@banned",
            json!("yes"),
            "banned: expected true or false",
        ),
        (
            "//sys/cluster_nodes/nope/@banned",
            json!(true),
            "no such node: 'nope'",
        ),
        (
            "//sys/cluster_nodes/n2/@hostname",
            json!(true),
            "@banned, @decommissioned",
        ),
    ] {
        let e = h.core.admin_set(path, value).unwrap_err();
        assert!(
            e.message.contains(says) && e.message.contains(path),
            "{}",
            e.message
        );
    }
    // A scheduler loading this configuration knows n2 is decommissioned when it
    // reappears.
    let saved = h.core.cluster_config().clone();
    assert!(saved.maintenance(&NodeId("n2".into())).decommissioned);
    let mut revived = Harness::starting_at(10);
    revived.core.set_cluster_config(saved).unwrap();
    revived
        .core
        .start_operation(op("more"), "u", spec(2, 1.0), 10)
        .unwrap();
    revived.add_node("n2", 4.0, &[]);
    let r = revived.heartbeat("n2");
    assert!(r.jobs_to_start.is_empty(), "work waits, but not for n2");
    assert!(node_info(&revived.core, "n2").maintenance.decommissioned);
}

fn in_pool(pool: &str, jobs: u32, cpu: f64) -> ytsched_common::spec::VanillaSpec {
    let mut s = spec(jobs, cpu);
    s.pool = Some(PoolName::parse(pool).unwrap());
    s
}

#[test]
fn explain_names_the_pool_that_keeps_an_operation_pending_and_its_place() {
    use ytsched_common::explain::Reason;
    let mut h = Harness::starting_at(0);
    h.core
        .create_pool(
            "default",
            "team",
            None,
            json!({"max_running_operation_count": 1}),
        )
        .unwrap();
    h.core
        .create_pool("default", "p", Some("team"), json!({}))
        .unwrap();
    h.add_node("n1", 4.0, &[]);
    h.at(0).heartbeat("n1");
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        h.core
            .start_operation(op(name), "u", in_pool("p", 1, 1.0), i as u64)
            .unwrap();
    }
    for (name, position) in [("b", 1), ("c", 2)] {
        let why = h.core.reads().explain_operation(&op(name)).unwrap();
        assert_eq!(why.state, OperationState::Pending);
        assert_eq!(
            why.reasons,
            vec![Reason::PoolAtRunningLimit {
                tree: "default".into(),
                pool: "team".into(),
                ancestor: true,
                running: 1,
                limit: 1,
                position,
                queued: 2,
            }]
        );
        assert!(why.trees[0].not_in_last_update);
        let text = why.text();
        assert!(
            text.contains("ancestor pool 'team'")
                && text.contains(&format!("it is {position} of 2")),
            "{text}"
        );
    }
    assert!(h.core.reads().explain_operation(&op("nope")).is_err());
}

#[test]
fn explain_names_a_tree_without_nodes_and_a_job_no_node_in_service_fits() {
    use ytsched_common::explain::Reason;
    let mut h = Harness::starting_at(0);
    h.core
        .start_operation(op("lonely"), "u", spec(1, 1.0), 0)
        .unwrap();
    let why = h.core.reads().explain_operation(&op("lonely")).unwrap();
    assert_eq!(
        why.reasons,
        vec![Reason::TreeHasNoNodes {
            tree: "default".into()
        }]
    );
    assert!(
        why.text().contains("pool tree 'default' has no nodes"),
        "{}",
        why.text()
    );

    // The only node big enough is decommissioned: the job fits no node taking jobs.
    h.add_node("big", 8.0, &[]);
    h.add_node("small", 4.0, &[]);
    h.at(1).heartbeat("big");
    h.at(1).heartbeat("small");
    h.core
        .admin_set("//sys/cluster_nodes/big/@decommissioned", json!(true))
        .unwrap();
    h.core
        .start_operation(op("wide"), "u", spec(1, 6.0), 2)
        .unwrap();
    h.at(3).heartbeat("small");
    let why = h.core.reads().explain_operation(&op("wide")).unwrap();
    assert!(
        why.reasons.contains(&Reason::NoNodeFits {
            tree: "default".into(),
            task: "task".into(),
            resource: "cpu".into(),
            need: 6.0,
            largest: 4.0,
        }),
        "{:?}",
        why.reasons
    );
}

#[test]
fn explain_shows_how_a_fair_share_was_made_and_what_bounds_it() {
    use ytsched_common::explain::Reason;
    let mut h = Harness::starting_at(0);
    h.core
        .create_pool(
            "default",
            "g",
            None,
            json!({"strong_guarantee_resources": {"cpu": 4}}),
        )
        .unwrap();
    h.core
        .create_pool(
            "default",
            "capped",
            None,
            json!({"resource_limits": {"cpu": 1}}),
        )
        .unwrap();
    h.core.create_pool("default", "o", None, json!({})).unwrap();
    h.node("n1", 4.0, &[]).node("n2", 4.0, &[]);
    h.core
        .start_operation(op("g"), "u", in_pool("g", 20, 1.0), 1)
        .unwrap();
    h.core
        .start_operation(op("capped"), "u", in_pool("capped", 20, 1.0), 1)
        .unwrap();
    h.core
        .start_operation(op("o"), "u", in_pool("o", 20, 1.0), 1)
        .unwrap();
    h.at(2).heartbeat_all();
    let g = h.core.reads().explain_operation(&op("g")).unwrap();
    let place = &g.trees[0];
    assert_eq!(place.dominant_resource, "cpu");
    // 8 cpu: g is guaranteed 4, capped takes its limit of 1, g and o split the other 3.
    assert!(
        (place.share.fair_share - 5.5 / 8.0).abs() < 1e-6,
        "{place:?}"
    );
    let pool = place.pool_share.expect("its pool's share");
    assert!((pool.strong_guarantee - 0.5).abs() < 1e-6, "{pool:?}");
    assert!(
        (pool.weight_proportional - 1.5 / 8.0).abs() < 1e-6,
        "{pool:?}"
    );
    for parts in [place.share, pool] {
        assert!(
            (parts.strong_guarantee + parts.integral_guarantee + parts.weight_proportional
                - parts.fair_share)
                .abs()
                < 1e-6,
            "the parts add up: {parts:?}"
        );
    }
    assert_eq!(
        place.bound_by, "sharing: its pool 'g' has weight 1 among 3 children of '<Root>'",
        "{place:?}"
    );
    assert!(g.reasons.contains(&Reason::FairShareBelowDemand {
        tree: "default".into()
    }));
    let capped = h.core.reads().explain_operation(&op("capped")).unwrap();
    assert_eq!(
        capped.trees[0].bound_by, "the resource_limits of pool 'capped'",
        "{:?}",
        capped.trees[0]
    );
    assert!((capped.trees[0].share.fair_share - 1.0 / 8.0).abs() < 1e-6);
    let text = g.text();
    println!("{text}");
    assert!(text.contains("strong guarantee 50.0%"), "{text}");
    assert!(text.contains("preemption allowed"), "{text}");
}

#[test]
fn a_dry_run_shows_the_shares_the_change_then_really_gives_and_changes_nothing() {
    let mut h = Harness::starting_at(0);
    for (pool, attrs) in [
        ("a", json!({})),
        ("b", json!({})),
        ("c", json!({"resource_limits": {"cpu": 2}})),
    ] {
        h.core.create_pool("default", pool, None, attrs).unwrap();
    }
    h.node("n1", 4.0, &[]).node("n2", 4.0, &[]);
    for pool in ["a", "b", "c"] {
        h.core
            .start_operation(op(pool), "u", in_pool(pool, 20, 1.0), 1)
            .unwrap();
    }
    h.at(2).heartbeat_all();
    type Change = Box<dyn Fn(&mut SchedulerCore) -> Result<(), ConfigError>>;
    let changes: Vec<Change> = vec![
        Box::new(|c| c.admin_set("//sys/pool_trees/default/a/@weight", json!(3))),
        Box::new(|c| {
            c.admin_set(
                "//sys/pool_trees/default/b/@strong_guarantee_resources",
                json!({"cpu": 5}),
            )
        }),
        Box::new(|c| {
            c.admin_set(
                "//sys/pool_trees/default/c/@resource_limits",
                json!({"cpu": 0.25}),
            )
        }),
        Box::new(|c| c.create_pool("default", "d", None, json!({}))),
    ];
    let mut now = 10;
    for change in changes {
        now += 10;
        let config = h.core.cluster_config().clone();
        let what_if = h.core.what_if(now, |c| change(c)).unwrap();
        assert!(!what_if.changes.is_empty(), "change at {now}");
        assert_eq!(
            h.core.cluster_config(),
            &config,
            "a dry run changes nothing"
        );
        change(&mut h.core).unwrap();
        let real = h.core.fair_share_ratios(now);
        for c in &what_if.changes {
            let key = (
                c.tree.clone(),
                if c.kind == "pool" {
                    "pool"
                } else {
                    "operation"
                },
                c.name.clone(),
            );
            assert_eq!(c.after, real.get(&key).copied(), "{c:?}");
        }
    }
    // A change the core refuses is refused as a dry run too, and the copy is dropped.
    let e = h
        .core
        .what_if(now, |c| {
            c.admin_set("//sys/pool_trees/default/a/@weight", json!(-1))
        })
        .unwrap_err();
    assert!(e.message.contains("weight"), "{e:?}");
}

#[test]
fn explain_pool_shows_its_counts_share_and_what_bounds_it() {
    let mut h = Harness::starting_at(0);
    h.core
        .create_pool(
            "default",
            "team",
            None,
            json!({"max_running_operation_count": 1, "resource_limits": {"cpu": 2}}),
        )
        .unwrap();
    h.core
        .create_pool("default", "other", None, json!({}))
        .unwrap();
    h.add_node("n1", 8.0, &[]);
    h.at(0).heartbeat("n1");
    h.core
        .start_operation(op("a"), "u", in_pool("team", 10, 1.0), 1)
        .unwrap();
    h.core
        .start_operation(op("b"), "u", in_pool("team", 10, 1.0), 1)
        .unwrap();
    h.core
        .start_operation(op("c"), "u", in_pool("other", 10, 1.0), 1)
        .unwrap();
    h.at(2).heartbeat("n1");
    let why = h.core.reads().explain_pool(None, "team").unwrap();
    assert_eq!((why.running_operations, why.operations), (1, 2));
    assert_eq!(why.max_running_operations, 1);
    assert_eq!(why.bound_by, "its own resource_limits");
    assert!((why.share.fair_share - 0.25).abs() < 1e-6, "{why:?}");
    assert_eq!(why.parent.as_deref(), Some("<Root>"));
    let text = why.text();
    assert!(
        text.contains("1 running of max_running_operation_count 1; 2 in all"),
        "{text}"
    );
    assert!(h.core.reads().explain_pool(None, "nope").is_err());
    assert!(h.core.reads().explain_pool(Some("nope"), "team").is_err());
}
