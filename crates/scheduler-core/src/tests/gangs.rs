//! Gang operations (SPEC 5.15) through the core's public calls: placed whole in one
//! decision or not at all, restarted whole when a member is lost, preempted whole, and
//! preempting only when that lets the whole gang in.

use crate::harness::Harness;
use crate::tests::spec;
use crate::*;
use serde_json::json;
use ytsched_common::protocol::HeartbeatReply;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::{AbortReason, JobState};

fn gang(jobs: u32) -> VanillaSpec {
    let mut s = spec(jobs, 1.0);
    s.is_gang = true;
    s
}

fn tick(h: &mut Harness, ms: u64) {
    h.advance(ms);
    let t = h.now;
    h.run(|c| c.tick(t));
}

fn orchid_op(core: &SchedulerCore, op: &OperationId) -> serde_json::Value {
    core.reads()
        .admin_get(&format!(
            "//sys/scheduler/orchid/scheduler/pool_trees/default/operations/{op}"
        ))
        .expect("in the orchid")
}

fn starts_of(r: &HeartbeatReply, op: &OperationId) -> usize {
    r.jobs_to_start
        .iter()
        .filter(|s| s.operation_id == *op)
        .count()
}

/// A 4-job gang running on two 2-cpu nodes, two jobs on each.
fn running_gang_on_two_nodes() -> (Harness, OperationId) {
    let mut h = Harness::new();
    h.node("n1", 2.0, &[]).node("n2", 2.0, &[]);
    h.heartbeat_all();
    let g = h.submit("u", gang(4));
    tick(&mut h, 300);
    h.heartbeat("n1");
    h.heartbeat("n2");
    assert_eq!(h.running_of(&g), 4);
    (h, g)
}

/// Two 2-cpu nodes, one of them taken by a 2-cpu job of another operation.
fn half_busy() -> (Harness, OperationId) {
    let mut h = Harness::new();
    h.node("n1", 2.0, &[]).node("n2", 2.0, &[]);
    let blocker = h.submit("b", spec(1, 2.0));
    let r = h.advance(1).heartbeat("n1");
    assert_eq!(starts_of(&r, &blocker), 1);
    (h, blocker)
}

/// A 4-job gang on two 2-cpu nodes starts only when both are free, all four in one
/// decision; until then nothing of it runs, the orchid says why and `explain` says what
/// it lacks.
#[test]
fn a_gang_starts_whole_across_nodes_or_not_at_all() {
    let (mut h, blocker) = half_busy();
    let g = h.submit("u", gang(4));
    for _ in 0..3 {
        tick(&mut h, 1_100);
        let r = h.heartbeat("n2");
        assert_eq!(starts_of(&r, &g), 0, "no part of a gang starts: {r:?}");
        h.heartbeat("n1");
    }
    assert_eq!(h.running_of(&g), 0);
    let o = orchid_op(&h.core, &g);
    assert_eq!(o["is_gang"], true);
    assert_eq!(o["unschedulable_reason"], "gang_does_not_fit", "{o}");
    let why = h.core.reads().explain_operation(&g).unwrap().text();
    assert!(
        why.contains(
            "a gang of 4 job(s) waits to start whole: together they need 4 cpu, and the 2 node(s) of pool tree 'default' it may use have 2 free in all"
        ),
        "{why}"
    );
    // The blocker ends: the next tick places all four, two on each node.
    h.finish_all("n1", JobState::Completed);
    h.advance(1).heartbeat("n1");
    assert_eq!(h.running_of(&blocker), 0);
    tick(&mut h, 1_100);
    let (r1, r2) = (h.heartbeat("n1"), h.heartbeat("n2"));
    assert_eq!(
        (starts_of(&r1, &g), starts_of(&r2, &g)),
        (2, 2),
        "{r1:?} {r2:?}"
    );
    assert_eq!(h.running_of(&g), 4);
    assert!(orchid_op(&h.core, &g).get("unschedulable_reason").is_none());
    let history = h.core.reads().operation_info(&g).unwrap().history;
    assert!(
        history
            .iter()
            .any(|e| e.event == "gang of 4 job(s) started whole on 2 node(s)"),
        "{history:?}"
    );
}

