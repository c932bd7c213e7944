//! What a fault campaign's history must satisfy (issue 42), checked at the end of a run
//! from three witnesses: the jobs' own ledger, the scheduler's event log, and what the
//! driver itself was told (acknowledged submissions, final states, when it healed each
//! fault). Each violation comes with its evidence.

use super::ledger::{Attempt, JobKey};
use std::collections::{BTreeMap, BTreeSet};
use ytsched_common::event_record::{Event, EventRecord};
use ytsched_common::states::JobState;

/// An operation whose submission the scheduler acknowledged, and the jobs it asked for.
#[derive(Clone, Debug)]
pub struct Submission {
    pub operation: String,
    /// Jobs per task.
    pub tasks: BTreeMap<String, u32>,
}

/// A fault healed at `at_ns`; work must start again within the bound after it.
#[derive(Clone, Debug)]
pub struct Heal {
    pub fault: String,
    pub at_ns: u64,
}

/// Everything the checks read.
pub struct History<'a> {
    pub submissions: &'a [Submission],
    /// Each operation's state as the scheduler answered at the end.
    pub final_states: &'a BTreeMap<String, String>,
    pub attempts: &'a BTreeMap<String, Attempt>,
    /// The event log in stream order.
    pub events: &'a [EventRecord],
    pub heals: &'a [Heal],
    /// When the run ended (the last heal's bound is not checked past it).
    pub end_ns: u64,
    /// How soon after a heal a job must start.
    pub recovery_bound_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub evidence: String,
}

fn violation(invariant: &'static str, evidence: String) -> Violation {
    Violation {
        invariant,
        evidence,
    }
}

/// Every violation of the history, each invariant in turn.
pub fn check(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(acknowledged_operations_finished(h));
    out.extend(each_job_completed_once(h));
    out.extend(no_attempts_overlap(h));
    out.extend(event_log_ordered(h.events));
    out.extend(work_resumes_after_each_heal(h));
    out
}

/// The distinct attempts the event log saw complete, per job.
fn completed_attempts(events: &[EventRecord]) -> BTreeMap<JobKey, BTreeSet<String>> {
    let mut done: BTreeMap<JobKey, BTreeSet<String>> = BTreeMap::new();
    for r in events {
        if let Event::JobFinished {
            operation,
            job,
            state: JobState::Completed,
            ..
        } = &r.event
        {
            let key = JobKey {
                operation: operation.id.to_string(),
                task: job.task.clone().unwrap_or_default(),
                index: job.job_index.unwrap_or(u32::MAX),
            };
            done.entry(key).or_default().insert(job.id.to_string());
        }
    }
    done
}

/// Every acknowledged submission exists and finished, completed exactly when every one
/// of its jobs completed.
fn acknowledged_operations_finished(h: &History) -> Vec<Violation> {
    let done = completed_attempts(h.events);
    let mut out = Vec::new();
    for s in h.submissions {
        let state = h.final_states.get(&s.operation).map(String::as_str);
        let all_done = s.tasks.iter().all(|(task, n)| {
            (0..*n).all(|index| {
                let key = JobKey {
                    operation: s.operation.clone(),
                    task: task.clone(),
                    index,
                };
                done.contains_key(&key)
            })
        });
        match state {
            None => out.push(violation(
                "acknowledged submission exists",
                format!(
                    "operation {} was acknowledged, and the scheduler does not know it",
                    s.operation
                ),
            )),
            Some("completed") if !all_done => out.push(violation(
                "final state follows the jobs",
                format!(
                    "operation {} is completed, but not every one of its jobs completed",
                    s.operation
                ),
            )),
            Some("completed" | "failed" | "aborted") => {}
            Some(other) => out.push(violation(
                "acknowledged submission finished",
                format!("operation {} ended the run {other}", s.operation),
            )),
        }
    }
    out
}

/// How the scheduler recorded each attempt's end, by job id: `completed`, `failed`, or
/// the reason it was aborted (`node_lost`, `preempted`, ...).
fn recorded_ends(events: &[EventRecord]) -> BTreeMap<&str, String> {
    let mut ends = BTreeMap::new();
    for r in events {
        match &r.event {
            Event::JobFinished { job, state, .. } => {
                ends.insert(job.id.as_str(), state.to_string());
            }
            Event::JobAborted { job, reason, .. } => {
                ends.insert(job.id.as_str(), reason.to_string());
            }
            _ => {}
        }
    }
    ends
}

/// Attempts that ran to success while the scheduler had lost their node, so it never
/// heard of it and ran the job again: the at-least-once that no scheduler can avoid
/// when a node is cut off just as its job ends (counted in the figures, not a violation).
pub fn successes_lost_with_their_node(h: &History) -> usize {
    let ends = recorded_ends(h.events);
    h.attempts
        .values()
        .filter(|a| a.exit == Some(0))
        .filter(|a| ends.get(a.job.as_str()).map(String::as_str) == Some("node_lost"))
        .count()
}

