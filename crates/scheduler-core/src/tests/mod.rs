//! Core behaviour driven by hand-made heartbeats and a hand-moved clock.

use crate::*;
use ytsched_common::protocol::*;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{AbortReason, JobState, OperationState};
use ytsched_common::{IncarnationId, JobId};

pub(crate) use crate::harness::spec;
use crate::harness::Harness;

/// An unnumbered heartbeat of a `cpu`-core node (see `harness::request`).
pub(crate) fn heartbeat(
    node: &str,
    cpu: f64,
    running: &[JobStartSpec],
    finished: Vec<FinishedJob>,
) -> HeartbeatRequest {
    crate::harness::request(node, crate::harness::limits(cpu), running, finished)
}

pub(crate) use crate::harness::finished as done;

/// Six one-cpu jobs on a four-cpu node: four start, the rest as the first finish; the
/// operation completes, and what each job printed went to the store once, as an
/// output record of the call that took its result.
#[test]
fn jobs_fill_node_and_operation_completes() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    let op = h.submit("alice", spec(6, 1.0));
    let r = h.at(10).heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 4, "4 cpus fit 4 one-cpu jobs");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.waiting), (4, 2));
    let r = h.finish_at("n1", 20);
    assert_eq!(r.acknowledged_jobs.len(), 4);
    assert_eq!(r.jobs_to_start.len(), 2);
    h.finish_at("n1", 30);
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.state, OperationState::Completed);
    assert_eq!(info.jobs.completed, 6);
    // The last two settled as the operation finished: their outputs ride in its record.
    let outputs: Vec<_> = h
        .effects
        .iter()
        .flat_map(|e| &e.changes)
        .flat_map(|c| match c {
            crate::records::StateChange::Output(o) => vec![o.as_ref()],
            crate::records::StateChange::Operation(r) => r.outputs.iter().collect(),
            _ => vec![],
        })
        .collect();
    assert_eq!(outputs.len(), 6, "one output record per attempt");
    assert!(outputs.iter().all(|o| o.stdout.starts_with("out ")));
}

#[test]
fn a_job_without_output_writes_no_output_record_and_a_running_one_has_none_to_read() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let op = OperationId("quiet".into());
    core.start_operation(op.clone(), "u", spec(1, 1.0), 0)
        .unwrap();
    let started = core
        .process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 1)
        .jobs_to_start;
    let e = core
        .reads()
        .job_output_ready(&op, &started[0].job_id)
        .unwrap_err();
    assert_eq!(e.kind, ytsched_common::api::ErrorKind::Conflict, "{e:?}");
    let mut result = done(&started[0], JobState::Completed);
    result.stdout_tail.clear();
    core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![result]), 2);
    assert!(!core
        .take_changes()
        .iter()
        .any(|c| matches!(c, crate::records::StateChange::Output(_))));
    core.reads()
        .job_output_ready(&op, &started[0].job_id)
        .unwrap();
}

#[test]
fn duplicate_results_count_once() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(2, 1.0), 0)
        .unwrap();
    let r = core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 1);
    let s = r.jobs_to_start[0].clone();
    core.process_heartbeat(
        heartbeat("n1", 1.0, &[], vec![done(&s, JobState::Completed)]),
        2,
    );
    // The reply was lost; the node sends the same result again.
    let again = core.process_heartbeat(
        heartbeat("n1", 1.0, &[], vec![done(&s, JobState::Completed)]),
        3,
    );
    assert_eq!(again.acknowledged_jobs, vec![s.job_id.clone()]);
    let info = core.reads().operation_info(&op).unwrap();
    assert_eq!(info.jobs.completed, 1);
    assert_eq!(info.state, OperationState::Running);
}

/// A failed job is retried until `max_failed_job_count`; one failure more fails the
/// operation, which says why and what the job said.
#[test]
fn failures_past_the_limit_fail_the_operation() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]);
    let mut sp = spec(1, 1.0);
    sp.max_failed_job_count = 1;
    let op = h.submit("u", sp);
    for t in 1..=2 {
        let r = h.at(t).heartbeat("n1");
        assert_eq!(
            r.jobs_to_start.len(),
            1,
            "failed job is retried until the limit"
        );
        h.finish_all("n1", JobState::Failed);
    }
    h.at(3).heartbeat("n1");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.state, OperationState::Failed);
    let err = info.error.unwrap();
    assert!(
        err.contains("max_failed_job_count") && err.contains("exited with code 1"),
        "{err}"
    );
}

#[test]
fn oversized_job_fails_at_once_naming_the_resource() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(1, 100.0), 0)
        .unwrap();
    let info = core.reads().operation_info(&op).unwrap();
    assert_eq!(info.state, OperationState::Failed);
    assert!(info.error.unwrap().contains("cpu = 100"));
}

#[test]
fn operation_waits_while_the_tree_is_empty() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(1, 100.0), 0)
        .unwrap();
    core.tick(10);
    assert_eq!(
        core.reads().operation_info(&op).unwrap().state,
        OperationState::Running
    );
}

