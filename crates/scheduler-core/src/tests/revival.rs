//! Revival from stored records (SPEC 5.10): what a restarted scheduler rebuilds, what it
//! keeps running, what it runs again, and what it never runs twice.

use crate::harness::Harness;
use crate::records::{JobRecord, OperationRecord, StateChange};
use crate::tests::{done, heartbeat, spec};
use crate::*;
use ytsched_common::codec::{decode, encode};
use ytsched_common::protocol::JobStartSpec;
use ytsched_common::states::{AbortReason, JobState, OperationState};
use ytsched_common::JobId;

/// What the store holds: the latest record of each key, through the real codec.
#[derive(Default)]
struct Store {
    config: Option<Vec<u8>>,
    ops: BTreeMap<OperationId, Vec<u8>>,
    jobs: BTreeMap<JobId, Vec<u8>>,
}

impl Store {
    fn take(&mut self, core: &mut SchedulerCore) {
        self.config = Some(encode(core.cluster_config()).unwrap());
        for c in core.take_changes() {
            match c {
                StateChange::Operation(o) => {
                    self.ops.insert(o.id.clone(), encode(o.as_ref()).unwrap());
                }
                StateChange::Job(j) => {
                    self.jobs
                        .insert(j.job.id.clone(), encode(j.as_ref()).unwrap());
                }
                // Revival never reads outputs back.
                StateChange::Output(_) => {}
            }
        }
    }

    fn revive(&self, now: u64) -> SchedulerCore {
        let mut core = SchedulerCore::new(CoreConfig::default());
        core.set_cluster_config(decode(self.config.as_ref().unwrap()).unwrap())
            .unwrap();
        let ops: Vec<OperationRecord> = self.ops.values().map(|b| decode(b).unwrap()).collect();
        let jobs: Vec<JobRecord> = self.jobs.values().map(|b| decode(b).unwrap()).collect();
        core.restore(ops, jobs, now, 5_000);
        core
    }
}

fn op() -> OperationId {
    OperationId("op".into())
}

/// A core with one 2-cpu node running 2 of 4 jobs, all of it stored.
fn running_two() -> (Store, Vec<JobStartSpec>) {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut store = Store::default();
    core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 0);
    core.start_operation(op(), "u", spec(4, 1.0), 1).unwrap();
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 2);
    assert_eq!(r.jobs_to_start.len(), 2);
    store.take(&mut core);
    (store, r.jobs_to_start)
}

/// One 2-cpu node runs 2 of 4 jobs; the scheduler restarts. The revived one keeps the
/// reported jobs running, starts only the other two when they finish, and never runs
/// an index twice.
#[test]
fn revived_scheduler_keeps_reported_jobs_running_and_starts_only_the_rest() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]);
    let op = h.at(1).submit("u", spec(4, 1.0));
    assert_eq!(h.at(2).heartbeat("n1").jobs_to_start.len(), 2);
    h.at(100).restart_scheduler(5_000);
    assert!(h.core.reviving());
    let info = h.core.operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.waiting), (2, 2));
    assert!(
        info.history.last().unwrap().event.contains("revived"),
        "{:?}",
        info.history
    );
    let r = h.at(110).heartbeat("n1");
    assert!(
        r.jobs_to_abort.is_empty(),
        "reported jobs keep running: {r:?}"
    );
    assert!(r.jobs_to_start.is_empty(), "the node is full");
    let r = h.finish_at("n1", 120);
    assert_eq!(r.acknowledged_jobs.len(), 2);
    let indices: Vec<u32> = r.jobs_to_start.iter().map(|s| s.job_index).collect();
    assert_eq!(indices, vec![2, 3], "indices 0 and 1 never run twice");
}

/// Jobs no node reports within the revival window are lost and wait to run again.
#[test]
fn jobs_no_node_reports_within_the_window_run_again() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]);
    let op = h.at(1).submit("u", spec(4, 1.0));
    h.at(2).heartbeat("n1");
    h.at(100).restart_scheduler(5_000);
    // n1 stays silent.
    h.at(4_000).run(|c| c.tick(4_000));
    let running = h.core.operation_info(&op).unwrap().jobs.running;
    assert_eq!(running, 2, "still in the window");
    h.at(5_200).run(|c| c.tick(5_200));
    assert!(!h.core.reviving());
    let info = h.core.operation_info(&op).unwrap();
    assert_eq!(
        (info.jobs.running, info.jobs.waiting, info.jobs.aborted),
        (0, 4, 2)
    );
    assert!(info
        .history
        .iter()
        .any(|h| h.event.contains("did not report it")));
    let jobs = h.core.held_jobs(&op).unwrap();
    assert!(jobs
        .iter()
        .filter(|j| j.state == JobState::Aborted)
        .all(|j| j.abort_reason == Some(AbortReason::NodeLost)));
}

