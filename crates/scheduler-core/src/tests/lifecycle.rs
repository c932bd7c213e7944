//! Operations changed while they run (SPEC 5.14): `update_operation_parameters` and
//! `suspend_operation` / `resume_operation`, through the core's public calls.

use crate::harness::Harness;
use crate::tests::spec;
use crate::*;
use serde_json::json;
use ytsched_common::identity::Caller;
use ytsched_common::names::PoolName;
use ytsched_common::protocol::JobStartSpec;
use ytsched_common::spec::{OperationParameters, VanillaSpec};
use ytsched_common::states::{AbortReason, JobState, OperationState};

fn spec_in(pool: &str, jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.pool = Some(PoolName::parse(pool).unwrap());
    s
}

fn params(v: serde_json::Value) -> OperationParameters {
    serde_json::from_value(v).expect("parameters")
}

fn orchid_op(core: &SchedulerCore, op: &OperationId) -> serde_json::Value {
    core.reads()
        .admin_get(&format!(
            "//sys/scheduler/orchid/scheduler/pool_trees/default/operations/{op}"
        ))
        .expect("in the orchid")
}

fn update(h: &mut Harness, op: &OperationId, p: serde_json::Value) -> Result<(), ApiError> {
    let now = h.now;
    let p = params(p);
    h.run(|c| c.update_operation_parameters(op, None, &p, now))
}

use ytsched_common::api::ApiError;

/// A running operation moved to another pool keeps its running jobs; the next update
/// counts it (usage included) in its new pool, the old one no longer; the move is in
/// its history and its stored record.
#[test]
fn a_running_operation_moves_pool_and_keeps_its_jobs() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    h.pool("a", None, json!({})).pool("b", None, json!({}));
    let op = h.submit("u", spec_in("a", 6));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 4);
    update(&mut h, &op, json!({"pool": "b", "weight": 3})).unwrap();
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.pool, "b");
    assert_eq!(info.weight, 3.0);
    assert_eq!(info.jobs.running, 4, "running jobs keep running");
    assert!(
        info.history
            .iter()
            .any(|e| e.event == "parameters updated: pool=b weight=3"),
        "{:?}",
        info.history
    );
    let r = h.advance(1).heartbeat("n1");
    assert!(r.jobs_to_abort.is_empty(), "{r:?}");
    {
        let t = h.now + 1;
        h.run(|c| c.tick(t));
    }
    let o = orchid_op(&h.core, &op);
    assert_eq!(o["pool"], "b");
    assert_eq!(o["weight"], 3.0);
    let pool = |p: &str| {
        h.core
            .reads()
            .admin_get(&format!(
                "//sys/scheduler/orchid/scheduler/pool_trees/default/pools/{p}"
            ))
            .unwrap()
    };
    assert_eq!(pool("b")["resource_usage"]["cpu"], 4.0);
    assert_eq!(pool("a")["resource_usage"]["cpu"], 0.0);
    assert_eq!(pool("a")["operation_count"], 0);
    assert_eq!(pool("b")["operation_count"], 1);
    // A restarted scheduler finds it where it was moved.
    h.restart_scheduler(10_000);
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.pool.as_str(), info.weight), ("b", 3.0));
}

/// Moving into a pool at its running-operation limit is refused, naming the pool and the
/// limit, and nothing changes; so is a move past `max_operation_count`.
#[test]
fn a_move_into_a_full_pool_is_refused_naming_pool_and_limit() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    h.pool("a", None, json!({}))
        .pool("b", None, json!({"max_running_operation_count": 1}))
        .pool(
            "c",
            None,
            json!({"max_operation_count": 1, "max_running_operation_count": 1}),
        );
    let op = h.submit("u", spec_in("a", 1));
    h.submit("u", spec_in("b", 1));
    h.submit("u", spec_in("c", 1));
    let e = update(&mut h, &op, json!({"pool": "b"})).unwrap_err();
    assert!(
        e.message.contains("pool 'b'") && e.message.contains("max_running_operation_count is 1"),
        "{e}"
    );
    let e = update(&mut h, &op, json!({"pool": "c"})).unwrap_err();
    assert!(
        e.message.contains("pool 'c'") && e.message.contains("max_operation_count is 1"),
        "{e}"
    );
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.pool, "a", "nothing changed");
    assert_eq!(info.history.len(), 1, "{:?}", info.history);
}

