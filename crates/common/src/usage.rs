//! Usage accounting from the event log (SPEC 5.16, `ytsched usage`): who used how much,
//! and how long their operations waited, summed per pool, user, tree or operation over a
//! window. Pure: events in, rows out, so the CLI, the web UI and tests sum alike.
//!
//! Each attempt counts once, by its job id: a successor leader may tell again a fact its
//! predecessor's last round told (`docs/events.md`). An attempt counts for the part of
//! its run inside the window; one still running counts up to the window's end.

use crate::event_record::{Event, EventRecord, JobRef, OperationRef};
use crate::names::ROOT_POOL;
use crate::protocol::UnixMillis;
use crate::states::{AbortReason, JobState};
use crate::JobId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// What rows are per.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Pool,
    User,
    Tree,
    Operation,
}

impl std::str::FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pool" => Ok(GroupBy::Pool),
            "user" => Ok(GroupBy::User),
            "tree" => Ok(GroupBy::Tree),
            "operation" => Ok(GroupBy::Operation),
            other => Err(format!(
                "'{other}' is not a grouping: give pool, user, tree or operation"
            )),
        }
    }
}

/// One group's figures over the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The pool (`<tree>/<pool>`), user, tree or operation id.
    pub group: String,
    pub cpu_hours: f64,
    pub memory_gib_hours: f64,
    pub gpu_hours: f64,
    pub jobs_completed: u64,
    pub jobs_failed: u64,
    /// Ended otherwise than by preemption (operation aborted, node lost...).
    pub jobs_aborted: u64,
    pub jobs_preempted: u64,
    /// Run time of preempted attempts: work that had to be done again.
    pub hours_lost_to_preemption: f64,
    /// Operations submitted in the window, and from submission to their first job.
    pub operations: u64,
    pub wait_p50_s: Option<f64>,
    pub wait_p95_s: Option<f64>,
    #[serde(default)]
    pub wait_mean_s: Option<f64>,
    /// Usage ÷ fair share over the window, from the pools' samples (about one a
    /// minute; per pool, or a tree's root): below 1, it got less than its share.
    pub fair_share_attainment: Option<f64>,
    /// Bytes nodes fetched from the file store for the attempts that ended in the
    /// window (SPEC 5.17).
    #[serde(default)]
    pub bytes_fetched: u64,
}

/// How an attempt ended, if it did.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Finished(JobState),
    Aborted(AbortReason),
}

struct Attempt {
    operation: OperationRef,
    job: JobRef,
    end: Option<(End, UnixMillis)>,
    fetched: u64,
}

const HOUR_MS: f64 = 3_600_000.0;
const GIB: f64 = (1u64 << 30) as f64;

/// Sums `events` (in log order) for `[since, until)` by `by`; rows sorted by group.
pub fn usage(
    events: &[EventRecord],
    by: GroupBy,
    since: UnixMillis,
    until: UnixMillis,
) -> Vec<UsageRow> {
    let mut sum = UsageSum::new(by, since, until);
    for r in events {
        sum.add(r);
    }
    sum.rows()
}

/// Usage summed as events are read, page by page: it holds what each attempt and
/// operation of the window needs, not the events.
pub struct UsageSum {
    by: GroupBy,
    since: UnixMillis,
    until: UnixMillis,
    attempts: HashMap<JobId, Attempt>,
    submitted: HashMap<crate::OperationId, (OperationRef, UnixMillis)>,
    first_start: HashMap<crate::OperationId, UnixMillis>,
    /// Per pool (`<tree>/<pool>`): summed usage and fair share ratios of its samples.
    attainment: HashMap<String, (f64, f64)>,
}

impl UsageSum {
    pub fn new(by: GroupBy, since: UnixMillis, until: UnixMillis) -> Self {
        UsageSum {
            by,
            since,
            until,
            attempts: HashMap::new(),
            submitted: HashMap::new(),
            first_start: HashMap::new(),
            attainment: HashMap::new(),
        }
    }

