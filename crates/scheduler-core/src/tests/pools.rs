//! Operation count limits, pending queue, ephemeral pools, lightweight operations and
//! admin changes, driven through the core's public calls.

use crate::harness::Harness;
use crate::tests::{heartbeat, spec};
use crate::*;
use serde_json::json;
use ytsched_common::names::PoolName;
use ytsched_common::protocol::*;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::JobId;

fn spec_in(pool: Option<&str>, jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.pool = pool.map(|p| PoolName::parse(p).unwrap());
    s
}

fn hb(cpu: f64, running: &[JobStartSpec], finished: Vec<FinishedJob>) -> HeartbeatRequest {
    heartbeat("n1", cpu, running, finished)
}

fn id(s: &str) -> OperationId {
    OperationId(s.into())
}

fn state(core: &SchedulerCore, op: &str) -> OperationState {
    core.reads().operation(&id(op)).unwrap().state
}

#[test]
fn fifty_first_operation_is_rejected_and_ninth_waits_in_order() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool("default", "p", None, json!({})).unwrap();
    for i in 0..50 {
        core.start_operation(id(&format!("op{i:02}")), "u", spec_in(Some("p"), 1), i)
            .unwrap();
    }
    let err = core
        .start_operation(id("op50"), "u", spec_in(Some("p"), 1), 50)
        .unwrap_err();
    assert!(
        err.message.contains("pool 'p'") && err.message.contains("max_operation_count is 50"),
        "{err}"
    );
    assert!(
        core.reads().operation(&id("op50")).is_err(),
        "nothing was admitted"
    );
    for i in 0..8 {
        assert_eq!(state(&core, &format!("op{i:02}")), OperationState::Running);
    }
    for i in 8..50 {
        assert_eq!(state(&core, &format!("op{i:02}")), OperationState::Pending);
    }
    core.abort_operation(&id("op03"), 60).unwrap();
    assert_eq!(
        state(&core, "op08"),
        OperationState::Running,
        "oldest pending first"
    );
    assert_eq!(state(&core, "op09"), OperationState::Pending);
    core.update_all_shares(61);
    let orchid = core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/default/pools/p")
        .unwrap();
    assert_eq!(orchid["operation_count"], 49);
    assert_eq!(orchid["running_operation_count"], 8);
}

/// A pool at `max_running_operation_count` holds the next operation pending; when the
/// running one completes, the pending one starts and gets the node's next job.
#[test]
fn pending_operation_starts_when_a_running_one_completes() {
    let mut h = Harness::starting_at(0);
    h.pool("p", None, json!({"max_running_operation_count": 1}))
        .node("n1", 4.0, &[]);
    let a = h.submit("u", spec_in(Some("p"), 1));
    let b = h.submit("u", spec_in(Some("p"), 1));
    assert_eq!(
        h.core.reads().operation(&b).unwrap().state,
        OperationState::Pending
    );
    let r = h.at(10).heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 1, "pending operations get no jobs");
    let r = h.finish_at("n1", 20);
    assert_eq!(
        h.core.reads().operation(&a).unwrap().state,
        OperationState::Completed
    );
    assert_eq!(
        h.core.reads().operation(&b).unwrap().state,
        OperationState::Running
    );
    assert_eq!(r.jobs_to_start.len(), 1);
    assert_eq!(r.jobs_to_start[0].operation_id, b);
}

/// An operation naming no pool runs in its user's ephemeral pool, which goes away
/// with its last operation; one ephemeral pool per user by default.
#[test]
fn ephemeral_user_pool_appears_and_disappears() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    let a = h.submit("alice", spec_in(None, 1));
    assert_eq!(h.core.reads().operation(&a).unwrap().main_pool(), "alice");
    assert_eq!(
        h.core
            .reads()
            .admin_get("//sys/pool_trees/default/alice/@is_ephemeral")
            .unwrap(),
        true
    );
    let err = h
        .run(|c| c.start_operation(id("b"), "alice", spec_in(Some("other"), 1), 0))
        .unwrap_err();
    assert!(err.message.contains("max_ephemeral_pool_per_user"), "{err}");
    h.at(10).heartbeat("n1");
    h.finish_at("n1", 20);
    assert!(!h
        .core
        .reads()
        .admin_exists("//sys/pool_trees/default/alice")
        .unwrap());
    assert!(
        h.effects.iter().any(|e| e.config_changed),
        "the pool's coming and going is stored"
    );
}

