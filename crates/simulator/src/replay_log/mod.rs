//! An event log (`ytsched events` JSON lines) read back as what a replay needs: the
//! cluster and its configuration over time, each operation's submission and spec, each
//! job's observed run time, what admins did to operations, and the figures observed.
//!
//! Every line becomes a checked `EventRecord` here or the read stops with the line's
//! number; nothing unchecked goes on to the simulation.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use ytsched_common::event_record::{Event, EventRecord, OperationRef, EVENT_SCHEMA_VERSION};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::usage::{GroupBy, UsageSum};
use ytsched_common::{NodeId, OperationId, ResourceVector};
use ytsched_scheduler_core::ClusterConfig;

/// Bounds on what one replay reads: a log past them is refused, not half read.
pub const MAX_LINE_BYTES: usize = 4 << 20;
pub const MAX_OPERATIONS: usize = 1_000_000;
pub const MAX_NODES: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot read the event log: {0}")]
    Io(#[from] std::io::Error),
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("{0}")]
    Unusable(String),
}

/// A node as the log told it, from when it was first seen.
#[derive(Clone, Debug)]
pub struct RecordedNode {
    pub first_at: UnixMillis,
    pub resources: ResourceVector,
    pub tags: Vec<String>,
}

/// An operation submitted within the log.
#[derive(Clone, Debug)]
pub struct RecordedOperation {
    pub id: OperationId,
    pub user: String,
    pub at: UnixMillis,
    pub spec: VanillaSpec,
    /// Run time of each job (task, job index) that completed, from its completing
    /// attempt; a job that never did runs until the replay ends.
    pub durations: HashMap<(String, u32), u64>,
}

/// What an admin or user did to an operation, replayed at its time.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordedAction {
    /// It ended otherwise than by completing (aborted, or failed): its jobs stop then.
    End(OperationId),
    Suspend {
        operation: OperationId,
        abort_running_jobs: bool,
    },
    Resume(OperationId),
}

/// What the log says happened, ready to replay.
pub struct RecordedRun {
    /// The first and last record's times.
    pub from: UnixMillis,
    pub to: UnixMillis,
    /// Configurations in time order; the first is what the replay starts from.
    pub configurations: Vec<(UnixMillis, ClusterConfig)>,
    pub heartbeat_period_ms: u64,
    pub pool_sample_period_ms: u64,
    pub nodes: BTreeMap<NodeId, RecordedNode>,
    /// In submission order.
    pub operations: Vec<RecordedOperation>,
    pub actions: Vec<(UnixMillis, RecordedAction)>,
    /// The figures as observed, per pool.
    pub observed: UsageSum,
    /// Things the log holds that the replay leaves out, said in its output.
    pub notes: Vec<String>,
}

/// Per attempt, until its end is read: which job it is an attempt of.
struct OpenAttempt {
    operation: OperationId,
    key: (String, u32),
}

/// Reads a whole log. `observed` sums the figures as they are read, so the records are
/// never all held.
pub fn read(input: impl BufRead) -> Result<RecordedRun, LogError> {
    let mut records = Reader {
        input,
        line: 0,
        buf: String::new(),
    };
    let mut reading = Reading::default();
    while let Some((line, r)) = records.next_record()? {
        reading.take(line, &r)?;
    }
    reading.finish()
}

/// What has been read of a log so far.
struct Reading {
    first: Option<UnixMillis>,
    last: UnixMillis,
    configurations: Vec<(UnixMillis, ClusterConfig)>,
    heartbeat_period_ms: Option<u64>,
    pool_sample_period_ms: Option<u64>,
    nodes: BTreeMap<NodeId, RecordedNode>,
    operations: Vec<RecordedOperation>,
    index: HashMap<OperationId, usize>,
    attempts: HashMap<ytsched_common::JobId, OpenAttempt>,
    failed: HashMap<(OperationId, String, u32), u64>,
    actions: Vec<(UnixMillis, RecordedAction)>,
    seen_before: std::collections::HashSet<OperationId>,
    parameter_updates: usize,
    /// The window is known only at the end; usage sums everything read.
    observed: UsageSum,
}

