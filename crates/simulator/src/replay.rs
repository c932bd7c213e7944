//! `ytsched simulate --replay` (SPEC 5.16): the nodes and operations of an event log run
//! again through the real core in virtual time, with admin changes (`--set`) applied,
//! and the per-pool figures of the replay set beside those observed.
//!
//! The replay's own events are summed by the same `UsageSum` as the observed ones, so
//! the two columns mean the same thing. Virtual time 0 is the log's first event.

use super::replay_log::{RecordedAction, RecordedRun};
use super::secs;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::collections::{BTreeSet, HashMap};
use ytsched_common::event_record::{EventRecord, EVENT_SCHEMA_VERSION};
use ytsched_common::protocol::JobStartSpec;
use ytsched_common::usage::{GroupBy, UsageRow, UsageSum};
use ytsched_common::OperationId;
use ytsched_scheduler_core::virtual_cluster::{VirtualCluster, VirtualNode};
use ytsched_scheduler_core::{ClusterConfig, CoreConfig, SchedulerCore};

/// Refusals the report lists; past these it only counts them (a week's log replayed
/// under a tighter limit can be refused a submission a second).
const MAX_LISTED_ERRORS: usize = 100;

/// What the core refused during the replay, the first `MAX_LISTED_ERRORS` of them.
#[derive(Default)]
struct Refusals {
    listed: Vec<Value>,
    more: u64,
}

impl Refusals {
    fn push(&mut self, error: Value) {
        if self.listed.len() < MAX_LISTED_ERRORS {
            self.listed.push(error);
        } else {
            self.more += 1;
        }
    }
}

/// One `--set PATH=VALUE`, its value already parsed (JSON or YSON text).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayChange {
    pub path: String,
    pub value: Value,
}

impl std::str::FromStr for ReplayChange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (path, value) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}': give PATH=VALUE"))?;
        if !path.starts_with("//") {
            return Err(format!("'{path}': a path starts with //"));
        }
        let value = ytsched_common::yson::parse_value(value)
            .map_err(|e| format!("the value of {path}: {e}"))?;
        Ok(ReplayChange {
            path: path.to_string(),
            value,
        })
    }
}

