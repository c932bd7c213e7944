//! The core's side of SPEC 5.11/5.12: refusals by pool ACL and ownership, idempotent
//! submission by client-made id, results taken only from the node a job was placed on,
//! heartbeat numbers that cannot lock a node out, and node reports that must be finite.

use crate::tests::{done, heartbeat, spec};
use crate::*;
use ytsched_common::api::ObjectType;
use ytsched_common::identity::Caller;
use ytsched_common::names::PoolName;
use ytsched_common::states::JobState;
use ytsched_common::IdempotencyToken;

#[test]
fn a_retried_submission_is_the_same_operation_by_its_token_scoped_to_the_user() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let token = Some(IdempotencyToken::parse("retry-me").unwrap());
    let alice = Caller::user("alice");
    // Each call gets a fresh scheduler-made id, as the service gives it.
    let first = core
        .start_operation_as(
            OperationId::random(),
            &alice,
            spec(2, 1.0),
            token.clone(),
            0,
        )
        .unwrap();
    let again = core
        .start_operation_as(
            OperationId::random(),
            &alice,
            spec(2, 1.0),
            token.clone(),
            5,
        )
        .unwrap();
    assert_eq!(first, again, "the retry found the first");
    assert_eq!(core.list_operations().len(), 1);
    // The same token from another user is another submission: it cannot reach alice's.
    let bobs = core
        .start_operation_as(
            OperationId::random(),
            &Caller::user("bob"),
            spec(2, 1.0),
            token.clone(),
            6,
        )
        .unwrap();
    assert_ne!(bobs, first);
    // The same token with another spec is a mistake, named as one.
    let e = core
        .start_operation_as(OperationId::random(), &alice, spec(3, 1.0), token, 7)
        .unwrap_err();
    assert!(e.message.contains("idempotency token 'retry-me'"), "{e}");
    assert_eq!(core.list_operations().len(), 2);
}

/// A retried submission answered from its token waits, as its first try did, for the
/// first try's writes to be stored. Issue 42's campaign: the first try's caller gave up
/// while the store was slow, the retry was answered at once, and the leader died before
/// the operation was stored, so an acknowledged operation never existed.
#[test]
fn a_retried_submission_is_answered_only_once_the_first_try_is_stored() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let token = Some(IdempotencyToken::parse("slow-store").unwrap());
    let alice = Caller::user("alice");
    let submit = |core: &mut SchedulerCore, now| {
        core.run(|c| {
            c.start_operation_as(
                OperationId::random(),
                &alice,
                spec(1, 1.0),
                token.clone(),
                now,
            )
        })
    };
    let (first, _) = submit(&mut core, 0);
    let (again, effects) = submit(&mut core, 5);
    assert_eq!(first.unwrap(), again.unwrap());
    assert!(
        effects.reply_after_store,
        "the retry's answer waits for the store"
    );
}

#[test]
fn acls_and_ownership_refuse_naming_user_permission_and_object() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool(
        "default",
        "team",
        None,
        serde_json::json!({"acl": [{"action": "deny", "subjects": ["bob"], "permissions": ["use"]}]}),
    )
    .unwrap();
    let mut s = spec(1, 1.0);
    s.pool = Some(PoolName::parse("team").unwrap());
    let bob = Caller::user("bob");
    let e = core
        .start_operation_as(OperationId::random(), &bob, s.clone(), None, 0)
        .unwrap_err();
    assert_eq!(
        e.message,
        "access denied: user 'bob' has no 'use' permission on pool 'team' of pool tree 'default'"
    );
    // Bob's own ephemeral pool is his to use.
    core.start_operation_as(OperationId::random(), &bob, spec(1, 1.0), None, 0)
        .unwrap();
    let op = core
        .start_operation_as(OperationId::random(), &Caller::user("alice"), s, None, 0)
        .unwrap();
    assert!(core
        .reads()
        .authorize_operation(&bob, &op, "abort")
        .is_err());
    assert!(core
        .reads()
        .authorize_operation(&Caller::admin("root"), &op, "abort")
        .is_ok());
    let e = core
        .reads()
        .authorize_change(&bob, "//sys/pool_trees/default/team/@weight")
        .unwrap_err();
    assert!(
        e.message.contains(
            "no 'administer' permission on pool tree 'default' (the root, parent of pool 'team')"
        ),
        "{e}"
    );
    assert!(core
        .reads()
        .authorize_create(&bob, ObjectType::SchedulerPoolTree, None, None)
        .is_err());
    assert!(core
        .reads()
        .authorize_change(&bob, "//sys/cluster_nodes/n1/@user_tags")
        .is_err());
}