impl Default for Reading {
    fn default() -> Self {
        Self {
            first: None,
            last: 0,
            configurations: Vec::new(),
            heartbeat_period_ms: None,
            pool_sample_period_ms: None,
            nodes: BTreeMap::new(),
            operations: Vec::new(),
            index: HashMap::new(),
            attempts: HashMap::new(),
            failed: HashMap::new(),
            actions: Vec::new(),
            seen_before: Default::default(),
            parameter_updates: 0,
            observed: UsageSum::new(GroupBy::Pool, 0, UnixMillis::MAX),
        }
    }
}

impl Reading {
    fn take(&mut self, line: usize, r: &EventRecord) -> Result<(), LogError> {
        if r.version > EVENT_SCHEMA_VERSION {
            return Err(LogError::Line {
                line,
                message: format!(
                    "schema version {} is newer than this ytsched reads ({EVENT_SCHEMA_VERSION})",
                    r.version
                ),
            });
        }
        self.first.get_or_insert(r.at);
        self.last = self.last.max(r.at);
        self.observed.add(r);
        self.take_event(line, r)
    }

    fn node_seen(
        &mut self,
        line: usize,
        at: UnixMillis,
        id: &NodeId,
        resources: ResourceVector,
        tags: &[String],
    ) -> Result<(), LogError> {
        if self.nodes.len() >= MAX_NODES && !self.nodes.contains_key(id) {
            return Err(LogError::Line {
                line,
                message: format!("more than {MAX_NODES} nodes: replay a shorter window"),
            });
        }
        self.nodes
            .entry(id.clone())
            .or_insert_with(|| RecordedNode {
                first_at: at,
                resources,
                tags: tags.to_vec(),
            });
        Ok(())
    }

    fn take_event(&mut self, line: usize, r: &EventRecord) -> Result<(), LogError> {
        match &r.event {
            Event::Configuration {
                configuration,
                heartbeat_period_ms: hb,
                pool_sample_period_ms: sample,
                nodes: groups,
            } => {
                self.configurations.push((r.at, (**configuration).clone()));
                self.heartbeat_period_ms.get_or_insert(*hb);
                self.pool_sample_period_ms.get_or_insert(*sample);
                for g in groups {
                    for id in &g.ids {
                        self.node_seen(line, r.at, id, g.resources, &g.tags)?;
                    }
                }
            }
            Event::NodeRegistered {
                node,
                resources: Some(resources),
                tags,
                ..
            } => self.node_seen(line, r.at, node, *resources, tags)?,
            _ => return self.take_operation_event(line, r),
        }
        Ok(())
    }

    /// An event of an operation or its jobs: what the replay submits, how long each job
    /// ran, and what was done to operations.
    fn take_operation_event(&mut self, line: usize, r: &EventRecord) -> Result<(), LogError> {
        match &r.event {
            Event::OperationStarted {
                operation,
                spec: Some(spec),
                ..
            } => {
                self.take_submission(line, r.at, operation, spec)?;
            }
            Event::JobStarted { operation, job } | Event::JobAdopted { operation, job } => {
                if !self.index.contains_key(&operation.id) {
                    self.seen_before.insert(operation.id.clone());
                    return Ok(());
                }
                if let (Some(task), Some(i)) = (&job.task, job.job_index) {
                    self.attempts.insert(
                        job.id.clone(),
                        OpenAttempt {
                            operation: operation.id.clone(),
                            key: (task.clone(), i),
                        },
                    );
                }
            }
            Event::JobFinished {
                job,
                state,
                finish_time,
                ..
            } => {
                let Some(a) = self.attempts.remove(&job.id) else {
                    return Ok(());
                };
                let took = finish_time.saturating_sub(job.start_time);
                let op = &mut self.operations[self.index[&a.operation]];
                match state {
                    JobState::Completed => {
                        op.durations.entry(a.key).or_insert(took);
                    }
                    _ => {
                        self.failed.insert((a.operation, a.key.0, a.key.1), took);
                    }
                }
            }
            Event::JobAborted { job, .. } => {
                self.attempts.remove(&job.id);
            }
            Event::OperationFinished {
                operation, state, ..
            } if *state != OperationState::Completed && self.index.contains_key(&operation.id) => {
                self.actions
                    .push((r.at, RecordedAction::End(operation.id.clone())));
            }
            Event::OperationSuspended {
                operation,
                aborted_jobs,
            } if self.index.contains_key(&operation.id) => self.actions.push((
                r.at,
                RecordedAction::Suspend {
                    operation: operation.id.clone(),
                    abort_running_jobs: *aborted_jobs > 0,
                },
            )),
            Event::OperationResumed { operation } if self.index.contains_key(&operation.id) => self
                .actions
                .push((r.at, RecordedAction::Resume(operation.id.clone()))),
            Event::OperationParametersUpdated { .. } => self.parameter_updates += 1,
            _ => {}
        }
        Ok(())
    }

