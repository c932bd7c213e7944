//! The vanilla operation spec (SPEC 4.3) and its validation.
//!
//! Parsing rejects unknown fields (serde names them); `validate` then checks values and
//! names the offending field by its path, e.g. `tasks.main.cpu_limit`.

use crate::names::{PoolName, TreeName};
use crate::quote::{quote, QUOTE_CHARS};
use crate::resources::ResourceVector;
use crate::tag_filter::TagFilter;
use crate::units::{ByteSize, DurationMs};
use litemap::LiteMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const DEFAULT_CPU_LIMIT: f64 = 1.0;
pub const DEFAULT_MEMORY_LIMIT: u64 = 512 << 20;
pub const DEFAULT_MAX_FAILED_JOB_COUNT: u32 = 10;

// Bounds on a spec (SPEC 5.12). Each keeps one operation's stored record well below the
// bus's payload limit and its waiting jobs within the scheduler's memory.
/// Jobs per operation (and so per task).
pub const MAX_JOBS_PER_OPERATION: u64 = 1_000_000;
pub const MAX_TASKS: usize = 100;
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
pub const MAX_STDIN_BYTES: usize = 256 * 1024;
pub const MAX_ENVIRONMENT_BYTES: usize = 64 * 1024;
/// Commands, stdin and environments of all tasks together.
pub const MAX_SPEC_TEXT_BYTES: usize = 384 * 1024;
pub const MAX_TITLE_BYTES: usize = 1024;
pub const MAX_OWNERS: usize = 100;
/// Jobs one gang operation may have: all are placed in one decision (SPEC 5.15).
pub const MAX_GANG_JOBS: u32 = 10_000;
pub const MAX_GPU_PER_JOB: u32 = 1024;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// Dotted path of the offending field, e.g. `tasks.main.job_count`.
    pub field: String,
    pub message: String,
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Resource amounts as a person writes them in a spec: memory with units, any subset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceAmounts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_slots: Option<f64>,
    /// Deprecated fifth resource: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<f64>,
}

impl ResourceAmounts {
    fn validate(&self, field: &str) -> Result<(), SpecError> {
        self.check_nonnegative().map_err(|(name, v)| {
            SpecError::new(
                format!("{field}.{name}"),
                format!("must be a non-negative number, got {v}"),
            )
        })
    }

    /// The first component that is negative or not a number, with its value.
    pub fn check_nonnegative(&self) -> Result<(), (&'static str, f64)> {
        for (name, v) in [
            ("cpu", self.cpu),
            ("gpu", self.gpu),
            ("user_slots", self.user_slots),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Err((name, v));
                }
            }
        }
        Ok(())
    }

    /// Which components are specified.
    pub fn specified(&self) -> [bool; 4] {
        [
            self.cpu.is_some(),
            self.memory.is_some(),
            self.gpu.is_some(),
            self.user_slots.is_some(),
        ]
    }

    /// The amounts as a vector, with unspecified components set to `unset`.
    pub fn to_vector(&self, unset: f64) -> ResourceVector {
        ResourceVector {
            cpu: self.cpu.unwrap_or(unset),
            memory: self.memory.map(|m| m.0 as f64).unwrap_or(unset),
            gpu: self.gpu.unwrap_or(unset),
            user_slots: self.user_slots.unwrap_or(unset),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub command: String,
    #[serde(default = "one")]
    pub job_count: u32,
    #[serde(default = "default_cpu")]
    pub cpu_limit: f64,
    #[serde(default = "default_memory")]
    pub memory_limit: ByteSize,
    #[serde(default)]
    pub gpu_limit: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_speculation_timeout: Option<DurationMs>,
    /// Disk each job's sandbox may fill (YTsaurus `disk_request`); without it, the
    /// node's default (`ytsched-node --job-disk-space`). Past it the job fails with
    /// "disk limit exceeded".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_request: Option<DiskRequest>,
    /// Sent to the job first when it is preempted or aborted (default SIGTERM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_signal: Option<InterruptionSignal>,
    /// A job that exits with this code goes back to waiting instead of failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_exit_code: Option<u8>,
    /// Files from the store placed read-only in each job's sandbox before it starts
    /// (YTsaurus's name; SPEC 5.17).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_paths: Vec<crate::files::FileRef>,
    /// Root-filesystem archives from the store, the first on top, the job's root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_paths: Vec<crate::files::Sha256Digest>,
}

/// What a job asks of the node's disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskRequest {
    /// Bytes the sandbox (work directory, stdout and stderr) may hold.
    pub disk_space: ByteSize,
}

