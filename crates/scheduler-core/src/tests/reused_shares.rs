//! An update of a tree at rest takes over its snapshot's shares (`share_update.rs`,
//! `UpdateKey`): every input it could read is as it was, so computing again would give
//! the same numbers. Each thing an update reads, changed, makes it compute again.

use crate::harness::{spec, Harness};
use crate::trees::fair_share::TreeShares;
use serde_json::json;
use std::sync::Arc;
use ytsched_common::states::AbortReason;

fn shares(h: &mut Harness) -> Arc<TreeShares> {
    h.run(|c| c.trees.shares("default"))
        .expect("the tree has shares")
}

/// Recomputes the tree now and returns its shares, with whether they are the ones it
/// had (taken over, not computed).
fn update(h: &mut Harness) -> (Arc<TreeShares>, bool) {
    let before = shares(h);
    let now = h.now;
    h.run(|c| c.update_all_shares(now));
    let after = shares(h);
    let reused = Arc::ptr_eq(&before, &after);
    (after, reused)
}

#[test]
fn a_tree_at_rest_takes_over_its_shares_until_something_it_reads_changes() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    let first = h.submit("u", spec(8, 1.0));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&first), 4);
    update(&mut h);
    // At rest: the jobs run, the node reports them, time passes.
    for _ in 0..3 {
        h.advance(1_000).heartbeat("n1");
        let (_, reused) = update(&mut h);
        assert!(reused, "nothing an update reads has changed");
    }
    // An operation arrives: the inputs changed.
    let second = h.submit("v", spec(2, 1.0));
    let (after, reused) = update(&mut h);
    assert!(!reused);
    assert!(after.operation_index.contains_key(&second));
    assert!(update(&mut h).1, "at rest again");
    // A job finishes: its operation's usage and demand changed.
    let job = h.running_on("n1")[0].job_id.clone();
    h.advance(1_000)
        .finish_job("n1", &job, ytsched_common::states::JobState::Completed);
    h.heartbeat("n1");
    assert!(!update(&mut h).1, "a job finished");
    assert!(update(&mut h).1);
    // A node joins: the tree's total changed.
    h.add_node("n2", 4.0, &[]);
    h.advance(1).heartbeat("n2");
    assert!(!update(&mut h).1, "the tree grew");
    // The configuration changed.
    h.pool("research", None, json!({"weight": 2.0}));
    let (after, reused) = update(&mut h);
    assert!(!reused, "a pool was created");
    assert!(after.pool_index.keys().any(|p| p.as_str() == "research"));
}

/// A burst or relaxed pool's volume moves with the clock, and its tree's shares with it:
/// such a tree computes every update.
#[test]
fn a_tree_with_an_integral_guarantee_computes_every_update() {
    let mut h = Harness::new();
    h.node("n1", 4.0, &[]);
    h.pool(
        "bursty",
        None,
        json!({"integral_guarantees": {"guarantee_type": "relaxed", "resource_flow": {"cpu": 1}}}),
    );
    let mut s = spec(8, 1.0);
    s.pool = Some(ytsched_common::names::PoolName::parse("bursty").unwrap());
    h.submit("u", s);
    h.advance(1).heartbeat("n1");
    update(&mut h);
    for _ in 0..3 {
        h.advance(1_000).heartbeat("n1");
        assert!(!update(&mut h).1, "the pool's volume moved on");
    }
}

/// Starvation moves on with the clock while the shares are taken over: an operation kept
/// below its fair share starves after the tree's timeout and preempts, at rest.
#[test]
fn starvation_moves_on_while_shares_are_taken_over() {
    let mut h = Harness::new();
    for (attr, value) in [
        ("fair_share_starvation_timeout", json!("1s")),
        ("preemptive_scheduling_backoff", json!("0s")),
    ] {
        h.run(|c| c.admin_set(&format!("//sys/pool_trees/default/@config/{attr}"), value))
            .unwrap();
    }
    h.node("n1", 4.0, &[]);
    let victim = h.submit("u", spec(4, 1.0));
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&victim), 4);
    let starving = h.submit("v", spec(4, 1.0));
    update(&mut h);
    let (mut reused_once, mut preempted) = (false, false);
    for _ in 0..10 {
        h.advance(300);
        let now = h.now;
        h.run(|c| c.tick(now));
        reused_once |= update(&mut h).1;
        h.heartbeat("n1");
        preempted |= h.last_effects().events.iter().any(|e| {
            matches!(e, crate::CoreEvent::JobAborted {
                reason: AbortReason::Preempted,
                preempted_by: Some(by),
                ..
            } if by == &starving)
        });
        if preempted {
            break;
        }
    }
    assert!(reused_once, "the shares were taken over while it waited");
    assert!(preempted, "the starving operation preempts");
}