/// An aborted operation's running job: its node is nudged and told to abort it on
/// every heartbeat until it stops reporting the job; aborting again is refused.
#[test]
fn abort_tells_the_node_until_it_stops_reporting_the_job() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]);
    let op = h.submit("u", spec(1, 1.0));
    h.at(1).heartbeat("n1");
    h.at(2).run(|c| c.abort_operation(&op, 2)).unwrap();
    assert_eq!(h.last_effects().nudges, vec![NodeId("n1".into())]);
    // The node has not stopped the job yet: it reports it on both heartbeats.
    h.slow_to_kill("n1", true);
    for t in 3..5 {
        let r = h.at(t).heartbeat("n1");
        assert_eq!(r.jobs_to_abort.len(), 1);
        assert_eq!(r.jobs_to_abort[0].reason, AbortReason::OperationAborted);
        assert!(r.jobs_to_start.is_empty());
    }
    // It kills the job at the next abort, reports it ended, and is told nothing more.
    h.slow_to_kill("n1", false);
    h.at(5).heartbeat("n1");
    assert!(h.at(6).heartbeat("n1").jobs_to_abort.is_empty());
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.state, OperationState::Aborted);
    assert_eq!(info.jobs.aborted, 1);
    assert!(h.at(7).run(|c| c.abort_operation(&op, 7)).is_err());
}

/// A node that goes silent past its timeout loses its job, which runs again elsewhere;
/// when the node comes back still running the old copy, it is told to abort it.
#[test]
fn silent_node_loses_its_jobs_and_they_run_elsewhere() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]);
    let op = h.submit("u", spec(1, 1.0));
    h.at(1).heartbeat("n1");
    let lost = h.running_on("n1")[0].job_id.clone();
    h.add_node("n2", 1.0, &[]);
    h.at(29_000).heartbeat("n2");
    h.at(31_002).run(|c| c.tick(31_002));
    let r = h.at(31_003).heartbeat("n2");
    assert_eq!(r.jobs_to_start.len(), 1);
    assert_ne!(r.jobs_to_start[0].job_id, lost);
    // The lost attempt was settled and its record taken for the store, so the core no
    // longer holds it: the old copy is aborted as a job it does not know.
    let back = h.at(31_004).heartbeat("n1");
    assert_eq!(back.jobs_to_abort.len(), 1);
    assert_eq!(back.jobs_to_abort[0].job_id, lost);
    assert!(
        back.jobs_to_abort[0].message.contains("knows no such job"),
        "{back:?}"
    );
    let jobs = h.core.reads().operation_info(&op).unwrap().jobs;
    assert_eq!((jobs.aborted, jobs.running), (1, 1));
}

#[test]
fn lost_start_reply_requeues_the_job() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(1, 1.0), 0)
        .unwrap();
    let first = core
        .process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 1)
        .jobs_to_start;
    // The node never got that reply, so it reports nothing running.
    let second = core
        .process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 2)
        .jobs_to_start;
    assert_eq!(second.len(), 1);
    assert_ne!(first[0].job_id, second[0].job_id);
    assert_eq!(second[0].job_index, first[0].job_index);
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.running, 1);
}

/// A heartbeat numbered `seq` from an agent that has read the replies up to `read`.
fn numbered(seq: u64, read: u64, running: &[JobStartSpec]) -> HeartbeatRequest {
    HeartbeatRequest {
        seq,
        last_reply_seq: Some(read),
        ..heartbeat("n1", 1.0, running, vec![])
    }
}

/// Node n1 registered by heartbeat 1; one one-job operation whose start went out in the
/// reply to heartbeat 2.
fn one_job_started_in_reply_2() -> (SchedulerCore, OperationId, Vec<JobStartSpec>) {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(numbered(1, 0, &[]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(1, 1.0), 0)
        .unwrap();
    let first = core.process_heartbeat(numbered(2, 1, &[]), 1).jobs_to_start;
    (core, op, first)
}

#[test]
fn a_start_in_an_unread_reply_is_sent_again_not_lost() {
    let (mut core, op, first) = one_job_started_in_reply_2();
    assert_eq!(first.len(), 1);
    // The agent gave up on reply 2 before it came: its next heartbeat says it read
    // only up to 1, and runs nothing. The same attempt comes again, nothing is lost.
    for (seq, t) in [(3, 2), (4, 3)] {
        let again = core.process_heartbeat(numbered(seq, 1, &[]), t);
        assert_eq!(again.jobs_to_start, first, "heartbeat {seq}");
    }
    let info = core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.aborted), (1, 0));
    // It read reply 4 and runs the job: nothing more is sent, nothing lost.
    let r = core.process_heartbeat(numbered(5, 4, &first), 4);
    assert!(r.jobs_to_start.is_empty());
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.aborted, 0);
    let n1 = NodeId("n1".into());
    assert!(first
        .iter()
        .all(|s| !core.jobs.is_unconfirmed(&n1, &s.job_id)));
}