/// A pending operation moved to a pool with room starts at once.
#[test]
fn a_pending_operation_moved_to_a_pool_with_room_starts() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    h.pool("a", None, json!({"max_running_operation_count": 1}))
        .pool("b", None, json!({}));
    h.submit("u", spec_in("a", 1));
    let second = h.submit("u", spec_in("a", 1));
    assert_eq!(
        h.core.reads().operation_info(&second).unwrap().state,
        OperationState::Pending
    );
    assert_eq!(
        orchid_op(&h.core, &second)["unschedulable_reason"],
        "pending"
    );
    update(&mut h, &second, json!({"pool": "b"})).unwrap();
    assert_eq!(
        h.core.reads().operation_info(&second).unwrap().state,
        OperationState::Running
    );
    let r = h.advance(1).heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 2, "{r:?}");
}

/// A change of weight or limits alone is never refused for counts, even in a pool now
/// above a lowered limit.
#[test]
fn a_weight_change_alone_never_checks_count_limits() {
    let mut h = Harness::new();
    h.pool("a", None, json!({}));
    let first = h.submit("u", spec_in("a", 1));
    h.submit("u", spec_in("a", 1));
    h.run(|c| {
        c.admin_set(
            "//sys/pool_trees/default/a/@max_running_operation_count",
            json!(1),
        )
    })
    .unwrap();
    update(&mut h, &first, json!({"weight": 5})).unwrap();
    assert_eq!(h.core.reads().operation_info(&first).unwrap().weight, 5.0);
}

/// Limits lowered below usage are taken back as `resource_limits_violation`, newest
/// first, on the next heartbeat.
#[test]
fn limits_lowered_below_usage_preempt_as_resource_limits_violation() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    let op = h.submit("u", spec(4, 1.0));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 4);
    update(&mut h, &op, json!({"resource_limits": {"cpu": 2}})).unwrap();
    let r = h.advance(1).heartbeat("n1");
    assert_eq!(r.jobs_to_abort.len(), 2, "{r:?}");
    assert!(r
        .jobs_to_abort
        .iter()
        .all(|a| a.reason == AbortReason::ResourceLimitsViolation));
    assert!(r.jobs_to_start.is_empty(), "{r:?}");
    assert_eq!(h.running_of(&op), 2);
}

/// Who may move an operation where: a pool the caller may not `use` is refused; the
/// new `owners` may then act on the operation.
#[test]
fn a_move_needs_use_on_the_new_pool_and_new_owners_gain_control() {
    let mut h = Harness::new();
    h.pool("a", None, json!({})).pool(
        "closed",
        None,
        json!({"acl": [{"action": "deny", "subjects": ["alice"], "permissions": ["use"]}]}),
    );
    let op = h.submit("alice", spec_in("a", 1));
    let alice = Caller::user("alice");
    let now = h.now;
    let e = h
        .run(|c| {
            c.update_operation_parameters(
                &op,
                Some(&alice),
                &params(json!({"pool": "closed"})),
                now,
            )
        })
        .unwrap_err();
    assert!(
        e.message.contains("alice") && e.message.contains("use") && e.message.contains("closed"),
        "{e}"
    );
    let bob = Caller::user("bob");
    assert!(h
        .core
        .reads()
        .authorize_operation(&bob, &op, "abort")
        .is_err());
    h.run(|c| {
        c.update_operation_parameters(&op, Some(&alice), &params(json!({"owners": ["bob"]})), now)
    })
    .unwrap();
    h.core
        .reads()
        .authorize_operation(&bob, &op, "abort")
        .unwrap();
}

/// Bad parameters name what is wrong: a tree the operation does not run in, a finished
/// operation, a bad weight.
#[test]
fn bad_parameter_updates_are_refused_naming_the_cause() {
    let mut h = Harness::new();
    let op = h.submit("u", spec(1, 1.0));
    let e = update(
        &mut h,
        &op,
        json!({"scheduling_options_per_pool_tree": {"gpu": {"weight": 2}}}),
    )
    .unwrap_err();
    assert!(e.message.contains("pool tree 'gpu'"), "{e}");
    let e = update(&mut h, &op, json!({"weight": -1})).unwrap_err();
    assert!(e.message.contains("weight"), "{e}");
    let now = h.now;
    h.run(|c| c.abort_operation(&op, now)).unwrap();
    let e = update(&mut h, &op, json!({"weight": 2})).unwrap_err();
    assert!(e.message.contains("already aborted"), "{e}");
    let missing = OperationId("nope".into());
    assert!(update(&mut h, &missing, json!({"weight": 2})).is_err());
}

