//! A job the scheduler aborts on a node that may still run it (preempted, its gang
//! broken, its node banned...) runs again only once that node says the attempt ended,
//! or once the tree's node timeout has passed without a word: never two attempts of
//! one job at once (issue 42's campaign saw a preempted job start elsewhere while its
//! old attempt still ran).

use crate::harness::{spec, Harness};
use crate::*;
use serde_json::json;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::{AbortReason, JobState};

fn starts(h: &mut Harness, node: &str, op: &OperationId) -> usize {
    let r = h.heartbeat(node);
    r.jobs_to_start
        .iter()
        .filter(|s| s.operation_id == *op)
        .count()
}

fn tick(h: &mut Harness, ms: u64) {
    h.advance(ms);
    let t = h.now;
    h.run(|c| c.tick(t));
}

/// One 1-cpu job running on n1; n2 is free.
fn one_job_on_n1() -> (Harness, OperationId) {
    let mut h = Harness::starting_at(0);
    h.node("n1", 1.0, &[]).node("n2", 1.0, &[]);
    let o = h.submit("u", spec(1, 1.0));
    assert_eq!(starts(h.at(1), "n1", &o), 1);
    h.core
        .admin_set("//sys/cluster_nodes/n1/@banned", json!(true))
        .unwrap();
    (h, o)
}

#[test]
fn a_job_aborted_on_a_live_node_runs_elsewhere_only_after_that_node_says_it_stopped() {
    let (mut h, o) = one_job_on_n1();
    h.slow_to_kill("n1", true);
    for t in 2..6 {
        let r = h.at(t).heartbeat("n1");
        assert_eq!(r.jobs_to_abort.len(), 1, "told to stop it: {r:?}");
        assert_eq!(r.jobs_to_abort[0].reason, AbortReason::NodeBanned);
        tick(&mut h, 0);
        assert_eq!(starts(&mut h, "n2", &o), 0, "its old attempt still runs");
    }
    let info = h.core.reads().operation_info(&o).unwrap();
    assert_eq!((info.jobs.waiting, info.jobs.running), (1, 0));
    let why = h.core.reads().explain_operation(&o).unwrap().text();
    assert!(
        why.contains("1 job(s) wait for node(s) n1 to say their aborted attempts stopped"),
        "{why}"
    );
    // The node kills it at the next abort and reports it ended: now it runs on n2.
    h.slow_to_kill("n1", false);
    h.at(6).heartbeat("n1");
    h.at(7).heartbeat("n1");
    assert_eq!(starts(&mut h, "n2", &o), 1);
}

#[test]
fn a_node_that_never_reports_the_aborted_job_holds_it_no_longer_than_its_node_timeout() {
    let (mut h, o) = one_job_on_n1();
    h.slow_to_kill("n1", true);
    let aborted_at = 2;
    assert_eq!(h.at(aborted_at).heartbeat("n1").jobs_to_abort.len(), 1);
    // n1 falls silent. Up to the default tree's 30 s node timeout the index is held...
    h.at(aborted_at + 29_000)
        .run(|c| c.tick(aborted_at + 29_000));
    assert_eq!(starts(&mut h, "n2", &o), 0);
    // ...after it, n1 has fenced its jobs (SPEC 5.11), and the job runs on n2.
    h.at(aborted_at + 30_001)
        .run(|c| c.tick(aborted_at + 30_001));
    assert_eq!(starts(&mut h, "n2", &o), 1);
}

#[test]
fn a_node_still_reporting_the_aborted_job_holds_it_past_the_node_timeout() {
    let (mut h, o) = one_job_on_n1();
    h.slow_to_kill("n1", true);
    // n1 is heard every 20 s, still killing the job: the 30 s timeout runs from its
    // last report, never from the abort (on a lossy link its report that the job ended
    // may come a while after the job did).
    for t in [2, 20_002, 40_002, 60_002] {
        assert_eq!(h.at(t).heartbeat("n1").jobs_to_abort.len(), 1);
        h.run(|c| c.tick(t));
        assert_eq!(
            starts(&mut h, "n2", &o),
            0,
            "at {t} ms its old attempt runs"
        );
    }
    h.at(90_001).run(|c| c.tick(90_001));
    assert_eq!(
        starts(&mut h, "n2", &o),
        0,
        "29.999 s after the last report"
    );
    // Silent for the whole timeout after its last report: n1 has fenced it.
    h.at(90_003).run(|c| c.tick(90_003));
    assert_eq!(starts(&mut h, "n2", &o), 1);
}