#[test]
fn a_result_counts_only_from_the_node_the_job_was_placed_on() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 0);
    core.process_heartbeat(heartbeat("n2", 0.0, &[], vec![]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(1, 1.0), 0)
        .unwrap();
    let r = core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 1);
    let job = &r.jobs_to_start[0];
    // n2 claims n1's job finished: not acknowledged, not counted.
    let forged = core.process_heartbeat(
        heartbeat("n2", 0.0, &[], vec![done(job, JobState::Completed)]),
        2,
    );
    assert!(forged.acknowledged_jobs.is_empty());
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.running, 1);
    let real = core.process_heartbeat(
        heartbeat("n1", 1.0, &[], vec![done(job, JobState::Completed)]),
        3,
    );
    assert_eq!(real.acknowledged_jobs, vec![job.job_id.clone()]);
}

#[test]
fn a_far_future_heartbeat_number_cannot_lock_a_node_out() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut hb = heartbeat("n1", 1.0, &[], vec![]);
    hb.seq = 1;
    core.process_heartbeat(hb.clone(), 0);
    let mut forged = hb.clone();
    forged.seq = u64::MAX;
    let r = core.process_heartbeat(forged, 1);
    assert!(
        matches!(
            r.registration,
            ytsched_common::protocol::Registration::Stale { .. }
        ),
        "{:?}",
        r.registration
    );
    hb.seq = 2;
    let r = core.process_heartbeat(hb, 2);
    assert!(matches!(
        r.registration,
        ytsched_common::protocol::Registration::Registered { .. }
    ));
}

#[test]
fn node_reports_must_be_finite_and_plausible() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for bad in [f64::INFINITY, f64::NAN, -1.0, 1e300] {
        let mut hb = heartbeat("n1", 1.0, &[], vec![]);
        hb.resource_limits.cpu = bad;
        let r = core.process_heartbeat(hb, 0);
        match r.registration {
            ytsched_common::protocol::Registration::Rejected { error } => {
                assert!(error.contains("resource_limits.cpu"), "{error}")
            }
            other => panic!("cpu {bad} accepted: {other:?}"),
        }
    }
    assert!(core.reads().list_nodes().is_empty());
}

#[test]
fn the_roots_acl_is_the_trees_and_every_pool_inherits_it() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.create_pool("default", "team", None, serde_json::Value::Null)
        .unwrap();
    core.admin_set(
        "//sys/pool_trees/default/@config/acl",
        serde_json::json!([{"action": "allow", "subjects": ["alice"], "permissions": ["use"]}]),
    )
    .unwrap();
    let mut s = spec(1, 1.0);
    s.pool = Some(PoolName::parse("team").unwrap());
    let e = core
        .start_operation_as(
            OperationId::random(),
            &Caller::user("bob"),
            s.clone(),
            None,
            0,
        )
        .unwrap_err();
    assert!(
        e.message.contains("no 'use' permission on pool 'team'"),
        "{e}"
    );
    core.start_operation_as(OperationId::random(), &Caller::user("alice"), s, None, 0)
        .unwrap();
    // A bad ACL is refused naming the attribute, and changes nothing.
    let e = core
        .admin_set(
            "//sys/pool_trees/default/@config/acl",
            serde_json::json!([{"action": "allow", "subjects": ["a.b"], "permissions": ["use"]}]),
        )
        .unwrap_err();
    assert!(e.message.contains("acl"), "{e}");
}

