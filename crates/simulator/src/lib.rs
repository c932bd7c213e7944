//! `ytsched simulate` (SPEC 6.3): the real scheduler core against simulated nodes in
//! virtual time. No NATS, no processes, no wall clock: the same scenario always gives
//! the same output, byte for byte.
//!
//! Order of work at each instant `t`: submissions and admin events due at `t`, job
//! completions, the core's tick (fair share updates that are due), node heartbeats due
//! at `t` (in node id order), then a snapshot if one is due: a fresh update, the orchid.

mod replay;
mod replay_log;
mod scenario;

pub use replay::{replay, Figures, PoolFigures, ReplayChange, ReplayReport, Window};
pub use replay_log::{read as read_log, LogError, RecordedRun};
pub use scenario::{Scenario, ScenarioError};

use scenario::{seconds_to_ms, SimNodeSpec, SimOperation};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use ytsched_common::event_record::Event;
use ytsched_common::protocol::JobStartSpec;
use ytsched_common::{NodeId, OperationId};
use ytsched_scheduler_core::config_file::ConfigFile;
use ytsched_scheduler_core::event_records::describe_all;
use ytsched_scheduler_core::virtual_cluster::{VirtualCluster, VirtualNode};
use ytsched_scheduler_core::{CoreConfig, SchedulerCore};

type TaskDurations = BTreeMap<String, Option<u64>>;

/// Runs a scenario file's text; the result is the JSON document to print.
pub fn run_text(text: &str) -> Result<Value, ScenarioError> {
    let scenario = Scenario::parse(text)?;
    run(&scenario)
}

fn secs(ms: u64) -> Value {
    json!(ms as f64 / 1000.0)
}

/// Runs a parsed scenario; the result is the JSON document to print.
pub fn run(scenario: &Scenario) -> Result<Value, ScenarioError> {
    let plan = Plan::of(scenario)?;
    let mut sim = Simulation::new(scenario, &plan)?;
    let mut t: u64 = 0;
    loop {
        sim.step(&plan, t);
        if sim.next_snapshot < plan.snapshots.len() && plan.snapshots[sim.next_snapshot] == t {
            sim.next_snapshot += 1;
            sim.snapshot(t);
        }
        if t >= plan.until {
            break;
        }
        t = sim.next_instant(&plan, t);
    }
    Ok(json!({
        "snapshots": sim.out_snapshots,
        "errors": sim.errors,
        // What the scheduler still held at the end: finished operations leave by the
        // trees' retention settings, as in the service.
        "held_at_end": {
            "operations": sim.core.reads().operation_count(),
            "finished_operations": sim.core.reads().retained_finished_count(),
        },
    }))
}

/// A scenario checked and put in time order: when everything is due.
struct Plan<'s> {
    scenario: &'s Scenario,
    nodes: Vec<SimNodeSpec>,
    operations: Vec<SimOperation>,
    until: u64,
    period: u64,
    /// Distinct, ascending, none after `until`.
    snapshots: Vec<u64>,
    /// (when, index into the scenario's events), ascending.
    events: Vec<(u64, usize)>,
}

impl<'s> Plan<'s> {
    fn of(scenario: &'s Scenario) -> Result<Self, ScenarioError> {
        let invalid = |e: String| ScenarioError::Invalid(e);
        let until = seconds_to_ms("until", scenario.until)?;
        let mut snapshots: Vec<u64> = match &scenario.snapshots {
            Some(s) => s
                .iter()
                .enumerate()
                .map(|(i, t)| seconds_to_ms(&format!("snapshots[{i}]"), *t))
                .collect::<Result<_, _>>()?,
            None => vec![until],
        };
        snapshots.sort();
        snapshots.dedup();
        if let Some(&last) = snapshots.last() {
            if last > until {
                return Err(invalid(format!(
                    "snapshots: {} is after until = {}",
                    last as f64 / 1000.0,
                    scenario.until
                )));
            }
        }
        let mut events: Vec<(u64, usize)> = scenario
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| Ok((seconds_to_ms(&format!("events[{i}].at"), e.at)?, i)))
            .collect::<Result<_, ScenarioError>>()?;
        for (i, e) in scenario.events.iter().enumerate() {
            let actions = [
                e.set.is_some(),
                e.remove.is_some(),
                e.create_scheduler_pool.is_some(),
                e.abort_operation.is_some(),
                e.update_operation_parameters.is_some(),
                e.suspend_operation.is_some(),
                e.resume_operation.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if actions != 1 {
                return Err(invalid(format!(
                    "events[{i}]: give exactly one of set, remove, create_scheduler_pool, abort_operation, update_operation_parameters, suspend_operation, resume_operation"
                )));
            }
        }
        events.sort();
        Ok(Self {
            scenario,
            nodes: scenario.node_specs()?,
            operations: scenario.sim_operations()?,
            until,
            period: scenario.heartbeat_period.0.max(1),
            snapshots,
            events,
        })
    }
}