#[test]
fn ephemeral_subpools_per_user_with_their_config() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool(
        "default",
        "research",
        None,
        json!({"create_ephemeral_subpools": true,
               "ephemeral_subpool_config": {"mode": "fifo", "max_running_operation_count": 2}}),
    )
    .unwrap();
    core.start_operation(id("a"), "bob", spec_in(Some("research"), 1), 0)
        .unwrap();
    let op = core.reads().operation(&id("a")).unwrap();
    assert_eq!(op.main_pool(), "research$bob");
    let attrs = core
        .reads()
        .admin_get("//sys/pool_trees/default/research/research$bob/@")
        .unwrap();
    assert_eq!(attrs["mode"], "fifo");
    assert_eq!(attrs["max_running_operation_count"], 2);
    assert_eq!(attrs["is_ephemeral"], true);
    core.abort_operation(&id("a"), 1).unwrap();
    assert!(!core
        .reads()
        .admin_exists("//sys/pool_trees/default/research/research$bob")
        .unwrap());
    assert!(core
        .reads()
        .admin_exists("//sys/pool_trees/default/research")
        .unwrap());
}

#[test]
fn lightweight_operations_do_not_take_running_slots() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool(
        "default",
        "light",
        None,
        json!({"mode": "fifo", "enable_lightweight_operations": true, "max_running_operation_count": 1}),
    )
    .unwrap();
    for name in ["a", "b", "c"] {
        core.start_operation(id(name), "u", spec_in(Some("light"), 1), 0)
            .unwrap();
        assert_eq!(state(&core, name), OperationState::Running);
        assert!(
            core.reads()
                .operation(&id(name))
                .unwrap()
                .slot("default")
                .unwrap()
                .lightweight
        );
    }
    core.update_all_shares(1);
    let p = core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/default/pools/light")
        .unwrap();
    assert_eq!(p["running_operation_count"], 0);
    assert_eq!(p["lightweight_running_operation_count"], 3);
    assert_eq!(p["operation_count"], 3);
}

#[test]
fn forbidden_immediate_operations() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool(
        "default",
        "org",
        None,
        json!({"forbid_immediate_operations": true}),
    )
    .unwrap();
    core.create_pool("default", "team", Some("org"), json!({}))
        .unwrap();
    let e = core
        .start_operation(id("a"), "u", spec_in(Some("org"), 1), 0)
        .unwrap_err();
    assert!(e.message.contains("forbid_immediate_operations"), "{e}");
    core.start_operation(id("b"), "u", spec_in(Some("team"), 1), 0)
        .unwrap();
}

/// An operation directly in `<Root>` is refused while the tree forbids it, and runs
/// once an admin allows it.
#[test]
fn operations_in_the_root_only_when_the_tree_allows_it() {
    let mut h = Harness::starting_at(0);
    let e = h
        .run(|c| c.start_operation(id("a"), "u", spec_in(Some("<Root>"), 1), 0))
        .unwrap_err();
    assert!(
        e.message.contains("forbid_immediate_operations_in_root"),
        "{e}"
    );
    h.run(|c| {
        c.admin_set(
            "//sys/pool_trees/default/@config/forbid_immediate_operations_in_root",
            json!(false),
        )
    })
    .unwrap();
    let b = h.submit("u", spec_in(Some("<Root>"), 1));
    assert_eq!(h.core.reads().operation(&b).unwrap().main_pool(), "<Root>");
    h.node("n1", 4.0, &[]);
    h.at(2).heartbeat("n1");
    assert_eq!(h.running_of(&b), 1);
}

