//! What the store keeps of operations and jobs, and how a restarted scheduler rebuilds
//! its state from it (SPEC 5.10).
//!
//! The core hands out the records changed by each call (`take_changes`); the driver writes
//! them before it replies to the call, so nothing a node or a user was told is ever
//! missing from the store. On start, `restore` rebuilds operations from the records: jobs
//! recorded as running stay running, and their nodes have a revival window to report them
//! before they count as lost.

use crate::jobs::adoption::StartHold;
use crate::jobs::job_index::JobIndex;
use crate::jobs::job_output::JobOutput;
use crate::nodes::trust::NodeTrust;
use crate::operations::operation::{Job, Operation, TreeSlot};
use crate::operations::operation_life::operation_life;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::{CoreEvent, Node, SchedulerCore};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use ytsched_common::api::HistoryEntry;
use ytsched_common::names::TreeName;
use ytsched_common::names::TreePoolName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::spec::{VanillaSpec, MAX_JOBS_PER_OPERATION};
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

/// An operation without its jobs: changes only when its state does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OperationRecord {
    pub id: OperationId,
    pub user: String,
    pub spec: VanillaSpec,
    pub state: OperationState,
    pub seq: u64,
    pub start_time: UnixMillis,
    pub finish_time: Option<UnixMillis>,
    pub error: Option<String>,
    /// Its pool trees in the order the spec named them.
    pub trees: Vec<(TreeName, TreeSlot)>,
    /// Suspended (SPEC 5.14): a restarted scheduler gives it no new jobs either.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    pub history: Vec<HistoryEntry>,
    /// History entries dropped from the ring (`Operation::record`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history_dropped: u64,
    /// The submitter's idempotency token, so a restarted scheduler still answers a retry.
    #[serde(default)]
    pub idempotency_token: Option<ytsched_common::IdempotencyToken>,
    /// Attempt numbers below this may have been given out without a record
    /// (`attempt_reservation.rs`); 0 in records of versions that stored every start.
    #[serde(default)]
    pub reserved_attempts: u64,
    /// Attempts that settled as it finished, kept here instead of one key each, and the
    /// outputs kept with them (`inline_attempts.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settled_jobs: Vec<Job>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<JobOutput>,
}

impl OperationRecord {
    /// Why this record and its jobs cannot be revived as they are, if they cannot.
    fn check(&self, jobs: &[Job]) -> Result<(), String> {
        self.spec.validate().map_err(|e| format!("spec: {e}"))?;
        if self.trees.is_empty() {
            return Err("it runs in no pool tree".into());
        }
        let counts: Vec<u32> = self.spec.tasks.values().map(|t| t.job_count).collect();
        for j in jobs.iter().chain(&self.settled_jobs) {
            if j.task >= counts.len() || j.index >= counts[j.task] {
                return Err(format!(
                    "job {} is index {} of task {}, but the spec has {} task(s)",
                    j.id,
                    j.index,
                    j.task,
                    counts.len()
                ));
            }
        }
        Ok(())
    }

    /// Makes this record a failed operation that is safe to hold in memory.
    fn fail_as_invalid(&mut self, error: String, now: UnixMillis) {
        self.state = OperationState::Failed;
        self.error = Some(error.clone());
        self.finish_time = Some(now);
        self.settled_jobs.clear();
        self.outputs.clear();
        for task in self.spec.tasks.iter_mut().map(|(_, t)| t) {
            task.job_count = task.job_count.min(MAX_JOBS_PER_OPERATION as u32);
        }
        if self.trees.is_empty() {
            // Queries show an operation's first tree; this one names none. (A tree name
            // cannot hold '<', so the marker is a plain name.)
            self.trees.push((
                TreeName::parse("unknown").expect("a valid name"),
                TreeSlot {
                    pool: TreePoolName::parse("unknown").expect("a valid name"),
                    weight: 1.0,
                    resource_limits: ytsched_common::ResourceVector::ZERO,
                    lightweight: false,
                    usage: ytsched_common::ResourceVector::ZERO,
                },
            ));
        }
    }
}

/// One job attempt.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRecord {
    pub operation: OperationId,
    pub job: Job,
}

#[derive(Clone, Debug)]
pub enum StateChange {
    Operation(Box<OperationRecord>),
    Job(Box<JobRecord>),
    /// Written once, when the attempt's result arrives.
    Output(Box<JobOutput>),
    /// What a node without an approval was trusted with (`nodes/trust.rs`).
    NodeTrust(NodeId, crate::nodes::trust::TrustRecord),
}