/// The core and the simulated world around it, as time moves.
struct Simulation {
    core: SchedulerCore,
    cluster: VirtualCluster,
    /// Each operation's job durations by task (`None`: runs until aborted).
    durations: BTreeMap<OperationId, TaskDurations>,
    tick_period: u64,
    out_snapshots: Vec<Value>,
    errors: Vec<Value>,
    pending_events: Vec<Value>,
    next_op: usize,
    next_event: usize,
    next_snapshot: usize,
}

impl Simulation {
    fn new(scenario: &Scenario, plan: &Plan) -> Result<Self, ScenarioError> {
        let invalid = |e: String| ScenarioError::Invalid(e);
        let config = ConfigFile {
            default_tree: scenario.default_tree.clone(),
            pool_trees: scenario.pool_trees.clone(),
            node_user_tags: scenario.node_user_tags.clone(),
        }
        .build()
        .map_err(|e| invalid(e.message))?;
        let mut core = SchedulerCore::new(CoreConfig {
            heartbeat_period_ms: plan.period,
            node_heartbeat_timeout_ms: 30_000,
            // Virtual time: updates happen inline, deterministically.
            background_share_updates: false,
            // A scenario's nodes have what it declares.
            nodes_declared: true,
            ..CoreConfig::default()
        });
        core.set_cluster_config(config)
            .map_err(|e| invalid(e.message))?;
        let tick_period = tick_period(&core);
        Ok(Self {
            core,
            cluster: virtual_cluster(&plan.nodes),
            durations: plan
                .operations
                .iter()
                .map(|o| (OperationId(o.id.as_str().into()), o.durations.clone()))
                .collect(),
            tick_period,
            out_snapshots: Vec::new(),
            errors: Vec::new(),
            pending_events: Vec::new(),
            next_op: 0,
            next_event: 0,
            next_snapshot: 0,
        })
    }

    /// Everything due at `t`, as one core call: its effects come back as one value.
    fn step(&mut self, plan: &Plan, t: u64) {
        let Self {
            core,
            cluster,
            durations,
            errors,
            next_op,
            next_event,
            ..
        } = self;
        let ((), effects) = core.run(|core| {
            while *next_op < plan.operations.len() && plan.operations[*next_op].at_ms <= t {
                let op = &plan.operations[*next_op];
                *next_op += 1;
                let result = match &op.spec {
                    Ok(spec) => core
                        .start_operation(
                            OperationId(op.id.as_str().into()),
                            &op.user,
                            spec.clone(),
                            t,
                        )
                        .map(|_| ())
                        .map_err(|e| e.message),
                    Err(message) => Err(message.clone()),
                };
                if let Err(message) = result {
                    errors.push(json!({"time": secs(t), "operation": op.id, "error": message}));
                }
            }
            while *next_event < plan.events.len() && plan.events[*next_event].0 <= t {
                let e = &plan.scenario.events[plan.events[*next_event].1];
                *next_event += 1;
                let (what, result) = apply_event(core, e, t);
                if let Err(message) = result {
                    errors.push(json!({"time": secs(t), "action": what, "error": message}));
                }
            }
            let duration_of = |start: &JobStartSpec| {
                durations
                    .get(&start.operation_id)
                    .and_then(|d| d.get(&start.task_name).copied().flatten())
            };
            cluster.step(core, t, &duration_of);
        });
        self.cluster.nudge(&effects.nudges, t);
        self.pending_events.extend(
            describe_all(&self.core, &effects, t)
                .into_iter()
                // The snapshots show the pools' shares and the configuration.
                .filter(|e| !matches!(e, Event::PoolShares { .. } | Event::Configuration { .. }))
                .map(|e| event_json(t, e)),
        );
        // What the service would store and archive: a long scenario keeps none of it.
        drop((effects.changes, effects.retired));
    }

    /// A fresh update, then each tree's orchid and the events since the last snapshot.
    fn snapshot(&mut self, t: u64) {
        self.core.update_all_shares(t);
        let mut trees = Map::new();
        for name in self.core.cluster_config().trees.keys() {
            if let Some(Value::Object(mut o)) = self.core.reads().tree_orchid(name) {
                let mut tree = Map::new();
                for key in ["resource_limits", "pools", "operations"] {
                    tree.insert(key.into(), o.remove(key).unwrap_or(Value::Null));
                }
                if o.get("alerts")
                    .and_then(|a| a.as_array())
                    .is_some_and(|a| !a.is_empty())
                {
                    tree.insert("alerts".into(), o.remove("alerts").unwrap_or_default());
                }
                trees.insert(name.to_string(), Value::Object(tree));
            }
        }
        self.out_snapshots.push(json!({
            "time": secs(t),
            "pool_trees": trees,
            "events": std::mem::take(&mut self.pending_events),
        }));
    }