/// The least disk a job may ask for: room for its output files.
pub const MIN_DISK_SPACE: u64 = 1 << 20;

fn one() -> u32 {
    1
}
fn default_cpu() -> f64 {
    DEFAULT_CPU_LIMIT
}
fn default_memory() -> ByteSize {
    ByteSize(DEFAULT_MEMORY_LIMIT)
}
fn default_max_failed() -> u32 {
    DEFAULT_MAX_FAILED_JOB_COUNT
}

/// Refuses a count or size over its bound, naming the field, the value and the limit:
/// "`<value><unit>` is more than the limit of `<limit><suffix>`".
fn at_most(
    field: impl Into<String>,
    value: usize,
    limit: usize,
    unit: &str,
    suffix: &str,
) -> Result<(), SpecError> {
    if value > limit {
        return Err(SpecError::new(
            field,
            format!("{value}{unit} is more than the limit of {limit}{suffix}"),
        ));
    }
    Ok(())
}

impl TaskSpec {
    /// `job_count` jobs running `command`, each with `cpu_limit` cores and
    /// `memory_limit`, and nothing else set: the one literal of a plain task.
    pub fn new(
        command: impl Into<String>,
        job_count: u32,
        cpu_limit: f64,
        memory_limit: ByteSize,
    ) -> Self {
        TaskSpec {
            command: command.into(),
            job_count,
            cpu_limit,
            memory_limit,
            gpu_limit: 0,
            environment: Default::default(),
            stdin: None,
            job_speculation_timeout: None,
            disk_request: None,
            interruption_signal: None,
            restart_exit_code: None,
            file_paths: Vec::new(),
            layer_paths: Vec::new(),
        }
    }

    /// Every stored file a job of this task needs: its files, then its layers.
    pub fn stored_files(&self) -> impl Iterator<Item = &crate::files::Sha256Digest> {
        self.file_paths
            .iter()
            .map(|f| &f.digest)
            .chain(self.layer_paths.iter())
    }

    fn environment_bytes(&self) -> usize {
        self.environment
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum()
    }

    /// Bytes of free text this task carries (command, stdin, environment).
    fn text_bytes(&self) -> usize {
        self.command.len() + self.stdin.as_ref().map_or(0, |s| s.len()) + self.environment_bytes()
    }

    /// What one job of this task occupies on a node.
    pub fn job_resources(&self) -> ResourceVector {
        ResourceVector {
            cpu: self.cpu_limit,
            memory: self.memory_limit.0 as f64,
            gpu: self.gpu_limit as f64,
            user_slots: 1.0,
        }
    }