#[test]
fn admin_errors_are_precise_and_change_nothing() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool(
        "default",
        "company",
        None,
        json!({"strong_guarantee_resources": {"cpu": 10}}),
    )
    .unwrap();
    core.create_pool(
        "default",
        "dev",
        Some("company"),
        json!({"strong_guarantee_resources": {"cpu": 6}}),
    )
    .unwrap();
    core.create_pool("default", "ops", Some("company"), json!({}))
        .unwrap();
    let before = core.cluster_config().clone();
    let revision = core.config_revision();

    let e = core
        .admin_set(
            "//sys/pool_trees/default/company/ops/@strong_guarantee_resources",
            json!({"cpu": 5}),
        )
        .unwrap_err();
    assert!(
        e.message.contains("company") && e.message.contains("cpu = 11"),
        "{e}"
    );

    core.create_pool("default", "q", None, json!({"mode": "fifo"}))
        .unwrap();
    let before_q = core.cluster_config().clone();
    let e = core
        .create_pool("default", "sub", Some("q"), json!({}))
        .unwrap_err();
    assert!(e.message.contains("FIFO"), "{e}");
    let e = core
        .admin_set("//sys/pool_trees/default/company/@mode", json!("fifo"))
        .unwrap_err();
    assert!(
        e.message.contains("FIFO") && e.message.contains("company"),
        "{e}"
    );
    assert_eq!(core.cluster_config(), &before_q);

    let e = core
        .admin_set("//sys/pool_trees/default/nope/@weight", json!(2))
        .unwrap_err();
    assert!(e.message.contains("nope"), "{e}");
    let e = core.admin_set("sys/pool_trees", json!(2)).unwrap_err();
    assert!(e.message.contains("start with '//'"), "{e}");
    let e = core
        .admin_set("//sys/pool_trees/default/company/@weight", json!("heavy"))
        .unwrap_err();
    assert!(
        e.message.contains("weight") && e.message.contains("company"),
        "{e}"
    );
    let e = core
        .admin_set("//sys/pool_trees/default/company/@wieght", json!(2))
        .unwrap_err();
    assert!(e.message.contains("wieght"), "{e}");
    let e = core
        .admin_set(
            "//sys/pool_trees/default/company/@max_running_operation_count",
            json!(80),
        )
        .unwrap_err();
    assert!(e.message.contains("max_operation_count"), "{e}");
    let e = core
        .admin_set(
            "//sys/pool_trees/default/@config/fair_share_starvation_tolerance",
            json!(3),
        )
        .unwrap_err();
    assert!(e.message.contains("fair_share_starvation_tolerance"), "{e}");
    let e = core
        .create_pool("default", "dev", None, json!({}))
        .unwrap_err();
    assert!(e.message.contains("already exists"), "{e}");
    let mut expected = before.clone();
    expected.trees.get_mut("default").unwrap().pools = before_q.trees["default"].pools.clone();
    assert_eq!(
        core.cluster_config(),
        &expected,
        "rejected changes left no trace"
    );
    assert_eq!(
        core.config_revision(),
        revision + 1,
        "only the q pool was created"
    );
}

