//! `time_limit` (SPEC 5.14): an operation still going `time_limit` after its submission
//! fails with "operation time limit exceeded" and its jobs are aborted; a restarted
//! scheduler counts from the stored start.

use crate::harness::Harness;
use crate::tests::spec;
use crate::*;
use ytsched_common::states::{AbortReason, OperationState};
use ytsched_common::units::DurationMs;

fn limited(jobs: u32, limit_ms: u64) -> ytsched_common::spec::VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.time_limit = Some(DurationMs(limit_ms));
    s
}

/// Past its limit, counted from submission, a running operation fails with the reason
/// named; its running job is aborted on its node and its waiting one never starts. An
/// operation without a limit, and one whose limit has not run out, go on.
#[test]
fn an_operation_past_its_time_limit_fails_and_its_jobs_are_aborted() {
    let mut h = Harness::starting_at(1_000);
    h.node("n1", 2.0, &[]);
    let limited_op = h.submit("u", limited(2, 10_000));
    let later = h.submit("v", limited(1, 60_000));
    let unlimited = h.submit("w", spec(1, 1.0));
    let r = h.at(1_001).heartbeat("n1");
    assert_eq!(r.jobs_to_start.len(), 2, "{r:?}");
    h.at(10_999).run(|c| c.tick(10_999));
    let before = h.core.reads().operation_info(&limited_op).unwrap();
    assert_eq!(
        before.state,
        OperationState::Running,
        "not yet: submitted at 1,000 with 10 s"
    );
    let running = before.jobs.running;
    assert!(running >= 1, "{before:?}");
    h.at(11_000).run(|c| c.tick(11_000));
    let info = h.core.reads().operation_info(&limited_op).unwrap();
    assert_eq!(info.state, OperationState::Failed);
    let error = info.error.unwrap();
    assert!(
        error.contains("operation time limit exceeded") && error.contains("10s"),
        "{error}"
    );
    let r = h.at(11_001).heartbeat("n1");
    let aborted: Vec<_> = r
        .jobs_to_abort
        .iter()
        .filter(|a| a.job_id.to_string().starts_with(&limited_op.to_string()))
        .collect();
    assert_eq!(aborted.len() as u64, running, "{r:?}");
    assert!(
        aborted
            .iter()
            .all(|a| a.reason == AbortReason::OperationAborted),
        "{r:?}"
    );
    for op in [&later, &unlimited] {
        assert_eq!(
            h.core.reads().operation_info(op).unwrap().state,
            OperationState::Running
        );
    }
    h.at(61_000).run(|c| c.tick(61_000));
    assert_eq!(
        h.core.reads().operation_info(&later).unwrap().state,
        OperationState::Failed
    );
    assert_eq!(
        h.core.reads().operation_info(&unlimited).unwrap().state,
        OperationState::Running
    );
}

/// A pending operation's limit counts from its submission too.
#[test]
fn a_pending_operation_fails_at_its_time_limit() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.admin_set(
        "//sys/pool_trees/default/@config/max_running_operation_count_per_pool",
        serde_json::json!(1),
    )
    .unwrap();
    core.start_operation(OperationId("first".into()), "u", spec(1, 1.0), 0)
        .unwrap();
    let second = core
        .start_operation(OperationId("second".into()), "u", limited(1, 5_000), 0)
        .unwrap();
    assert_eq!(
        core.reads().operation_info(&second).unwrap().state,
        OperationState::Pending
    );
    core.tick(5_000);
    let info = core.reads().operation_info(&second).unwrap();
    assert_eq!(info.state, OperationState::Failed, "{info:?}");
}

/// A limit of nothing is refused, naming the field.
#[test]
fn a_zero_time_limit_is_refused() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let e = core
        .start_operation(OperationId("z".into()), "u", limited(1, 0), 0)
        .unwrap_err();
    assert!(e.message.contains("time_limit"), "{e:?}");
}