fn running_specs(h: &Harness, node: &str, op: &OperationId) -> Vec<JobStartSpec> {
    h.running_on(node)
        .into_iter()
        .filter(|s| s.operation_id == *op)
        .cloned()
        .collect()
}

/// A suspended operation keeps its running jobs but starts no new one; it wants only
/// what it uses, so another operation takes the freed room; the orchid says why.
/// Resumed, it is given jobs again.
#[test]
fn a_suspended_operation_keeps_its_jobs_starts_none_and_wants_only_its_usage() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    let op = h.submit("u", spec(8, 1.0));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 4);
    let now = h.now;
    h.run(|c| c.suspend_operation(&op, false, now)).unwrap();
    let other = h.submit("v", spec(2, 1.0));
    // Two of its jobs end; the room goes to the other operation, none to it.
    for s in running_specs(&h, "n1", &op).into_iter().take(2) {
        h.finish_job("n1", &s.job_id, JobState::Completed);
    }
    h.advance(1).heartbeat("n1");
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 2);
    assert_eq!(h.running_of(&other), 2);
    {
        let t = h.now + 1;
        h.run(|c| c.tick(t));
    }
    let o = orchid_op(&h.core, &op);
    assert_eq!(o["suspended"], true);
    assert_eq!(o["unschedulable_reason"], "suspended");
    assert_eq!(o["resource_demand"], o["resource_usage"], "{o}");
    assert_eq!(o["pending_job_count"], 4);
    let info = h.core.reads().operation_info(&op).unwrap();
    assert!(info.suspended);
    assert_eq!(info.state, OperationState::Running);
    // Resumed: the next free room is its again.
    let now = h.now;
    h.run(|c| c.resume_operation(&op, now)).unwrap();
    h.finish_all("n1", JobState::Completed);
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 4);
    let o = orchid_op(&h.core, &op);
    assert_eq!(o["suspended"], false);
    assert!(o.get("unschedulable_reason").is_none(), "{o}");
    let history: Vec<String> = h
        .core
        .reads()
        .operation_info(&op)
        .unwrap()
        .history
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert!(
        history.contains(&"suspended".into()) && history.contains(&"resumed".into()),
        "{history:?}"
    );
}

/// With `abort_running_jobs`, running jobs are aborted as `suspended` on their node
/// and wait again; they run once resumed. A suspension survives a restart.
#[test]
fn suspending_with_abort_running_jobs_aborts_them_as_suspended() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    let op = h.submit("u", spec(3, 1.0));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 3);
    let now = h.now;
    h.run(|c| c.suspend_operation(&op, true, now)).unwrap();
    let r = h.advance(1).heartbeat("n1");
    assert_eq!(r.jobs_to_abort.len(), 3, "{r:?}");
    assert!(r
        .jobs_to_abort
        .iter()
        .all(|a| a.reason == AbortReason::Suspended));
    assert!(r.jobs_to_start.is_empty(), "{r:?}");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.waiting, info.jobs.aborted), (3, 3));
    h.restart_scheduler(10_000);
    assert!(h.core.reads().operation_info(&op).unwrap().suspended);
    let r = h.advance(20_000).heartbeat("n1");
    assert!(r.jobs_to_start.is_empty(), "still suspended: {r:?}");
    let now = h.now;
    h.run(|c| c.resume_operation(&op, now)).unwrap();
    let r = h.advance(1).heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 3, "{r:?}");
}

/// Suspend and resume are idempotent; a finished operation cannot be suspended or
/// resumed, and the error says why.
#[test]
fn suspend_and_resume_are_idempotent_and_refused_for_finished_operations() {
    let mut h = Harness::new();
    let op = h.submit("u", spec(1, 1.0));
    let now = h.now;
    h.run(|c| c.suspend_operation(&op, false, now)).unwrap();
    h.run(|c| c.suspend_operation(&op, false, now)).unwrap();
    h.run(|c| c.resume_operation(&op, now)).unwrap();
    h.run(|c| c.resume_operation(&op, now)).unwrap();
    let suspends = h
        .core
        .reads()
        .operation_info(&op)
        .unwrap()
        .history
        .iter()
        .filter(|e| e.event == "suspended")
        .count();
    assert_eq!(suspends, 1);
    h.run(|c| c.abort_operation(&op, now)).unwrap();
    let e = h.run(|c| c.suspend_operation(&op, false, now)).unwrap_err();
    assert!(e.message.contains("already aborted"), "{e}");
    let e = h.run(|c| c.resume_operation(&op, now)).unwrap_err();
    assert!(e.message.contains("already aborted"), "{e}");
}