#[test]
fn a_start_in_a_read_reply_that_the_node_does_not_run_is_lost() {
    let (mut core, op, first) = one_job_started_in_reply_2();
    // It read reply 2 yet reports nothing: the job died there. A new attempt runs.
    let second = core.process_heartbeat(numbered(3, 2, &[]), 2).jobs_to_start;
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].job_id, first[0].job_id);
    let info = core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.aborted), (1, 1));
}

#[test]
fn a_restarted_agent_gets_no_start_of_its_old_run() {
    let (mut core, op, first) = one_job_started_in_reply_2();
    let restarted = HeartbeatRequest {
        incarnation_id: IncarnationId("i2".into()),
        ..numbered(1, 0, &[])
    };
    let r = core.process_heartbeat(restarted, 2);
    assert_eq!(r.jobs_to_start.len(), 1);
    assert_ne!(r.jobs_to_start[0].job_id, first[0].job_id, "a new attempt");
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.aborted, 1);
}

/// Two equal operations on one node: each start goes to the less satisfied one, so
/// they split it.
#[test]
fn least_satisfied_operation_goes_first() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    let a = h.submit("u", spec(10, 1.0));
    let b = h.at(1).submit("u", spec(10, 1.0));
    h.at(2).heartbeat("n1");
    assert_eq!(h.running_of(&a), 2);
    assert_eq!(h.running_of(&b), 2);
    assert_eq!(h.core.reads().operation_info(&a).unwrap().jobs.running, 2);
}

#[test]
fn malformed_heartbeats_are_rejected_without_state_change() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut hb = heartbeat("n1", 1.0, &[], vec![]);
    hb.protocol_version = 99;
    assert!(matches!(
        core.process_heartbeat(hb, 0).registration,
        Registration::Rejected { .. }
    ));
    let mut hb = heartbeat("bad.id", 1.0, &[], vec![]);
    hb.node_id = NodeId("bad.id".into());
    assert!(matches!(
        core.process_heartbeat(hb, 0).registration,
        Registration::Rejected { .. }
    ));
    let mut hb = heartbeat("n1", 1.0, &[], vec![]);
    hb.resource_limits.cpu = f64::NAN;
    assert!(matches!(
        core.process_heartbeat(hb, 0).registration,
        Registration::Rejected { .. }
    ));
    assert!(core.reads().list_nodes().is_empty());
}

/// A tree's total follows its nodes: joining, changing their limits, going silent and
/// coming back.
#[test]
fn cluster_resources_follow_nodes_joining_changing_and_leaving() {
    let mut h = Harness::starting_at(0);
    assert_eq!(h.core.tree_resources("default"), ResourceVector::ZERO);
    h.node("n1", 4.0, &[]).node("n2", 2.0, &[]);
    assert_eq!(h.core.tree_resources("default").cpu, 6.0);
    // An admin lowered n1's cpu: the next heartbeat carries the new limits.
    h.set_cpu("n1", 1.0);
    h.at(1).heartbeat("n1");
    assert_eq!(h.core.tree_resources("default").cpu, 3.0);
    h.at(29_000).heartbeat("n2");
    h.at(30_002).run(|c| c.tick(30_002));
    assert_eq!(h.core.tree_resources("default").cpu, 2.0, "n1 went offline");
    h.at(30_003).heartbeat("n1");
    assert_eq!(h.core.tree_resources("default").cpu, 3.0, "n1 is back");
}

#[test]
fn a_heartbeat_delivered_late_is_ignored() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut old = heartbeat("n1", 2.0, &[], vec![]);
    old.seq = 1;
    let mut new = old.clone();
    new.seq = 2;
    core.process_heartbeat(new.clone(), 0);
    core.start_operation(OperationId("op".into()), "u", spec(2, 1.0), 1)
        .unwrap();
    new.seq = 3;
    let started = core.process_heartbeat(new, 2).jobs_to_start;
    assert_eq!(started.len(), 2);
    // The request numbered 1 arrives now: it does not know of the starts, and must not
    // make them look lost.
    let r = core.process_heartbeat(old, 3);
    assert!(matches!(r.registration, Registration::Stale { .. }));
    let info = core
        .reads()
        .operation_info(&OperationId("op".into()))
        .unwrap();
    assert_eq!((info.jobs.running, info.jobs.aborted), (2, 0));
}

#[test]
fn a_node_without_a_free_user_slot_is_not_walked() {
    // Every job takes one user slot. A node whose slots are all taken must cost no
    // placement walk however many operations wait (a tolerant comparison once let a
    // near-zero request "fit" into zero free space, walking everything on each heartbeat).
    let mut core = SchedulerCore::new(CoreConfig::default());
    let two_slots = |running: &[JobStartSpec]| {
        let mut hb = heartbeat("n1", 16.0, running, vec![]);
        hb.resource_limits.user_slots = 2.0;
        hb
    };
    core.process_heartbeat(two_slots(&[]), 0);
    for i in 0..50 {
        core.start_operation(
            OperationId(format!("op{i}").into()),
            "alice",
            spec(3, 1.0),
            0,
        )
        .unwrap();
    }
    let r = core.process_heartbeat(two_slots(&[]), 10);
    assert_eq!(r.jobs_to_start.len(), 2, "two slots, two jobs");
    let running = r.jobs_to_start.clone();
    let walks = core.placement_walks();
    for t in 0..10 {
        let r = core.process_heartbeat(two_slots(&running), 20 + t);
        assert!(r.jobs_to_start.is_empty());
    }
    assert_eq!(
        core.placement_walks(),
        walks,
        "a full node is skipped before any walk"
    );
    // With a slot free again, it is walked and filled.
    let r = core.process_heartbeat(two_slots(&running[..1]), 40);
    assert_eq!(r.jobs_to_start.len(), 1);
    assert!(core.placement_walks() > walks);
}

