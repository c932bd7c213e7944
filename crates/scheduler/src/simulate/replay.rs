//! `ytsched simulate --replay` (SPEC 5.16): the nodes and operations of an event log run
//! again through the real core in virtual time, with admin changes (`--set`) applied,
//! and the per-pool figures of the replay set beside those observed.
//!
//! The replay's own events are summed by the same `UsageSum` as the observed ones, so
//! the two columns mean the same thing. Virtual time 0 is the log's first event.

use super::replay_log::{RecordedAction, RecordedRun};
use super::{finish_due_jobs, heartbeat, secs, SimNode};
use crate::core::{ClusterConfig, CoreConfig, SchedulerCore};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use ytsched_common::event_record::{EventRecord, EVENT_SCHEMA_VERSION};
use ytsched_common::protocol::JobStartSpec;
use ytsched_common::usage::{GroupBy, UsageRow, UsageSum};
use ytsched_common::{NodeId, OperationId};

/// A nudged node heartbeats this long after the nudge, as an agent answers one.
const NUDGE_DELAY_MS: u64 = 5;

/// One `--set PATH=VALUE`, its value already parsed (JSON or YSON text).
#[derive(Clone, Debug, PartialEq)]
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
pub fn replay(run: &RecordedRun, changes: &[ReplayChange]) -> Result<Value, String> {
    let rel = |at: u64| at.saturating_sub(run.from);
    let until = rel(run.to);
    let mut core = SchedulerCore::new(CoreConfig {
        heartbeat_period_ms: run.heartbeat_period_ms,
        pool_sample_period_ms: run.pool_sample_period_ms,
        ..CoreConfig::default()
    });
    let (_, first) = &run.configurations[0];
    core.set_cluster_config(first.clone())
        .map_err(|e| format!("the log's configuration: {}", e.message))?;
    for c in changes {
        core.admin_set(&c.path, c.value.clone())
            .map_err(|e| format!("--set {}: {}", c.path, e.message))?;
    }
    let mut due: Vec<(u64, Due)> = run.configurations[1..]
        .iter()
        .map(|(at, c)| (rel(*at), Due::Configuration(c)))
        .chain(run.actions.iter().map(|(at, a)| (rel(*at), Due::Action(a))))
        .collect();
    due.sort_by_key(|(at, _)| *at);
    let mut nodes: Vec<(u64, SimNode)> = run
        .nodes
        .iter()
        .map(|(id, n)| {
            (
                rel(n.first_at),
                SimNode {
                    spec: super::scenario::SimNodeSpec {
                        id: id.to_string(),
                        tags: n.tags.clone(),
                        resources: n.resources,
                    },
                    running: BTreeMap::new(),
                    finished: vec![],
                },
            )
        })
        .collect();
    let durations: HashMap<&OperationId, &HashMap<(String, u32), u64>> = run
        .operations
        .iter()
        .map(|o| (&o.id, &o.durations))
        .collect();
    let duration_of = |start: &JobStartSpec| {
        durations
            .get(&start.operation_id)?
            .get(&(start.task_name.clone(), start.job_index))
            .copied()
    };
    let tick_period = core
        .cluster_config()
        .trees
        .values()
        .map(|t| t.config.fair_share_update_period.0)
        .min()
        .unwrap_or(200)
        .max(1);
    let period = run.heartbeat_period_ms;
    let mut replayed = UsageSum::new(GroupBy::Pool, 0, until.saturating_add(1));
    let mut seq = 0u64;
    let mut errors: Vec<Value> = Vec::new();
    let mut nudged: BTreeMap<NodeId, u64> = BTreeMap::new();
    let (mut next_op, mut next_due) = (0usize, 0usize);
    let mut t = 0u64;
    loop {
        let ((), effects) = core.run(|core| {
            while let Some(op) = run.operations.get(next_op).filter(|o| rel(o.at) <= t) {
                next_op += 1;
                if let Err(e) = core.start_operation(op.id.clone(), &op.user, op.spec.clone(), t)
                {
                    errors.push(json!({"time": secs(t), "operation": op.id, "error": e.message}));
                }
            }
            while let Some((_, d)) = due.get(next_due).filter(|(at, _)| *at <= t) {
                next_due += 1;
                if let Err(e) = apply(core, d, changes, t) {
                    errors.push(json!({"time": secs(t), "error": e}));
                }
            }
            for (joins, node) in nodes.iter_mut() {
                if *joins <= t {
                    finish_due_jobs(node, t);
                }
            }
            core.tick(t);
            let on_period = t.is_multiple_of(period);
            for (joins, node) in nodes.iter_mut() {
                let id = NodeId(node.spec.id.clone());
                let nudge_due = nudged.get(&id).is_some_and(|at| *at <= t);
                if *joins <= t && (on_period || nudge_due) {
                    nudged.remove(&id);
                    heartbeat(core, node, &duration_of, t);
                }
            }
        });
        for id in &effects.nudges {
            nudged.entry(id.clone()).or_insert(t + NUDGE_DELAY_MS);
        }
        for event in crate::event_records::describe_all(&core, &effects, t) {
            seq += 1;
            replayed.add(&EventRecord {
                version: EVENT_SCHEMA_VERSION,
                epoch: 1,
                seq,
                at: t,
                event,
            });
        }
        if t >= until {
            break;
        }
        let mut next = until.min((t / period + 1) * period);
        next = next.min((t / tick_period + 1) * tick_period);
        if let Some(op) = run.operations.get(next_op) {
            next = next.min(rel(op.at).max(t + 1));
        }
        if let Some((at, _)) = due.get(next_due) {
            next = next.min((*at).max(t + 1));
        }
        if let Some(at) = nudged.values().min() {
            next = next.min((*at).max(t + 1));
        }
        if let Some(joins) = nodes.iter().map(|(j, _)| *j).filter(|j| *j > t).min() {
            next = next.min(joins);
        }
        t = next;
    }
    Ok(report(run, changes, &replayed, until, errors))
}