/// The shares a fresh computation gives from the tree's inputs as they are now.
fn fresh(h: &mut Harness) -> TreeShares {
    h.run(|c| {
        let (inputs, _) = c.operations.share_inputs("default");
        let ops: Vec<_> = inputs.iter().map(|(id, s)| s.input(id)).collect();
        let tree = c.cluster.trees.get("default").expect("the default tree");
        crate::trees::fair_share::compute(tree, c.trees.resources("default"), &ops)
    })
}

/// Through a random run of submissions, finished jobs, aborts, a node joining and time
/// passing, every snapshot an update leaves (taken over or computed) is, element for
/// element, what a fresh computation from the inputs of that moment gives.
#[test]
fn shares_taken_over_are_those_a_fresh_computation_gives() {
    let mut h = Harness::new();
    h.node("n1", 8.0, &[]);
    h.node("n2", 8.0, &[]);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ops, mut reused, mut computed) = (vec![], 0, 0);
    for step in 0..300 {
        match next() % 6 {
            0 => ops.push(h.submit(
                &format!("u{}", next() % 3),
                spec(1 + (next() % 4) as u32, 1.0),
            )),
            1 => {
                let node = if next() % 2 == 0 { "n1" } else { "n2" };
                if let Some(job) = h.running_on(node).first().map(|s| s.job_id.clone()) {
                    h.finish_job(node, &job, ytsched_common::states::JobState::Completed);
                }
                h.heartbeat(node);
            }
            2 if !ops.is_empty() => {
                let id = ops.swap_remove((next() % ops.len() as u64) as usize);
                let now = h.now;
                let _ = h.run(|c| c.abort_operation(&id, now));
            }
            3 if step == 150 => {
                h.add_node("n3", 8.0, &[]);
                h.heartbeat("n3");
            }
            _ => h.heartbeat_all(),
        }
        h.advance(100 + next() % 900);
        let (now_shares, was_reused) = update(&mut h);
        if was_reused {
            reused += 1;
        } else {
            computed += 1;
        }
        let expected = fresh(&mut h);
        assert_eq!(
            format!("{:?}", now_shares.elements),
            format!("{:?}", expected.elements),
            "step {step}: the snapshot is not what its inputs give"
        );
    }
    assert!(
        reused > 20 && computed > 20,
        "{reused} taken over, {computed} computed"
    );
}

/// Each operation's own starvation settings reach its own element, whether the shares
/// were computed or taken over: of two operations held alike below their shares, the one
/// whose spec sets a longer timeout than the tree's starves only after it.
#[test]
fn each_operation_starves_after_its_own_timeout() {
    use crate::trees::starvation::{ElementKey, StarvationStatus};
    let mut h = Harness::new();
    h.run(|c| {
        c.admin_set(
            "//sys/pool_trees/default/@config/fair_share_starvation_timeout",
            json!("2s"),
        )
    })
    .unwrap();
    h.node("n1", 6.0, &[]);
    let big = h.submit("u", spec(5, 1.0));
    h.advance(1).heartbeat("n1");
    let mut patient = spec(3, 1.0);
    patient.fair_share_starvation_timeout = Some(ytsched_common::DurationMs(5_000));
    // Ids in both orders around the other's, so no pairing by position could pass.
    let ops = [
        h.submit("v", spec(3, 1.0)),
        h.submit("w", patient),
        h.submit("x", spec(3, 1.0)),
    ];
    h.advance(1).heartbeat("n1");
    let status = |h: &mut Harness, op: &ytsched_common::OperationId| {
        let key = ElementKey::Operation(op.clone());
        h.run(|c| {
            c.reads()
                .starvation_of("default", &key)
                .map(|s| s.starvation)
        })
    };
    let mut starved_at = [None; 3];
    for step in 1..=16u64 {
        h.advance(500);
        let now = h.now;
        h.run(|c| c.tick(now));
        update(&mut h);
        for (k, op) in ops.iter().enumerate() {
            if starved_at[k].is_none() && status(&mut h, op) == Some(StarvationStatus::Starving) {
                starved_at[k] = Some(step * 500);
            }
        }
    }
    assert_eq!(
        h.running_of(&big),
        5,
        "nothing preempts here: no backoff passed"
    );
    let [Some(v), Some(w), Some(x)] = starved_at else {
        panic!("every operation starves within 8 s: {starved_at:?}");
    };
    assert!(v <= 2_500 && x <= 2_500, "the tree's 2 s: {starved_at:?}");
    assert!(w >= 5_000, "its own 5 s: {starved_at:?}");
}