    /// An operation submitted within the log: it is submitted again at the same time
    /// (once, however many leaders told it).
    fn take_submission(
        &mut self,
        line: usize,
        at: UnixMillis,
        operation: &OperationRef,
        spec: &VanillaSpec,
    ) -> Result<(), LogError> {
        if self.index.contains_key(&operation.id) {
            return Ok(()); // told again by a successor leader
        }
        if self.operations.len() >= MAX_OPERATIONS {
            return Err(LogError::Line {
                line,
                message: format!("more than {MAX_OPERATIONS} operations: replay a shorter window"),
            });
        }
        self.index
            .insert(operation.id.clone(), self.operations.len());
        self.operations.push(RecordedOperation {
            id: operation.id.clone(),
            user: operation.user.clone(),
            at,
            spec: spec.clone(),
            durations: HashMap::new(),
        });
        Ok(())
    }

    fn finish(mut self) -> Result<RecordedRun, LogError> {
        let Some(from) = self.first else {
            return Err(LogError::Unusable("the event log is empty".into()));
        };
        if self.configurations.is_empty() {
            return Err(LogError::Unusable(
        "the event log has no readable `configuration` event (a leader tells one when it starts, after each admin change and once an hour): export a window that holds one".into(),
    ));
        }
        // A job that only ever failed runs as long as its last attempt did.
        for ((op, task, i), took) in self.failed {
            self.operations[self.index[&op]]
                .durations
                .entry((task, i))
                .or_insert(took);
        }
        let mut notes = Vec::new();
        if !self.seen_before.is_empty() {
            notes.push(format!(
        "{} operations submitted before the log's first event are left out (their jobs' usage is not replayed)",
        self.seen_before.len()
    ));
        }
        if self.parameter_updates > 0 {
            notes.push(format!(
                "{} operation parameter updates are not replayed",
                self.parameter_updates
            ));
        }
        if self.nodes.is_empty() {
            return Err(LogError::Unusable(
                "the event log names no node with its resources: nothing to replay on".into(),
            ));
        }
        self.actions.sort_by_key(|(at, _)| *at);
        self.observed.set_window(from, self.last.saturating_add(1));
        Ok(RecordedRun {
            from,
            to: self.last,
            configurations: self.configurations,
            heartbeat_period_ms: self.heartbeat_period_ms.unwrap_or(1000).max(1),
            pool_sample_period_ms: self.pool_sample_period_ms.unwrap_or(60_000).max(1),
            nodes: self.nodes,
            operations: self.operations,
            actions: self.actions,
            observed: self.observed,
            notes,
        })
    }
}

/// Lines to records, each one bounded and checked.
struct Reader<R> {
    input: R,
    line: usize,
    buf: String,
}

impl<R: BufRead> Reader<R> {
    fn next_record(&mut self) -> Result<Option<(usize, EventRecord)>, LogError> {
        loop {
            self.buf.clear();
            self.line += 1;
            let read = std::io::Read::take(self.input.by_ref(), MAX_LINE_BYTES as u64 + 1)
                .read_line(&mut self.buf)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::InvalidData => LogError::Line {
                        line: self.line,
                        message: "not UTF-8 text".into(),
                    },
                    _ => LogError::Io(e),
                })?;
            if read == 0 {
                return Ok(None);
            }
            if self.buf.len() > MAX_LINE_BYTES {
                return Err(LogError::Line {
                    line: self.line,
                    message: format!("longer than {MAX_LINE_BYTES} bytes"),
                });
            }
            let text = self.buf.trim();
            if text.is_empty() {
                continue;
            }
            let record: EventRecord = serde_json::from_str(text).map_err(|e| LogError::Line {
                line: self.line,
                message: format!("not an event record ({e})"),
            })?;
            return Ok(Some((self.line, record)));
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