/// Tells the core one recorded change: a later configuration keeps the replay's own
/// ephemeral pools (the log's are those of the live run) and gets `changes` again.
fn apply(
    core: &mut SchedulerCore,
    due: &Due,
    changes: &[ReplayChange],
    t: u64,
) -> Result<(), String> {
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
            for c in changes {
                core.admin_set(&c.path, c.value.clone())
                    .map_err(|e| format!("--set {}: {}", c.path, e.message))?;
            }
            Ok(())
        }
        Due::Action(RecordedAction::End(id)) => {
            // It may have completed sooner in the replay: nothing left to end.
            match core.operation(id) {
                Ok(op) if !op.state.is_finished() => core
                    .abort_operation(id, t)
                    .map_err(|e| format!("abort {id}: {}", e.message)),
                _ => Ok(()),
            }
        }
        Due::Action(RecordedAction::Suspend {
            operation,
            abort_running_jobs,
        }) => match core.operation(operation) {
            Ok(op) if !op.state.is_finished() => core
                .suspend_operation(operation, *abort_running_jobs, t)
                .map_err(|e| format!("suspend {operation}: {}", e.message)),
            _ => Ok(()),
        },
        Due::Action(RecordedAction::Resume(id)) => match core.operation(id) {
            Ok(op) if !op.state.is_finished() => core
                .resume_operation(id, t)
                .map_err(|e| format!("resume {id}: {}", e.message)),
            _ => Ok(()),
        },
    }
}

/// The figures of one side (observed or replayed) of a pool.
fn figures(row: Option<&UsageRow>) -> Value {
    let Some(r) = row else {
        return Value::Null;
    };
    json!({
        "operations": r.operations,
        "wait_p50_s": r.wait_p50_s,
        "wait_p95_s": r.wait_p95_s,
        "wait_mean_s": r.wait_mean_s,
        "fair_share_attainment": r.fair_share_attainment,
        "cpu_hours": r.cpu_hours,
        "jobs_completed": r.jobs_completed,
        "jobs_preempted": r.jobs_preempted,
    })
}

fn report(
    run: &RecordedRun,
    changes: &[ReplayChange],
    replayed: &UsageSum,
    until: u64,
    errors: Vec<Value>,
) -> Value {
    let observed: BTreeMap<String, UsageRow> = run
        .observed
        .rows()
        .into_iter()
        .map(|r| (r.group.clone(), r))
        .collect();
    let replayed: BTreeMap<String, UsageRow> = replayed
        .rows()
        .into_iter()
        .map(|r| (r.group.clone(), r))
        .collect();
    let groups: BTreeSet<&String> = observed.keys().chain(replayed.keys()).collect();
    let pools: Vec<Value> = groups
        .into_iter()
        .map(|g| {
            json!({
                "pool": g,
                "observed": figures(observed.get(g)),
                "replayed": figures(replayed.get(g)),
            })
        })
        .collect();
    json!({
        "window": {"from": run.from, "to": run.to, "seconds": secs(until)},
        "nodes": run.nodes.len(),
        "operations": run.operations.len(),
        "changes": changes.iter().map(|c| json!({"path": c.path, "value": c.value})).collect::<Vec<_>>(),
        "pools": pools,
        "notes": run.notes,
        "errors": errors,
    })
}