/// No job completed twice: in the event log, once per job; in the ledger, a job may have
/// run to success more than once only where the scheduler lost the node of each success
/// but the one it recorded (it never learnt of them). A success it knew of and ran
/// again, or recorded as something else, is a violation.
fn each_job_completed_once(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, jobs) in completed_attempts(h.events)
        .iter()
        .filter(|(_, j)| j.len() > 1)
    {
        out.push(violation(
            "each job completed once",
            format!("{key:?} completed in attempts {jobs:?} (event log)"),
        ));
    }
    let ends = recorded_ends(h.events);
    let mut ran_ok: BTreeMap<&JobKey, Vec<&str>> = BTreeMap::new();
    for a in h.attempts.values().filter(|a| a.exit == Some(0)) {
        ran_ok.entry(&a.key).or_default().push(&a.job);
    }
    for (key, jobs) in ran_ok.iter().filter(|(_, j)| j.len() > 1) {
        let record = |j: &&str| ends.get(*j).map(String::as_str).unwrap_or("nothing");
        let known = jobs.iter().filter(|j| record(j) != "node_lost").count();
        if known > 1 {
            let told: Vec<String> = jobs.iter().map(|j| format!("{j}: {}", record(j))).collect();
            out.push(violation(
                "each job completed once",
                format!(
                    "{key:?} ran to success in attempts the scheduler knew of (ledger; its record: {})",
                    told.join(", ")
                ),
            ));
        }
    }
    out
}

/// No two attempts of one job ran at once: each began after the one before it last
/// showed life.
fn no_attempts_overlap(h: &History) -> Vec<Violation> {
    let mut by_job: BTreeMap<&JobKey, Vec<&Attempt>> = BTreeMap::new();
    for a in h.attempts.values() {
        by_job.entry(&a.key).or_default().push(a);
    }
    let mut out = Vec::new();
    for (key, mut attempts) in by_job {
        attempts.sort_by_key(|a| a.start_ns);
        for pair in attempts.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.start_ns < a.last_ns {
                out.push(violation(
                    "no double execution",
                    format!(
                        "{key:?}: attempt {} (node {}) started at {} ns while attempt {} (node {}) still ran until {} ns",
                        b.job, b.node, b.start_ns, a.job, a.node, a.last_ns
                    ),
                ));
            }
        }
    }
    out
}

/// The event log, in stream order: epochs never go back (a deposed leader never wrote
/// after its successor), and within an epoch the numbers run on with no gap and no
/// repeat (two writers of one epoch would repeat them).
pub fn event_log_ordered(events: &[EventRecord]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut last: Option<(u64, u64)> = None;
    let mut highest_epoch = 0;
    for r in events {
        if r.epoch < highest_epoch {
            out.push(violation(
                "one writer per epoch",
                format!(
                    "event {}:{} came after events of epoch {highest_epoch}",
                    r.epoch, r.seq
                ),
            ));
            continue;
        }
        highest_epoch = r.epoch;
        match last {
            Some((epoch, seq)) if epoch == r.epoch && r.seq != seq + 1 => out.push(violation(
                if r.seq <= seq {
                    "no duplicate in an epoch"
                } else {
                    "no gap in an epoch"
                },
                format!("in epoch {epoch}, event {} follows event {seq}", r.seq),
            )),
            _ => {}
        }
        last = Some((r.epoch, r.seq));
    }
    out
}