impl OperationRecord {
    pub(crate) fn of(op: &Operation) -> Self {
        OperationRecord {
            id: op.id.clone(),
            user: op.user.clone(),
            spec: op.spec.clone(),
            state: op.state,
            seq: op.seq,
            start_time: op.start_time,
            finish_time: op.finish_time,
            error: op.error.clone(),
            trees: op.trees.clone(),
            suspended: op.suspended,
            history: op.history.clone(),
            history_dropped: op.history_dropped,
            idempotency_token: op.idempotency_token.clone(),
            reserved_attempts: op.reserved_attempts,
            settled_jobs: op.inline_jobs().cloned().collect(),
            outputs: op.inline_outputs.clone(),
        }
    }
}

/// What a revival found, for its log line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RevivalSummary {
    pub operations: usize,
    pub unfinished: usize,
    pub running_jobs: usize,
}

impl SchedulerCore {
    /// What nodes were trusted with, as stored (at revival, before any heartbeat).
    pub fn restore_node_trust(
        &mut self,
        records: impl IntoIterator<Item = (NodeId, crate::nodes::trust::TrustRecord)>,
    ) {
        self.trust.restore(records);
    }

    /// Rebuilds operations from the store at start (before any heartbeat). Jobs recorded
    /// as running wait up to `revival_window_ms` for their node to report them.
    pub fn restore(
        &mut self,
        operations: Vec<OperationRecord>,
        jobs: Vec<JobRecord>,
        now: UnixMillis,
        revival_window_ms: u64,
    ) -> RevivalSummary {
        self.operations.recount();
        self.latest_now.observe(now);
        let mut by_op: BTreeMap<OperationId, Vec<Job>> = BTreeMap::new();
        for r in jobs {
            by_op.entry(r.operation).or_default().push(r.job);
        }
        let mut summary = RevivalSummary::default();
        for record in operations {
            let jobs = by_op.remove(&record.id).unwrap_or_default();
            self.revive_operation(record, jobs, now, &mut summary);
        }
        // A crash between a job's last result and its operation's end leaves an
        // operation with every job done: it ends now.
        let done: Vec<OperationId> = self
            .operations
            .values()
            .filter(|o| !o.state.is_finished() && o.all_jobs_completed())
            .map(|o| o.id.clone())
            .collect();
        for id in done {
            operation_life!(self).finish(&id, OperationState::Completed, None, now);
        }
        self.revival_deadline = Some(now + revival_window_ms);
        // Unfinished operations may have jobs running that no record shows: nothing
        // starts until the nodes have said what they run.
        if summary.unfinished > 0 {
            self.start_hold = Some(StartHold::new(now + revival_window_ms));
        }
        self.trees.mark_all_stale();
        summary
    }

    /// One stored operation back in memory: failed if its record no longer validates,
    /// its running jobs waiting for their nodes, its history noting the revival.
    fn revive_operation(
        &mut self,
        mut record: OperationRecord,
        mut jobs: Vec<Job>,
        now: UnixMillis,
        summary: &mut RevivalSummary,
    ) {
        let id = record.id.clone();
        let mut invalid = None;
        if let Err(reason) = record.check(&jobs) {
            // A record that no longer validates (written by an older version, or
            // damaged) fails its operation; reviving it as it is could panic or
            // exhaust memory on every restart.
            let error = format!("failed at revival: its stored record is invalid: {reason}");
            self.outbox.event(CoreEvent::OperationFinished {
                id: id.clone(),
                state: OperationState::Failed,
                error: Some(error.clone()),
            });
            record.fail_as_invalid(error.clone(), now);
            jobs.clear();
            invalid = Some(error);
        }
        let mut op = Operation::restore(record, jobs);
        let mut changed = false;
        if let Some(error) = invalid {
            op.record(now, error);
            changed = true;
        }
        summary.operations += 1;
        self.operations.next_seq = self.operations.next_seq.max(op.seq + 1);
        for (job_id, job) in op.jobs.iter() {
            self.jobs.owned(job_id, &id);
            if job.state == JobState::Running {
                summary.running_jobs += 1;
                self.nodes
                    .entry(job.node.clone())
                    .or_insert_with(|| Node::new(job.node.clone(), None));
                self.jobs.started(job_id, &id, &job.node);
            }
        }
        if !op.state.is_finished() {
            summary.unfinished += 1;
            op.renew_reservation_at_revival();
            let running = op.running_job_ids().count();
            op.record(
                now,
                format!(
                    "revived by a restarted scheduler; {running} running job(s) to re-learn from their nodes"
                ),
            );
            changed = true;
            if op.uses_speculation() {
                self.operations.speculating.insert(id.clone());
            }
            if op.is_gang() {
                self.operations.gangs.insert(id.clone());
            }
        }
        let finished = op.state.is_finished();
        if let Some(token) = &op.idempotency_token {
            self.operations
                .idempotency
                .insert((op.user.clone(), token.clone()), id.clone());
        }
        self.operations.insert(op, changed);
        if finished {
            self.operations.note_finished(&id);
        }
    }