fn gang(jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.is_gang = true;
    s
}

#[test]
fn a_broken_gang_starts_whole_again_only_when_every_aborted_member_has_stopped() {
    let mut h = Harness::new();
    h.node("n1", 2.0, &[]).node("n2", 2.0, &[]);
    h.heartbeat_all();
    let g = h.submit("u", gang(4));
    tick(&mut h, 300);
    h.heartbeat_all();
    assert_eq!(h.running_of(&g), 4);
    // A member on n1 fails; n2 is slow to kill its two members.
    let failing = h.running_on("n1")[0].job_id.clone();
    h.finish_job("n1", &failing, JobState::Failed);
    h.slow_to_kill("n2", true);
    // Room for the whole gang comes: n1 and a new node could take it at once.
    h.add_node("n3", 2.0, &[]);
    let all = |h: &mut Harness| {
        ["n1", "n2", "n3"]
            .map(|n| starts(h, n, &g))
            .iter()
            .sum::<usize>()
    };
    for _ in 0..3 {
        h.advance(1).heartbeat_all();
        tick(&mut h, 1_100);
        assert_eq!(all(&mut h), 0, "members still run on n2");
    }
    h.slow_to_kill("n2", false);
    h.advance(1).heartbeat("n2");
    h.advance(1).heartbeat("n2");
    tick(&mut h, 1_100);
    assert_eq!(all(&mut h), 4, "the gang starts whole again");
}

#[test]
fn a_node_still_reporting_the_aborted_job_past_its_timeout_holds_it_again() {
    let (mut h, o) = one_job_on_n1();
    h.slow_to_kill("n1", true);
    assert_eq!(h.at(2).heartbeat("n1").jobs_to_abort.len(), 1);
    // n1 keeps heartbeating, still killing it, past the timeout: the hold ends at the
    // tick, but n1's next report of the attempt holds the index again.
    for t in [10_000, 20_000, 30_000] {
        assert_eq!(h.at(t).heartbeat("n1").jobs_to_abort.len(), 1);
        assert_eq!(starts(h.at(t + 1), "n2", &o), 0);
    }
    h.at(30_100).run(|c| c.tick(30_100));
    let info = h.core.reads().operation_info(&o).unwrap();
    assert_eq!(info.jobs.waiting, 1);
    assert_eq!(h.at(30_101).heartbeat("n1").jobs_to_abort.len(), 1);
    assert_eq!(starts(h.at(30_102), "n2", &o), 0, "held again");
    h.slow_to_kill("n1", false);
    h.at(30_103).heartbeat("n1");
    h.at(30_104).heartbeat("n1");
    assert_eq!(starts(h.at(30_105), "n2", &o), 1);
}

#[test]
fn an_aborted_job_whose_node_is_lost_before_it_confirmed_is_recorded_node_lost() {
    // The campaign's case: the abort goes out as the node is cut off, and the job may
    // have completed there unheard. Once the node is lost, how the attempt ended is
    // unknown; its record must not say it was stopped by the abort.
    let (mut h, o) = one_job_on_n1();
    h.slow_to_kill("n1", true);
    let r = h.at(2).heartbeat("n1");
    assert_eq!(r.jobs_to_abort.len(), 1);
    let job = r.jobs_to_abort[0].job_id.clone();
    let reason = |h: &Harness| h.core.operations.get(&o).unwrap().jobs[&job].abort_reason;
    assert_eq!(reason(&h), Some(AbortReason::NodeBanned));
    h.at(20_000).heartbeat("n2");
    h.at(30_003).run(|c| c.tick(30_003));
    // n1 went silent for 30 s: the record now says the node was lost, and with nothing
    // more to come from n1, the attempt is settled and leaves memory once stored.
    assert!(!h.core.operations.get(&o).unwrap().jobs.contains_key(&job));
    let told = h.last_effects().events.iter().any(|e| {
        matches!(e, CoreEvent::JobAborted { id, reason: AbortReason::NodeLost, .. } if *id == job)
    });
    assert!(told, "{:?}", h.last_effects().events);
    let stored = h.last_effects().changes.iter().any(|c| {
        matches!(c, crate::records::StateChange::Job(j) if j.job.id == job
            && j.job.abort_reason == Some(AbortReason::NodeLost))
    });
    assert!(stored, "the new record is stored");
    assert_eq!(starts(h.at(30_004), "n2", &o), 1, "it runs again on n2");
}
