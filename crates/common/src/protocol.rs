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
    /// How long the agent waits for the reply, in ms (0: not said). A heartbeat that
    /// waited longer than this at the scheduler is dropped unprocessed: jobs placed in a
    /// reply nobody reads would only come back as lost.
    #[serde(default)]
    pub timeout_ms: u64,
    /// The `seq` of the newest heartbeat whose reply this incarnation read and applied.
    /// A job started in a later reply that the node does not report was never seen by
    /// it (the reply went unread): the scheduler sends its start again instead of
    /// declaring it lost. Absent: the agent does not say, and such a job is lost.
    #[serde(default)]
    pub last_reply_seq: Option<u64>,
    /// The node's file cache, counted since the agent started (`/metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_cache: Option<crate::files::FileCacheCounters>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningJob {
    pub job_id: JobId,
    pub operation_id: OperationId,
    pub state: JobState,
    pub resource_usage: ResourceVector,
    pub start_time: UnixMillis,
    /// Which job of its operation this attempt runs, as its start named it. The
    /// scheduler does not store starts: after a restart it adopts an attempt it never
    /// recorded by this, when that job is still waiting (an agent of an older version
    /// sends none, and such an attempt is aborted instead).
    #[serde(default)]
    pub attempt_of: Option<AttemptOf>,
}

/// One job of an operation: its task and its index in that task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptOf {
    pub task_name: String,
    pub job_index: u32,
    /// The token the scheduler gave this attempt's start (`JobStartSpec::start_token`),
    /// echoed back: a restarted scheduler adopts only an attempt whose token proves a
    /// scheduler started it on this node, so no node can claim jobs it never got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_token: Option<String>,
}

impl AttemptOf {
    pub fn of(spec: &JobStartSpec) -> Self {
        AttemptOf {
            task_name: spec.task_name.clone(),
            job_index: spec.job_index,
            start_token: spec.start_token.clone(),
        }
    }
}

impl RunningJob {
    /// A job running as it was started, using all it was given.
    pub fn started(spec: &JobStartSpec, start_time: UnixMillis) -> Self {
        RunningJob {
            job_id: spec.job_id.clone(),
            operation_id: spec.operation_id.clone(),
            state: JobState::Running,
            resource_usage: spec.resources,
            start_time,
            attempt_of: Some(AttemptOf::of(spec)),
        }
    }
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
    /// Bytes the node fetched from the file store for this attempt (its cache had the
    /// rest); absent when the job named no files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_fetched: Option<u64>,
    /// How long the attempt spent preparing (fetching files, unpacking layers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preparing_ms: Option<u64>,
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
    /// As in `RunningJob`: a result of an attempt the scheduler never recorded is taken
    /// by this when that job still waits.
    #[serde(default)]
    pub attempt_of: Option<AttemptOf>,
}

/// The longest an agent waits between heartbeats while the scheduler does not answer:
/// well inside a revived scheduler's revival window, during which it starts nothing
/// so that every live agent reports what it runs first.
pub const AGENT_MAX_RETRY_MS: u64 = 2_000;

/// Most tags one node may report (system and configured each).
pub const MAX_NODE_TAGS: usize = 256;
/// Longest error message a job result keeps.
pub const MAX_JOB_ERROR_BYTES: usize = 4096;

impl HeartbeatRequest {
    /// An unnumbered heartbeat of `node_id` offering `resource_limits` and reporting no
    /// jobs, under its hostname: what simulated nodes (the simulator, benches, tests)
    /// start from before they fill in what they run.
    pub fn new(
        node_id: NodeId,
        incarnation_id: IncarnationId,
        resource_limits: ResourceVector,
    ) -> Self {
        HeartbeatRequest {
            protocol_version: PROTOCOL_VERSION,
            hostname: node_id.to_string(),
            node_id,
            incarnation_id,
            seq: 0,
            system_tags: vec![],
            tags: vec![],
            resource_limits,
            resource_usage: ResourceVector::ZERO,
            running_jobs: vec![],
            finished_jobs: vec![],
            timeout_ms: 0,
            last_reply_seq: None,
            file_cache: None,
        }
    }

    /// What is wrong with this request's own fields, if anything: tags must be tags, and
    /// few enough; the hostname a hostname.
    pub fn check(&self) -> Result<(), String> {
        if self.hostname.len() > 255 {
            return Err(format!(
                "hostname is {} bytes, longer than 255",
                self.hostname.len()
            ));
        }
        for (what, tags) in [("system_tags", &self.system_tags), ("tags", &self.tags)] {
            if tags.len() > MAX_NODE_TAGS {
                return Err(format!(
                    "{what}: {} tags is more than the limit of {MAX_NODE_TAGS}",
                    tags.len()
                ));
            }
            for t in tags {
                crate::tag_filter::validate_tag(t).map_err(|e| format!("{what}: {e}"))?;
            }
        }
        Ok(())
    }
}

