//! Work per call stays bounded when thousands of operations or nodes arrive or leave at
//! once (issue 26): what used to hold the core lock for seconds.

use super::{heartbeat, spec};
use crate::operations::retention::MAX_RETIRED_PER_CALL;
use crate::*;
use ytsched_common::states::OperationState;

/// A thousand nodes of one size joining one by one check the waiting operations once,
/// not once per node; a node of a new size checks them again, and an operation that
/// fits no node still fails as soon as nodes exist.
#[test]
fn nodes_of_one_size_joining_check_waiting_operations_once() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for i in 0..200 {
        let user = format!("u{}", i % 10);
        core.start_operation(
            OperationId(format!("op{i}").into()),
            &user,
            spec(1, 64.0),
            0,
        )
        .unwrap();
    }
    let huge = OperationId("huge".into());
    core.start_operation(huge.clone(), "u", spec(1, 1_000.0), 0)
        .unwrap();
    core.tick(1);
    assert_eq!(
        core.placeability_passes(),
        0,
        "no nodes: nothing to check against"
    );
    // Nodes too small for the waiting jobs (64 cpu): they join, nothing starts.
    for n in 0..1_000 {
        core.process_heartbeat(heartbeat(&format!("n{n}"), 8.0, &[], vec![]), 2 + n);
        core.tick(2 + n);
    }
    assert_eq!(core.placeability_passes(), 1);
    let failed = core.reads().operation_info(&huge).unwrap();
    assert_eq!(failed.state, OperationState::Failed, "{failed:?}");
    let waiting = core
        .reads()
        .operation_info(&OperationId("op0".into()))
        .unwrap();
    assert_eq!(
        waiting.state,
        OperationState::Failed,
        "no 64-cpu node: {waiting:?}"
    );
    // A node of another size is something new to check against.
    core.process_heartbeat(heartbeat("big", 128.0, &[], vec![]), 2_000);
    core.tick(2_000);
    assert_eq!(core.placeability_passes(), 2);
}

/// After a burst, tens of thousands of finished operations may be due to leave memory
/// at once: each tick retires a bounded number, the oldest first, until all are gone.
#[test]
fn a_burst_of_finished_operations_leaves_memory_a_bounded_number_per_tick() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for attr in [
        "soft_retained_operation_count",
        "hard_retained_operation_count",
    ] {
        core.admin_set(
            &format!("//sys/pool_trees/default/@config/{attr}"),
            serde_json::json!(0),
        )
        .unwrap();
    }
    let total = MAX_RETIRED_PER_CALL * 2 + 5;
    for i in 0..total {
        let id = OperationId(format!("op{i:05}").into());
        let user = format!("u{}", i % 50);
        core.start_operation(id.clone(), &user, spec(1, 1.0), 0)
            .unwrap();
        core.abort_operation(&id, 1).unwrap();
    }
    // Their last records taken for the store: they may leave.
    core.take_changes();
    let mut per_tick = vec![];
    for t in 0..4 {
        core.tick(10 + t);
        per_tick.push(core.outbox.take_retired().len());
    }
    assert_eq!(per_tick, [MAX_RETIRED_PER_CALL, MAX_RETIRED_PER_CALL, 5, 0]);
    assert_eq!(core.reads().operation_count(), 0);
}

/// While the store is behind, heartbeats start nothing but still take results (which
/// only shrink what is left to store); once it has caught up, starts resume.
#[test]
fn no_job_starts_while_the_store_is_behind() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.start_operation(OperationId("a".into()), "u", spec(4, 1.0), 0)
        .unwrap();
    let started = core
        .process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 1)
        .jobs_to_start;
    assert_eq!(started.len(), 2);
    assert!(core.set_store_behind(true));
    assert!(!core.set_store_behind(true), "no change, nothing to log");
    let results = started
        .iter()
        .map(|s| super::done(s, ytsched_common::states::JobState::Completed))
        .collect();
    let reply = core.process_heartbeat(heartbeat("n1", 2.0, &[], results), 2);
    assert!(reply.jobs_to_start.is_empty(), "{reply:?}");
    assert_eq!(reply.acknowledged_jobs.len(), 2, "results are still taken");
    assert!(core.set_store_behind(false));
    let reply = core.process_heartbeat(heartbeat("n1", 2.0, &[], vec![]), 3);
    assert_eq!(reply.jobs_to_start.len(), 2);
}