#[test]
fn node_tags_and_hostname_are_checked_when_new() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut hb = heartbeat("n1", 1.0, &[], vec![]);
    hb.tags = vec!["ok".into(), "not a tag".into()];
    let r = core.process_heartbeat(hb.clone(), 0);
    assert!(
        matches!(&r.registration, ytsched_common::protocol::Registration::Rejected { error } if error.contains("'not a tag'")),
        "{:?}",
        r.registration
    );
    hb.tags = (0..300).map(|i| format!("t{i}")).collect();
    let r = core.process_heartbeat(hb.clone(), 1);
    assert!(matches!(
        &r.registration,
        ytsched_common::protocol::Registration::Rejected { error } if error.contains("limit of 256")
    ));
    // A registered node that changes to a bad tag is refused too.
    hb.tags = vec!["ok".into()];
    core.process_heartbeat(hb.clone(), 2);
    hb.tags = vec!["x/../..?".into()];
    let r = core.process_heartbeat(hb, 3);
    assert!(matches!(
        r.registration,
        ytsched_common::protocol::Registration::Rejected { .. }
    ));
}

#[test]
fn a_users_ephemeral_pool_is_that_users_and_no_one_squats_another_name() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let (alice, mallory) = (Caller::user("alice"), Caller::user("mallory"));
    let start = |core: &mut SchedulerCore, who: &Caller, pool: Option<&str>| {
        let mut s = spec(1, 1.0);
        s.pool = pool.map(|p| PoolName::parse(p).unwrap());
        core.start_operation_as(OperationId::random(), who, s, None, 0)
    };
    start(&mut core, &alice, None).unwrap();
    // Into alice's ephemeral pool: refused, naming whose it is.
    let e = start(&mut core, &mallory, Some("alice")).unwrap_err();
    assert_eq!(e.kind, ytsched_common::api::ErrorKind::PermissionDenied);
    assert!(
        e.message
            .contains("it is the ephemeral pool of user 'alice'"),
        "{e}"
    );
    // Nor may she create one under another user's name before that user does.
    let e = start(&mut core, &mallory, Some("bob")).unwrap_err();
    assert!(
        e.message
            .contains("may not create the ephemeral pool 'bob'"),
        "{e}"
    );
    // Her own is hers; admins go anywhere.
    start(&mut core, &mallory, None).unwrap();
    start(&mut core, &Caller::admin("root"), Some("alice")).unwrap();
    // An administrator may grant her `use` on alice's pool itself.
    core.admin_set(
        "//sys/pool_trees/default/alice/@acl",
        serde_json::json!([{"action": "allow", "subjects": ["mallory"], "permissions": ["use"]}]),
    )
    .unwrap();
    start(&mut core, &mallory, Some("alice")).unwrap();
    // Alice was never locked out of her own pool.
    start(&mut core, &alice, None).unwrap();
}

#[test]
fn a_node_offers_no_more_than_it_was_approved_for_and_an_excess_is_an_alert() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    // Without an approval of its own: the generous defaults still bound it.
    core.process_heartbeat(heartbeat("n1", 5000.0, &[], vec![]), 0);
    let n = core.reads().list_nodes().remove(0);
    assert_eq!(n.resource_limits.cpu, 1024.0);
    assert!(
        n.alert.as_deref().unwrap().contains("cpu = 5000"),
        "{:?}",
        n.alert
    );
    // Approved for 2 cpu: used as 2, whatever it says.
    let mut approvals = ytsched_common::node_approval::NodeApprovals::default();
    approvals.nodes.insert(
        ytsched_common::NodeId::parse("n1").unwrap(),
        ytsched_common::node_approval::parse_max_resources("cpu=2").unwrap(),
    );
    core.set_node_approvals(approvals);
    let mut hb = heartbeat("n1", 5000.0, &[], vec![]);
    hb.seq = 2;
    core.process_heartbeat(hb, 1);
    assert_eq!(core.tree_resources("default").cpu, 2.0);
    // Reporting within it clears the alert.
    let mut hb = heartbeat("n1", 1.0, &[], vec![]);
    hb.seq = 3;
    core.process_heartbeat(hb, 2);
    let n = core.reads().list_nodes().remove(0);
    assert_eq!((n.resource_limits.cpu, n.alert), (1.0, None));
}
