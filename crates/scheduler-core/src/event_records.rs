//! The event log's records (`common::event_record`) of what the core reports
//! (`CoreEvent`). The core names operations and attempts by id; a record must stand on
//! its own long after both are archived and expired, so it is filled in here from the
//! core, under the same lock hold that produced the event: the operation's user and
//! pools, the attempt's node, tree, resources and times.

use crate::retention::Archived;
use crate::{AttemptFacts, CoreEvent, Effects, Operation, SchedulerCore};
use ytsched_common::event_record::{spec_summary, Event, JobRef, NodeGroup, OperationRef};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::states::OperationState;
use ytsched_common::{JobId, NodeId, OperationId};

/// The records of a call's events, in order. An event whose operation is in neither the
/// core nor the call's retired operations (it cannot be) is left out rather than
/// written half.
pub fn describe_all(core: &SchedulerCore, effects: &Effects, now: UnixMillis) -> Vec<Event> {
    let ctx = Context {
        core,
        retired: &effects.retired,
        now,
    };
    effects
        .events
        .iter()
        .filter_map(|e| ctx.describe(e))
        .collect()
}

struct Context<'c> {
    core: &'c SchedulerCore,
    /// Operations this call retired to the archive: gone from the core already.
    retired: &'c [Archived],
    now: UnixMillis,
}

fn operation_ref(op: &Operation) -> OperationRef {
    OperationRef {
        id: op.id.clone(),
        user: op.user.clone(),
        pools: op
            .trees
            .iter()
            .map(|(tree, slot)| (tree.as_str().to_string(), slot.pool.as_str().to_string()))
            .collect(),
    }
}

fn job_ref(id: &JobId, node: &NodeId, facts: &AttemptFacts, task: Option<String>) -> JobRef {
    JobRef {
        id: id.clone(),
        node: node.clone(),
        tree: facts.tree.as_str().to_string(),
        resources: facts.resources,
        start_time: facts.start_time,
        task,
        job_index: Some(facts.index),
    }
}

/// The online nodes, grouped by resources and tags (for `configuration`).
fn node_groups(core: &SchedulerCore) -> Vec<NodeGroup> {
    let mut groups: Vec<NodeGroup> = Vec::new();
    for n in core.reads().list_nodes() {
        if n.state != "online" && n.state != "idle" {
            continue;
        }
        let mut tags: Vec<String> = n.tags.into_iter().chain(n.system_tags).collect();
        tags.sort();
        tags.dedup();
        match groups
            .iter_mut()
            .find(|g| g.resources == n.resource_limits && g.tags == tags)
        {
            Some(g) => g.ids.push(n.id),
            None => groups.push(NodeGroup {
                resources: n.resource_limits,
                tags,
                ids: vec![n.id],
            }),
        }
    }
    groups
}