    /// Sets the window after the events are read (a replay learns it from the log).
    pub fn set_window(&mut self, since: UnixMillis, until: UnixMillis) {
        self.since = since;
        self.until = until;
    }

    /// Takes the next event of the log.
    pub fn add(&mut self, r: &EventRecord) {
        let mut fetched = 0;
        let (operation, job, end) = match &r.event {
            Event::PoolShares { tree, pools } => {
                if (self.since..self.until).contains(&r.at) {
                    for p in pools {
                        let sums = self
                            .attainment
                            .entry(format!("{tree}/{}", p.pool))
                            .or_default();
                        sums.0 += p.usage_ratio;
                        sums.1 += p.fair_share_ratio;
                    }
                }
                return;
            }
            Event::OperationStarted { operation, .. } => {
                self.submitted
                    .entry(operation.id.clone())
                    .or_insert_with(|| (operation.clone(), r.at));
                return;
            }
            Event::JobStarted { operation, job } | Event::JobAdopted { operation, job } => {
                (operation, job, None)
            }
            Event::JobFinished {
                operation,
                job,
                state,
                finish_time,
                bytes_fetched,
                ..
            } => {
                fetched = bytes_fetched.unwrap_or(0);
                (operation, job, Some((End::Finished(*state), *finish_time)))
            }
            Event::JobAborted {
                operation,
                job,
                reason,
                finish_time,
                ..
            } => (operation, job, Some((End::Aborted(*reason), *finish_time))),
            _ => return,
        };
        let first = self
            .first_start
            .entry(operation.id.clone())
            .or_insert(job.start_time);
        *first = (*first).min(job.start_time);
        let a = self
            .attempts
            .entry(job.id.clone())
            .or_insert_with(|| Attempt {
                operation: operation.clone(),
                job: job.clone(),
                end: None,
                fetched: 0,
            });
        // The first end told counts, with the attempt as its end tells it (the times
        // its node reported); a later telling (a successor's) does not.
        if a.end.is_none() && end.is_some() {
            a.end = end;
            a.job = job.clone();
            a.fetched = fetched;
        }
    }

    /// The rows, sorted by group.
    pub fn rows(&self) -> Vec<UsageRow> {
        let (by, since, until) = (self.by, self.since, self.until);
        let mut rows: BTreeMap<String, UsageRow> = BTreeMap::new();
        let mut waits: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for a in self.attempts.values() {
            let end_at = a.end.map_or(until, |(_, t)| t);
            let from = a.job.start_time.max(since);
            let to = end_at.min(until);
            let hours = to.saturating_sub(from) as f64 / HOUR_MS;
            // An attempt's outcome counts in the window it ended in.
            let ended = a.end.filter(|(_, t)| (since..until).contains(t));
            if hours == 0.0 && ended.is_none() {
                continue;
            }
            let row = rows
                .entry(group_of(by, &a.operation, Some(&a.job)))
                .or_default();
            let r = &a.job.resources;
            row.cpu_hours += r.cpu * hours;
            row.memory_gib_hours += r.memory / GIB * hours;
            row.gpu_hours += r.gpu * hours;
            let Some((end, t)) = ended else { continue };
            row.bytes_fetched += a.fetched;
            match end {
                End::Finished(JobState::Completed) => row.jobs_completed += 1,
                End::Finished(JobState::Failed) => row.jobs_failed += 1,
                End::Aborted(AbortReason::Preempted) => {
                    row.jobs_preempted += 1;
                    row.hours_lost_to_preemption +=
                        t.saturating_sub(a.job.start_time) as f64 / HOUR_MS;
                }
                End::Finished(_) | End::Aborted(_) => row.jobs_aborted += 1,
            }
        }
        for (id, (operation, at)) in &self.submitted {
            if *at < since || *at >= until {
                continue;
            }
            let group = group_of(by, operation, None);
            rows.entry(group.clone()).or_default().operations += 1;
            if let Some(start) = self.first_start.get(id) {
                waits
                    .entry(group)
                    .or_default()
                    .push(start.saturating_sub(*at) as f64 / 1000.0);
            }
        }
        for (group, mut w) in waits {
            w.sort_by(f64::total_cmp);
            let row = rows.entry(group).or_default();
            row.wait_p50_s = percentile(&w, 0.50);
            row.wait_p95_s = percentile(&w, 0.95);
            row.wait_mean_s = (!w.is_empty()).then(|| w.iter().sum::<f64>() / w.len() as f64);
        }
        for (group, row) in rows.iter_mut() {
            let pool = match by {
                GroupBy::Pool => group.clone(),
                GroupBy::Tree => format!("{group}/{ROOT_POOL}"),
                GroupBy::User | GroupBy::Operation => continue,
            };
            row.fair_share_attainment = self
                .attainment
                .get(&pool)
                .filter(|(_, fair)| *fair > 0.0)
                .map(|(used, fair)| used / fair);
        }
        rows.into_iter()
            .map(|(group, row)| UsageRow { group, ..row })
            .collect()
    }
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank - 1).copied()
}