    fn validate(&self, field: &str) -> Result<(), SpecError> {
        self.validate_files(field)?;
        if self.command.trim().is_empty() {
            return Err(SpecError::new(
                format!("{field}.command"),
                "must not be empty",
            ));
        }
        if self.job_count == 0 {
            return Err(SpecError::new(
                format!("{field}.job_count"),
                "must be at least 1",
            ));
        }
        if self.restart_exit_code == Some(0) {
            return Err(SpecError::new(
                format!("{field}.restart_exit_code"),
                "must be 1 to 255: 0 is success",
            ));
        }
        at_most(
            format!("{field}.job_count"),
            self.job_count as usize,
            MAX_JOBS_PER_OPERATION as usize,
            "",
            " jobs per operation",
        )?;
        self.validate_text_sizes(field)?;
        if self.command.contains('\0') {
            return Err(SpecError::new(
                format!("{field}.command"),
                "must not contain NUL bytes",
            ));
        }
        at_most(
            format!("{field}.gpu_limit"),
            self.gpu_limit as usize,
            MAX_GPU_PER_JOB as usize,
            "",
            "",
        )?;
        if !self.cpu_limit.is_finite() || self.cpu_limit < 0.0 {
            return Err(SpecError::new(
                format!("{field}.cpu_limit"),
                format!("must be a non-negative number, got {}", self.cpu_limit),
            ));
        }
        if self.memory_limit.0 == 0 {
            return Err(SpecError::new(
                format!("{field}.memory_limit"),
                "must be positive",
            ));
        }
        if let Some(d) = &self.disk_request {
            if d.disk_space.0 < MIN_DISK_SPACE {
                return Err(SpecError::new(
                    format!("{field}.disk_request.disk_space"),
                    format!(
                        "{} bytes is less than the least of {MIN_DISK_SPACE} (1M)",
                        d.disk_space.0
                    ),
                ));
            }
        }
        self.validate_environment(field)
    }

    /// The command, stdin and environment within their byte limits.
    fn validate_text_sizes(&self, field: &str) -> Result<(), SpecError> {
        at_most(
            format!("{field}.command"),
            self.command.len(),
            MAX_COMMAND_BYTES,
            " bytes",
            "",
        )?;
        let stdin = self.stdin.as_ref().map_or(0, String::len);
        at_most(
            format!("{field}.stdin"),
            stdin,
            MAX_STDIN_BYTES,
            " bytes",
            "",
        )?;
        at_most(
            format!("{field}.environment"),
            self.environment_bytes(),
            MAX_ENVIRONMENT_BYTES,
            " bytes",
            "",
        )
    }

