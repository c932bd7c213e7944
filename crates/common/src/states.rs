//! Lifecycle states of operations and jobs (SPEC 4.3) and why a job was aborted.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    Pending,
    Running,
    Completed,
    Failed,
    Aborted,
}

impl OperationState {
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Aborted)
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
        }
    }
}

impl fmt::Display for OperationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Waiting,
    /// Started on its node, which is still fetching its files or unpacking its layers
    /// (SPEC 5.17). The scheduler counts it as running; only what it shows differs.
    Preparing,
    Running,
    Completed,
    Failed,
    Aborted,
}

impl JobState {
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Aborted)
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Preparing => "preparing",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the scheduler took a job away. Only `operation_aborted` and `speculative_lost`
/// jobs do not run again; none counts as a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    Preempted,
    OperationAborted,
    NodeLost,
    SpeculativeLost,
    ResourceOvercommit,
    ResourceLimitsViolation,
    /// Its node left the job's pool tree (re-tagged, or the tree's filter changed); the
    /// job runs again in its tree. YTsaurus calls this `node_fair_share_tree_changed`.
    NodeFairShareTreeChanged,
    /// An admin banned its node (`//sys/cluster_nodes/<n>/@banned`); the job runs again
    /// elsewhere.
    NodeBanned,
    /// `suspend_operation` with `abort_running_jobs`: the job waits again until its
    /// operation is resumed.
    Suspended,
    /// The job exited with its task's `restart_exit_code`: it asked to run again.
    RestartRequested,
    /// Another job of its gang ended other than completed: the gang restarts whole
    /// (SPEC 5.15).
    GangMemberLost,
    /// A user asked for it (`abort_job`); the job runs again.
    UserRequest,
}

impl AbortReason {
    pub fn name(self) -> &'static str {
        match self {
            Self::Preempted => "preempted",
            Self::OperationAborted => "operation_aborted",
            Self::NodeLost => "node_lost",
            Self::SpeculativeLost => "speculative_lost",
            Self::ResourceOvercommit => "resource_overcommit",
            Self::ResourceLimitsViolation => "resource_limits_violation",
            Self::NodeFairShareTreeChanged => "node_fair_share_tree_changed",
            Self::NodeBanned => "node_banned",
            Self::Suspended => "suspended",
            Self::RestartRequested => "restart_requested",
            Self::GangMemberLost => "gang_member_lost",
            Self::UserRequest => "user_request",
        }
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