/// What the core is told at one instant, in this order.
enum Due<'r> {
    Configuration(&'r ClusterConfig),
    Action(&'r RecordedAction),
}

/// Replays `run` with `changes` applied from the start (and again over every later
/// configuration the log tells). A change the core refuses at the start is an error;
/// later refusals go into the output's `errors`.
pub fn replay(run: &RecordedRun, changes: &[ReplayChange]) -> Result<ReplayReport, String> {
    let mut replay = Replay::new(run, changes)?;
    let mut t = 0u64;
    loop {
        replay.step(t);
        if t >= replay.until {
            break;
        }
        t = replay.next_instant(t);
    }
    if let Some(e) = replay.never_applied.into_iter().flatten().next() {
        return Err(e);
    }
    Ok(report(
        run,
        changes,
        &replay.replayed,
        replay.until,
        replay.errors,
    ))
}

/// The core and the recorded world around it, as virtual time moves.
struct Replay<'r> {
    run: &'r RecordedRun,
    changes: &'r [ReplayChange],
    core: SchedulerCore,
    /// Per change, why it has not applied yet (`None` once it has).
    never_applied: Vec<Option<String>>,
    /// Configurations and actions of the log, by their time from the start.
    due: Vec<(u64, Due<'r>)>,
    /// The log's nodes, each joining when it was first seen.
    cluster: VirtualCluster,
    durations: HashMap<&'r OperationId, &'r HashMap<(String, u32), u64>>,
    tick_period: u64,
    until: u64,
    replayed: UsageSum,
    seq: u64,
    errors: Refusals,
    next_op: usize,
    next_due: usize,
}

impl<'r> Replay<'r> {
    fn new(run: &'r RecordedRun, changes: &'r [ReplayChange]) -> Result<Self, String> {
        let rel = |at: u64| at.saturating_sub(run.from);
        let until = rel(run.to);
        let mut core = SchedulerCore::new(CoreConfig {
            heartbeat_period_ms: run.heartbeat_period_ms,
            pool_sample_period_ms: run.pool_sample_period_ms,
            // The log's nodes had what the log says they had.
            nodes_declared: true,
            ..CoreConfig::default()
        });
        let (_, first) = &run.configurations[0];
        core.set_cluster_config(first.clone())
            .map_err(|e| format!("the log's configuration: {}", e.message))?;
        // Each change holds from the start, or from when its path first exists (a pool
        // created during the log); one that never applies is an error.
        let never_applied = changes
            .iter()
            .map(|c| apply_change(&mut core, c).err())
            .collect();
        let mut due: Vec<(u64, Due)> = run.configurations[1..]
            .iter()
            .map(|(at, c)| (rel(*at), Due::Configuration(c)))
            .chain(run.actions.iter().map(|(at, a)| (rel(*at), Due::Action(a))))
            .collect();
        due.sort_by_key(|(at, _)| *at);
        Ok(Self {
            tick_period: super::tick_period(&core),
            run,
            changes,
            core,
            never_applied,
            due,
            cluster: recorded_nodes(run),
            durations: run
                .operations
                .iter()
                .map(|o| (&o.id, &o.durations))
                .collect(),
            until,
            replayed: UsageSum::new(GroupBy::Pool, 0, until.saturating_add(1)),
            seq: 0,
            errors: Refusals::default(),
            next_op: 0,
            next_due: 0,
        })
    }

    fn rel(&self, at: u64) -> u64 {
        at.saturating_sub(self.run.from)
    }

    /// Everything due at `t`, as one core call; its events summed as the log's are.
    fn step(&mut self, t: u64) {
        let ((), effects) = self.core.run(|core| {
            submit_due(core, self.run, &mut self.next_op, &mut self.errors, t);
            while let Some((_, d)) = self.due.get(self.next_due).filter(|(at, _)| *at <= t) {
                self.next_due += 1;
                match apply(core, d, t) {
                    Err(e) => self.errors.push(json!({"time": secs(t), "error": e})),
                    Ok(true) => {
                        for (c, never) in self.changes.iter().zip(self.never_applied.iter_mut()) {
                            let result = apply_change(core, c);
                            if never.is_some() {
                                *never = result.err();
                            }
                        }
                    }
                    Ok(false) => {}
                }
            }
            let durations = &self.durations;
            let duration_of = |start: &JobStartSpec| {
                durations
                    .get(&start.operation_id)?
                    .get(&(start.task_name.clone(), start.job_index))
                    .copied()
            };
            self.cluster.step(core, t, &duration_of);
        });
        self.cluster.nudge(&effects.nudges, t);
        for event in ytsched_scheduler_core::event_records::describe_all(&self.core, &effects, t) {
            self.seq += 1;
            self.replayed.add(&EventRecord {
                version: EVENT_SCHEMA_VERSION,
                epoch: 1,
                seq: self.seq,
                at: t,
                event,
            });
        }
    }

    /// The next instant anything can happen: a heartbeat or tick, a submission, a
    /// recorded change, a nudged heartbeat, a node joining or a job ending.
    fn next_instant(&self, t: u64) -> u64 {
        let period = self.run.heartbeat_period_ms;
        let mut next = self.until.min(self.cluster.next_instant(t, period));
        next = next.min((t / self.tick_period + 1) * self.tick_period);
        if let Some(op) = self.run.operations.get(self.next_op) {
            next = next.min(self.rel(op.at).max(t + 1));
        }
        if let Some((at, _)) = self.due.get(self.next_due) {
            next = next.min((*at).max(t + 1));
        }
        next
    }
}

/// The log's nodes, each joining when it was first seen.
fn recorded_nodes(run: &RecordedRun) -> VirtualCluster {
    let mut cluster = VirtualCluster::new();
    for (id, n) in &run.nodes {
        let node = VirtualNode::new(id.clone(), n.resources, n.tags.clone());
        cluster.add(node.joining_at(n.first_at.saturating_sub(run.from)));
    }
    cluster
}

/// The log's submissions due by `t`, submitted again.
fn submit_due(
    core: &mut SchedulerCore,
    run: &RecordedRun,
    next_op: &mut usize,
    errors: &mut Refusals,
    t: u64,
) {
    while let Some(op) = run
        .operations
        .get(*next_op)
        .filter(|o| o.at.saturating_sub(run.from) <= t)
    {
        *next_op += 1;
        if let Err(e) = core.start_operation(op.id.clone(), &op.user, op.spec.clone(), t) {
            errors.push(json!({"time": secs(t), "operation": op.id, "error": e.message}));
        }
    }
}

fn apply_change(core: &mut SchedulerCore, c: &ReplayChange) -> Result<(), String> {
    core.admin_set(&c.path, c.value.clone())
        .map_err(|e| format!("--set: {}", e.message))
}

/// Tells the core one recorded change; true for a configuration, which the replay's
/// own changes go over again. A later configuration keeps the replay's own ephemeral
/// pools (the log's are those of the live run).
fn apply(core: &mut SchedulerCore, due: &Due, t: u64) -> Result<bool, String> {
    match due {
        Due::Configuration(c) => {
            let mut next = (*c).clone();
            for (name, tree) in &core.cluster_config().trees {
                let Some(into) = next.trees.get_mut(name) else {
                    continue;
                };
                for (pool, p) in &tree.pools {
                    if p.ephemeral_user.is_some() {
                        into.pools.entry(pool.clone()).or_insert_with(|| p.clone());
                    }
                }
            }
            core.set_cluster_config(next)
                .map_err(|e| format!("configuration: {}", e.message))?;
            Ok(true)
        }
        Due::Action(action) => {
            let id = match action {
                RecordedAction::End(id) | RecordedAction::Resume(id) => id,
                RecordedAction::Suspend { operation, .. } => operation,
            };
            // It may have completed sooner in the replay: nothing left to do to it.
            if core
                .reads()
                .operation(id)
                .map_or(true, |op| op.state.is_finished())
            {
                return Ok(false);
            }
            let (what, result) = match action {
                RecordedAction::End(_) => ("abort", core.abort_operation(id, t)),
                RecordedAction::Suspend {
                    abort_running_jobs, ..
                } => (
                    "suspend",
                    core.suspend_operation(id, *abort_running_jobs, t),
                ),
                RecordedAction::Resume(_) => ("resume", core.resume_operation(id, t)),
            };
            result
                .map(|_| false)
                .map_err(|e| format!("{what} {id}: {}", e.message))
        }
    }
}

/// What a replay reports: the window, what was replayed, and each pool's figures as
/// observed and as replayed (`null` where the pool had none on that side).
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    pub window: Window,
    pub nodes: usize,
    pub operations: usize,
    pub changes: Vec<ReplayChange>,
    pub pools: Vec<PoolFigures>,
    pub notes: Vec<String>,
    /// What the core refused, the first `MAX_LISTED_ERRORS` of them.
    pub errors: Vec<Value>,
    pub errors_not_listed: u64,
}