impl Context<'_> {
    fn operation_ref(&self, id: &OperationId) -> Option<OperationRef> {
        if let Ok(op) = self.core.reads().operation(id) {
            return Some(operation_ref(op));
        }
        let a = self.retired.iter().find(|a| &a.info.id == id)?;
        Some(OperationRef {
            id: id.clone(),
            user: a.info.user.clone(),
            pools: a.info.pool_trees.clone(),
        })
    }

    /// The name of task number `task` of operation `id`.
    fn task_name(&self, id: &OperationId, task: usize) -> Option<String> {
        if let Ok(op) = self.core.reads().operation(id) {
            return op.spec.tasks.iter().nth(task).map(|(name, _)| name.clone());
        }
        let a = self.retired.iter().find(|a| &a.info.id == id)?;
        a.task_names.get(task).cloned()
    }

    /// The operation and attempt of a job event, with the attempt's facts.
    fn job<'e>(
        &self,
        op: &OperationId,
        job: &JobId,
        node: &NodeId,
        attempt: &'e Option<AttemptFacts>,
    ) -> Option<(OperationRef, JobRef, &'e AttemptFacts)> {
        let facts = attempt.as_ref()?;
        let task = self.task_name(op, facts.task);
        Some((
            self.operation_ref(op)?,
            job_ref(job, node, facts, task),
            facts,
        ))
    }

    fn describe(&self, e: &CoreEvent) -> Option<Event> {
        let core = self.core;
        Some(match e {
            CoreEvent::OperationStarted { id, jobs, .. } => {
                let op = core.reads().operation(id).ok()?;
                Event::OperationStarted {
                    operation: operation_ref(op),
                    title: op.spec.title.clone(),
                    jobs: *jobs,
                    pending: op.state == OperationState::Pending,
                    spec: Some(Box::new(spec_summary(&op.spec))),
                }
            }
            CoreEvent::OperationRunning { id } => Event::OperationRunning {
                operation: self.operation_ref(id)?,
            },
            CoreEvent::OperationParametersUpdated { id, parameters } => {
                Event::OperationParametersUpdated {
                    operation: self.operation_ref(id)?,
                    parameters: parameters.clone(),
                }
            }
            CoreEvent::OperationSuspended { id, aborted_jobs } => Event::OperationSuspended {
                operation: self.operation_ref(id)?,
                aborted_jobs: *aborted_jobs as u64,
            },
            CoreEvent::OperationResumed { id } => Event::OperationResumed {
                operation: self.operation_ref(id)?,
            },
            CoreEvent::OperationFinished { id, state, error } => Event::OperationFinished {
                operation: self.operation_ref(id)?,
                state: *state,
                error: error.clone(),
            },
            CoreEvent::JobStarted { .. }
            | CoreEvent::JobAdopted { .. }
            | CoreEvent::JobPreparing { .. }
            | CoreEvent::JobInterrupted { .. }
            | CoreEvent::JobFinished { .. }
            | CoreEvent::JobAborted { .. } => return self.describe_job(e),
            _ => return self.describe_cluster(e),
        })
    }

    /// A job's event, with its operation and attempt as the event log names them.
    fn describe_job(&self, e: &CoreEvent) -> Option<Event> {
        Some(match e {
            CoreEvent::JobStarted {
                id,
                operation,
                node,
                attempt,
            }
            | CoreEvent::JobAdopted {
                id,
                operation,
                node,
                attempt,
            }
            | CoreEvent::JobPreparing {
                id,
                operation,
                node,
                attempt,
            } => {
                let (operation, job, _) = self.job(operation, id, node, attempt)?;
                match e {
                    CoreEvent::JobStarted { .. } => Event::JobStarted { operation, job },
                    CoreEvent::JobPreparing { .. } => Event::JobPreparing { operation, job },
                    _ => Event::JobAdopted { operation, job },
                }
            }
            CoreEvent::JobInterrupted {
                id,
                operation,
                node,
                attempt,
                preempted_by,
            } => {
                let (operation, job, _) = self.job(operation, id, node, attempt)?;
                Event::JobInterrupted {
                    operation,
                    job,
                    preempted_by: preempted_by.clone(),
                }
            }
            CoreEvent::JobFinished {
                id,
                operation,
                node,
                attempt,
                ..
            } => {
                let (operation, job, facts) = self.job(operation, id, node, attempt)?;
                Event::JobFinished {
                    operation,
                    job,
                    state: facts.state,
                    finish_time: facts.finish_time.unwrap_or(self.now),
                    error: facts.error.clone(),
                    bytes_fetched: facts.bytes_fetched,
                }
            }
            CoreEvent::JobAborted {
                id,
                operation,
                node,
                reason,
                attempt,
                preempted_by,
            } => {
                let (operation, job, facts) = self.job(operation, id, node, attempt)?;
                Event::JobAborted {
                    operation,
                    job,
                    reason: *reason,
                    finish_time: facts.finish_time.unwrap_or(self.now),
                    preempted_by: preempted_by.clone(),
                }
            }
            _ => return None,
        })
    }

    /// An event about nodes, pools or the configuration.
    fn describe_cluster(&self, e: &CoreEvent) -> Option<Event> {
        let core = self.core;
        Some(match e {
            CoreEvent::NodeRegistered { id, registration } => {
                let node = core.reads().node(id);
                let mut tags: Vec<String> = node
                    .map(|n| n.tags.iter().chain(&n.system_tags).cloned().collect())
                    .unwrap_or_default();
                tags.sort();
                tags.dedup();
                Event::NodeRegistered {
                    node: id.clone(),
                    registration: registration.to_string(),
                    resources: node.map(|n| n.resource_limits),
                    tags,
                }
            }
            CoreEvent::NodeMembership { id, registration } => Event::NodeMembership {
                node: id.clone(),
                registration: registration.to_string(),
            },
            CoreEvent::NodeRestarted { id } => Event::NodeRestarted { node: id.clone() },
            CoreEvent::NodeOffline { id, lost_jobs } => Event::NodeOffline {
                node: id.clone(),
                lost_jobs: *lost_jobs as u64,
            },
            CoreEvent::NodeMaintenance { id, maintenance } => Event::NodeMaintenance {
                node: id.clone(),
                maintenance: maintenance.summary(),
            },
            CoreEvent::AdminChanged {
                who,
                path,
                old,
                new,
            } => Event::AdminChanged {
                who: who.clone(),
                path: path.clone(),
                old: old.clone(),
                new: new.clone(),
            },
            CoreEvent::PoolShares { tree, pools } => Event::PoolShares {
                tree: tree.as_str().to_string(),
                pools: pools
                    .iter()
                    .map(|p| ytsched_common::event_record::PoolShares {
                        pool: p.pool.as_str().to_string(),
                        fair_share_ratio: p.fair_share_ratio,
                        usage_ratio: p.usage_ratio,
                        demand_ratio: p.demand_ratio,
                    })
                    .collect(),
            },
            CoreEvent::Configuration => Event::Configuration {
                configuration: Box::new(core.cluster_config().clone()),
                heartbeat_period_ms: core.config().heartbeat_period_ms,
                pool_sample_period_ms: core.config().pool_sample_period_ms,
                nodes: node_groups(core),
            },
            CoreEvent::PoolRemoved { tree, pool } => Event::PoolRemoved {
                tree: tree.as_str().to_string(),
                pool: pool.as_str().to_string(),
            },
            // A pending operation is told by `OperationStarted` (its `pending`); the
            // scheduler's own revival says nothing about operations or nodes that the
            // events of each do not.
            CoreEvent::OperationPending { .. }
            | CoreEvent::NodeOverApproval { .. }
            | CoreEvent::RevivalEnded { .. }
            | CoreEvent::StartsResumed { .. }
            | CoreEvent::OperationStarted { .. }
            | CoreEvent::OperationRunning { .. }
            | CoreEvent::OperationParametersUpdated { .. }
            | CoreEvent::OperationSuspended { .. }
            | CoreEvent::OperationResumed { .. }
            | CoreEvent::OperationFinished { .. }
            | CoreEvent::JobStarted { .. }
            | CoreEvent::JobAdopted { .. }
            | CoreEvent::JobPreparing { .. }
            | CoreEvent::JobInterrupted { .. }
            | CoreEvent::JobFinished { .. }
            | CoreEvent::JobAborted { .. } => return None,
        })
    }
}
