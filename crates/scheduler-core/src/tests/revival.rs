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
    /// Running attempts as a version that stored starts would have kept them.
    legacy_running: BTreeMap<JobId, Vec<u8>>,
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
                // Revival never reads outputs back; these nodes offer the same again.
                StateChange::Output(_) | StateChange::NodeTrust(..) => {}
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

/// A core with one 2-cpu node running 2 of 4 jobs, all of it stored (the starts are
/// not: nothing of a running attempt is).
fn running_two() -> (Store, Vec<JobStartSpec>) {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut store = Store::default();
    core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 0);
    core.start_operation(op(), "u", spec(4, 1.0), 1).unwrap();
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 2);
    assert_eq!(r.jobs_to_start.len(), 2);
    store.take(&mut core);
    assert!(store.jobs.is_empty(), "starts are not stored");
    // What an older version stored: its running attempts.
    store.legacy_running = core.operations[&op()]
        .jobs
        .values()
        .map(|j| {
            let r = JobRecord {
                operation: op(),
                job: j.clone(),
            };
            (j.id.clone(), encode(&r).unwrap())
        })
        .collect();
    (store, r.jobs_to_start)
}

/// The revival window these tests restart with: starts are held for it.
const WINDOW_MS: u64 = 5_000;

/// One 2-cpu node runs 2 of 4 jobs; the scheduler restarts. Nothing recorded the
/// starts: the node's report makes them the running attempts of their jobs again,
/// nothing starts while nodes come back, and then only the other two start.
#[test]
fn revived_scheduler_adopts_reported_jobs_and_starts_only_the_rest() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]);
    let op = h.at(1).submit("u", spec(4, 1.0));
    assert_eq!(h.at(2).heartbeat("n1").jobs_to_start.len(), 2);
    h.at(100).restart_scheduler(5_000);
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.waiting), (0, 4));
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
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.waiting), (2, 2));
    assert!(h
        .last_effects()
        .events
        .iter()
        .any(|e| matches!(e, CoreEvent::JobAdopted { .. })));
    let r = h.finish_at("n1", 120);
    assert_eq!(r.acknowledged_jobs.len(), 2);
    assert!(r.jobs_to_start.is_empty(), "starts are held: {r:?}");
    let r = h.at(100 + WINDOW_MS - 1).heartbeat("n1");
    assert!(r.jobs_to_start.is_empty(), "still held: {r:?}");
    let r = h.at(100 + WINDOW_MS).heartbeat("n1");
    let indices: Vec<u32> = r.jobs_to_start.iter().map(|s| s.job_index).collect();
    assert_eq!(indices, vec![2, 3], "indices 0 and 1 never run twice");
    let ids: Vec<String> = r
        .jobs_to_start
        .iter()
        .map(|s| s.job_id.to_string())
        .collect();
    // 4 jobs reserved 5 numbers at submission; an earlier scheduler may have used
    // any of them, so the revived one numbers on from there.
    assert_eq!(
        ids,
        vec![format!("{op}-5"), format!("{op}-6")],
        "attempt numbers go on past the stored reservation"
    );
}

/// Attempt numbers past the stored reservation are announced only once the store has
/// the larger one: the reply that carries such a start waits for it; others do not.
#[test]
fn a_start_past_the_reservation_waits_for_the_store() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]);
    let mut s = spec(1, 1.0);
    s.max_failed_job_count = 10;
    h.at(1).submit("u", s);
    let mut waits = vec![];
    for t in 0..6u64 {
        let r = h.at(10 + t * 10).heartbeat("n1");
        waits.push((r.jobs_to_start.len(), h.last_effects().reply_after_store));
        h.finish_all("n1", JobState::Failed);
    }
    // One job reserves 2 numbers (0 and 1); each further block the one it needs and
    // 2 more.
    assert_eq!(
        waits,
        vec![
            (1, false),
            (1, false),
            (1, true),
            (1, false),
            (1, false),
            (1, true)
        ]
    );
}