/// The log's window (unix ms) and its length.
#[derive(Clone, Debug, Serialize)]
pub struct Window {
    pub from: u64,
    pub to: u64,
    pub seconds: f64,
}

/// One pool's figures on both sides.
#[derive(Clone, Debug, Serialize)]
pub struct PoolFigures {
    pub pool: String,
    pub observed: Option<Figures>,
    pub replayed: Option<Figures>,
}

/// The figures of one side (observed or replayed) of a pool.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub operations: u64,
    pub wait_p50_s: Option<f64>,
    pub wait_p95_s: Option<f64>,
    pub wait_mean_s: Option<f64>,
    pub fair_share_attainment: Option<f64>,
    pub cpu_hours: f64,
    pub jobs_completed: u64,
    pub jobs_preempted: u64,
}

impl From<&UsageRow> for Figures {
    fn from(r: &UsageRow) -> Self {
        Figures {
            operations: r.operations,
            wait_p50_s: r.wait_p50_s,
            wait_p95_s: r.wait_p95_s,
            wait_mean_s: r.wait_mean_s,
            fair_share_attainment: r.fair_share_attainment,
            cpu_hours: r.cpu_hours,
            jobs_completed: r.jobs_completed,
            jobs_preempted: r.jobs_preempted,
        }
    }
}