/// The abort reason of job `id` as the last call's effects stored it.
fn stored_abort_reason(h: &Harness, id: &ytsched_common::JobId) -> Option<AbortReason> {
    h.last_effects()
        .changes
        .iter()
        .rev()
        .find_map(|c| match c {
            crate::records::StateChange::Job(j) if j.job.id == *id => Some(j.job.abort_reason),
            _ => None,
        })?
}

fn graceful(jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.preemption_mode = Some(ytsched_common::spec::PreemptionMode::Graceful);
    s
}

/// A harness whose default tree starves after 1 s, runs the preemptive stage on every
/// heartbeat, and gives gracefully preempted jobs 10 s.
fn preempting_harness() -> Harness {
    let mut h = Harness::new();
    for (attr, value) in [
        ("fair_share_starvation_timeout", json!("1s")),
        ("preemptive_scheduling_backoff", json!("0s")),
        ("job_graceful_interrupt_timeout", json!("10s")),
    ] {
        h.run(|c| c.admin_set(&format!("//sys/pool_trees/default/@config/{attr}"), value))
            .unwrap();
    }
    h.node("n1", 4.0, &[]);
    h
}

/// The event log names what a preemption made room for (SPEC 5.16), with the victim's
/// facts as they were when it was taken.
#[test]
fn a_preemption_names_the_operation_it_made_room_for() {
    let mut h = preempting_harness();
    let victim_op = h.submit("u", spec(4, 1.0));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&victim_op), 4);
    let starving = h.submit("v", spec(4, 1.0));
    let mut named = vec![];
    for _ in 0..10 {
        h.advance(500);
        let t = h.now;
        h.run(|c| c.tick(t));
        h.heartbeat("n1");
        for e in &h.last_effects().events {
            if let crate::CoreEvent::JobAborted {
                operation,
                reason: AbortReason::Preempted,
                preempted_by,
                attempt,
                ..
            } = e
            {
                named.push((operation.clone(), preempted_by.clone(), attempt.clone()));
            }
        }
    }
    assert!(!named.is_empty(), "the starving operation preempts");
    for (op, by, attempt) in &named {
        assert_eq!(op, &victim_op);
        assert_eq!(by.as_ref(), Some(&starving));
        let attempt = attempt.as_ref().expect("the victim's facts");
        assert_eq!(attempt.resources.cpu, 1.0);
        assert!(attempt.finish_time.is_some_and(|f| f >= attempt.start_time));
    }
}

/// Graceful preemption (SPEC 5.3): the victim is told to stop with the tree's timeout
/// and keeps its room (nothing starts in its place, nothing more is preempted for the
/// same need) until it has exited; then it waits again as `preempted` and the starving
/// operation takes the room.
#[test]
fn a_gracefully_preempted_job_holds_its_room_until_it_exits() {
    let mut h = preempting_harness();
    let victim_op = h.submit("u", graceful(4));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&victim_op), 4);
    let starving = h.submit("v", spec(4, 1.0));
    let mut told = vec![];
    for _ in 0..10 {
        h.advance(500);
        let t = h.now;
        h.run(|c| c.tick(t));
        let r = h.heartbeat("n1");
        assert!(
            r.jobs_to_start.iter().all(|s| s.operation_id != starving),
            "nothing starts in a graceful victim's room: {r:?}"
        );
        told.extend(r.jobs_to_abort);
    }
    assert!(!told.is_empty(), "the starving operation preempts");
    let victim = told[0].job_id.clone();
    assert!(
        told.iter().all(|a| a.job_id == victim),
        "one victim for one job's need, told again until it exits: {told:?}"
    );
    assert_eq!(told[0].reason, AbortReason::Preempted);
    assert_eq!(told[0].graceful_timeout_ms, Some(10_000));
    let last = told.last().unwrap().graceful_timeout_ms.unwrap();
    assert!(
        last < 10_000,
        "the time left, not the whole timeout again: {last}"
    );
    assert!(told[0].message.contains(&starving.to_string()), "{told:?}");
    assert_eq!(h.running_of(&victim_op), 4, "still running and counted");

    // It checkpoints and exits: preempted, back to waiting; the room goes to the
    // starving operation.
    h.finish_job("n1", &victim, JobState::Aborted);
    let r = h.advance(1).heartbeat("n1");
    let started: Vec<_> = r
        .jobs_to_start
        .iter()
        .filter(|s| s.operation_id == starving)
        .collect();
    assert_eq!(started.len(), 1, "{r:?}");
    let info = h.core.reads().operation_info(&victim_op).unwrap();
    assert_eq!(
        (info.jobs.aborted, info.jobs.waiting, info.jobs.failed),
        (1, 1, 0)
    );
    assert_eq!(
        stored_abort_reason(&h, &victim),
        Some(AbortReason::Preempted)
    );
}