/// A revival with nothing unfinished holds nothing.
#[test]
fn a_revival_without_unfinished_operations_holds_no_start() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]);
    h.at(1).submit("u", spec(1, 1.0));
    h.at(2).heartbeat("n1");
    h.finish_at("n1", 3);
    h.at(100).restart_scheduler(WINDOW_MS);
    h.at(101).submit("u", spec(1, 1.0));
    let r = h.at(110).heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 1, "{r:?}");
}

/// A node that comes back only after the hold reports attempts whose jobs were given
/// to others meanwhile: they are aborted, and their results never count.
#[test]
fn an_unrecorded_attempt_whose_job_runs_elsewhere_is_aborted() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 2.0, &[]);
    let op = h.at(1).submit("u", spec(2, 1.0));
    h.at(2).heartbeat("n1");
    let old: Vec<JobId> = h
        .running_on("n1")
        .iter()
        .map(|s| s.job_id.clone())
        .collect();
    h.at(100).restart_scheduler(WINDOW_MS);
    h.add_node("n2", 2.0, &[]);
    h.at(200).heartbeat("n2");
    let r = h.at(100 + WINDOW_MS).heartbeat("n2");
    assert_eq!(r.jobs_to_start.len(), 2, "n1 is silent: its jobs run on n2");
    h.finish_all("n1", JobState::Completed);
    let old_job = h.running_on("n1").len();
    assert_eq!(old_job, 0);
    let r = h.at(200 + WINDOW_MS).heartbeat("n1");
    assert_eq!(
        r.acknowledged_jobs.len(),
        2,
        "taken off the node, not counted"
    );
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!((info.jobs.running, info.jobs.completed), (2, 0), "{old:?}");
    h.finish_all("n2", JobState::Completed);
    h.at(300 + WINDOW_MS).heartbeat("n2");
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(
        (info.state, info.jobs.completed),
        (OperationState::Completed, 2)
    );
}

/// A node cannot make the scheduler adopt what no scheduler could have started: an
/// attempt number far past the operation's, another operation's job, or a job of no
/// task; nor adopt without saying which job (an older agent).
#[test]
fn only_an_attempt_a_scheduler_could_have_started_is_adopted() {
    let (store, started) = running_two();
    let forged = |seq: u64, task: &str, index: u32| {
        let mut s = started[0].clone();
        s.job_id = JobId::attempt(&op(), seq);
        s.task_name = task.into();
        s.job_index = index;
        s
    };
    let mut core = store.revive(100);
    let task = started[0].task_name.clone();
    let claims = vec![
        forged(10_000_000, &task, 2),
        forged(7, "no-such-task", 2),
        forged(8, &task, 99),
    ];
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &claims, vec![]), 110);
    assert_eq!(r.jobs_to_abort.len(), 3, "{r:?}");
    let mut old_agent = heartbeat("n1", 2.0, &started, vec![]);
    for j in &mut old_agent.running_jobs {
        j.attempt_of = None;
    }
    let r = core.process_heartbeat(old_agent, 120);
    assert_eq!(r.jobs_to_abort.len(), 2, "{r:?}");
    let info = core.reads().operation_info(&op()).unwrap();
    assert_eq!((info.jobs.running, info.jobs.waiting), (0, 4));
    // The real ones, reported as they are, are adopted.
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &started, vec![]), 130);
    assert!(r.jobs_to_abort.is_empty(), "{r:?}");
    assert_eq!(core.reads().operation_info(&op()).unwrap().jobs.running, 2);
}

/// A job that finished while no scheduler ran: its result is taken as that of an
/// adopted attempt, once.
#[test]
fn a_result_of_an_unrecorded_attempt_counts_once() {
    let (store, started) = running_two();
    let mut core = store.revive(100);
    let results: Vec<_> = started
        .iter()
        .map(|s| done(s, JobState::Completed))
        .collect();
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], results.clone()), 110);
    assert_eq!(r.acknowledged_jobs.len(), 2);
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], results), 120);
    assert_eq!(r.acknowledged_jobs.len(), 2);
    let info = core.reads().operation_info(&op()).unwrap();
    assert_eq!((info.jobs.completed, info.jobs.waiting), (2, 2));
}