fn report(
    run: &RecordedRun,
    changes: &[ReplayChange],
    replayed: &UsageSum,
    until: u64,
    errors: Refusals,
) -> ReplayReport {
    let by_group = |sum: &UsageSum| -> BTreeMap<String, UsageRow> {
        sum.rows()
            .into_iter()
            .map(|r| (r.group.clone(), r))
            .collect()
    };
    let (observed, replayed) = (by_group(&run.observed), by_group(replayed));
    let groups: BTreeSet<&String> = observed.keys().chain(replayed.keys()).collect();
    let pools = groups
        .into_iter()
        .map(|g| PoolFigures {
            pool: g.clone(),
            observed: observed.get(g).map(Figures::from),
            replayed: replayed.get(g).map(Figures::from),
        })
        .collect();
    ReplayReport {
        window: Window {
            from: run.from,
            to: run.to,
            seconds: until as f64 / 1000.0,
        },
        nodes: run.nodes.len(),
        operations: run.operations.len(),
        changes: changes.to_vec(),
        pools,
        notes: run.notes.clone(),
        errors: errors.listed,
        errors_not_listed: errors.more,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay_log::{read, tests::LogText};
    use ytsched_common::event_record::Event;

    fn pool<'v>(report: &'v Value, name: &str) -> &'v Value {
        report["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pool"] == name)
            .unwrap_or_else(|| panic!("no {name}: {report:#}"))
    }

    /// One two-cpu node; pool a's two 10 s jobs, then pool b's two 1 s jobs.
    fn log() -> LogText {
        let mut log = LogText::new();
        log.node(0, "n1", 2.0)
            .operation(0, "op1", "a", 2)
            .job("op1", "a", 0, 0, (100, Some(10_100)), None)
            .job("op1", "a", 1, 0, (100, Some(10_100)), None)
            .operation(1_000, "op2", "b", 2)
            .job("op2", "b", 0, 0, (10_200, Some(11_200)), None)
            .job("op2", "b", 1, 0, (10_200, Some(11_200)), None);
        log
    }

    fn replayed(log: &LogText, changes: &[ReplayChange]) -> Result<Value, String> {
        let run = read(std::io::Cursor::new(log.text().into_bytes())).unwrap();
        replay(&run, changes).map(|r| serde_json::to_value(r).unwrap())
    }

    #[test]
    fn each_job_runs_as_long_as_it_was_observed_to() {
        let report = replayed(&log(), &[]).unwrap();
        assert_eq!(report["errors"], json!([]), "{report:#}");
        let hours = |p: &str| pool(&report, p)["replayed"]["cpu_hours"].as_f64().unwrap();
        assert!(
            (hours("default/a") - 20.0 / 3600.0).abs() < 1e-9,
            "{report:#}"
        );
        assert!(
            (hours("default/b") - 2.0 / 3600.0).abs() < 1e-9,
            "{report:#}"
        );
        for p in ["default/a", "default/b"] {
            assert_eq!(pool(&report, p)["replayed"]["operations"], 1, "{report:#}");
            assert_eq!(pool(&report, p)["observed"]["operations"], 1, "{report:#}");
        }
        // Pool b waits for a's jobs to end (at 10 s, then the next heartbeat).
        let wait = pool(&report, "default/b")["replayed"]["wait_p50_s"]
            .as_f64()
            .unwrap();
        assert!((9.0..=10.5).contains(&wait), "{report:#}");
        // The same log replays the same, to the byte.
        assert_eq!(report, replayed(&log(), &[]).unwrap());
    }

    #[test]
    fn a_change_holds_from_when_its_path_exists_and_one_that_never_does_is_refused() {
        let mut later = log();
        let mut core = SchedulerCore::new(Default::default());
        for p in ["a", "b", "c"] {
            core.create_pool("default", p, None, Value::Null).unwrap();
        }
        later.add(
            2_000,
            Event::Configuration {
                configuration: Box::new(core.cluster_config().clone()),
                heartbeat_period_ms: 1000,
                pool_sample_period_ms: 1000,
                nodes: vec![],
            },
        );
        let change = |s: &str| s.parse::<ReplayChange>().unwrap();
        let ok = replayed(&later, &[change("//sys/pool_trees/default/c/@weight=2")]).unwrap();
        assert_eq!(ok["errors"], json!([]), "{ok:#}");
        assert_eq!(ok["changes"][0]["value"], json!(2));
        let e = replayed(&later, &[change("//sys/pool_trees/default/zzz/@weight=2")]).unwrap_err();
        assert!(e.contains("zzz"), "{e}");
        let e = replayed(&later, &[change("//sys/pool_trees/default/a/@weight=-1")]).unwrap_err();
        assert!(e.contains("weight"), "{e}");
    }

    #[test]
    fn refusals_past_a_hundred_are_counted_not_listed() {
        let mut log = LogText::new();
        log.node(0, "n1", 2.0);
        // 160 submissions to a pool that admits 50.
        for i in 0..160 {
            log.operation(10 + i, &format!("op{i}"), "a", 1);
        }
        let report = replayed(&log, &[]).unwrap();
        assert_eq!(
            report["errors"].as_array().unwrap().len(),
            100,
            "{report:#}"
        );
        assert_eq!(report["errors_not_listed"], 10);
        assert!(report["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("max_operation_count"));
    }

    #[test]
    fn a_change_is_path_equals_value() {
        let c: ReplayChange = "//sys/pool_trees/t/p/@strong_guarantee_resources={cpu=20}"
            .parse()
            .unwrap();
        assert_eq!(c.path, "//sys/pool_trees/t/p/@strong_guarantee_resources");
        assert_eq!(c.value, json!({"cpu": 20}));
        for (bad, says) in [
            ("weight", "PATH=VALUE"),
            ("weight=2", "starts with //"),
            ("//sys/pool_trees/t/p/@weight={cpu=", "the value of"),
        ] {
            let e = bad.parse::<ReplayChange>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