    /// Variable names a shell can take (no '=' or control characters), values without
    /// NUL bytes.
    fn validate_environment(&self, field: &str) -> Result<(), SpecError> {
        for (key, value) in &self.environment {
            if value.contains('\0') {
                return Err(SpecError::new(
                    format!("{field}.environment.{key}"),
                    "must not contain NUL bytes",
                ));
            }
            if key.is_empty() || key.contains('=') || key.chars().any(char::is_control) {
                return Err(SpecError::new(
                    format!("{field}.environment"),
                    format!(
                        "'{}' is not a valid variable name (no '=' or control characters)",
                        quote(key, QUOTE_CHARS)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Per-tree overrides of where and how an operation runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeSchedulingOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceAmounts>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VanillaSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_trees: Option<Vec<TreeName>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Parsed as it is decoded: a filter that does not parse never reaches the core.
    pub scheduling_tag_filter: Option<TagFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default = "default_max_failed")]
    pub max_failed_job_count: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduling_options_per_pool_tree: BTreeMap<TreeName, TreeSchedulingOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_starvation_timeout: Option<DurationMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_starvation_tolerance: Option<f64>,
    /// How long the operation may go on, counted from its submission (SPEC 5.14): past
    /// it, it fails with "operation time limit exceeded" and its jobs are aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<DurationMs>,
    /// `graceful`: preempted jobs get their interruption signal and the tree's
    /// `job_graceful_interrupt_timeout` to exit before they are killed (SPEC 5.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_mode: Option<PreemptionMode>,
    /// All its jobs (every task) run together or none does (SPEC 5.15).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_gang: bool,
    /// Users who, besides the submitter and admins, may abort the operation and read
    /// its jobs' output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// A flat sorted map: most specs have one task, and a `BTreeMap` node for one
    /// entry takes about 1.5 KB of every operation the scheduler holds.
    #[serde(deserialize_with = "tasks_without_trusting_their_count")]
    pub tasks: LiteMap<String, TaskSpec>,
}

/// `LiteMap`'s own `Deserialize` reserves the entry count a message claims before
/// reading one entry: a damaged or hostile message claiming 4 billion tasks aborted the
/// process on a 400 GB allocation. A `BTreeMap` grows only with entries actually read.
fn tasks_without_trusting_their_count<'de, D>(d: D) -> Result<LiteMap<String, TaskSpec>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let read = BTreeMap::<String, TaskSpec>::deserialize(d)?;
    // Exactly as many entries as read: collecting would give a one-task spec room for
    // four (a `Vec`'s smallest growth), 480 bytes of every operation held.
    let mut tasks = LiteMap::with_capacity(read.len());
    for (name, task) in read {
        tasks.insert(name, task);
    }
    Ok(tasks)
}

impl VanillaSpec {
    /// The operation's `resource_limits` in `tree` (SPEC 4.3): its per-tree option
    /// there, else the spec's own.
    pub fn resource_limits_in(&self, tree: &str) -> Option<&ResourceAmounts> {
        self.scheduling_options_per_pool_tree
            .get(tree)
            .and_then(|o| o.resource_limits.as_ref())
            .or(self.resource_limits.as_ref())
    }

    /// The operation's weight in `tree`: its per-tree option there, else the spec's own.
    pub fn weight_in(&self, tree: &str) -> f64 {
        self.scheduling_options_per_pool_tree
            .get(tree)
            .and_then(|o| o.weight)
            .or(self.weight)
            .unwrap_or(1.0)
    }

    /// Every field but the tasks (left empty): the small part of a spec, copied without
    /// its commands, environments and stdin.
    pub fn clone_without_tasks(&self) -> Self {
        VanillaSpec {
            pool: self.pool.clone(),
            pool_trees: self.pool_trees.clone(),
            weight: self.weight,
            resource_limits: self.resource_limits.clone(),
            max_share_ratio: self.max_share_ratio,
            scheduling_tag_filter: self.scheduling_tag_filter.clone(),
            title: self.title.clone(),
            max_failed_job_count: self.max_failed_job_count,
            scheduling_options_per_pool_tree: self.scheduling_options_per_pool_tree.clone(),
            fair_share_starvation_timeout: self.fair_share_starvation_timeout,
            fair_share_starvation_tolerance: self.fair_share_starvation_tolerance,
            time_limit: self.time_limit,
            preemption_mode: self.preemption_mode,
            is_gang: self.is_gang,
            owners: self.owners.clone(),
            tasks: LiteMap::new(),
        }
    }

    /// A one-task spec, as `run-vanilla --command` builds it.
    pub fn single_task(task: TaskSpec) -> Self {
        let mut tasks = LiteMap::new();
        tasks.insert("task".to_string(), task);
        VanillaSpec {
            pool: None,
            pool_trees: None,
            weight: None,
            resource_limits: None,
            max_share_ratio: None,
            scheduling_tag_filter: None,
            title: None,
            max_failed_job_count: DEFAULT_MAX_FAILED_JOB_COUNT,
            scheduling_options_per_pool_tree: BTreeMap::new(),
            fair_share_starvation_timeout: None,
            fair_share_starvation_tolerance: None,
            time_limit: None,
            preemption_mode: None,
            is_gang: false,
            owners: vec![],
            tasks,
        }
    }

    pub fn total_job_count(&self) -> u64 {
        self.tasks.values().map(|t| t.job_count as u64).sum()
    }
}

pub use crate::names::{validate_pool_name, MAX_POOL_NAME_LEN};

mod interruption;
mod parameters;
mod spec_checks;
mod valid;
pub use interruption::{InterruptionSignal, PreemptionMode};
pub use parameters::OperationParameters;
pub use valid::{IntoValidSpec, ValidSpec};

#[cfg(test)]
mod tests;