    /// The next instant anything can happen: a submission, an event, a node's
    /// heartbeat or job ending, a fair share update or a snapshot.
    fn next_instant(&self, plan: &Plan, t: u64) -> u64 {
        let mut next = plan.until.min(self.cluster.next_instant(t, plan.period));
        next = next.min((t / self.tick_period + 1) * self.tick_period);
        if let Some(op) = plan.operations.get(self.next_op) {
            next = next.min(op.at_ms.max(t + 1));
        }
        if let Some(e) = plan.events.get(self.next_event) {
            next = next.min(e.0.max(t + 1));
        }
        if let Some(&s) = plan.snapshots.get(self.next_snapshot) {
            next = next.min(s.max(t + 1));
        }
        next
    }
}

/// The scenario's nodes, online from the start.
fn virtual_cluster(nodes: &[SimNodeSpec]) -> VirtualCluster {
    let mut cluster = VirtualCluster::new();
    for n in nodes {
        let id = NodeId(n.id.clone());
        cluster.add(VirtualNode::new(id, n.resources, n.tags.clone()));
    }
    cluster
}

/// How often the core's clock ticks in virtual time: the shortest fair-share update
/// period of its trees.
fn tick_period(core: &SchedulerCore) -> u64 {
    core.cluster_config()
        .trees
        .values()
        .map(|t| t.config.fair_share_update_period.0)
        .min()
        .unwrap_or(200)
        .max(1)
}

fn apply_event(
    core: &mut SchedulerCore,
    e: &scenario::EventEntry,
    t: u64,
) -> (String, Result<(), String>) {
    if let Some(s) = &e.set {
        return (
            format!("set {}", s.path),
            core.admin_set(&s.path, s.value.clone())
                .map_err(|e| e.message),
        );
    }
    if let Some(p) = &e.remove {
        return (
            format!("remove {p}"),
            core.admin_remove(p).map_err(|e| e.message),
        );
    }
    if let Some(c) = &e.create_scheduler_pool {
        return (
            format!("create scheduler_pool {}", c.name),
            core.create_pool(
                &c.pool_tree,
                &c.name,
                c.parent_name.as_deref(),
                c.attributes.clone(),
            )
            .map_err(|e| e.message),
        );
    }
    if let Some(u) = &e.update_operation_parameters {
        return (
            format!("update_operation_parameters {}", u.operation),
            core.update_operation_parameters(
                &OperationId(u.operation.as_str().into()),
                None,
                &u.parameters,
                t,
            )
            .map_err(|e| e.message),
        );
    }
    if let Some(s) = &e.suspend_operation {
        return (
            format!("suspend_operation {}", s.operation()),
            core.suspend_operation(
                &OperationId(s.operation().into()),
                s.abort_running_jobs(),
                t,
            )
            .map_err(|e| e.message),
        );
    }
    if let Some(id) = &e.resume_operation {
        return (
            format!("resume_operation {id}"),
            core.resume_operation(&OperationId(id.as_str().into()), t)
                .map_err(|e| e.message),
        );
    }
    let id = e.abort_operation.clone().unwrap_or_default();
    (
        format!("abort_operation {id}"),
        core.abort_operation(&OperationId(id.as_str().into()), t)
            .map_err(|e| e.message),
    )
}

/// An event as the output lists it: its time, then the event as the event log writes
/// it (`docs/events.md`), so a simulation and a live run read the same.
fn event_json(t: u64, e: Event) -> Value {
    let mut out = Map::new();
    out.insert("time".into(), secs(t));
    if let Ok(Value::Object(fields)) = serde_json::to_value(&e) {
        out.extend(fields);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    /// 10,000 one-job operations, one every simulated second for close to three hours:
    /// the run holds only the retained finished operations and those still running.
    #[test]
    fn a_long_scenario_holds_a_bounded_number_of_operations() {
        let mut text = String::from(
            "resources: {cpu: 16, memory: 64G}\npool_trees:\n  default:\n    config: {soft_retained_operation_count: 100, hard_retained_operation_count: 500}\n    pools:\n      p: {}\noperations:\n",
        );
        for i in 0..10_000 {
            text.push_str(&format!(
                "  - {{id: op{i}, at: {i}, spec: {{pool: p, tasks: {{t: {{job_count: 1, cpu_limit: 1, duration: 5}}}}}}}}\n"
            ));
        }
        text.push_str("snapshots: [10100]\nuntil: 10100\n");
        let out = super::run_text(&text).unwrap();
        assert_eq!(
            out["errors"].as_array().map(Vec::len),
            Some(0),
            "{}",
            out["errors"]
        );
        let held = &out["held_at_end"];
        assert!(held["operations"].as_u64().unwrap() <= 100, "{held}");
        assert_eq!(
            held["operations"], held["finished_operations"],
            "all finished: {held}"
        );
    }
}