#[test]
fn new_work_nudges_only_nodes_that_can_start_it_a_bounded_number_in_turn() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for n in ["n1", "n2", "n3", "n4", "n5"] {
        core.process_heartbeat(heartbeat(n, 4.0, &[], vec![]), 0);
    }
    core.outbox.take_nudges();
    let nudged = |core: &mut SchedulerCore| -> Vec<String> {
        core.outbox.take_nudges().into_iter().map(|n| n.0).collect()
    };
    // Two waiting jobs: two nodes, not five.
    core.start_operation(OperationId("a".into()), "u", spec(2, 1.0), 1)
        .unwrap();
    assert_eq!(nudged(&mut core), vec!["n1", "n2"]);
    // The next arrival goes on from there, wrapping around.
    core.start_operation(OperationId("b".into()), "u", spec(4, 1.0), 2)
        .unwrap();
    assert_eq!(nudged(&mut core), vec!["n1", "n3", "n4", "n5"]);
    // A node with no user slot free is not nudged.
    let mut full = heartbeat("n1", 4.0, &[], vec![]);
    full.resource_limits.user_slots = 0.0;
    core.process_heartbeat(full, 3);
    core.outbox.take_nudges();
    core.start_operation(OperationId("c".into()), "u", spec(10, 1.0), 4)
        .unwrap();
    assert!(!nudged(&mut core).contains(&"n1".to_string()));
}

#[test]
fn operations_are_listed_newest_first_in_pages_with_filters() {
    use ytsched_common::api::{ListOperations, OperationFilter};
    let mut core = SchedulerCore::new(CoreConfig::default());
    for i in 0..25u64 {
        let user = if i % 2 == 0 { "alice" } else { "bob" };
        core.start_operation(
            OperationId(format!("op{i:02}").into()),
            user,
            spec(1, 1.0),
            i * 10,
        )
        .unwrap();
    }
    core.abort_operation(&OperationId("op03".into()), 500)
        .unwrap();
    let ids = |p: &ytsched_common::api::OperationPage| -> Vec<String> {
        p.operations.iter().map(|o| o.id.to_string()).collect()
    };
    // Pages of 10, newest first, each continuing where the last stopped.
    let mut req = ListOperations {
        limit: Some(10),
        ..Default::default()
    };
    let first = core.reads().list_operations_page(&req).unwrap();
    assert_eq!(ids(&first)[..3], ["op24", "op23", "op22"]);
    req.cursor = first.next_cursor.clone();
    let second = core.reads().list_operations_page(&req).unwrap();
    assert_eq!(ids(&second)[0], "op14");
    req.cursor = second.next_cursor.clone();
    let third = core.reads().list_operations_page(&req).unwrap();
    assert_eq!(ids(&third), ["op04", "op03", "op02", "op01", "op00"]);
    assert_eq!(third.next_cursor, None, "the last page says so");
    // Filters: user, state, submission time.
    let only = |filter: OperationFilter| {
        ids(&core
            .reads()
            .list_operations_page(&ListOperations {
                filter,
                ..Default::default()
            })
            .unwrap())
    };
    assert_eq!(
        only(OperationFilter {
            user: Some("bob".into()),
            to_time: Some(60),
            ..Default::default()
        }),
        ["op05", "op03", "op01"]
    );
    assert_eq!(
        only(OperationFilter {
            state: Some(OperationState::Aborted),
            ..Default::default()
        }),
        ["op03"]
    );
    assert_eq!(
        only(OperationFilter {
            from_time: Some(230),
            ..Default::default()
        }),
        ["op24", "op23"]
    );
    assert_eq!(
        only(OperationFilter {
            pool: Some("alice".into()),
            ..Default::default()
        })
        .len(),
        13,
        "alice's ephemeral pool: 0, 2, ..., 24"
    );
    // Bad paging input is refused, naming the field.
    let bad = |req: ListOperations| core.reads().list_operations_page(&req).unwrap_err().message;
    assert!(bad(ListOperations {
        limit: Some(0),
        ..Default::default()
    })
    .contains("limit"));
    assert!(bad(ListOperations {
        limit: Some(5000),
        ..Default::default()
    })
    .contains("limit"));
    assert!(bad(ListOperations {
        cursor: Some("x".into()),
        ..Default::default()
    })
    .contains("cursor"));
}