impl FinishedJob {
    /// Cuts what a node sent down to what a result keeps: output tails of
    /// `OUTPUT_TAIL_BYTES` and an error of `MAX_JOB_ERROR_BYTES`, so every job record
    /// fits in the store whatever the node says.
    pub fn bound(&mut self) {
        for tail in [&mut self.stdout_tail, &mut self.stderr_tail] {
            let start = tail.ceil_char_boundary(tail.len().saturating_sub(OUTPUT_TAIL_BYTES));
            tail.drain(..start);
        }
        if let Some(e) = &mut self.error {
            if e.len() > MAX_JOB_ERROR_BYTES {
                e.truncate(e.floor_char_boundary(MAX_JOB_ERROR_BYTES));
                e.push('…');
            }
        }
    }
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
    /// The heartbeat's number does not follow what the scheduler has from this
    /// incarnation (a late delivery, or numbers someone else pushed ahead): the agent
    /// registers again with a new incarnation instead of retrying forever.
    Stale { error: String },
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Registration::Registered { tree } => write!(f, "in pool tree '{tree}'"),
            Registration::Idle => f.write_str("idle: no pool tree's nodes_filter matches it"),
            Registration::Refused { error } => write!(f, "refused: {error}"),
            Registration::Rejected { error } => write!(f, "rejected: {error}"),
            Registration::Stale { error } => write!(f, "stale: {error}"),
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
    /// After this much silence the scheduler runs the node's jobs elsewhere: an agent
    /// that hears no answer for nearly as long kills its jobs itself, so a job never
    /// runs twice at once (0: not said).
    #[serde(default)]
    pub node_heartbeat_timeout_ms: u64,
}

impl HeartbeatReply {
    /// A reply that only tells the node what went wrong with its request.
    pub fn rejected(error: String, heartbeat_period_ms: u64) -> Self {
        Self::refusing(Registration::Rejected { error }, heartbeat_period_ms)
    }

    /// A reply that only tells the node its heartbeat's number is out of sequence.
    pub fn stale(error: String, heartbeat_period_ms: u64) -> Self {
        Self::refusing(Registration::Stale { error }, heartbeat_period_ms)
    }

    fn refusing(registration: Registration, heartbeat_period_ms: u64) -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            registration,
            jobs_to_start: vec![],
            jobs_to_abort: vec![],
            acknowledged_jobs: vec![],
            user_tags: vec![],
            heartbeat_period_ms,
            node_heartbeat_timeout_ms: 0,
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
    /// Bytes the sandbox may hold (the task's `disk_request`); None: the node's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_space: Option<u64>,
    /// Sent first when the job is aborted or preempted (None: SIGTERM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_signal: Option<crate::spec::InterruptionSignal>,
    /// A keyed digest of the attempt and its node, which the node echoes in `AttemptOf`
    /// (see there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_token: Option<String>,
    /// Stored files to place in the sandbox before the job starts (its task's
    /// `file_paths`); the node fetches each into its cache first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::files::FileRef>,
    /// Root-filesystem layers, the first on top (its task's `layer_paths`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<crate::files::Sha256Digest>,
}

impl JobStartSpec {
    /// Whether the node must fetch or unpack anything before the job runs.
    pub fn needs_files(&self) -> bool {
        !self.files.is_empty() || !self.layers.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAbort {
    pub job_id: JobId,
    pub reason: AbortReason,
    pub message: String,
    /// Graceful preemption (SPEC 5.3): how long the job has after its interruption
    /// signal before it is killed (None: the agent's own short kill grace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_timeout_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_cut_to_what_a_record_keeps() {
        let mut r = FinishedJob {
            job_id: JobId::parse("j").unwrap(),
            operation_id: OperationId::parse("o").unwrap(),
            state: JobState::Failed,
            error: Some("é".repeat(10_000)),
            start_time: 0,
            finish_time: 0,
            statistics: Default::default(),
            stdout_tail: "x".repeat(OUTPUT_TAIL_BYTES) + "end",
            stderr_tail: "ok".into(),
            attempt_of: None,
        };
        r.bound();
        assert!(r.error.unwrap().len() <= MAX_JOB_ERROR_BYTES + 3);
        assert_eq!(r.stdout_tail.len(), OUTPUT_TAIL_BYTES);
        assert!(r.stdout_tail.ends_with("end"));
        assert_eq!(r.stderr_tail, "ok");
    }
}