/// An attempt counts in the pool of the tree it ran in; an operation (its wait) in its
/// pool of its first tree.
fn group_of(by: GroupBy, op: &OperationRef, job: Option<&JobRef>) -> String {
    let tree = match job {
        Some(j) => Some(j.tree.as_str()),
        None => op.pools.keys().next().map(String::as_str),
    };
    match by {
        GroupBy::User => op.user.clone(),
        GroupBy::Operation => op.id.to_string(),
        GroupBy::Tree => tree.unwrap_or_default().to_string(),
        GroupBy::Pool => {
            let tree = tree.unwrap_or_default();
            let pool = op.pools.get(tree).map(String::as_str).unwrap_or_default();
            format!("{tree}/{pool}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_record::tests::op;
    use crate::event_record::EVENT_SCHEMA_VERSION;
    use crate::{NodeId, OperationId, ResourceVector};

    fn job(id: &str, cpu: f64, start: UnixMillis) -> JobRef {
        JobRef {
            id: JobId(id.into()),
            node: NodeId("n".into()),
            tree: "physical".into(),
            resources: ResourceVector::new(cpu, 2.0 * GIB, 0.0, 1.0),
            start_time: start,
            task: None,
            job_index: None,
        }
    }

    fn at(seq: u64, at: UnixMillis, event: Event) -> EventRecord {
        EventRecord {
            version: EVENT_SCHEMA_VERSION,
            epoch: 1,
            seq,
            at,
            event,
        }
    }

    const H: UnixMillis = 3_600_000;

    fn log() -> Vec<EventRecord> {
        let a = op("a", "alice", "research");
        let b = op("b", "bob", "prod");
        vec![
            at(
                1,
                0,
                Event::OperationStarted {
                    operation: a.clone(),
                    title: None,
                    jobs: 2,
                    pending: false,
                    spec: None,
                },
            ),
            at(
                2,
                10_000,
                Event::JobStarted {
                    operation: a.clone(),
                    job: job("a-0-0", 2.0, 10_000),
                },
            ),
            at(
                3,
                H + 10_000,
                Event::JobFinished {
                    operation: a.clone(),
                    job: job("a-0-0", 2.0, 10_000),
                    state: JobState::Completed,
                    finish_time: H + 10_000,
                    error: None,
                    bytes_fetched: None,
                },
            ),
            at(
                4,
                H,
                Event::OperationStarted {
                    operation: b.clone(),
                    title: None,
                    jobs: 1,
                    pending: false,
                    spec: None,
                },
            ),
            at(
                5,
                H + 30_000,
                Event::JobStarted {
                    operation: b.clone(),
                    job: job("b-0-0", 1.0, H + 30_000),
                },
            ),
            // Preempted after half an hour, told twice (a successor leader's retelling).
            at(
                6,
                H + 30_000 + H / 2,
                Event::JobAborted {
                    operation: b.clone(),
                    job: job("b-0-0", 1.0, H + 30_000),
                    reason: AbortReason::Preempted,
                    finish_time: H + 30_000 + H / 2,
                    preempted_by: Some(OperationId("a".into())),
                },
            ),
            at(
                7,
                H + 30_000 + H / 2 + 5,
                Event::JobAborted {
                    operation: b.clone(),
                    job: job("b-0-0", 1.0, H + 30_000),
                    reason: AbortReason::Preempted,
                    finish_time: H + 30_000 + H / 2 + 5,
                    preempted_by: Some(OperationId("a".into())),
                },
            ),
            at(
                8,
                2 * H,
                shares(&[("research", 0.5, 0.25), ("prod", 0.0, 0.0)]),
            ),
            at(9, 2 * H + 60_000, shares(&[("research", 0.5, 0.75)])),
        ]
    }

    fn shares(pools: &[(&str, f64, f64)]) -> Event {
        Event::PoolShares {
            tree: "physical".into(),
            pools: pools
                .iter()
                .map(|&(pool, fair, used)| crate::event_record::PoolShares {
                    pool: pool.into(),
                    fair_share_ratio: fair,
                    usage_ratio: used,
                    demand_ratio: fair,
                })
                .collect(),
        }
    }

    #[test]
    fn usage_sums_each_attempts_run_once_per_pool_with_outcomes_and_waits() {
        let rows = usage(&log(), GroupBy::Pool, 0, 10 * H);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let prod = &rows[0];
        assert_eq!(prod.group, "physical/prod");
        assert!((prod.cpu_hours - 0.5).abs() < 1e-9, "{prod:?}");
        assert!((prod.memory_gib_hours - 1.0).abs() < 1e-9, "{prod:?}");
        assert_eq!((prod.jobs_preempted, prod.jobs_completed), (1, 0));
        assert!((prod.hours_lost_to_preemption - 0.5).abs() < 1e-9);
        assert_eq!(prod.wait_p50_s, Some(30.0));
        let research = &rows[1];
        assert_eq!(research.group, "physical/research");
        assert!((research.cpu_hours - 2.0).abs() < 1e-9, "{research:?}");
        assert_eq!((research.jobs_completed, research.operations), (1, 1));
        assert_eq!(research.wait_p50_s, Some(10.0));
        assert_eq!(research.wait_p95_s, Some(10.0));
        assert_eq!(
            research.fair_share_attainment,
            Some(1.0),
            "(0.25 + 0.75) / (0.5 + 0.5)"
        );
        assert_eq!(prod.fair_share_attainment, None, "no fair share to attain");
        let users: Vec<String> = usage(&log(), GroupBy::User, 0, 10 * H)
            .into_iter()
            .map(|r| r.group)
            .collect();
        assert_eq!(users, vec!["alice", "bob"]);
    }

    #[test]
    fn a_window_counts_only_the_part_of_a_run_inside_it() {
        // The first half hour of alice's job only; bob's job had not started.
        let rows = usage(&log(), GroupBy::User, 0, 10_000 + H / 2);
        let alice = rows.iter().find(|r| r.group == "alice").unwrap();
        assert!((alice.cpu_hours - 1.0).abs() < 1e-9, "{alice:?}");
        assert_eq!(alice.jobs_completed, 0, "it ended after the window");
        assert!(!rows.iter().any(|r| r.group == "bob"), "{rows:?}");
    }

    #[test]
    fn groupings_are_read_by_name_and_others_refused_naming_them() {
        assert_eq!("tree".parse::<GroupBy>(), Ok(GroupBy::Tree));
        let e = "team".parse::<GroupBy>().unwrap_err();
        assert!(e.contains("'team'"), "{e}");
    }
}