#[test]
fn job_attempts_are_listed_in_pages_with_a_state_filter() {
    use ytsched_common::api::ListJobs;
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 8.0, &[], vec![]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "alice", spec(5, 1.0), 0)
        .unwrap();
    let started = core
        .process_heartbeat(heartbeat("n1", 8.0, &[], vec![]), 10)
        .jobs_to_start;
    assert_eq!(started.len(), 5);
    let finished = started[..2]
        .iter()
        .map(|s| done(s, JobState::Completed))
        .collect();
    core.process_heartbeat(heartbeat("n1", 8.0, &started[2..], finished), 20);
    let request = |limit, cursor: Option<String>, state| ListJobs {
        operation_id: op.clone(),
        limit,
        cursor,
        state,
    };
    let ids = |plan: &crate::JobPagePlan| -> Vec<JobId> {
        plan.entries
            .iter()
            .map(|(_, e)| match e {
                crate::JobEntry::Held(info) => info.id.clone(),
                crate::JobEntry::Stored(id) => id.clone(),
            })
            .collect()
    };
    let first = core
        .reads()
        .list_jobs_page(&request(Some(2), None, None))
        .unwrap();
    assert_eq!(first.entries.len(), 2);
    let cursor = |p: &crate::JobPagePlan| p.next_cursor.map(|c| c.to_string());
    let second = core
        .reads()
        .list_jobs_page(&request(Some(2), cursor(&first), None))
        .unwrap();
    let third = core
        .reads()
        .list_jobs_page(&request(Some(2), cursor(&second), None))
        .unwrap();
    assert_eq!(third.entries.len(), 1);
    assert_eq!(third.next_cursor, None);
    let mut seen: Vec<_> = [ids(&first), ids(&second), ids(&third)].concat();
    seen.dedup();
    assert_eq!(seen.len(), 5, "every attempt once");
    let running = core
        .reads()
        .list_jobs_page(&request(None, None, Some(JobState::Running)))
        .unwrap();
    assert_eq!(running.entries.len(), 3);
    // Once their records are taken for the store, finished attempts leave memory: the
    // page names them for the store to answer, and counts and filters still hold.
    assert!(first
        .entries
        .iter()
        .all(|(_, e)| matches!(e, crate::JobEntry::Held(_))));
    core.take_changes();
    let completed = core
        .reads()
        .list_jobs_page(&request(None, None, Some(JobState::Completed)))
        .unwrap();
    assert_eq!(
        ids(&completed),
        vec![started[0].job_id.clone(), started[1].job_id.clone()]
    );
    assert!(completed
        .entries
        .iter()
        .all(|(_, e)| matches!(e, crate::JobEntry::Stored(_))));
    let all = core
        .reads()
        .list_jobs_page(&request(None, None, None))
        .unwrap();
    assert_eq!(ids(&all), seen);
    assert_eq!(
        core.reads().operation(&op).unwrap().jobs.len(),
        3,
        "only running ones held"
    );
    let counts = core.reads().operation_info(&op).unwrap().jobs;
    assert_eq!((counts.completed, counts.running), (2, 3));
    // Their output can still be asked for (the store has it); a made-up id cannot.
    core.reads()
        .job_output_ready(&op, &started[0].job_id)
        .unwrap();
    let made_up = JobId(format!("{}-99", op).into());
    assert_eq!(
        core.reads()
            .job_output_ready(&op, &made_up)
            .unwrap_err()
            .kind,
        ytsched_common::api::ErrorKind::NotFound
    );
    // A result sent again for a released attempt is acknowledged and changes nothing.
    let again = core.process_heartbeat(
        heartbeat(
            "n1",
            8.0,
            &started[2..],
            vec![done(&started[0], JobState::Completed)],
        ),
        30,
    );
    assert_eq!(again.acknowledged_jobs, vec![started[0].job_id.clone()]);
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.completed, 2);
    assert!(core
        .reads()
        .list_jobs_page(&request(Some(0), None, None))
        .unwrap_err()
        .message
        .contains("limit"));
    assert!(core
        .reads()
        .list_jobs_page(&request(None, Some("-1".into()), None))
        .unwrap_err()
        .message
        .contains("cursor"));
}

#[test]
fn errors_say_what_kind_they_are() {
    use ytsched_common::api::ErrorKind;
    let mut core = SchedulerCore::new(CoreConfig::default());
    let missing = core
        .reads()
        .operation_info(&OperationId("nope".into()))
        .unwrap_err();
    assert_eq!(missing.kind, ErrorKind::NotFound);
    let mut bad = spec(1, 1.0);
    bad.tasks
        .iter_mut()
        .map(|(_, t)| t)
        .for_each(|t| t.job_count = 0);
    let invalid = core
        .start_operation(OperationId("a".into()), "u", bad, 0)
        .unwrap_err();
    assert_eq!(invalid.kind, ErrorKind::InvalidArgument);
    core.start_operation(OperationId("a".into()), "u", spec(1, 1.0), 0)
        .unwrap();
    core.abort_operation(&OperationId("a".into()), 1).unwrap();
    let twice = core
        .abort_operation(&OperationId("a".into()), 2)
        .unwrap_err();
    assert_eq!(twice.kind, ErrorKind::Conflict);
    core.create_pool(
        "default",
        "tiny",
        None,
        serde_json::json!({"max_operation_count": 1, "max_running_operation_count": 1}),
    )
    .unwrap();
    let mut in_tiny = spec(1, 1.0);
    in_tiny.pool = Some(ytsched_common::names::PoolName::parse("tiny").unwrap());
    core.start_operation(OperationId("b".into()), "u", in_tiny.clone(), 3)
        .unwrap();
    let full = core
        .start_operation(OperationId("c".into()), "u", in_tiny, 4)
        .unwrap_err();
    assert_eq!(full.kind, ErrorKind::LimitReached);
    assert_eq!(
        [
            ErrorKind::InvalidArgument,
            ErrorKind::NotFound,
            ErrorKind::PermissionDenied,
            ErrorKind::LimitReached
        ]
        .map(ErrorKind::exit_code),
        [2, 3, 4, 5]
    );
}