#[test]
fn admin_paths_get_set_list_remove_with_aliases_and_nesting() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool("default", "company", None, json!({}))
        .unwrap();
    core.admin_set(
        "//sys/pool_trees/default/company/@min_share_resources",
        json!({"cpu": 4, "memory": "2G"}),
    )
    .unwrap();
    assert_eq!(
        core.reads()
            .admin_get("//sys/pool_trees/default/company/@strong_guarantee_resources/memory")
            .unwrap(),
        json!(2u64 << 30)
    );
    core.admin_set(
        "//sys/pool_trees/default/company/@strong_guarantee_resources/cpu",
        json!(6),
    )
    .unwrap();
    assert_eq!(
        core.reads()
            .admin_get("//sys/pool_trees/default/company/@strong_guarantee_resources/cpu")
            .unwrap(),
        json!(6.0)
    );
    assert_eq!(
        core.reads()
            .admin_get("//sys/pool_trees/default/company/@weight")
            .unwrap(),
        json!(1.0)
    );
    assert_eq!(
        core.reads().admin_list("//sys/pool_trees").unwrap(),
        vec!["default"]
    );
    assert_eq!(
        core.reads().admin_list("//sys/pool_trees/default").unwrap(),
        vec!["company"]
    );
    assert_eq!(
        core.reads()
            .admin_get("//sys/pool_trees/default/@config/max_running_operation_count_per_pool")
            .unwrap(),
        json!(8)
    );
    core.admin_set(
        "//sys/pool_trees/default/@config/fair-share_preemption_timeout",
        json!("10s"),
    )
    .unwrap();
    assert_eq!(
        core.reads()
            .admin_get("//sys/pool_trees/default/@config/fair_share_starvation_timeout")
            .unwrap(),
        json!(10_000)
    );
    core.admin_remove("//sys/pool_trees/default/company/@strong_guarantee_resources")
        .unwrap();
    assert!(!core
        .reads()
        .admin_exists("//sys/pool_trees/default/company/@strong_guarantee_resources")
        .unwrap());
    core.create_pool_tree("gpu", json!({"config": {"nodes_filter": "gpu"}}))
        .unwrap();
    assert_eq!(
        core.reads()
            .admin_get("//sys/pool_trees/gpu/@config/nodes_filter")
            .unwrap(),
        json!("gpu")
    );
    core.admin_set("//sys/pool_trees/@default_tree", json!("gpu"))
        .unwrap();
    assert!(
        core.admin_remove("//sys/pool_trees/gpu").is_err(),
        "the default tree stays"
    );
    core.admin_set("//sys/pool_trees/@default_tree", json!("default"))
        .unwrap();
    core.admin_remove("//sys/pool_trees/gpu").unwrap();
    core.admin_remove("//sys/pool_trees/default/company")
        .unwrap();
    assert!(core
        .reads()
        .admin_list("//sys/pool_trees/default")
        .unwrap()
        .is_empty());
    assert!(core.reads().admin_exists("//bad/path").is_err());
}

#[test]
fn weight_change_takes_effect_at_the_next_update() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(hb(10.0, &[], vec![]), 0);
    core.create_pool("default", "a", None, json!({})).unwrap();
    core.create_pool("default", "b", None, json!({})).unwrap();
    core.start_operation(id("x"), "u", spec_in(Some("a"), 20), 0)
        .unwrap();
    core.start_operation(id("y"), "u", spec_in(Some("b"), 20), 0)
        .unwrap();
    core.update_all_shares(0);
    let ratio = |core: &SchedulerCore, p: &str| {
        core.reads()
            .admin_get(&format!(
                "//sys/scheduler/orchid/scheduler/pool_trees/default/pools/{p}/fair_share_ratio"
            ))
            .unwrap()
            .as_f64()
            .unwrap()
    };
    assert!((ratio(&core, "a") - 0.5).abs() < 1e-6);
    core.admin_set("//sys/pool_trees/default/a/@weight", json!(3))
        .unwrap();
    core.tick(10_000);
    assert!((ratio(&core, "a") - 0.75).abs() < 1e-6);
    assert!((ratio(&core, "b") - 0.25).abs() < 1e-6);
    // Operations are found by id without naming their tree, and the orchid's top holds all.
    assert_eq!(
        core.reads()
            .admin_get("//sys/scheduler/orchid/scheduler/operations/x/pool")
            .unwrap(),
        json!("a")
    );
    assert!(core
        .reads()
        .admin_get("//sys/scheduler/orchid/scheduler/operations/nope/pool")
        .is_err());
    let top = core.reads().admin_get("//sys/scheduler/orchid").unwrap();
    assert_eq!(
        top["scheduler"]["pool_trees"]["default"]["pools"]["b"]["weight"],
        1.0
    );
}

fn status(core: &SchedulerCore, key: starvation::ElementKey) -> (String, String) {
    let s = core.reads().starvation_of("default", &key).expect("status");
    (
        serde_json::to_value(s.scheduling)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string(),
        s.starvation.name().to_string(),
    )
}

