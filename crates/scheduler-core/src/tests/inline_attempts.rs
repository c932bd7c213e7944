//! Attempts that settle as their operation finishes ride in its record
//! (`operations/inline_attempts.rs`): fewer store writes, the same answers, and the same
//! state after a restart.

use super::{done, heartbeat, spec};
use crate::harness::Harness;
use crate::operations::inline_attempts::{MAX_INLINE_ATTEMPTS, MAX_INLINE_OUTPUT_BYTES};
use crate::records::StateChange;
use crate::*;
use ytsched_common::api::{ListJobs, OutputStream};
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::JobId;

fn list_jobs(core: &SchedulerCore, op: &OperationId) -> Vec<(JobId, JobState)> {
    let plan = core
        .reads()
        .list_jobs_page(&ListJobs {
            operation_id: op.clone(),
            limit: None,
            cursor: None,
            state: None,
        })
        .expect("a page");
    let (held, _) = plan
        .into_held()
        .unwrap_or_else(|_| panic!("every attempt of {op} is held in memory"));
    held.into_iter().map(|(_, j)| (j.id, j.state)).collect()
}

/// The store changes of the heartbeat that reports every job of node `n1` done.
fn finishing_changes(h: &mut Harness) -> Vec<StateChange> {
    let before = h.effects.len();
    h.finish_at("n1", 20);
    h.effects[before..]
        .iter()
        .flat_map(|e| e.changes.iter().cloned())
        .collect()
}

#[test]
fn a_one_job_operation_ends_in_one_record_that_holds_its_attempt_and_output() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    let op = h.submit("alice", spec(1, 1.0));
    let started = h.at(10).heartbeat("n1").jobs_to_start;
    assert_eq!(started.len(), 1);
    let job = started[0].job_id.clone();
    let changes = finishing_changes(&mut h);
    assert_eq!(
        changes.len(),
        1,
        "one record, not a key per attempt and output: {changes:?}"
    );
    let StateChange::Operation(record) = &changes[0] else {
        panic!("the operation's record, got {changes:?}");
    };
    assert_eq!(record.state, OperationState::Completed);
    assert_eq!(record.settled_jobs.len(), 1);
    assert_eq!(record.settled_jobs[0].id, job);
    assert_eq!(record.outputs.len(), 1);
    assert_eq!(record.outputs[0].stdout, "out 0");

    // The same answers from memory, and after a restart from the stored record.
    for round in ["before", "after"] {
        let out = h.core.reads().job_output_ready(&op, &job).unwrap();
        assert_eq!(
            out.map(|o| o.stream(OutputStream::Stdout).to_string()),
            Some("out 0".to_string()),
            "{round} the restart"
        );
        assert_eq!(
            list_jobs(&h.core, &op),
            vec![(job.clone(), JobState::Completed)]
        );
        let info = h.core.reads().operation_info(&op).unwrap();
        assert_eq!(
            (info.state, info.jobs.completed),
            (OperationState::Completed, 1)
        );
        h.restart_scheduler(1_000);
    }
}

#[test]
fn a_finished_operation_whose_record_is_written_again_keeps_its_attempts_in_it() {
    let mut h = Harness::starting_at(0);
    h.node("n1", 4.0, &[]);
    let op = h.submit("alice", spec(2, 1.0));
    h.at(10).heartbeat("n1");
    h.finish_at("n1", 20);
    h.core
        .operations
        .edit(&op)
        .expect("held")
        .record(30, "noted after its end".into());
    let changes = h.core.take_changes();
    let [StateChange::Operation(record)] = changes.as_slice() else {
        panic!("its record alone, got {changes:?}");
    };
    assert_eq!(record.settled_jobs.len(), 2, "{record:?}");
    assert_eq!(record.outputs.len(), 2);
}

#[test]
fn an_operation_ending_with_more_attempts_than_fit_stores_each_under_its_own_key() {
    let jobs = MAX_INLINE_ATTEMPTS as u32 + 1;
    let mut h = Harness::starting_at(0);
    h.node("n1", f64::from(jobs), &[]);
    let op = h.submit("alice", spec(jobs, 1.0));
    assert_eq!(h.at(10).heartbeat("n1").jobs_to_start.len(), jobs as usize);
    let changes = finishing_changes(&mut h);
    let job_records = changes
        .iter()
        .filter(|c| matches!(c, StateChange::Job(_)))
        .count();
    assert_eq!(job_records, jobs as usize);
    assert!(changes.iter().all(|c| match c {
        StateChange::Operation(r) => r.settled_jobs.is_empty() && r.outputs.is_empty(),
        _ => true,
    }));
    h.restart_scheduler(1_000);
    let info = h.core.reads().operation_info(&op).unwrap();
    assert_eq!(info.jobs.completed, u64::from(jobs));
}

#[test]
fn a_large_output_keeps_its_own_key_while_its_attempt_rides_in_the_record() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let op = OperationId("loud".into());
    core.start_operation(op.clone(), "u", spec(1, 1.0), 0)
        .unwrap();
    let started = core
        .process_heartbeat(heartbeat("n1", 1.0, &[], vec![]), 1)
        .jobs_to_start;
    core.take_changes();
    let mut result = done(&started[0], JobState::Completed);
    result.stdout_tail = "x".repeat(MAX_INLINE_OUTPUT_BYTES + 1);
    core.process_heartbeat(heartbeat("n1", 1.0, &[], vec![result]), 2);
    let changes = core.take_changes();
    let record = changes
        .iter()
        .find_map(|c| match c {
            StateChange::Operation(r) => Some(r),
            _ => None,
        })
        .expect("the operation's final record");
    assert_eq!(record.settled_jobs.len(), 1);
    assert!(record.outputs.is_empty());
    assert!(changes
        .iter()
        .any(|c| matches!(c, StateChange::Output(o) if o.stdout.len() > MAX_INLINE_OUTPUT_BYTES)));
    assert!(!changes.iter().any(|c| matches!(c, StateChange::Job(_))));
    // Not held: the answer comes from the store.
    assert!(core
        .reads()
        .job_output_ready(&op, &started[0].job_id)
        .unwrap()
        .is_none());
}