#[test]
fn a_node_that_cannot_fit_the_smallest_waiting_job_is_not_walked() {
    // Slots free but every cpu taken: no waiting job (each wants a cpu) can start, and
    // the heartbeat must not walk the 49 waiting operations to find that out.
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 0);
    for i in 0..49 {
        core.start_operation(
            OperationId(format!("op{i}").into()),
            "alice",
            spec(3, 1.0),
            0,
        )
        .unwrap();
    }
    let running = core
        .process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 10)
        .jobs_to_start;
    assert_eq!(running.len(), 2);
    let walks = core.placement_walks();
    for t in 0..10 {
        assert!(core
            .process_heartbeat(heartbeat("n1", 2.0, &running, vec![]), 20 + t)
            .jobs_to_start
            .is_empty());
    }
    assert_eq!(core.placement_walks(), walks);
    // A smaller job arriving is worth a walk only once there is room for it: half a cpu
    // still does not fit a node with none free.
    core.start_operation(OperationId("small".into()), "alice", spec(1, 0.5), 40)
        .unwrap();
    core.process_heartbeat(heartbeat("n1", 2.0, &running, vec![]), 41);
    assert_eq!(core.placement_walks(), walks);
    // One cpu frees up: the node is walked and filled again.
    let finished = vec![done(&running[0], JobState::Completed)];
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &running[1..], finished), 50);
    assert!(!r.jobs_to_start.is_empty());
    assert!(core.placement_walks() > walks);
}

/// Runs one one-job operation `name` to completion on n1 at time `t`.
fn run_to_completion(core: &mut SchedulerCore, name: &str, t: u64) -> OperationId {
    let op = core
        .start_operation(OperationId(name.into()), "u", spec(1, 1.0), t)
        .unwrap();
    let started = core
        .process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), t)
        .jobs_to_start;
    assert_eq!(started.len(), 1, "{name} starts");
    core.process_heartbeat(
        heartbeat("n1", 1.0, &[], vec![done(&started[0], JobState::Completed)]),
        t,
    );
    assert_eq!(
        core.reads().operation_info(&op).unwrap().state,
        OperationState::Completed
    );
    core.take_changes();
    op
}

#[test]
fn finished_operations_leave_memory_by_count_and_age() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for (attr, value) in [
        ("soft_retained_operation_count", 1),
        ("hard_retained_operation_count", 2),
        ("clean_delay", 1_000),
        ("max_operation_age", 10_000),
    ] {
        core.admin_set(
            &format!("//sys/pool_trees/default/@config/{attr}"),
            serde_json::json!(value),
        )
        .unwrap();
    }
    core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 0);
    let a = run_to_completion(&mut core, "a", 100);
    let b = run_to_completion(&mut core, "b", 200);
    core.tick(300);
    assert!(
        core.outbox.take_retired().is_empty(),
        "two finished: within both counts"
    );
    // A third goes over the hard count: the oldest leaves at once.
    let c = run_to_completion(&mut core, "c", 400);
    core.tick(400);
    let retired = core.outbox.take_retired();
    assert_eq!(retired.len(), 1);
    assert_eq!(retired[0].info.id, a);
    assert_eq!(retired[0].info.state, OperationState::Completed);
    // Its one attempt settled as it finished: its record kept it, and it comes along
    // for the archive (`inline_attempts.rs`).
    assert_eq!(retired[0].attempts, 1);
    assert_eq!(retired[0].inline.len(), 1);
    assert_eq!(
        retired[0].job_ids().collect::<Vec<_>>(),
        vec![JobId(format!("{a}-0").into())]
    );
    let err = core.reads().operation_info(&a).unwrap_err();
    assert_eq!(err.kind, ytsched_common::api::ErrorKind::NotFound);
    // Over the soft count, the oldest waits for its clean delay (b finished at 200).
    core.tick(1_100);
    assert!(core.outbox.take_retired().is_empty());
    core.tick(1_201);
    let retired = core.outbox.take_retired();
    assert_eq!(
        retired
            .iter()
            .map(|r| r.info.id.clone())
            .collect::<Vec<_>>(),
        vec![b]
    );
    // The last one stays until it is older than max_operation_age.
    core.tick(10_400);
    assert!(core.outbox.take_retired().is_empty());
    core.tick(10_401);
    assert_eq!(core.outbox.take_retired()[0].info.id, c);
    assert_eq!(core.reads().retained_finished_count(), 0);
    assert!(
        core.jobs.is_empty(),
        "no job of a retired operation is kept"
    );
}