/// One member fails: every other member is aborted as `gang_member_lost` on its node,
/// the failure counts once, and the gang starts again whole.
#[test]
fn a_lost_member_restarts_the_whole_gang() {
    let (mut h, g) = running_gang_on_two_nodes();
    let failing = h.running_on("n1")[0].job_id.clone();
    h.finish_job("n1", &failing, JobState::Failed);
    let r1 = h.advance(1).heartbeat("n1");
    let r2 = h.heartbeat("n2");
    let lost: Vec<_> = r1.jobs_to_abort.iter().chain(&r2.jobs_to_abort).collect();
    assert_eq!(lost.len(), 3, "{r1:?} {r2:?}");
    assert!(lost.iter().all(|a| a.reason == AbortReason::GangMemberLost));
    assert_eq!(h.running_of(&g), 0);
    let info = h.core.reads().operation_info(&g).unwrap();
    assert_eq!(
        (info.jobs.failed, info.jobs.aborted, info.jobs.waiting),
        (1, 3, 4)
    );
    assert_eq!(info.state, ytsched_common::states::OperationState::Running);
    // Whole again at the next tick.
    h.advance(1).heartbeat("n1");
    h.heartbeat("n2");
    tick(&mut h, 1);
    let (r1, r2) = (h.heartbeat("n1"), h.heartbeat("n2"));
    assert_eq!(starts_of(&r1, &g) + starts_of(&r2, &g), 4, "{r1:?} {r2:?}");
}

/// A member that completed just before another failed, whose node had not reported it
/// yet when the gang broke, is aborted as `gang_member_lost`; when its node then
/// reports it completed, it stays completed (SPEC 5.15) and only the others run again
/// (issue 42's campaign saw such jobs run to success twice).
#[test]
fn a_member_that_completed_before_the_gang_broke_stays_completed() {
    let (mut h, g) = running_gang_on_two_nodes();
    let done = h.running_on("n2")[0].job_id.clone();
    h.finish_job("n2", &done, JobState::Completed);
    let failing = h.running_on("n1")[0].job_id.clone();
    h.finish_job("n1", &failing, JobState::Failed);
    let r1 = h.advance(1).heartbeat("n1");
    assert!(r1
        .jobs_to_abort
        .iter()
        .all(|a| a.reason == AbortReason::GangMemberLost));
    let info = h.core.reads().operation_info(&g).unwrap();
    assert_eq!(
        (info.jobs.completed, info.jobs.waiting),
        (0, 4),
        "{:?}",
        info.jobs
    );
    // Its node reports what it did before it heard of the break.
    h.heartbeat("n2");
    let info = h.core.reads().operation_info(&g).unwrap();
    assert_eq!(
        (info.jobs.completed, info.jobs.failed, info.jobs.waiting),
        (1, 1, 3),
        "{:?}",
        info.jobs
    );
    let job = h
        .last_effects()
        .changes
        .iter()
        .rev()
        .find_map(|c| match c {
            crate::records::StateChange::Job(j) if j.job.id == done => Some(j.job.clone()),
            _ => None,
        })
        .expect("the attempt's new state is stored");
    assert_eq!((job.state, job.abort_reason), (JobState::Completed, None));
    // The other three start again whole; the completed one never runs again.
    h.advance(1).heartbeat("n1");
    h.heartbeat("n2");
    tick(&mut h, 1);
    let (r1, r2) = (h.heartbeat("n1"), h.heartbeat("n2"));
    assert_eq!(starts_of(&r1, &g) + starts_of(&r2, &g), 3, "{r1:?} {r2:?}");
}

/// A tree whose operations starve after 1 s and whose nodes run the preemptive stage at
/// every heartbeat.
fn starving_soon(h: &mut Harness) {
    for (attr, value) in [
        ("fair_share_starvation_timeout", json!("1s")),
        ("preemptive_scheduling_backoff", json!("0s")),
    ] {
        h.run(|c| c.admin_set(&format!("//sys/pool_trees/default/@config/{attr}"), value))
            .unwrap();
    }
}

/// A starving gang preempts only when what it may take lets the whole gang in: a gang
/// of 4 facing 2 preemptible jobs kills nothing; a gang of 2 takes exactly 2 and starts.
#[test]
fn a_starving_gang_preempts_only_when_it_then_fits_whole() {
    for (gang_jobs, expect_taken) in [(4, 0), (2, 2)] {
        let mut h = Harness::new();
        starving_soon(&mut h);
        h.node("n1", 2.0, &[]).node("n2", 2.0, &[]);
        let busy = h.submit("u", spec(4, 1.0));
        h.advance(1).heartbeat("n1");
        h.heartbeat("n2");
        assert_eq!(h.running_of(&busy), 4);
        let g = h.submit("v", gang(gang_jobs));
        let mut taken = 0;
        let mut started = 0;
        for _ in 0..6 {
            tick(&mut h, 600);
            for n in ["n1", "n2"] {
                let r = h.heartbeat(n);
                taken += r.jobs_to_abort.len();
                started += starts_of(&r, &g);
            }
        }
        assert_eq!(taken, expect_taken, "gang of {gang_jobs}");
        assert_eq!(h.running_of(&busy), 4 - expect_taken);
        let expect_started = if expect_taken > 0 {
            gang_jobs as usize
        } else {
            0
        };
        assert_eq!(started, expect_started, "gang of {gang_jobs}");
    }
}