/// An operation held below its fair share starves after its pool's timeout (not
/// sooner, whatever its spec says), aggressively only where enabled, and is normal again
/// once it is back at its share.
#[test]
fn an_operation_below_its_fair_share_starves_after_the_timeout() {
    use starvation::ElementKey::{Operation, Pool};
    let mut h = Harness::starting_at(0);
    h.pool("testing", None, json!({})).node("n1", 24.0, &[]);
    let a = h.submit("u", spec_in(Some("testing"), 20));
    assert_eq!(h.heartbeat("n1").jobs_to_start.len(), 20);
    let mut b = spec_in(Some("testing"), 12);
    b.fair_share_starvation_timeout = Some(ytsched_common::DurationMs(10_000));
    let b = h.at(1_000).submit("u", b);
    let mut c = spec_in(Some("testing"), 1);
    c.fair_share_starvation_timeout = Some(ytsched_common::DurationMs(60_000));
    h.submit("u", c);
    assert_eq!(h.heartbeat("n1").jobs_to_start.len(), 4);
    let b_key = Operation(b);
    assert_eq!(status(&h.core, Operation(a.clone())).0, "normal");
    assert_eq!(
        status(&h.core, b_key.clone()),
        ("below_fair_share".into(), "non_starving".into())
    );
    // Heartbeats keep the node online; the shares stay as they are.
    for t in (2_000..=31_000).step_by(1_000) {
        h.at(t).heartbeat("n1");
        h.run(|c| c.tick(t));
        // B may not starve sooner than its pool's 30 s, whatever its spec says.
        let expect = if t >= 31_000 {
            "starving"
        } else {
            "non_starving"
        };
        assert_eq!(status(&h.core, b_key.clone()).1, expect, "at {t} ms");
    }
    assert_eq!(
        status(
            &h.core,
            Pool(ytsched_common::names::TreePoolName::parse("testing").unwrap())
        )
        .1,
        "non_starving",
        "the pool itself is not below"
    );
    // Aggressive starvation only where enabled, after its own timeout.
    h.run(|c| {
        c.admin_set(
            "//sys/pool_trees/default/@config/enable_aggressive_starvation",
            json!(true),
        )
    })
    .unwrap();
    h.at(122_000).heartbeat("n1");
    h.run(|c| c.tick(122_000));
    assert_eq!(status(&h.core, b_key.clone()).1, "aggressively_starving");
    // Back at its fair share (ten of A's jobs end), it is normal and no longer starving.
    let a_jobs: Vec<JobId> = h
        .running_on("n1")
        .iter()
        .filter(|s| s.operation_id == a)
        .take(10)
        .map(|s| s.job_id.clone())
        .collect();
    for j in &a_jobs {
        h.finish_job("n1", j, JobState::Completed);
    }
    h.at(123_000).heartbeat("n1");
    h.at(123_500).run(|c| c.tick(123_500));
    let (sched, starving) = status(&h.core, b_key);
    assert_eq!(
        (sched.as_str(), starving.as_str()),
        ("normal", "non_starving")
    );
}

#[test]
fn pools_starve_only_with_enable_pool_starvation() {
    use starvation::ElementKey::Pool;
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool("default", "a", None, json!({})).unwrap();
    core.create_pool(
        "default",
        "b",
        None,
        json!({"fair_share_starvation_timeout": "5s"}),
    )
    .unwrap();
    core.process_heartbeat(heartbeat("n1", 10.0, &[], vec![]), 0);
    core.start_operation(id("x"), "u", spec_in(Some("a"), 10), 0)
        .unwrap();
    let r = core.process_heartbeat(heartbeat("n1", 10.0, &[], vec![]), 0);
    core.start_operation(id("y"), "u", spec_in(Some("b"), 10), 0)
        .unwrap();
    core.process_heartbeat(heartbeat("n1", 10.0, &r.jobs_to_start, vec![]), 1);
    core.tick(5_000);
    assert_eq!(
        status(
            &core,
            Pool(ytsched_common::names::TreePoolName::parse("b").unwrap())
        )
        .1,
        "non_starving"
    );
    core.tick(6_000);
    assert_eq!(
        status(
            &core,
            Pool(ytsched_common::names::TreePoolName::parse("b").unwrap())
        )
        .1,
        "starving",
        "pool timeout of 5 s"
    );
    core.admin_set(
        "//sys/pool_trees/default/@config/enable_pool_starvation",
        json!(false),
    )
    .unwrap();
    core.tick(7_000);
    assert_eq!(
        status(
            &core,
            Pool(ytsched_common::names::TreePoolName::parse("b").unwrap())
        ),
        ("below_fair_share".into(), "non_starving".into())
    );
}