/// A normal-mode victim is aborted at once and the preemptor starts in the same reply;
/// its abort carries no graceful timeout (the agent's short kill grace applies).
#[test]
fn a_normal_mode_victim_makes_room_at_once() {
    let mut h = preempting_harness();
    let victim_op = h.submit("u", spec(4, 1.0));
    h.advance(1).heartbeat("n1");
    let starving = h.submit("v", spec(4, 1.0));
    let mut first = None;
    for _ in 0..10 {
        h.advance(500);
        let t = h.now;
        h.run(|c| c.tick(t));
        let r = h.heartbeat("n1");
        if !r.jobs_to_abort.is_empty() {
            first = Some(r);
            break;
        }
    }
    let r = first.expect("the starving operation preempts");
    assert!(r
        .jobs_to_abort
        .iter()
        .all(|a| a.graceful_timeout_ms.is_none()));
    assert!(
        r.jobs_to_start.iter().any(|s| s.operation_id == starving),
        "{r:?}"
    );
    assert_eq!(h.running_of(&victim_op), 3);
}

/// A job exiting with its task's `restart_exit_code` waits again: not a failure, and
/// it runs again; another exit code is a failure.
#[test]
fn a_job_exiting_with_its_restart_exit_code_runs_again() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    let mut s = spec(1, 1.0);
    for (_, t) in s.tasks.iter_mut() {
        t.restart_exit_code = Some(42);
        t.interruption_signal = Some(ytsched_common::spec::InterruptionSignal::Usr1);
    }
    let op = h.submit("u", s);
    let r = h.advance(1).heartbeat("n1");
    assert_eq!(
        r.jobs_to_start[0].interruption_signal,
        Some(ytsched_common::spec::InterruptionSignal::Usr1),
        "the agent is told which signal to send"
    );
    let first = r.jobs_to_start[0].job_id.clone();
    h.exit_job("n1", &first, 42);
    let r = h.advance(1).heartbeat("n1");
    assert!(r.jobs_to_start.is_empty(), "not before its back-off: {r:?}");
    let why = h.core.reads().explain_operation(&op).unwrap().text();
    assert!(
        why.contains(
            "1 job(s) that asked to run again (restart_exit_code) wait out their back-off"
        ),
        "{why}"
    );
    assert_eq!(
        stored_abort_reason(&h, &first),
        Some(AbortReason::RestartRequested)
    );
    // After its back-off (100 ms for a first restart) it waits again and runs.
    let now = h.now + 100;
    h.at(now).run(|c| c.tick(now));
    let r = h.heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 1, "it runs again: {r:?}");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.failed, info.jobs.aborted), (0, 1));
    let second = r.jobs_to_start[0].job_id.clone();
    h.exit_job("n1", &second, 3);
    h.advance(1).heartbeat("n1");
    assert_eq!(h.core.reads().operation_info(&op).unwrap().jobs.failed, 1);
}

/// A per-tree `resource_limits` set by `update-op-parameters` is the operation's limit
/// in that tree, and the orchid shows it, not the spec's own.
#[test]
fn the_orchid_shows_a_per_tree_limit_set_by_an_update() {
    let mut h = Harness::new();
    h.node("n1", 8.0, &[]);
    let mut s = spec(8, 1.0);
    s.resource_limits = Some(ytsched_common::spec::ResourceAmounts {
        cpu: Some(6.0),
        ..Default::default()
    });
    let op = h.submit("u", s);
    let now = h.now;
    h.core.update_all_shares(now);
    assert_eq!(
        orchid_op(&h.core, &op)["resource_limits"]["cpu"],
        json!(6.0)
    );
    update(
        &mut h,
        &op,
        json!({"scheduling_options_per_pool_tree": {"default": {"resource_limits": {"cpu": 2}}}}),
    )
    .unwrap();
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&op), 2, "the per-tree limit holds");
    let now = h.now;
    h.core.update_all_shares(now);
    let shown = orchid_op(&h.core, &op);
    assert_eq!(shown["resource_limits"]["cpu"], json!(2.0), "{shown}");
}