/// After each heal, a job starts within the bound (unless the run ended first).
fn work_resumes_after_each_heal(h: &History) -> Vec<Violation> {
    let bound_ns = h.recovery_bound_ms * 1_000_000;
    let mut starts: Vec<u64> = h.attempts.values().map(|a| a.start_ns).collect();
    starts.sort_unstable();
    let mut out = Vec::new();
    for heal in h.heals {
        if heal.at_ns + bound_ns > h.end_ns {
            continue;
        }
        let first = starts.iter().find(|s| **s >= heal.at_ns);
        match first {
            Some(s) if s - heal.at_ns <= bound_ns => {}
            _ => out.push(violation(
                "work resumes after a heal",
                format!(
                    "no job started within {} ms of healing '{}' at {} ns (first start after it: {:?} ns)",
                    h.recovery_bound_ms, heal.fault, heal.at_ns, first
                ),
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ytsched_common::event_record::{JobRef, OperationRef};
    use ytsched_common::states::AbortReason;
    use ytsched_common::{JobId, NodeId, OperationId, ResourceVector};

    fn attempt(job: &str, index: u32, start_ns: u64, last_ns: u64, exit: Option<i32>) -> Attempt {
        Attempt {
            key: JobKey {
                operation: "op".into(),
                task: "t".into(),
                index,
            },
            job: job.into(),
            node: "n1".into(),
            start_ns,
            last_ns,
            exit,
        }
    }

    fn completed(epoch: u64, seq: u64, job: &str, index: u32) -> EventRecord {
        EventRecord {
            version: 1,
            epoch,
            seq,
            at: 0,
            event: Event::JobFinished {
                operation: OperationRef {
                    id: OperationId("op".into()),
                    user: "u".into(),
                    pools: Default::default(),
                },
                job: JobRef {
                    id: JobId(job.into()),
                    node: NodeId("n1".into()),
                    tree: "default".into(),
                    resources: ResourceVector::ZERO,
                    start_time: 0,
                    task: Some("t".into()),
                    job_index: Some(index),
                },
                state: JobState::Completed,
                finish_time: 0,
                error: None,
                bytes_fetched: None,
            },
        }
    }

    fn aborted_node_lost(epoch: u64, seq: u64, job: &str, index: u32) -> EventRecord {
        let mut r = completed(epoch, seq, job, index);
        if let Event::JobFinished { operation, job, .. } = r.event {
            r.event = Event::JobAborted {
                operation,
                job,
                reason: AbortReason::NodeLost,
                finish_time: 0,
                preempted_by: None,
            };
        }
        r
    }

    fn history<'a>(
        submissions: &'a [Submission],
        states: &'a BTreeMap<String, String>,
        attempts: &'a BTreeMap<String, Attempt>,
        events: &'a [EventRecord],
        heals: &'a [Heal],
    ) -> History<'a> {
        History {
            submissions,
            final_states: states,
            attempts,
            events,
            heals,
            end_ns: 100_000_000_000,
            recovery_bound_ms: 5_000,
        }
    }

    #[test]
    fn a_clean_history_has_no_violation_and_each_kind_is_caught_with_its_evidence() {
        let subs = vec![Submission {
            operation: "op".into(),
            tasks: [("t".to_string(), 2)].into(),
        }];
        let states: BTreeMap<_, _> = [("op".to_string(), "completed".to_string())].into();
        // Job 0: a lost attempt, then one that ran after it; job 1 ran once.
        let mut attempts: BTreeMap<String, Attempt> = [
            ("op-0".into(), attempt("op-0", 0, 1_000, 2_000, None)),
            ("op-1".into(), attempt("op-1", 0, 3_000, 4_000, Some(0))),
            ("op-2".into(), attempt("op-2", 1, 3_000, 4_000, Some(0))),
        ]
        .into();
        let events = vec![completed(1, 1, "op-1", 0), completed(1, 2, "op-2", 1)];
        let heals = vec![Heal {
            fault: "kill agent".into(),
            at_ns: 2_500,
        }];
        assert_eq!(
            check(&history(&subs, &states, &attempts, &events, &heals)),
            vec![]
        );

        // Job 1 ran to success again after the scheduler lost its first success with its
        // node: at-least-once, not a violation.
        let events = vec![
            completed(1, 1, "op-1", 0),
            aborted_node_lost(1, 2, "op-2", 1),
            completed(1, 3, "op-4", 1),
        ];
        attempts.insert("op-4".into(), attempt("op-4", 1, 5_000, 6_000, Some(0)));
        let h = history(&subs, &states, &attempts, &events, &heals);
        assert_eq!(check(&h), vec![]);
        assert_eq!(successes_lost_with_their_node(&h), 1);

        // A second attempt of job 0 that started while the first still ran, and succeeded.
        attempts.insert("op-3".into(), attempt("op-3", 0, 1_500, 2_200, Some(0)));
        let found = check(&history(&subs, &states, &attempts, &events, &heals));
        let kinds: Vec<_> = found.iter().map(|v| v.invariant).collect();
        assert_eq!(
            kinds,
            vec!["each job completed once", "no double execution"]
        );
        assert!(found[1].evidence.contains("op-3"), "{found:?}");
    }

    #[test]
    fn unfinished_or_unknown_operations_and_a_disordered_log_are_caught() {
        let subs = vec![
            Submission {
                operation: "op".into(),
                tasks: [("t".to_string(), 2)].into(),
            },
            Submission {
                operation: "lost".into(),
                tasks: [("t".to_string(), 1)].into(),
            },
        ];
        let states: BTreeMap<_, _> = [("op".to_string(), "completed".to_string())].into();
        let attempts = BTreeMap::new();
        // Job 1 never completed; an epoch goes back; a number repeats; one is skipped.
        let events = vec![
            completed(2, 1, "op-1", 0),
            completed(2, 2, "op-5", 9),
            completed(1, 9, "op-6", 9),
            completed(2, 2, "op-7", 9),
            completed(2, 5, "op-8", 9),
        ];
        let heals = vec![Heal {
            fault: "partition".into(),
            at_ns: 1_000,
        }];
        let found = check(&history(&subs, &states, &attempts, &events, &heals));
        let kinds: BTreeSet<_> = found.iter().map(|v| v.invariant).collect();
        for k in [
            "acknowledged submission exists",
            "final state follows the jobs",
            "one writer per epoch",
            "no duplicate in an epoch",
            "no gap in an epoch",
            "work resumes after a heal",
        ] {
            assert!(kinds.contains(k), "{k} not found in {found:?}");
        }
    }
}
