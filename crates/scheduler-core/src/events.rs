//! State changes the core reports to its driver, which logs them (one line each) or,
//! in the simulator, prints them.

use serde::Serialize;
use ytsched_common::maintenance::NodeMaintenance;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::protocol::Registration;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{AbortReason, JobState, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

/// One pool's shares as fractions of its tree, at their largest resource (as the
/// orchid's `*_ratio`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolShareSample {
    pub pool: TreePoolName,
    pub fair_share_ratio: f64,
    pub usage_ratio: f64,
    pub demand_ratio: f64,
}

/// An attempt as it was when its event happened: what the event log keeps of it, as
/// the attempt itself may leave memory within the same call (settled and released).
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptFacts {
    pub tree: TreeName,
    /// Its task (by number in the spec) and job index.
    pub task: usize,
    pub index: u32,
    pub resources: ResourceVector,
    pub start_time: UnixMillis,
    pub finish_time: Option<UnixMillis>,
    pub state: JobState,
    pub error: Option<String>,
    pub bytes_fetched: Option<u64>,
}

impl AttemptFacts {
    pub fn of(job: &crate::Job) -> AttemptFacts {
        AttemptFacts {
            tree: job.tree.clone(),
            task: job.task,
            index: job.index,
            resources: job.resources,
            start_time: job.start_time,
            finish_time: job.finish_time,
            state: job.state,
            error: job.error.clone(),
            bytes_fetched: job.statistics.as_ref().and_then(|s| s.bytes_fetched),
        }
    }
}

/// Serialises as `{"event": "<snake_case name>", ...fields}` (the simulator's output).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CoreEvent {
    /// The node came online (first heartbeat, or back after going silent).
    NodeRegistered {
        id: NodeId,
        registration: Registration,
    },
    /// The node's pool tree changed (it joined one, moved, went idle or was refused).
    NodeMembership {
        id: NodeId,
        registration: Registration,
    },
    NodeRestarted {
        id: NodeId,
    },
    /// The node reports more than it was approved for (None: no longer).
    NodeOverApproval {
        id: NodeId,
        alert: Option<String>,
    },
    /// An admin banned, decommissioned or returned the node to service.
    NodeMaintenance {
        id: NodeId,
        maintenance: NodeMaintenance,
    },
    NodeOffline {
        id: NodeId,
        lost_jobs: usize,
    },
    /// The revival window closed; jobs no node reported were lost and run again.
    RevivalEnded {
        lost_jobs: usize,
        silent_nodes: usize,
    },
    /// A revived scheduler starts jobs again: the nodes have reported what they run.
    StartsResumed {
        adopted_jobs: usize,
    },
    OperationStarted {
        id: OperationId,
        user: String,
        pool: TreePoolName,
        jobs: u64,
    },
    /// Admitted but waiting for a running-operation slot in its pool or an ancestor.
    OperationPending {
        id: OperationId,
    },
    /// A pending operation got its slot.
    OperationRunning {
        id: OperationId,
    },
    /// `update_operation_parameters` changed it (the fields given, as one line).
    OperationParametersUpdated {
        id: OperationId,
        parameters: String,
    },
    /// `suspend_operation`: no new jobs; `aborted_jobs` running ones were aborted as
    /// `suspended` (with `abort_running_jobs`).
    OperationSuspended {
        id: OperationId,
        aborted_jobs: usize,
    },
    OperationResumed {
        id: OperationId,
    },
    /// Each pool's fair share, usage and demand in a tree, about once a minute: what the
    /// event log's usage accounting measures attainment against. Not in the
    /// simulator's output (its snapshots show the same).
    PoolShares {
        tree: TreeName,
        pools: Vec<PoolShareSample>,
    },
    /// An admin (or a delegate) changed the configuration: who, the path, and its value
    /// before and after as JSON (absent: there was none, or there is none now).
    AdminChanged {
        who: String,
        path: String,
        old: Option<String>,
        new: Option<String>,
    },
    /// The configuration should go to the event log as it is at the end of this call
    /// (`note_configuration`). Not in the simulator's output.
    Configuration,
    /// An ephemeral pool lost its last operation.
    PoolRemoved {
        tree: TreeName,
        pool: TreePoolName,
    },
    OperationFinished {
        id: OperationId,
        state: OperationState,
        error: Option<String>,
    },
    JobStarted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        /// Not in the simulator's output: the event log's.
        #[serde(skip)]
        attempt: Option<AttemptFacts>,
    },
    /// A node runs an attempt nothing recorded (a previous scheduler started it), and it
    /// is now its job's running attempt.
    /// Gracefully preempted (SPEC 5.3): sent its interruption signal; it still runs
    /// until it exits or its timeout ends.
    JobInterrupted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        /// The starving operation it was preempted for (not in the simulator's output,
        /// whose preemption messages name it).
        #[serde(skip)]
        preempted_by: Option<OperationId>,
        /// Not in the simulator's output: the event log's.
        #[serde(skip)]
        attempt: Option<AttemptFacts>,
    },
    /// Its node reports it fetching its files or unpacking its layers (SPEC 5.17).
    JobPreparing {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        /// Not in the simulator's output: the event log's.
        #[serde(skip)]
        attempt: Option<AttemptFacts>,
    },
    JobAdopted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        /// Not in the simulator's output: the event log's.
        #[serde(skip)]
        attempt: Option<AttemptFacts>,
    },
    JobFinished {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        state: &'static str,
        error: Option<String>,
        /// Not in the simulator's output: the event log's.
        #[serde(skip)]
        attempt: Option<AttemptFacts>,
    },
    JobAborted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        reason: AbortReason,
        /// The starving operation it was preempted for (not in the simulator's output,
        /// whose preemption messages name it).
        #[serde(skip)]
        preempted_by: Option<OperationId>,
        /// Not in the simulator's output: the event log's.
        #[serde(skip)]
        attempt: Option<AttemptFacts>,
    },
}