/// A node whose limits drop below its jobs gives back the newest first
/// (`resource_overcommit`), and takes nothing new while full.
#[test]
fn a_node_whose_limits_drop_gives_back_its_newest_jobs() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    let a = h.submit("u", spec_in(None, 4));
    assert_eq!(h.at(1).heartbeat("n1").jobs_to_start.len(), 4);
    h.set_cpu("n1", 2.0);
    let r = h.at(2).heartbeat("n1");
    let ids: Vec<String> = r
        .jobs_to_abort
        .iter()
        .map(|a| a.job_id.to_string())
        .collect();
    assert_eq!(ids, [format!("{a}-3"), format!("{a}-2")]);
    assert!(r
        .jobs_to_abort
        .iter()
        .all(|a| a.reason == ytsched_common::states::AbortReason::ResourceOvercommit));
    assert!(
        r.jobs_to_start.is_empty(),
        "nothing new while the node is full"
    );
    assert_eq!(h.running_on("n1").len(), 2);
    let info = h.core.reads().operation_info(&a).unwrap();
    assert_eq!(
        (info.jobs.running, info.jobs.waiting, info.jobs.failed),
        (2, 2, 0)
    );
}

/// A job past its `job_speculation_timeout` gets one copy on another node; the copy
/// finishes first, the job counts once, and the original loses (`speculative_lost`).
#[test]
fn a_slow_job_gets_one_speculative_copy_elsewhere_and_counts_once() {
    use ytsched_common::states::AbortReason;
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]);
    let mut s = spec_in(None, 1);
    s.tasks.get_mut("task").unwrap().job_speculation_timeout =
        Some(ytsched_common::DurationMs(5_000));
    let a = h.submit("u", s);
    assert_eq!(h.heartbeat("n1").jobs_to_start.len(), 1);
    let original = h.running_on("n1")[0].clone();
    h.add_node("n2", 1.0, &[]);
    let early = h.at(3_000).heartbeat("n2");
    assert!(early.jobs_to_start.is_empty(), "not overdue yet");
    h.at(4_000).heartbeat("n1");
    let r = h.at(5_000).heartbeat("n2");
    assert_eq!(r.jobs_to_start.len(), 1, "a copy on the other node");
    let copy = r.jobs_to_start[0].clone();
    assert_eq!(copy.job_index, original.job_index);
    // The original's node never gets a copy, and there is only ever one.
    assert!(h.at(9_000).heartbeat("n1").jobs_to_start.is_empty());
    // The copy finishes first: the original loses.
    h.finish_job("n2", &copy.job_id, JobState::Completed);
    h.at(10_000).heartbeat("n2");
    let info = h.core.reads().operation_info(&a).unwrap();
    assert_eq!(info.state, OperationState::Completed);
    assert_eq!(info.jobs.completed, 1, "the job counts once");
    let r = h.at(11_000).heartbeat("n1");
    assert_eq!(r.jobs_to_abort.len(), 1);
    assert_eq!(r.jobs_to_abort[0].job_id, original.job_id);
    assert_eq!(r.jobs_to_abort[0].reason, AbortReason::SpeculativeLost);
}

#[test]
fn integral_volume_carries_over_to_a_new_core() {
    let relaxed =
        json!({"integral_guarantees": {"guarantee_type": "relaxed", "resource_flow": {"cpu": 1}}});
    let mut a = SchedulerCore::new(CoreConfig::default());
    a.create_pool("default", "r", None, relaxed).unwrap();
    for t in (0..=10_000).step_by(1_000) {
        a.process_heartbeat(heartbeat("n1", 10.0, &[], vec![]), t);
        a.tick(t);
    }
    let saved = a.integral_volumes().clone();
    assert!(
        (a.integral_volume("default", "r") - 1.0).abs() < 1e-6,
        "10 s at 0.1"
    );
    // What the store kept goes into the next scheduler, which goes on from there.
    let mut b = SchedulerCore::new(CoreConfig::default());
    b.set_cluster_config(a.cluster_config().clone()).unwrap();
    b.set_integral_volumes(saved);
    for t in (20_000..=25_000).step_by(1_000) {
        b.process_heartbeat(heartbeat("n1", 10.0, &[], vec![]), t);
        b.tick(t);
    }
    assert!((b.integral_volume("default", "r") - 1.5).abs() < 1e-6);
}