#[test]
fn retention_counts_must_be_ordered() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let err = core
        .admin_set(
            "//sys/pool_trees/default/@config/hard_retained_operation_count",
            serde_json::json!(10),
        )
        .unwrap_err();
    assert!(
        err.message.contains("soft_retained_operation_count = 200"),
        "{}",
        err.message
    );
}

/// A core whose fair-share updates the test computes itself, as the service does.
fn background_core() -> SchedulerCore {
    SchedulerCore::new(CoreConfig {
        background_share_updates: true,
        ..Default::default()
    })
}

#[test]
fn background_updates_are_computed_apart_and_nudge_the_nodes_for_new_work() {
    let mut core = background_core();
    core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 0);
    for u in core.share_updates_due(1) {
        core.apply_share_update(u.compute());
    }
    let op = core
        .start_operation(OperationId("op".into()), "u", spec(2, 1.0), 10)
        .unwrap();
    assert!(
        core.outbox.take_nudges().is_empty(),
        "no node can start it before an update includes it"
    );
    // No update has included it yet: placement reads the last snapshot, and neither a
    // heartbeat nor a tick computes one.
    let r = core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 20);
    assert!(r.jobs_to_start.is_empty());
    core.tick(30);
    let due = core.share_updates_due(30);
    assert_eq!(due.len(), 1);
    assert!(
        core.share_updates_due(31).is_empty(),
        "one update per tree at a time"
    );
    let computed = due.into_iter().next().unwrap().compute();
    core.apply_share_update(computed);
    assert_eq!(
        core.outbox.take_nudges(),
        vec![NodeId("n1".into())],
        "the node hears of the work once it can be placed"
    );
    let r = core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 40);
    assert_eq!(r.jobs_to_start.len(), 2);
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.running, 2);
}

/// The live arrays of an update are computed with it, off the core's lock, from its
/// inputs; operations that change while it computes (jobs started, finished, an
/// operation gone) are read again when it is applied, so they match a full scan.
#[test]
fn live_arrays_of_a_background_update_follow_changes_made_while_it_computed() {
    let mut core = background_core();
    core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 0);
    for u in core.share_updates_due(1) {
        core.apply_share_update(u.compute());
    }
    let a = core
        .start_operation(OperationId("a".into()), "u", spec(3, 1.0), 10)
        .unwrap();
    let b = core
        .start_operation(OperationId("b".into()), "u", spec(3, 1.0), 10)
        .unwrap();
    for u in core.share_updates_due(1_100) {
        core.apply_share_update(u.compute());
    }
    let r = core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 1_200);
    assert_eq!(r.jobs_to_start.len(), 4);
    let due = core.share_updates_due(2_300);
    assert_eq!(due.len(), 1);
    // While it computes: two jobs finish, one operation is aborted.
    let finished: Vec<_> = r.jobs_to_start[..2]
        .iter()
        .map(|s| done(s, JobState::Completed))
        .collect();
    core.process_heartbeat(heartbeat("n1", 4.0, &r.jobs_to_start[2..], finished), 2_310);
    core.abort_operation(&b, 2_320).unwrap();
    core.apply_share_update(due.into_iter().next().unwrap().compute());
    let shares = core.trees.shares("default").unwrap();
    let scan = crate::trees::live_usage::compute_live(&core.operations, &shares);
    let live = &core.trees.get("default").unwrap().live;
    assert_eq!(live.waiting, scan.waiting);
    assert_eq!(live.usage, scan.usage, "{a} and {b}");
}

#[test]
fn a_background_update_prepared_before_a_configuration_change_is_dropped() {
    let mut core = background_core();
    core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 0);
    let before = core.share_updates_due(1_000);
    let before = before.into_iter().next().expect("the period has passed");
    core.create_pool("default", "p", None, serde_json::json!({}))
        .unwrap();
    core.apply_share_update(before.compute());
    // The heartbeat at 0 made the tree's first snapshot; the update prepared at 1,000,
    // before pool p existed, does not replace it.
    assert_eq!(
        core.trees.get("default").and_then(|t| t.last_update()),
        Some(0),
        "the update made before the change is not taken in"
    );
    let again = core.share_updates_due(1_001);
    assert_eq!(
        again.len(),
        1,
        "the tree is computed again with the new pools"
    );
    core.apply_share_update(again.into_iter().next().unwrap().compute());
    assert!(core.reads().tree_orchid("default").unwrap()["pools"]
        .get("p")
        .is_some());
}