/// Running attempts an older version recorded, that no node reports within the
/// revival window, are lost and wait to run again.
#[test]
fn recorded_jobs_no_node_reports_within_the_window_run_again() {
    let (mut store, _) = running_two();
    store.jobs = std::mem::take(&mut store.legacy_running);
    let mut core = store.revive(100);
    assert!(core.reviving());
    core.tick(4_000);
    assert_eq!(
        core.reads().operation_info(&op()).unwrap().jobs.running,
        2,
        "still in the window"
    );
    core.tick(5_200);
    assert!(!core.reviving());
    let info = core.reads().operation_info(&op()).unwrap();
    assert_eq!(
        (info.jobs.running, info.jobs.waiting, info.jobs.aborted),
        (0, 4, 2)
    );
    assert!(info
        .history
        .iter()
        .any(|h| h.event.contains("did not report it")));
    let jobs = core.held_jobs(&op()).unwrap();
    assert!(jobs
        .iter()
        .filter(|j| j.state == JobState::Aborted)
        .all(|j| j.abort_reason == Some(AbortReason::NodeLost)));
}

#[test]
fn a_start_never_delivered_runs_once_after_the_hold() {
    // The reply with the starts was lost with the scheduler: the node runs nothing.
    let (store, _lost_reply) = running_two();
    let mut core = store.revive(100);
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 110);
    assert!(r.jobs_to_abort.is_empty());
    assert!(r.jobs_to_start.is_empty(), "held for the revival window");
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 100 + WINDOW_MS);
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
    assert_eq!(
        core.reads().operation_info(&op()).unwrap().jobs.completed,
        1
    );
}

#[test]
fn an_operation_whose_every_job_finished_before_the_crash_completes_at_revival() {
    let (mut store, started) = running_two();
    let mut core = store.revive(100);
    let mut running = started.clone();
    let mut now = 110;
    while core.reads().operation_info(&op()).unwrap().jobs.completed < 4 {
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
        core.reads().operation_info(&op()).unwrap().state,
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
    let mut jobs: Vec<JobRecord> = store
        .legacy_running
        .values()
        .map(|b| decode(b).unwrap())
        .collect();
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
        let info = core.reads().operation_info(&id).unwrap();
        assert_eq!(info.state, OperationState::Failed, "{id}");
        let error = info.error.unwrap();
        assert!(error.contains("stored record is invalid"), "{error}");
    }
    assert!(core
        .reads()
        .operation_info(&op())
        .unwrap()
        .error
        .unwrap()
        .contains("index 0 of task 7"));
    assert!(core
        .reads()
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
        .reads()
        .operation_info(&OperationId("gone".into()))
        .unwrap_err();
    assert!(e.message.contains("failed at revival"), "{e}");
    assert!(core
        .reads()
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
    assert_eq!(h.core.reads().operation_count(), 1);
}

/// A restarted scheduler counts an operation's `time_limit` from its stored start, not
/// from its own: one submitted at 0 with 10 s fails at 10 s whenever the restart was.
#[test]
fn a_time_limit_counts_from_the_stored_start_after_a_restart() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut store = Store::default();
    let mut s = spec(1, 1.0);
    s.time_limit = Some(ytsched_common::units::DurationMs(10_000));
    core.start_operation(op(), "u", s, 0).unwrap();
    store.take(&mut core);
    let mut revived = store.revive(6_000);
    revived.tick(9_999);
    assert_eq!(
        revived.reads().operation_info(&op()).unwrap().state,
        OperationState::Running
    );
    revived.tick(10_000);
    let info = revived.reads().operation_info(&op()).unwrap();
    assert_eq!(info.state, OperationState::Failed);
    assert!(info
        .error
        .unwrap()
        .contains("operation time limit exceeded"));
}

/// Issue 38 point 10: after a restart, a node that never got an attempt (a new node
/// key, or one replaying another node's token) cannot have it adopted, running or
/// "completed": the claim is aborted on it and the operation is untouched; a start
/// token is good only for its own node and key. The real node's report is adopted.
#[test]
fn only_attempts_started_on_the_claiming_node_are_adopted() {
    let (store, started) = running_two();
    let mut core = store.revive(100);
    let stranger = core.process_heartbeat(heartbeat("n9", 2.0, &started, vec![]), 105);
    assert_eq!(stranger.jobs_to_abort.len(), 2, "{stranger:?}");
    let forged: Vec<_> = started
        .iter()
        .map(|s| done(s, JobState::Completed))
        .collect();
    // Acknowledged so that it stops sending them, and dropped.
    core.process_heartbeat(heartbeat("n9", 2.0, &[], forged), 106);
    let info = core.reads().operation_info(&op()).unwrap();
    assert_eq!((info.jobs.running, info.jobs.completed), (0, 0));
    // Without a token (or with a made-up one) n1 itself is not believed either.
    let mut tokenless = started.clone();
    for s in &mut tokenless {
        s.start_token = Some("0".repeat(32));
    }
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &tokenless, vec![]), 107);
    assert_eq!(r.jobs_to_abort.len(), 2, "{r:?}");
    let info = core.reads().operation_info(&op()).unwrap();
    assert_eq!(
        (info.jobs.running, info.jobs.completed, info.jobs.waiting),
        (0, 0, 4)
    );
    // A scheduler with another key believes none of them.
    let mut other = store.revive(100);
    other.set_start_key(crate::StartKey::new([9; 32]));
    let r = other.process_heartbeat(heartbeat("n1", 2.0, &started, vec![]), 110);
    assert_eq!(r.jobs_to_abort.len(), 2, "{r:?}");
    // The real starts, on their node, are adopted.
    let r = core.process_heartbeat(heartbeat("n1", 2.0, &started, vec![]), 110);
    assert!(r.jobs_to_abort.is_empty(), "{r:?}");
    assert_eq!(core.reads().operation_info(&op()).unwrap().jobs.running, 2);
}

