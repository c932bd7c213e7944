//! The orchid's entries carry every field under YTsaurus's name: pools (with guarantees,
//! limits and an integral guarantee), running operations (one in a FIFO pool) and
//! pending ones, and the tree itself. The entries are typed and written straight to
//! text, so a field left out of a type would vanish from what users read.

use crate::harness::Harness;
use crate::tests::spec;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use ytsched_common::names::PoolName;
use ytsched_common::spec::VanillaSpec;

fn spec_in(pool: &str, jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.pool = Some(PoolName::parse(pool).unwrap());
    s
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

const SHARES: &[&str] = &[
    "fair_share_ratio",
    "usage_ratio",
    "demand_ratio",
    "dominant_resource",
    "weight",
    "detailed_fair_share",
    "usage_share",
    "demand_share",
    "limits_share",
    "resource_usage",
    "resource_demand",
    "limited_resource_demand",
    "satisfaction_ratio",
    "scheduling_status",
    "starvation_status",
];

const POOL: &[&str] = &[
    "mode",
    "parent",
    "is_ephemeral",
    "operation_count",
    "running_operation_count",
    "lightweight_running_operation_count",
    "max_operation_count",
    "max_running_operation_count",
    "strong_guarantee_share",
    "effective_strong_guarantee_resources",
    "total_burst_ratio",
    "total_resource_flow_ratio",
];

const INTEGRAL: &[&str] = &[
    "integral_guarantee_type",
    "specified_resource_flow_ratio",
    "specified_burst_ratio",
    "accumulated_resource_ratio_volume",
    "accumulated_resource_volume",
    "integral_pool_capacity",
];

const OPERATION: &[&str] = &[
    "state",
    "pool",
    "user",
    "lightweight",
    "running_job_count",
    "pending_job_count",
    "suspended",
    "is_gang",
];

#[test]
fn every_orchid_entry_has_its_fields_under_their_yt_names() {
    let mut h = Harness::starting_at(0);
    h.pool(
        "burst",
        None,
        json!({"strong_guarantee_resources": {"cpu": 1}, "resource_limits": {"cpu": 3},
               "integral_guarantees": {"guarantee_type": "burst",
                   "resource_flow": {"cpu": 1}, "burst_guarantee_resources": {"cpu": 2}}}),
    )
    .pool(
        "queue",
        None,
        json!({"mode": "fifo", "max_running_operation_count": 1}),
    )
    .node("n1", 8.0, &[]);
    let fifo = h.submit("u", spec_in("queue", 2));
    let waiting = h.submit("u", spec_in("queue", 1));
    h.submit("u", spec_in("burst", 1));
    h.at(1).run(|c| c.update_all_shares(1));
    let _ = h.at(2).heartbeat("n1");
    h.at(3).run(|c| c.update_all_shares(3));
    let tree = h.core.reads().tree_orchid("default").unwrap();

    let top = set(&[
        "resource_limits",
        "config",
        "node_count",
        "alerts",
        "pools",
        "operations",
    ]);
    assert_eq!(keys(&tree), top);
    let pool_keys = |extra: &[&str]| set(&[SHARES, POOL, extra].concat());
    assert_eq!(keys(&tree["pools"]["queue"]), pool_keys(&[]));
    let burst = [INTEGRAL, &["estimated_burst_usage_duration_seconds"]].concat();
    let limits = ["resource_limits", "strong_guarantee_resources"];
    assert_eq!(
        keys(&tree["pools"]["burst"]),
        pool_keys(&[&burst[..], &limits].concat())
    );
    assert_eq!(tree["pools"]["burst"]["integral_guarantee_type"], "burst");
    assert_eq!(tree["pools"]["queue"]["parent"], "<Root>");
    assert_eq!(tree["pools"]["<Root>"]["parent"], Value::Null);

    let ops = &tree["operations"];
    let running = set(&[
        SHARES,
        OPERATION,
        &[
            "preemptible_job_count",
            "aggressively_preemptible_job_count",
            "fifo_index",
        ],
    ]
    .concat());
    assert_eq!(keys(&ops[fifo.as_str()]), running);
    assert_eq!(ops[fifo.as_str()]["fifo_index"], 0);
    let pending = set(&[
        OPERATION,
        &[
            "weight",
            "fair_share_ratio",
            "usage_ratio",
            "demand_ratio",
            "dominant_resource",
            "detailed_fair_share",
            "usage_share",
            "demand_share",
            "resource_usage",
            "resource_demand",
            "unschedulable_reason",
        ],
    ]
    .concat());
    assert_eq!(keys(&ops[waiting.as_str()]), pending);
    assert_eq!(ops[waiting.as_str()]["state"], "pending");
    assert_eq!(ops.as_object().unwrap().len(), 3, "{ops:#}");

    // An operation's own path answers its entry, made from its facts alone.
    for id in [&fifo, &waiting] {
        let path = format!("//sys/scheduler/orchid/scheduler/operations/{id}");
        assert_eq!(h.core.reads().admin_get(&path).unwrap(), ops[id.as_str()]);
    }
    let whole = h.core.reads().orchid();
    assert_eq!(whole["scheduler"]["pool_trees"]["default"], tree);
    assert_eq!(whole["scheduler"]["operations"], tree["operations"]);
}
