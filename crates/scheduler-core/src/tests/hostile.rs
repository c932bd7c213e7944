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
    assert_eq!(
        h.core.reads().operation(&op).unwrap().main_pool().as_str(),
        "a"
    );
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

/// Two hundred changes of a long `owners` list keep the operation's history, and so its
/// stored record, bounded: the submission and the latest entries, the rest counted.
#[test]
fn an_operations_history_is_a_bounded_ring() {
    use crate::operations::operation::{MAX_HISTORY_ENTRIES, MAX_HISTORY_EVENT_BYTES};
    let mut h = Harness::new();
    let op = h.submit("alice", spec(1, 1.0));
    let first = h.core.reads().operation(&op).unwrap().history[0].clone();
    let now = h.now;
    for i in 0..200 {
        let owners: Vec<String> = (0..100).map(|k| format!("user-{i}-{k:0>50}")).collect();
        let p = params(json!({ "owners": owners }));
        h.run(|c| c.update_operation_parameters(&op, None, &p, now + i))
            .unwrap();
    }
    let o = h.core.reads().operation(&op).unwrap();
    assert_eq!(o.history.len(), MAX_HISTORY_ENTRIES);
    assert_eq!(o.history[0], first, "the submission stays first");
    assert_eq!(o.history_dropped, 201 - MAX_HISTORY_ENTRIES as u64);
    assert!(o.history.last().unwrap().event.contains("user-199-"));
    assert!(o
        .history
        .iter()
        .all(|e| e.event.len() <= MAX_HISTORY_EVENT_BYTES + 32));
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.history_dropped, o.history_dropped);
    let record = crate::records::OperationRecord::of(o);
    let bytes = ytsched_common::codec::encode(&record).unwrap().len();
    assert!(bytes < 128 * 1024, "a record of {bytes} bytes");
}

/// A job that always exits with its restart code runs again only up to the
/// per-operation limit; then the operation fails, saying why.
#[test]
fn restart_exit_code_restarts_stop_at_the_operations_limit() {
    use crate::operations::operation::MAX_REQUESTED_RESTARTS;
    use ytsched_common::states::OperationState;
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    let mut s = spec(1, 1.0);
    for (_, t) in s.tasks.iter_mut() {
        t.restart_exit_code = Some(42);
    }
    let op = h.submit("u", s);
    let mut started = 0;
    let mut waits = vec![];
    for _ in 0..MAX_REQUESTED_RESTARTS + 5 {
        // Heartbeats every 100 ms for the first second, then every 5 s, until the
        // held restart is let go.
        let asked = h.now;
        let mut r = h.advance(1).heartbeat("n1");
        while r.jobs_to_start.is_empty() && h.now < asked + 120_000 && started > 0 {
            let step = if h.now < asked + 1_000 { 100 } else { 5_000 };
            let now = h.now + step;
            h.at(now).run(|c| c.tick(now));
            r = h.heartbeat("n1");
        }
        waits.push(h.now - asked);
        let Some(job) = r.jobs_to_start.first() else {
            break;
        };
        started += 1;
        h.exit_job("n1", &job.job_id.clone(), 42);
    }
    h.advance(1).heartbeat("n1");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(
        started,
        MAX_REQUESTED_RESTARTS + 1,
        "the first run and its restarts"
    );
    // Each restart waited longer than the one before, up to a minute.
    assert!(
        waits[3] >= 400 && waits[6] >= 3200 && waits[20] >= 60_000,
        "{:?}",
        &waits[..21]
    );
    // (The last waited for nothing: the operation had failed.)
    let restarts = &waits[..waits.len() - 1];
    assert!(restarts.iter().all(|w| *w <= 65_100), "{restarts:?}");
    assert_eq!(info.state, OperationState::Failed);
    let error = info.error.unwrap_or_default();
    assert!(
        error.contains("restart_exit_code 42") && error.contains("limit of 1000"),
        "{error}"
    );
}

/// A delegate (`administer` on `team-alice` only) shapes what is below her pool, and
/// nothing of the pool itself: its guarantee, weight, preemption settings and ACL are
/// for whoever administers its parent, as is granting `administer` onward.
#[test]
fn a_delegate_shapes_her_subtree_but_not_her_own_pool() {
    let mut h = Harness::new();
    h.pool(
        "team-alice",
        None,
        json!({"strong_guarantee_resources": {"cpu": 1}, "acl": [{"action": "allow", "subjects": ["alice"], "permissions": ["administer"]}]}),
    );
    h.pool("team-alice-sub", Some("team-alice"), json!({}));
    let alice = Caller::user("alice");
    for own in [
        "//sys/pool_trees/default/team-alice/@strong_guarantee_resources",
        "//sys/pool_trees/default/team-alice/@weight",
        "//sys/pool_trees/default/team-alice/@allow_regular_preemption",
        "//sys/pool_trees/default/team-alice/@acl",
        "//sys/pool_trees/default/team-alice",
    ] {
        let e = h.core.reads().authorize_change(&alice, own).unwrap_err();
        assert!(
            e.message.contains("parent of pool 'team-alice'")
                && e.message.contains("its parent's administrator"),
            "{own}: {e}"
        );
    }
    // Below her pool she may do as she likes, within the pool (validated against it).
    for below in [
        "//sys/pool_trees/default/team-alice/team-alice-sub/@weight",
        "//sys/pool_trees/default/team-alice/team-alice-sub/@acl",
        "//sys/pool_trees/default/team-alice/team-alice-sub",
    ] {
        h.core.reads().authorize_change(&alice, below).unwrap();
    }
    h.core
        .reads()
        .authorize_create(
            &alice,
            ytsched_common::api::ObjectType::SchedulerPool,
            Some("default"),
            Some(&PoolName::parse("team-alice").unwrap()),
        )
        .unwrap();
    // An admin still sets her pool's own attributes.
    let admin = Caller::admin("root");
    h.core
        .reads()
        .authorize_change(&admin, "//sys/pool_trees/default/team-alice/@weight")
        .unwrap();
}

