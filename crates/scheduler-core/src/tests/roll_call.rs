//! A revival's roll call (`jobs/roll_call.rs`): the revival window ends once every node
//! the store knows of has said what it runs, and not before.

use crate::harness::Harness;
use crate::tests::spec;
use crate::*;
use ytsched_common::protocol::HeartbeatReply;

const WINDOW_MS: u64 = 5_000;

/// Two 2-cpu nodes run 4 of 6 jobs; the scheduler restarts and begins serving at 100.
fn revived_with_four_running() -> (Harness, OperationId) {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]).node("n2", 2.0, &[]);
    let op = h.at(1).submit("u", spec(6, 1.0));
    h.at(2).heartbeat_all();
    assert_eq!(h.running_of(&op), 4);
    h.at(100).restart_scheduler(WINDOW_MS);
    h.run(|c| c.begin_serving(100, WINDOW_MS));
    (h, op)
}

fn started_indices(reply: &HeartbeatReply) -> Vec<u32> {
    reply.jobs_to_start.iter().map(|s| s.job_index).collect()
}

/// Once both known nodes have reported, starts resume long before the window's
/// deadline, only for the jobs no node runs, and no reported job is lost.
#[test]
fn the_window_ends_once_every_known_node_has_reported() {
    let (mut h, op) = revived_with_four_running();
    let r = h.finish_at("n1", 110);
    assert!(r.jobs_to_start.is_empty(), "n2 is not heard yet: {r:?}");
    assert_eq!(r.acknowledged_jobs.len(), 2, "n1's results are taken in");
    h.at(120).heartbeat("n2");
    assert!(h
        .last_effects()
        .events
        .iter()
        .any(|e| matches!(e, CoreEvent::RevivalEnded { lost_jobs: 0, .. })));
    let r = h.at(130).heartbeat("n1");
    assert_eq!(
        started_indices(&r),
        vec![4, 5],
        "before the deadline at 5,100"
    );
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.completed, info.jobs.running), (2, 4));
}

/// A known node not heard from keeps every start held until the deadline, which then
/// loses what it ran.
#[test]
fn a_known_node_not_heard_holds_starts_until_the_deadline() {
    let (mut h, op) = revived_with_four_running();
    let r = h.finish_at("n1", 110);
    assert!(r.jobs_to_start.is_empty());
    let r = h.at(100 + WINDOW_MS - 1).heartbeat("n1");
    assert!(r.jobs_to_start.is_empty(), "n2 may still run jobs: {r:?}");
    h.at(100 + WINDOW_MS).run(|c| c.tick(100 + WINDOW_MS));
    let r = h.heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 2, "n1 is free again");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.completed, info.jobs.running), (2, 2));
}

/// The reply to a node's first heartbeat waits until its record is stored, so a
/// successor knows every node that could have been given work; later replies do not.
#[test]
fn a_node_first_heard_is_answered_once_its_record_is_stored() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]);
    assert!(h.last_effects().reply_after_store);
    h.at(10).heartbeat("n1");
    assert!(!h.last_effects().reply_after_store);
}

/// A node first heard after the revival is not on the roll: the window waits for the
/// known ones only.
#[test]
fn a_node_first_heard_after_the_revival_is_not_awaited() {
    let (mut h, _) = revived_with_four_running();
    h.node("n3", 2.0, &[]);
    h.at(110).heartbeat("n1");
    let r = h.at(120).heartbeat("n3");
    assert!(r.jobs_to_start.is_empty(), "n2 is not heard yet: {r:?}");
    h.at(130).heartbeat("n2");
    let r = h.at(140).heartbeat("n3");
    assert_eq!(started_indices(&r), vec![4, 5]);
}

/// The revival window counts from the first heartbeat the scheduler may answer, not
/// from the revival: a revival whose writes took 60 s still holds starts for the whole
/// window after, so a node heard only then has its finished jobs adopted rather than
/// run again (issue 42's campaign: a revival's writes took 47 s, and two jobs that had
/// completed on a node not yet heard from ran a second time). n3, known and silent,
/// keeps the roll open.
#[test]
fn the_revival_window_counts_from_when_heartbeats_are_first_answered() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]).node("n3", 1.0, &[]);
    let op = h.at(1).submit("u", spec(4, 1.0));
    assert_eq!(h.at(2).heartbeat("n1").jobs_to_start.len(), 2);
    h.add_node("n2", 4.0, &[]);
    h.at(100).restart_scheduler(WINDOW_MS);
    h.run(|c| c.begin_serving(60_100, WINDOW_MS));
    // Another node, heard first, would get the waiting jobs if starts were not held.
    let r = h.at(60_200).heartbeat("n2");
    assert!(r.jobs_to_start.is_empty(), "starts are held: {r:?}");
    h.run(|c| c.tick(60_300));
    let r = h.finish_at("n1", 60_400);
    assert_eq!(r.acknowledged_jobs.len(), 2);
    assert!(r.jobs_to_start.is_empty(), "n3 is not heard yet: {r:?}");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.completed, info.jobs.waiting), (2, 2));
    h.at(60_100 + WINDOW_MS).run(|c| c.tick(60_100 + WINDOW_MS));
    let r = h.heartbeat("n2");
    assert_eq!(
        started_indices(&r),
        vec![2, 3],
        "indices 0 and 1 never run twice"
    );
}
