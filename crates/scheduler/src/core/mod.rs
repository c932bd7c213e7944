//! The scheduler core: no I/O, no NATS, no wall clock. Every method takes `now`
//! (Unix milliseconds supplied by the caller), so the service, the simulator and tests
//! drive exactly the same code, and the same inputs give the same decisions.

mod events;
mod heartbeat;
mod nodes;
mod operation;
mod placement;
mod queries;

pub use events::CoreEvent;
pub use nodes::Node;
pub use operation::{Job, Operation, Task};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use ytsched_common::api::ApiError;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::{AbortReason, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

/// The only tree until multiple pool trees land; every node registers in it.
pub const DEFAULT_TREE: &str = "default";

#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Period the scheduler asks nodes to heartbeat at.
    pub heartbeat_period_ms: u64,
    /// Silence after which a node is offline and its jobs are lost.
    pub node_heartbeat_timeout_ms: u64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            heartbeat_period_ms: 1000,
            node_heartbeat_timeout_ms: 30_000,
        }
    }
}

pub struct SchedulerCore {
    config: CoreConfig,
    nodes: BTreeMap<NodeId, Node>,
    operations: BTreeMap<OperationId, Operation>,
    /// Which operation a job belongs to, for results that arrive by job id.
    job_owner: HashMap<JobId, OperationId>,
    /// Sum of schedulable nodes' limits, recomputed only when nodes join, leave or
    /// change limits (heartbeats read it on every placement).
    cluster_resources: ResourceVector,
    /// Submission sequence, the tie-breaker that keeps decisions deterministic.
    next_operation_seq: u64,
    /// Nodes that should heartbeat now because there is new work or an abort for them.
    nudges: BTreeSet<NodeId>,
    events: Vec<CoreEvent>,
}

impl SchedulerCore {
    pub fn new(config: CoreConfig) -> Self {
        Self {
            config,
            nodes: BTreeMap::new(),
            operations: BTreeMap::new(),
            job_owner: HashMap::new(),
            cluster_resources: ResourceVector::ZERO,
            next_operation_seq: 0,
            nudges: BTreeSet::new(),
            events: Vec::new(),
        }
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Accepts a validated spec as a new running operation.
    pub fn start_operation(
        &mut self,
        id: OperationId,
        user: &str,
        spec: VanillaSpec,
        now: UnixMillis,
    ) -> Result<OperationId, ApiError> {
        spec.validate().map_err(|e| ApiError::new(e.to_string()))?;
        if self.operations.contains_key(&id) {
            return Err(ApiError::new(format!("operation {id} already exists")));
        }
        let seq = self.next_operation_seq;
        self.next_operation_seq += 1;
        let op = Operation::new(id.clone(), user.to_string(), spec, seq, now);
        self.events.push(CoreEvent::OperationStarted {
            id: id.clone(),
            user: user.to_string(),
            pool: op.pool.clone(),
            jobs: op.total_job_count(),
        });
        self.operations.insert(id.clone(), op);
        self.fail_unplaceable(now);
        self.nudge_all_online();
        Ok(id)
    }

    pub fn abort_operation(&mut self, id: &OperationId, now: UnixMillis) -> Result<(), ApiError> {
        let op = self
            .operations
            .get(id)
            .ok_or_else(|| ApiError::new(format!("no such operation: {id}")))?;
        if op.state.is_finished() {
            return Err(ApiError::new(format!(
                "operation {id} is already {}",
                op.state
            )));
        }
        self.finish_operation(
            id,
            OperationState::Aborted,
            Some("aborted by user".into()),
            now,
        );
        Ok(())
    }

    /// Periodic housekeeping: nodes that went silent, operations that can never run.
    pub fn tick(&mut self, now: UnixMillis) {
        self.expire_silent_nodes(now);
        self.fail_unplaceable(now);
    }

    pub fn take_nudges(&mut self) -> Vec<NodeId> {
        std::mem::take(&mut self.nudges).into_iter().collect()
    }

    pub fn take_events(&mut self) -> Vec<CoreEvent> {
        std::mem::take(&mut self.events)
    }

    fn nudge_all_online(&mut self) {
        for n in self.nodes.values().filter(|n| n.online) {
            self.nudges.insert(n.id.clone());
        }
    }

    /// Ends an operation: running jobs are aborted (their nodes told on the next
    /// heartbeat, and nudged so that it comes soon), waiting jobs dropped.
    fn finish_operation(
        &mut self,
        id: &OperationId,
        state: OperationState,
        error: Option<String>,
        now: UnixMillis,
    ) {
        let Some(op) = self.operations.get_mut(id) else {
            return;
        };
        let running: Vec<JobId> = op.running_job_ids().collect();
        for job_id in running {
            if let Some(node_id) = op.abort_job(&job_id, AbortReason::OperationAborted, now) {
                if let Some(node) = self.nodes.get_mut(&node_id) {
                    node.jobs.remove(&job_id);
                    self.nudges.insert(node_id);
                }
            }
        }
        op.finish(state, error.clone(), now);
        self.events.push(CoreEvent::OperationFinished {
            id: id.clone(),
            state,
            error,
        });
    }
}

#[cfg(test)]
mod tests;