/// A revived operation held pending behind its pool's running limit cannot adopt the
/// attempts a node reports; a result of one is left with the node (not acknowledged)
/// and taken once the operation runs, so the job does not run again (issue 42's
/// campaign: a leader's store lagged, its successor revived a running operation as
/// pending, and the result was acknowledged, dropped, and its job run twice).
#[test]
fn a_result_for_a_revived_pending_operation_waits_until_it_runs() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    h.pool(
        "a",
        None,
        serde_json::json!({"max_running_operation_count": 1}),
    );
    let in_a = || {
        let mut s = spec(1, 1.0);
        s.pool = Some(ytsched_common::names::PoolName::parse("a").unwrap());
        s
    };
    let first = h.at(1).submit("u", in_a());
    let second = h.at(2).submit("u", in_a());
    let state = |h: &Harness, op: &OperationId| h.core.reads().operation_info(op).unwrap().state;
    assert_eq!(state(&h, &second), OperationState::Pending);
    assert_eq!(h.at(3).heartbeat("n1").jobs_to_start.len(), 1);
    // The store stops here (it lags): `first` runs, `second` is pending.
    let lagging = h.stored.clone();
    let r = h.finish_at("n1", 10);
    assert_eq!(state(&h, &second), OperationState::Running);
    assert_eq!(r.jobs_to_start.len(), 1, "second's job starts: {r:?}");
    h.finish_all("n1", JobState::Completed);
    // The leader dies; its successor reads the lagging store.
    h.stored = lagging;
    h.at(100).restart_scheduler(WINDOW_MS);
    assert_eq!(state(&h, &second), OperationState::Pending);
    let r = h.at(110).heartbeat("n1");
    assert!(r.acknowledged_jobs.is_empty(), "kept by the node: {r:?}");
    // `first` is aborted within the revival window: `second` runs, and takes the
    // result its node kept at the node's next heartbeat.
    h.run(|c| c.abort_operation(&first, 120)).unwrap();
    assert_eq!(state(&h, &second), OperationState::Running);
    let r = h.at(130).heartbeat("n1");
    assert_eq!(r.acknowledged_jobs.len(), 1, "{r:?}");
    assert_eq!(state(&h, &second), OperationState::Completed);
    let r = h.at(100 + WINDOW_MS + 1).heartbeat("n1");
    assert!(
        r.jobs_to_start.is_empty(),
        "its job never runs again: {r:?}"
    );
}