#[test]
fn each_call_returns_its_effects_and_leaves_none_behind() {
    use crate::records::StateChange;
    let mut core = SchedulerCore::new(CoreConfig::default());
    let (reply, joined) = core.run(|c| c.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 0));
    assert!(reply.jobs_to_start.is_empty());
    // (The tree's first fair-share update also tells its pools' shares to the log.)
    let told: Vec<&CoreEvent> = joined
        .events
        .iter()
        .filter(|e| !matches!(e, CoreEvent::PoolShares { .. }))
        .collect();
    assert!(
        matches!(told[..], [CoreEvent::NodeRegistered { .. }]),
        "{told:?}"
    );
    // Its first offer is what it is trusted with from now on: stored (`nodes/trust.rs`).
    assert!(
        matches!(&joined.changes[..], [StateChange::NodeTrust(n, r)] if n.as_str() == "n1" && r.resources.cpu == 2.0),
        "{:?}",
        joined.changes
    );
    assert!(!joined.config_changed);

    let (started, submitted) =
        core.run(|c| c.start_operation(OperationId("o".into()), "u", spec(1, 1.0), 1));
    started.unwrap();
    assert!(
        matches!(&submitted.changes[..], [StateChange::Operation(r)] if r.id.as_str() == "o"),
        "{:?}",
        submitted.changes
    );
    // The operation arrived while the node was idle: the node is told.
    assert_eq!(submitted.nudges, vec![NodeId("n1".into())]);

    let (reply, placed) = core.run(|c| c.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 2));
    assert_eq!(reply.jobs_to_start.len(), 1);
    assert!(placed
        .events
        .iter()
        .any(|e| matches!(e, CoreEvent::JobStarted { .. })));
    // A start is not stored: its node reports it after a restart (`adoption.rs`).
    assert!(!placed
        .changes
        .iter()
        .any(|c| matches!(c, StateChange::Job(_))));

    let ((), configured) = core.run(|c| {
        c.create_pool("default", "p", None, serde_json::json!({}))
            .unwrap()
    });
    assert!(configured.config_changed);
    // Nothing was left in the core for another caller to find.
    let ((), after) = core.run(|_| ());
    assert!(after.is_empty(), "{after:?}");
}

mod bursts;
mod gangs;
mod held_indexes;
mod hostile;
mod inline_attempts;
mod lifecycle;
mod observers;
mod orchid_fields;
mod pools;
mod reused_shares;
mod revival;
mod roll_call;
mod security;
mod time_limits;
mod trees;

#[test]
fn pools_shares_are_told_to_the_event_log_about_once_a_minute_per_tree() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let _ = core.run(|c| c.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 0));
    let _ = core.run(|c| c.start_operation(OperationId("o".into()), "u", spec(1, 1.0), 1));
    let mut told = Vec::new();
    for t in [1_000, 30_000, 59_000, 61_500, 90_000, 122_000] {
        let (_, effects) = core.run(|c| {
            for u in c.share_updates_due(t) {
                let _ = c.apply_share_update(u.compute());
            }
        });
        for e in effects.events {
            if let CoreEvent::PoolShares { tree, pools } = e {
                told.push((t, tree.to_string(), pools));
            }
        }
    }
    let at: Vec<u64> = told.iter().map(|(t, ..)| *t).collect();
    assert_eq!(at, vec![61_500, 122_000], "{told:?}");
    let (_, tree, pools) = &told[0];
    assert_eq!(tree, "default");
    let root = pools
        .iter()
        .find(|p| p.pool.as_str() == ytsched_common::names::ROOT_POOL)
        .expect("the root is sampled");
    assert!(root.demand_ratio > 0.0, "{root:?}");
}

/// A job whose node still fetches its files shows as `preparing` (and is found by that
/// state), is told of in the event log once, and counts as running all along.
#[test]
fn a_job_fetching_its_files_shows_as_preparing_and_counts_as_running() {
    use ytsched_common::api::ListJobs;
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 0);
    let op = core
        .start_operation(OperationId("op".into()), "alice", spec(1, 1.0), 0)
        .unwrap();
    let started = core
        .process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 10)
        .jobs_to_start;
    let mut preparing = heartbeat("n1", 4.0, &started, vec![]);
    preparing.running_jobs[0].state = JobState::Preparing;
    let (_, effects) = core.run(|c| c.process_heartbeat(preparing.clone(), 20));
    let told = |effects: &crate::Effects| {
        effects
            .events
            .iter()
            .filter(|e| matches!(e, CoreEvent::JobPreparing { .. }))
            .count()
    };
    assert_eq!(told(&effects), 1);
    let (_, effects) = core.run(|c| c.process_heartbeat(preparing, 30));
    assert_eq!(told(&effects), 0, "told once, not per heartbeat");
    let list = |core: &SchedulerCore, state| {
        let req = ListJobs {
            operation_id: op.clone(),
            limit: None,
            cursor: None,
            state,
        };
        core.reads().list_jobs_page(&req).unwrap().entries.len()
    };
    assert_eq!(list(&core, Some(JobState::Preparing)), 1);
    assert_eq!(core.reads().operation_info(&op).unwrap().jobs.running, 1);
    core.process_heartbeat(heartbeat("n1", 4.0, &started, vec![]), 40);
    assert_eq!(list(&core, Some(JobState::Preparing)), 0);
    assert_eq!(list(&core, Some(JobState::Running)), 1);
}