/// Errors quote at most a short prefix of what they name: a 500 KB path or cursor
/// gives a short error, not one as long as the input.
#[test]
fn errors_quote_only_a_short_prefix_of_hostile_input() {
    use ytsched_common::api::ListOperations;
    let mut h = Harness::new();
    let huge = "x".repeat(500 * 1024);
    for path in [
        format!("//sys/pool_trees/default/{huge}"),
        format!("//sys/pool_trees/default/{huge}/@weight"),
        format!("//sys/{huge}"),
        format!("//sys/pool_trees/{huge}"),
        format!("//sys/cluster_nodes/{huge}/@user_tags"),
    ] {
        let e = h.core.reads().admin_get(&path).unwrap_err().to_string();
        assert!(e.len() < 1024, "{} bytes: {}", e.len(), &e[..200]);
        let e = h
            .run(|c| c.admin_set(&path, json!(1)))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 1024, "{} bytes: {}", e.len(), &e[..200]);
    }
    let e = h
        .core
        .reads()
        .list_operations_page(&ListOperations {
            cursor: Some(huge.clone()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(e.message.len() < 1024, "{}", e.message.len());
}

/// Issue 38 point 7: a node without an approval is used for at most what it offered at
/// its first registration; a later claim above that is used as that, with an alert
/// saying how to approve more, until an admin does; a restarted scheduler holds the
/// same; the approvals file, where it names the node, still decides.
#[test]
fn a_node_is_trusted_with_what_it_first_offered_until_an_admin_approves_more() {
    use ytsched_common::NodeId;
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    h.set_cpu("n1", 1024.0);
    h.advance(1).heartbeat("n1");
    let n1 = NodeId::parse("n1").unwrap();
    let node = |h: &Harness| {
        h.core
            .reads()
            .list_nodes()
            .into_iter()
            .find(|n| n.id == n1)
            .unwrap()
    };
    assert_eq!(node(&h).resource_limits.cpu, 4.0, "held to its first offer");
    let alert = node(&h).alert.unwrap_or_default();
    assert!(
        alert.contains("cpu = 1024")
            && alert.contains("first registration")
            && alert.contains("ytsched node approve n1"),
        "{alert}"
    );
    // It stays so across a restart of the scheduler.
    h.restart_scheduler(0).advance(1).heartbeat("n1");
    assert_eq!(node(&h).resource_limits.cpu, 4.0, "the trust was stored");
    // An admin approves what it reports now, or names a cap.
    h.run(|c| c.approve_node(&n1, None)).unwrap();
    h.advance(1).heartbeat("n1");
    assert_eq!(node(&h).resource_limits.cpu, 1024.0);
    assert!(node(&h).alert.is_none());
    h.run(|c| c.approve_node(&n1, Some(crate::harness::limits(8.0))))
        .unwrap();
    h.advance(1).heartbeat("n1");
    assert_eq!(node(&h).resource_limits.cpu, 8.0);
    assert!(node(&h)
        .alert
        .unwrap_or_default()
        .contains("an admin approved"));
    // Nothing to approve for a node never heard from, without a cap.
    let ghost = NodeId::parse("ghost").unwrap();
    assert!(h.run(|c| c.approve_node(&ghost, None)).is_err());
}

/// Issue 38 point 12: a submission or a change whose operation record could not be
/// stored is refused before it is answered, naming the limit, and changes nothing.
#[test]
fn a_record_the_store_could_not_take_is_refused_before_it_is_answered() {
    // A bus whose payload limit leaves 10 KiB for a spec.
    let mut h = Harness::new();
    h.core = crate::SchedulerCore::new(crate::CoreConfig {
        max_record_bytes: 170 * 1024,
        ..Default::default()
    });
    let mut big = spec(1, 1.0);
    for (_, t) in big.tasks.iter_mut() {
        t.command = "x".repeat(12 * 1024);
    }
    let e = h
        .run(|c| c.start_operation(crate::OperationId::random(), "u", big, 0))
        .unwrap_err();
    assert!(
        e.message.contains("174080 bytes (the store's limit)"),
        "{e}"
    );
    let mut fits = spec(1, 1.0);
    for (_, t) in fits.tasks.iter_mut() {
        t.command = "x".repeat(6 * 1024);
    }
    let op = h.submit("alice", fits);
    let owners: Vec<String> = (0..100).map(|k| format!("owner-{k:0>50}")).collect();
    let now = h.now;
    let p = params(json!({ "owners": owners }));
    let e = h
        .run(|c| c.update_operation_parameters(&op, None, &p, now))
        .unwrap_err();
    assert!(e.message.contains("store's limit"), "{e}");
    assert!(
        h.core
            .reads()
            .operation(&op)
            .unwrap()
            .spec
            .owners
            .is_empty(),
        "unchanged"
    );
}