    /// An operation whose record the store could not decode: it answers as failed.
    pub fn note_damaged_operation(&mut self, id: OperationId, reason: String) {
        self.damaged.insert(id, reason);
    }

    /// The key start tokens are made and checked with: the same for every leader of a
    /// cluster (the service keeps it in the store).
    pub fn set_start_key(&mut self, key: crate::StartKey) {
        self.start_key = key;
    }
}

impl Operation {
    /// An operation as the store kept it, with everything derived from its jobs
    /// recomputed: waiting indices, completed and failed counts, usage per tree.
    pub fn restore(record: OperationRecord, jobs: Vec<Job>) -> Self {
        let pending = record.state == OperationState::Pending;
        let placement = crate::operations::operation::Placement {
            trees: record.trees,
            pending,
        };
        let mut op = Operation::new(
            record.id,
            record.user,
            record.spec,
            placement,
            record.seq,
            record.start_time,
        );
        op.state = record.state;
        op.finish_time = record.finish_time;
        op.error = record.error;
        op.history = record.history;
        op.history_dropped = record.history_dropped;
        op.suspended = record.suspended;
        op.idempotency_token = record.idempotency_token;
        op.reserved_attempts = record.reserved_attempts;
        // Inline attempts count like the others, and stay held: that is what marks them
        // inline.
        op.adopt_jobs(
            jobs.into_iter()
                .chain(record.settled_jobs.iter().cloned())
                .collect(),
        );
        for job in record.settled_jobs {
            op.jobs.insert(Box::new(job));
        }
        op.inline_outputs = record.outputs;
        // Nothing here is new to the store.
        op.take_changes();
        op
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Records of everything changed since the last call, operations before their jobs.
/// Settled finished attempts leave memory here, once their last record is taken.
pub(crate) fn take_changes(
    operations: &mut OperationTable,
    jobs: &mut JobIndex,
    outbox: &mut Outbox,
    trust: &mut NodeTrust,
) -> Vec<StateChange> {
    let mut out = Vec::new();
    let mut outputs: BTreeMap<JobId, JobOutput> = outbox
        .take_outputs()
        .into_iter()
        .map(|o| (o.job.clone(), o))
        .collect();
    let jobs_index = jobs;
    let mut reservation_grew = false;
    operations.drain_changed(|op| {
        reservation_grew |= op.take_reservation_grew();
        let id = op.id.clone();
        let (header, mut jobs) = op.take_changes();
        if header {
            // Attempts that settled as it finished go inside its record.
            let inline = op.take_in_settled(&jobs, &mut outputs);
            jobs.retain(|j| !inline.contains(j));
        }
        let mut records = Vec::new();
        for j in &jobs {
            // Running attempts are not stored: their nodes report them (see
            // `adoption.rs`); the record comes with their end.
            if let Some(job) = op.jobs.get(j).filter(|j| j.state != JobState::Running) {
                records.push(StateChange::Job(Box::new(JobRecord {
                    operation: id.clone(),
                    job: job.clone(),
                })));
            }
        }
        // Recorded for good: the store answers for them from now on.
        for j in op.release_settled(&jobs) {
            jobs_index.forget(&j);
        }
        if header {
            out.push(StateChange::Operation(Box::new(OperationRecord::of(op))));
        }
        out.extend(records);
    });
    if reservation_grew {
        outbox.reply_after_store();
    }
    out.extend(
        outputs
            .into_values()
            .map(|o| StateChange::Output(Box::new(o))),
    );
    out.extend(
        trust
            .take_changes()
            .into_iter()
            .map(|(node, record)| StateChange::NodeTrust(node, record)),
    );
    out
}
