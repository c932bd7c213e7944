//! Security round 3 (issue 38) in the core: what one user's numbers, moves and histories
//! may cost the others.

use crate::harness::Harness;
use crate::tests::spec;
use serde_json::json;
use ytsched_common::identity::Caller;
use ytsched_common::names::PoolName;
use ytsched_common::spec::{OperationParameters, VanillaSpec};

fn params(v: serde_json::Value) -> OperationParameters {
    serde_json::from_value(v).expect("parameters")
}

fn spec_in(pool: &str, jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.pool = Some(PoolName::parse(pool).unwrap());
    s
}

/// An owner with `use` on a pool cannot move into it an operation whose user the pool
/// denies: the operation's user is checked, not only the caller.
#[test]
fn a_move_checks_the_operations_user_as_well_as_the_caller() {
    let mut h = Harness::new();
    h.pool("a", None, json!({})).pool(
        "secure",
        None,
        json!({"acl": [{"action": "deny", "subjects": ["bob"], "permissions": ["use"]}]}),
    );
    let op = h.submit("bob", spec_in("a", 1));
    let (bob, carol) = (Caller::user("bob"), Caller::user("carol"));
    let now = h.now;
    h.run(|c| {
        c.update_operation_parameters(&op, Some(&bob), &params(json!({"owners": ["carol"]})), now)
    })
    .unwrap();
    let into_secure = params(json!({"pool": "secure"}));
    let e = h
        .run(|c| c.update_operation_parameters(&op, Some(&carol), &into_secure, now))
        .unwrap_err();
    assert!(
        e.message.contains("operation's own user")
            && e.message.contains("'bob'")
            && e.message.contains("secure"),
        "{e}"
    );
    assert_eq!(h.core.operation(&op).unwrap().main_pool().as_str(), "a");
    // An admin is held to the same rule: the operation still runs as bob.
    let admin = Caller {
        admin: true,
        ..Caller::user("root")
    };
    assert!(h
        .run(|c| c.update_operation_parameters(&op, Some(&admin), &into_secure, now))
        .is_err());
    // A pool that admits bob takes the move from carol.
    h.pool("open", None, json!({}));
    let into_open = params(json!({"pool": "open"}));
    h.run(|c| c.update_operation_parameters(&op, Some(&carol), &into_open, now))
        .unwrap();
}

/// Weights past YTsaurus's schedulable bound are refused on submission and on update,
/// naming the bound; a pool's too.
#[test]
fn weights_are_bounded_on_submission_update_and_pools() {
    let mut h = Harness::new();
    let mut s = spec(1, 1.0);
    s.weight = Some(1e15);
    let e = h
        .run(|c| c.start_operation(crate::OperationId::random(), "u", s, 0))
        .expect_err("weight past the bound");
    assert!(
        e.message.contains("weight") && e.message.contains("6.7108864e7"),
        "{e}"
    );
    let op = h.submit("u", spec(1, 1.0));
    let now = h.now;
    let e = h
        .run(|c| c.update_operation_parameters(&op, None, &params(json!({"weight": 1e15})), now))
        .unwrap_err();
    assert!(e.message.contains("6.7108864e7"), "{e}");
    h.run(|c| c.update_operation_parameters(&op, None, &params(json!({"weight": 6e7})), now))
        .unwrap();
    h.pool("p", None, json!({}));
    let e = h
        .run(|c| c.admin_set("//sys/pool_trees/default/p/@weight", json!(1e15)))
        .unwrap_err();
    assert!(e.to_string().contains("6.7108864e7"), "{e}");
    let e = h
        .run(|c| c.create_pool("default", "q", None, json!({"weight": 1e-12})))
        .unwrap_err();
    assert!(e.to_string().contains("weight"), "{e}");
}