#[test]
fn a_start_stored_but_never_delivered_runs_once_elsewhere() {
    // The reply with the starts was lost with the scheduler: the node runs nothing.
    let (store, _lost_reply) = running_two();
    let mut core = store.revive(100);
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 110);
    assert!(r.jobs_to_abort.is_empty());
    let mut indices: Vec<u32> = r.jobs_to_start.iter().map(|s| s.job_index).collect();
    indices.sort();
    assert_eq!(indices, vec![0, 1], "the lost starts run again, once");
}

#[test]
fn a_result_delivered_again_after_revival_counts_once() {
    let (mut store, started) = running_two();
    let mut core = store.revive(100);
    let result = done(&started[0], JobState::Completed);
    core.process_heartbeat(
        heartbeat("n1", 2.0, &started[1..], vec![result.clone()]),
        110,
    );
    store.take(&mut core);
    // The ack was lost with the scheduler; the node sends the result again.
    let mut core = store.revive(200);
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &started[1..], vec![result]), 210);
    assert_eq!(r.acknowledged_jobs.len(), 1);
    assert_eq!(core.operation_info(&op()).unwrap().jobs.completed, 1);
}

#[test]
fn an_operation_whose_every_job_finished_before_the_crash_completes_at_revival() {
    let (mut store, started) = running_two();
    let mut core = store.revive(100);
    let mut running = started.clone();
    let mut now = 110;
    while core.operation_info(&op()).unwrap().jobs.completed < 4 {
        let finished = running
            .iter()
            .map(|s| done(s, JobState::Completed))
            .collect();
        running = core
            .process_heartbeat(heartbeat("n1", 2.0, &[], finished), now)
            .jobs_to_start;
        now += 10;
    }
    store.take(&mut core);
    // As if the operation's own record had not been written before the crash.
    let mut stale: OperationRecord = decode(&store.ops[&op()]).unwrap();
    stale.state = OperationState::Running;
    stale.finish_time = None;
    store.ops.insert(op(), encode(&stale).unwrap());
    let core = store.revive(1_000);
    assert_eq!(
        core.operation_info(&op()).unwrap().state,
        OperationState::Completed
    );
}

/// Records that no longer validate fail their operation at revival instead of panicking
/// or exhausting memory on every restart.
#[test]
fn invalid_stored_records_fail_their_operation_and_revival_goes_on() {
    let (store, _) = running_two();
    // A job whose task index the spec does not have.
    let mut ops: Vec<OperationRecord> = store.ops.values().map(|b| decode(b).unwrap()).collect();
    let mut jobs: Vec<JobRecord> = store.jobs.values().map(|b| decode(b).unwrap()).collect();
    jobs[0].job.task = 7;
    // Another operation whose job_count is beyond any bound (6×10^8 jobs).
    let mut huge = ops[0].clone();
    huge.id = OperationId("huge".into());
    huge.spec
        .tasks
        .iter_mut()
        .map(|(_, t)| t)
        .next()
        .unwrap()
        .job_count = 600_000_000;
    ops.push(huge);
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.set_cluster_config(decode(store.config.as_ref().unwrap()).unwrap())
        .unwrap();
    core.restore(ops, jobs, 10, 5_000);

    for id in [op(), OperationId("huge".into())] {
        let info = core.operation_info(&id).unwrap();
        assert_eq!(info.state, OperationState::Failed, "{id}");
        let error = info.error.unwrap();
        assert!(error.contains("stored record is invalid"), "{error}");
    }
    assert!(core
        .operation_info(&op())
        .unwrap()
        .error
        .unwrap()
        .contains("index 0 of task 7"));
    assert!(core
        .operation_info(&OperationId("huge".into()))
        .unwrap()
        .error
        .unwrap()
        .contains("1000000 jobs per operation"));
    // The failed operations are stored as failed, and the core serves on.
    assert!(core.take_changes().len() >= 2);
    core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 20);
}

#[test]
fn an_unreadable_operation_answers_as_failed() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.note_damaged_operation(OperationId("gone".into()), "malformed message".into());
    let e = core
        .operation_info(&OperationId("gone".into()))
        .unwrap_err();
    assert!(e.message.contains("failed at revival"), "{e}");
    assert!(core
        .operation_info(&OperationId("other".into()))
        .unwrap_err()
        .message
        .contains("no such operation"));
}

/// A retried submission with the same idempotency token finds its operation after a
/// scheduler restart.
#[test]
fn a_revived_scheduler_still_answers_a_retry_by_its_token() {
    let mut h = Harness::starting_at(0);
    let alice = ytsched_common::identity::Caller::user("alice");
    let token = Some(ytsched_common::IdempotencyToken::parse("t1").unwrap());
    let submit = |h: &mut Harness, now: u64| {
        let token = token.clone();
        h.at(now)
            .run(|c| c.start_operation_as(OperationId::random(), &alice, spec(1, 1.0), token, now))
            .unwrap()
    };
    let id = submit(&mut h, 0);
    h.at(10).restart_scheduler(5_000);
    assert_eq!(submit(&mut h, 11), id);
    assert_eq!(h.core.operation_count(), 1);
}