/// Preempting one job of a gang takes the gang: its members on that node go in the
/// same reply (its whole usage there counts as freed) and the gang waits whole.
#[test]
fn preempting_one_member_preempts_the_whole_gang() {
    let mut h = Harness::new();
    starving_soon(&mut h);
    h.node("n1", 4.0, &[]);
    h.heartbeat_all();
    let g = h.submit("u", gang(4));
    tick(&mut h, 300);
    h.heartbeat("n1");
    assert_eq!(h.running_of(&g), 4);
    let s = h.submit("v", spec(2, 1.0));
    let mut first = None;
    for _ in 0..10 {
        tick(&mut h, 500);
        let r = h.heartbeat("n1");
        if !r.jobs_to_abort.is_empty() {
            first = Some(r);
            break;
        }
    }
    let r = first.expect("the starving operation preempts");
    let reasons: Vec<AbortReason> = r.jobs_to_abort.iter().map(|a| a.reason).collect();
    assert_eq!(reasons.len(), 4, "{r:?}");
    assert_eq!(
        reasons
            .iter()
            .filter(|&&a| a == AbortReason::Preempted)
            .count(),
        1
    );
    assert_eq!(starts_of(&r, &s), 1, "the preemptor starts: {r:?}");
    assert_eq!(h.running_of(&g), 0);
    assert!(h.core.reads().operation_info(&g).unwrap().jobs.waiting == 4);
}

/// Bounds and nonsense in a gang spec are refused, naming the field.
#[test]
fn gang_specs_are_bounded() {
    let mut core = SchedulerCore::new(CoreConfig::default());
    let mut big = gang(1);
    for (_, t) in big.tasks.iter_mut() {
        t.job_count = 10_001;
    }
    let e = core
        .start_operation(OperationId("big".into()), "u", big, 0)
        .unwrap_err();
    assert!(
        e.message.contains("is_gang") && e.message.contains("10000"),
        "{e}"
    );
    let mut copies = gang(2);
    for (_, t) in copies.tasks.iter_mut() {
        t.job_speculation_timeout = Some(ytsched_common::DurationMs(1_000));
    }
    let e = core
        .start_operation(OperationId("copies".into()), "u", copies, 0)
        .unwrap_err();
    assert!(e.message.contains("job_speculation_timeout"), "{e}");
}

/// A graceful gang victim: all its members on the node are told to stop with the
/// graceful timeout, nothing is started in their room meanwhile, and once one has
/// exited the gang is restarted whole elsewhere or later, never in part.
#[test]
fn a_graceful_gang_victim_has_every_member_on_the_node_told() {
    let mut h = Harness::new();
    starving_soon(&mut h);
    h.node("n1", 4.0, &[]);
    h.heartbeat_all();
    let mut g_spec = gang(4);
    g_spec.preemption_mode = Some(ytsched_common::spec::PreemptionMode::Graceful);
    let g = h.submit("u", g_spec);
    tick(&mut h, 300);
    h.heartbeat("n1");
    assert_eq!(h.running_of(&g), 4);
    let s = h.submit("v", spec(2, 1.0));
    let mut told = None;
    for _ in 0..10 {
        tick(&mut h, 500);
        let r = h.heartbeat("n1");
        assert_eq!(
            starts_of(&r, &s),
            0,
            "nothing starts in a graceful victim's room"
        );
        if !r.jobs_to_abort.is_empty() {
            told = Some(r);
            break;
        }
    }
    let r = told.expect("the starving operation preempts");
    assert_eq!(r.jobs_to_abort.len(), 4, "{r:?}");
    assert!(r
        .jobs_to_abort
        .iter()
        .all(|a| a.reason == AbortReason::Preempted && a.graceful_timeout_ms.is_some()));
    // One member checkpoints and exits: the rest are lost with it, the room is free.
    let first = r.jobs_to_abort[0].job_id.clone();
    h.finish_job("n1", &first, JobState::Aborted);
    h.finish_all("n1", JobState::Aborted);
    let r = h.advance(1).heartbeat("n1");
    assert!(starts_of(&r, &s) >= 1, "{r:?}");
    assert_eq!(h.running_of(&g), 0);
}

