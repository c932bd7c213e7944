//! What the API says of an operation and its job attempts: `get-operation`'s whole
//! record, the brief entry of a list (`OperationInfo::brief`), and a job attempt.

use crate::ids::{JobId, NodeId, OperationId};
use crate::protocol::{JobStatistics, UnixMillis};
use crate::resources::ResourceVector;
use crate::spec::VanillaSpec;
use crate::states::{AbortReason, JobState, OperationState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCounts {
    pub waiting: u64,
    pub running: u64,
    pub completed: u64,
    pub failed: u64,
    pub aborted: u64,
    pub total: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperationInfo {
    pub id: OperationId,
    pub user: String,
    pub state: OperationState,
    /// Its pool in the first of its pool trees.
    pub pool: String,
    /// Its pool in each of its pool trees.
    #[serde(default)]
    pub pool_trees: BTreeMap<String, String>,
    pub title: Option<String>,
    pub weight: f64,
    pub error: Option<String>,
    pub start_time: UnixMillis,
    pub finish_time: Option<UnixMillis>,
    pub jobs: JobCounts,
    pub resource_usage: ResourceVector,
    pub resource_demand: ResourceVector,
    pub spec: VanillaSpec,
    /// What happened to it, oldest first (submission, revivals, the end).
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// History entries dropped (the history keeps its first and latest ones).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history_dropped: u64,
    /// Given no new jobs until resumed (SPEC 5.14).
    #[serde(default)]
    pub suspended: bool,
    /// Why it may not be given jobs now (`suspended`, `pending`); absent when it may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable_reason: Option<String>,
}

impl OperationInfo {
    /// The operation as a list shows it: the spec's summary (no environment or stdin,
    /// commands cut short) and no history; `get-operation` has them whole.
    pub fn brief(mut self) -> Self {
        self.spec = crate::event_record::spec_summary(&self.spec);
        self.history = Vec::new();
        self
    }

    /// The operation as anyone may see it: its jobs' environment values and stdin,
    /// which often carry secrets, are replaced by a marker.
    pub fn redacted(mut self) -> Self {
        for task in self.spec.tasks.iter_mut().map(|(_, t)| t) {
            for v in task.environment.values_mut() {
                *v = REDACTED.into();
            }
            if task.stdin.is_some() {
                task.stdin = Some(REDACTED.into());
            }
            // A digest would tell another user that the file exists (SPEC 5.17).
            task.file_paths.clear();
            task.layer_paths.clear();
        }
        self
    }
}

/// What stands in for a value only the operation's owners may read.
pub const REDACTED: &str = "<redacted>";

/// One line of an operation's history: what happened to it and when (submission,
/// revivals by a restarted scheduler, its end). The scheduler stores these as they are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub time: UnixMillis,
    pub event: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: JobId,
    pub operation_id: OperationId,
    pub task_name: String,
    pub job_index: u32,
    pub state: JobState,
    pub node_id: Option<NodeId>,
    pub start_time: Option<UnixMillis>,
    pub finish_time: Option<UnixMillis>,
    pub error: Option<String>,
    pub abort_reason: Option<AbortReason>,
    pub statistics: Option<JobStatistics>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