#[test]
fn lightweightness_follows_the_pool_both_ways_and_never_sends_an_operation_back() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool(
        "default",
        "q",
        None,
        json!({"mode": "fifo", "enable_lightweight_operations": true, "max_running_operation_count": 1}),
    )
    .unwrap();
    for name in ["a", "b", "c"] {
        core.start_operation(id(name), "u", spec_in(Some("q"), 1), 0)
            .unwrap();
    }
    let counts = |core: &mut SchedulerCore| {
        core.update_all_shares(1);
        let p = core
            .reads()
            .admin_get("//sys/scheduler/orchid/scheduler/pool_trees/default/pools/q")
            .unwrap();
        (
            p["running_operation_count"].as_u64().unwrap(),
            p["lightweight_running_operation_count"].as_u64().unwrap(),
        )
    };
    assert_eq!(counts(&mut core), (0, 3));
    // The flag goes off: all three count as running, above the limit of 1, and none
    // goes back to pending.
    core.admin_set(
        "//sys/pool_trees/default/q/@enable_lightweight_operations",
        json!(false),
    )
    .unwrap();
    for name in ["a", "b", "c"] {
        assert_eq!(state(&core, name), OperationState::Running);
        assert!(
            !core
                .reads()
                .operation(&id(name))
                .unwrap()
                .slot("default")
                .unwrap()
                .lightweight
        );
    }
    assert_eq!(counts(&mut core), (3, 0));
    // A new one now waits for the running limit.
    core.start_operation(id("d"), "u", spec_in(Some("q"), 1), 2)
        .unwrap();
    assert_eq!(state(&core, "d"), OperationState::Pending);
    // The flag comes back: the pending one becomes lightweight and starts at once.
    core.admin_set(
        "//sys/pool_trees/default/q/@enable_lightweight_operations",
        json!(true),
    )
    .unwrap();
    assert_eq!(state(&core, "d"), OperationState::Running);
    assert_eq!(counts(&mut core), (0, 4));
    // Leaving FIFO mode ends lightweightness as well.
    core.admin_set("//sys/pool_trees/default/q/@mode", json!("fair_share"))
        .unwrap();
    assert_eq!(counts(&mut core), (4, 0));
}

/// A pending operation shows in its tree's orchid with its pool and demand, and no
/// share or usage yet.
#[test]
fn pending_operations_are_listed_in_the_tree_orchid_with_no_share() {
    let mut h = Harness::starting_at(0);
    h.pool("p", None, json!({"max_running_operation_count": 1}))
        .node("n1", 4.0, &[]);
    let a = h.submit("u", spec_in(Some("p"), 2));
    let b = h.submit("u", spec_in(Some("p"), 3));
    assert_eq!(
        h.core.reads().operation(&b).unwrap().state,
        OperationState::Pending
    );
    h.at(1).run(|c| c.update_all_shares(1));
    let orchid = |h: &Harness, op: &OperationId| {
        h.core
            .reads()
            .admin_get(&format!(
                "//sys/scheduler/orchid/scheduler/pool_trees/default/operations/{op}"
            ))
            .unwrap()
    };
    let pending = orchid(&h, &b);
    assert_eq!(pending["state"], "pending");
    assert_eq!(pending["pool"], "p");
    assert_eq!(pending["resource_demand"]["cpu"], 3.0);
    assert_eq!(pending["fair_share_ratio"], 0.0);
    assert_eq!(pending["detailed_fair_share"]["total"]["cpu"], 0.0);
    assert_eq!(pending["resource_usage"]["cpu"], 0.0);
    assert_eq!(orchid(&h, &a)["state"], "running");
}