/// While the driver cannot be sure the leader lease is still held (a pause outlasted
/// it), heartbeats start nothing, a gang included, but are still answered and still
/// take results; starts resume once it is sure again.
#[test]
fn no_job_starts_while_the_leader_lease_is_not_surely_held() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    core.start_operation(OperationId("a".into()), "u", spec(2, 1.0), 0)
        .unwrap();
    let mut gang = spec(2, 1.0);
    gang.is_gang = true;
    core.start_operation(OperationId("g".into()), "u", gang, 0)
        .unwrap();
    core.set_lease_sure(false);
    let reply = core.process_heartbeat(heartbeat("n1", 8.0, &[], vec![]), 1);
    core.tick(2);
    let reply2 = core.process_heartbeat(heartbeat("n1", 8.0, &[], vec![]), 3);
    assert!(reply.jobs_to_start.is_empty(), "{reply:?}");
    assert!(
        reply2.jobs_to_start.is_empty(),
        "no gang booked either: {reply2:?}"
    );
    core.set_lease_sure(true);
    core.tick(4);
    let reply = core.process_heartbeat(heartbeat("n1", 8.0, &[], vec![]), 5);
    assert_eq!(reply.jobs_to_start.len(), 4, "{reply:?}");
}

/// A fair-share update reads only the operations changed since the last one: preparing
/// it used to walk every operation under the core lock. What it computes is the same as
/// from a full read (debug builds check every update against a scan).
#[test]
fn a_share_update_reads_only_the_operations_changed_since_the_last() {
    let mut core = SchedulerCore::new(CoreConfig {
        background_share_updates: true,
        ..CoreConfig::default()
    });
    for i in 0..1_000 {
        // Five to a user's pool: all of them run (none is held pending).
        let user = format!("u{}", i % 200);
        core.start_operation(
            OperationId(format!("op{i:04}").into()),
            &user,
            spec(2, 1.0),
            0,
        )
        .unwrap();
    }
    let mut now = 1_000;
    let update = |core: &mut SchedulerCore, now: u64| {
        let before = core.share_input_reads();
        let due = core.share_updates_due(now);
        assert_eq!(due.len(), 1, "one tree, due by its period");
        for u in due {
            let _ = core.apply_share_update(u.compute());
        }
        core.share_input_reads() - before
    };
    assert_eq!(
        update(&mut core, now),
        1_000,
        "the first update reads everything"
    );
    now += 1_000;
    assert_eq!(update(&mut core, now), 0, "nothing changed, nothing read");
    // Three operations change: two are aborted, one arrives.
    for id in ["op0007", "op0500"] {
        core.abort_operation(&OperationId(id.into()), now).unwrap();
    }
    core.start_operation(OperationId("late".into()), "u", spec(1, 1.0), now)
        .unwrap();
    now += 1_000;
    assert_eq!(update(&mut core, now), 3);
    let shares = core.trees.shares("default").unwrap();
    assert!(shares
        .operation_index
        .contains_key(&OperationId("late".into())));
    assert!(!shares
        .operation_index
        .contains_key(&OperationId("op0500".into())));
    // A configuration change may move every operation: the next update reads them all.
    core.create_pool("default", "new", None, serde_json::json!({}))
        .unwrap();
    now += 1_000;
    assert_eq!(update(&mut core, now), 1_001);
}

/// The orchid's facts taken a few operations at a time (the web face lets go of the core
/// lock between parts) make the same orchid as taken at once, pending operations too.
#[test]
fn the_orchid_taken_in_parts_is_the_orchid_taken_at_once() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for i in 0..30 {
        // Three users' pools of ten: eight run in each, two wait as pending.
        let user = format!("u{}", i % 3);
        core.start_operation(
            OperationId(format!("op{i:02}").into()),
            &user,
            spec(2, 1.0),
            0,
        )
        .unwrap();
    }
    core.process_heartbeat(heartbeat("n1", 4.0, &[], vec![]), 1);
    core.update_all_shares(2);
    let whole = core.reads().orchid();
    let mut heads = core.reads().orchid_facts_heads();
    for tree in &mut heads {
        let mut parts = 1;
        while core.reads().add_facts(tree, 7) {
            parts += 1;
        }
        // The 24 running operations 7 at a time (4 parts, the last ending the
        // snapshot), then the 30 operations looked at for pending ones 7 at a time (5).
        assert_eq!(parts, 9, "parts of at most 7 operations");
    }
    let parted = serde_json::to_value(crate::orchid::orchid_of(&heads)).unwrap();
    assert_eq!(parted, whole);
    let pending = whole["scheduler"]["pool_trees"]["default"]["operations"]
        .as_object()
        .unwrap()
        .values()
        .filter(|o| o["state"] == "pending")
        .count();
    assert_eq!(pending, 6, "{whole:#}");
    let running = whole["scheduler"]["pool_trees"]["default"]["operations"]
        .as_object()
        .unwrap()
        .values()
        .filter(|o| o["state"] == "running")
        .count();
    assert_eq!(running, 24, "the running operations");
}