/// Free room split so that no packing fits (3 cpu free in all, but 1.5 on each of two
/// nodes, for 2-cpu jobs): nothing starts, and `explain` names the resource and how many
/// nodes lack it.
#[test]
fn a_gang_whose_jobs_fit_no_node_waits_and_explain_counts_the_nodes() {
    let mut h = Harness::new();
    h.node("n1", 2.0, &[]).node("n2", 2.0, &[]);
    for node in ["n1", "n2"] {
        let blocker = h.submit("b", spec(1, 0.5));
        h.advance(1).heartbeat(node);
        assert_eq!(h.running_of(&blocker), 1);
    }
    let g = h.submit("u", {
        let mut s = spec(1, 2.0);
        s.is_gang = true;
        s
    });
    for _ in 0..2 {
        tick(&mut h, 1_100);
        h.heartbeat("n1");
        h.heartbeat("n2");
    }
    assert_eq!(h.running_of(&g), 0);
    let why = h.core.reads().explain_operation(&g).unwrap().text();
    assert!(
        why.contains("1 of them find no room on the 2 node(s)")
            && why.contains("cpu 2 needed; 2 of the nodes have less free, the most free is 1.5"),
        "{why}"
    );
}

/// A running gang survives a scheduler restart whole: its nodes report its four jobs,
/// all are adopted, none is lost or started twice, and a member lost afterwards still
/// restarts the gang whole.
#[test]
fn a_running_gang_survives_a_restart_whole() {
    let (mut h, g) = running_gang_on_two_nodes();
    h.advance(1).restart_scheduler(5_000);
    for _ in 0..3 {
        h.advance(1_000);
        let (r1, r2) = (h.heartbeat("n1"), h.heartbeat("n2"));
        assert!(
            r1.jobs_to_abort.is_empty() && r2.jobs_to_abort.is_empty(),
            "{r1:?} {r2:?}"
        );
        assert_eq!(starts_of(&r1, &g) + starts_of(&r2, &g), 0, "nothing twice");
        tick(&mut h, 1);
    }
    let info = h.core.reads().operation_info(&g).unwrap();
    assert_eq!((info.jobs.running, info.jobs.waiting), (4, 0), "{info:?}");
    // After revival a lost member still takes the gang down whole.
    let failing = h.running_on("n2")[0].job_id.clone();
    h.finish_job("n2", &failing, JobState::Failed);
    let r2 = h.advance(1).heartbeat("n2");
    let r1 = h.heartbeat("n1");
    assert_eq!(
        r1.jobs_to_abort.len() + r2.jobs_to_abort.len(),
        3,
        "{r1:?} {r2:?}"
    );
    assert_eq!(h.core.reads().operation_info(&g).unwrap().jobs.waiting, 4);
}

/// A gang's members on a node that is lost were lost with it: each is `node_lost`
/// (never `gang_member_lost`, which says a node still ran it and was told to stop), and
/// its index waits again at once; a member on another node is `gang_member_lost`.
#[test]
fn members_on_a_lost_node_are_lost_with_it() {
    let mut h = Harness::new();
    h.node("n1", 2.0, &[]).node("n2", 1.0, &[]);
    h.heartbeat_all();
    let g = h.submit("u", gang(3));
    tick(&mut h, 300);
    h.heartbeat("n1");
    h.heartbeat("n2");
    assert_eq!(h.running_of(&g), 3);
    let on_n1: Vec<String> = h
        .running_on("n1")
        .iter()
        .map(|s| s.job_id.to_string())
        .collect();
    assert_eq!(on_n1.len(), 2);
    // n1 falls silent past the 30 s node timeout; n2 is heard.
    for _ in 0..4 {
        h.advance(10_000).heartbeat("n2");
        tick(&mut h, 0);
    }
    let aborted: Vec<(String, AbortReason)> = h
        .effects
        .iter()
        .flat_map(|e| &e.events)
        .filter_map(|e| match e {
            CoreEvent::JobAborted { id, reason, .. } => Some((id.to_string(), *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(aborted.len(), 3, "{aborted:?}");
    for (id, reason) in &aborted {
        let want = if on_n1.contains(id) {
            AbortReason::NodeLost
        } else {
            AbortReason::GangMemberLost
        };
        assert_eq!(*reason, want, "{id}: {aborted:?}");
    }
}
