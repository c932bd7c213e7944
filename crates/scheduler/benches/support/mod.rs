//! What the core benches set up alike: pools that take the operations measured, and a
//! default tree that lets them all run.

// Each bench uses the part it needs.
#![allow(dead_code)]

use ytsched_common::names::PoolName;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::OperationId;
use ytsched_scheduler::core::SchedulerCore;

/// Pools `p0`..`p<count>` in the default tree, each taking up to `limit` operations,
/// all of them running.
pub fn add_pools(core: &mut SchedulerCore, count: usize, limit: u64) {
    for p in 0..count {
        core.create_pool(
            "default",
            &format!("p{p}"),
            None,
            serde_json::json!({"max_operation_count": limit, "max_running_operation_count": limit}),
        )
        .expect("pool");
    }
}

/// The default tree's counts of operations lifted, so that its pools' own decide (by
/// default most of a burst would wait as pending).
pub fn lift_tree_limits(core: &mut SchedulerCore) {
    let mut cluster = core.cluster_config().clone();
    for tree in cluster.trees.values_mut() {
        tree.config.max_operation_count = u32::MAX;
        tree.config.max_running_operation_count = u32::MAX;
    }
    core.set_cluster_config(cluster).expect("limits");
}

/// A one-job operation of `true` in `pool`.
pub fn one_job_spec(pool: &str) -> VanillaSpec {
    let mut s: VanillaSpec =
        serde_yaml_ng::from_str("tasks: {t: {command: 'true', job_count: 1}}").expect("spec");
    s.pool = Some(PoolName::parse(pool).expect("pool"));
    s
}

/// `count` one-job operations of user `u`, with ids `{i:032x}`, spread over the pools
/// `p0`..`p99` of `add_pools`.
pub fn submit_one_job_operations(core: &mut SchedulerCore, count: u64, now: u64) {
    for i in 0..count {
        submit_one_job_operation(core, i, now);
    }
}

/// One-job operation number `i` of user `u` (id `{i:032x}`), in pool `p{i % 100}`.
pub fn submit_one_job_operation(core: &mut SchedulerCore, i: u64, now: u64) {
    core.start_operation(
        OperationId(format!("{i:032x}").into()),
        "u",
        one_job_spec(&format!("p{}", i % 100)),
        now,
    )
    .expect("submit");
}
