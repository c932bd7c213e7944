//! Node ↔ scheduler heartbeat protocol v1 (SPEC 3.3).
//!
//! A node sends `HeartbeatRequest` as a NATS request on `Subjects::heartbeat`; the
//! scheduler answers with `HeartbeatReply`. A finished job's result rides on every
//! heartbeat until the scheduler acknowledges it, so a lost reply never loses a result.

use crate::ids::{IncarnationId, JobId, NodeId, OperationId};
use crate::resources::ResourceVector;
use crate::states::{AbortReason, JobState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// 2: API subjects carry the caller (`<prefix>.api.<user>.<method>`), requests no `user`.
pub const PROTOCOL_VERSION: u32 = 2;

/// Bytes of stdout/stderr that travel with a job result.
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;

/// Times on the wire are Unix milliseconds.
pub type UnixMillis = u64;

/// The wall clock as the wire carries it. Only drivers call this; the scheduler core
/// is handed `now` instead.
pub fn unix_now() -> UnixMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    pub protocol_version: u32,
    pub node_id: NodeId,
    pub incarnation_id: IncarnationId,
    /// Numbers this incarnation's heartbeats from 1. The bus may deliver an old request
    /// late (a client flushes what it buffered during an outage): the scheduler ignores
    /// any request not newer than the last it took from the same incarnation. 0: unnumbered.
    #[serde(default)]
    pub seq: u64,
    pub hostname: String,
    /// Tags the agent detected (`host:`, `arch:`, `gpu`, `gpu_model:`).
    #[serde(default)]
    pub system_tags: Vec<String>,
    /// Tags configured on the agent (`--tag`).
    pub tags: Vec<String>,
    pub resource_limits: ResourceVector,
    pub resource_usage: ResourceVector,
    pub running_jobs: Vec<RunningJob>,
    pub finished_jobs: Vec<FinishedJob>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningJob {
    pub job_id: JobId,
    pub operation_id: OperationId,
    pub state: JobState,
    pub resource_usage: ResourceVector,
    pub start_time: UnixMillis,
}

/// Counters collected when a job ends. Optional values are absent where the sandbox
/// cannot measure them (process sandbox without cgroups).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobStatistics {
    pub wall_time_ms: u64,
    pub user_cpu_seconds: Option<f64>,
    pub system_cpu_seconds: Option<f64>,
    pub peak_memory_bytes: Option<u64>,
    pub exit_code: Option<i32>,
    /// Name of the signal that ended the job's main process, e.g. `SIGKILL`.
    pub signal: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinishedJob {
    pub job_id: JobId,
    pub operation_id: OperationId,
    /// `Completed`, `Failed` or `Aborted`.
    pub state: JobState,
    /// Human-readable failure, e.g. "memory limit exceeded".
    pub error: Option<String>,
    pub start_time: UnixMillis,
    pub finish_time: UnixMillis,
    pub statistics: JobStatistics,
    /// Last `OUTPUT_TAIL_BYTES` of the job's stdout, lossily decoded.
    pub stdout_tail: String,
    pub stderr_tail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Registration {
    /// Registered in this pool tree.
    Registered { tree: String },
    /// Registered, but no tree's `nodes_filter` matches the node.
    Idle,
    /// Refused, e.g. "node matches pool trees a and b".
    Refused { error: String },
    /// The scheduler could not read the request (version mismatch, malformed).
    Rejected { error: String },
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Registration::Registered { tree } => write!(f, "in pool tree '{tree}'"),
            Registration::Idle => f.write_str("idle: no pool tree's nodes_filter matches it"),
            Registration::Refused { error } => write!(f, "refused: {error}"),
            Registration::Rejected { error } => write!(f, "rejected: {error}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    pub protocol_version: u32,
    pub registration: Registration,
    pub jobs_to_start: Vec<JobStartSpec>,
    pub jobs_to_abort: Vec<JobAbort>,
    pub acknowledged_jobs: Vec<JobId>,
    /// Tags an admin set on the node (`//sys/cluster_nodes/<node>/@user_tags`).
    pub user_tags: Vec<String>,
    pub heartbeat_period_ms: u64,
}

impl HeartbeatReply {
    /// A reply that only tells the node what went wrong with its request.
    pub fn rejected(error: String, heartbeat_period_ms: u64) -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            registration: Registration::Rejected { error },
            jobs_to_start: vec![],
            jobs_to_abort: vec![],
            acknowledged_jobs: vec![],
            user_tags: vec![],
            heartbeat_period_ms,
        }
    }
}

/// Everything a node needs to run one job, self-contained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStartSpec {
    pub job_id: JobId,
    pub operation_id: OperationId,
    pub task_name: String,
    pub job_index: u32,
    pub job_count: u32,
    pub command: String,
    pub environment: BTreeMap<String, String>,
    pub stdin: Option<String>,
    pub resources: ResourceVector,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAbort {
    pub job_id: JobId,
    pub reason: AbortReason,
    pub message: String,
}
