//! State changes the core reports to its driver, which logs them (one line each) or,
//! in the simulator, prints them.

use serde::Serialize;
use ytsched_common::maintenance::NodeMaintenance;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::protocol::Registration;
use ytsched_common::states::{AbortReason, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

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
    },
    /// A node runs an attempt nothing recorded (a previous scheduler started it), and it
    /// is now its job's running attempt.
    /// Gracefully preempted (SPEC 5.3): sent its interruption signal; it still runs
    /// until it exits or its timeout ends.
    JobInterrupted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
    },
    JobAdopted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
    },
    JobFinished {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        state: &'static str,
        error: Option<String>,
    },
    JobAborted {
        id: JobId,
        operation: OperationId,
        node: NodeId,
        reason: AbortReason,
    },
}
