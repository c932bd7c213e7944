//! One operation's bookkeeping: its tasks' waiting job indices, its job attempts, and
//! the running usage that placement reads.
//!
//! A finished attempt leaves memory once its last record is taken for the store and
//! nothing more is expected of it (its node reported it, or the node is lost): the store
//! (then the archive) has it, and the operation keeps only its state, one byte per
//! attempt, for counts and `list-jobs` filters. Memory per finished job is that byte,
//! whatever the operation's size.

pub use super::job::Job;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use ytsched_common::api::HistoryEntry;
use ytsched_common::names::TreeName;
use ytsched_common::names::TreePoolName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::{TaskSpec, VanillaSpec};
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::tag_filter::TagFilter;
use ytsched_common::{JobId, NodeId, OperationId};

/// Restarts by `restart_exit_code` one operation may ask for: a job that always exits
/// with it would otherwise run again forever, each attempt a record and events that
/// every user's history shares the store and the event log with.
pub const MAX_REQUESTED_RESTARTS: u32 = 1000;

/// How long a job that asked to run again waits first: 100 ms, doubling with each round
/// of restarts the operation's jobs asked for (restarts per job), up to a minute. A job
/// that restarts once (a checkpoint) barely waits; one that always does backs off.
pub fn restart_backoff_ms(requested_restarts: u32, job_count: u64) -> u64 {
    let rounds = (requested_restarts as u64).saturating_sub(1) / job_count.max(1);
    (100u64 << rounds.min(10)).min(60_000)
}

/// History entries an operation keeps (its submission and the latest): a user may
/// change her operation as often as her rate allows, and each change is a line, so an
/// unbounded history would grow its record past what the store takes.
pub const MAX_HISTORY_ENTRIES: usize = 64;
/// Bytes of one history entry kept (a longer one is cut, saying how long it was).
pub const MAX_HISTORY_EVENT_BYTES: usize = 1024;

/// One task's progress. Its name and spec are the operation's spec's
/// (`Operation::task_spec`): a copy in each task was about 250 bytes of every operation.
#[derive(Clone, Debug)]
pub struct Task {
    /// Job indices not yet running, in the order they will start.
    pub waiting: VecDeque<u32>,
    pub completed: u32,
}

/// How an operation runs in one of its pool trees (SPEC 5.9): its pool there (after
/// ephemeral pool resolution), weight and limits (spec, then per-tree overrides), and
/// the usage of its jobs on that tree's nodes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TreeSlot {
    pub pool: TreePoolName,
    pub weight: f64,
    pub resource_limits: ResourceVector,
    /// Runs in a FIFO pool with lightweight operations enabled: not counted against
    /// running-operation limits.
    pub lightweight: bool,
    /// Derived from the running jobs: not stored.
    #[serde(skip)]
    pub usage: ResourceVector,
}

/// Where and how an admitted operation runs, decided by admission.
#[derive(Clone, Debug)]
pub struct Placement {
    /// One slot per pool tree, in the order the spec named the trees.
    pub trees: Vec<(TreeName, TreeSlot)>,
    pub pending: bool,
}

#[derive(Clone, Debug)]
pub struct Operation {
    pub id: OperationId,
    pub user: String,
    /// The pool trees it runs in, in the order the spec named them (one or two, so a
    /// list beats a map).
    pub trees: Vec<(TreeName, TreeSlot)>,
    pub max_share_ratio: f64,
    pub spec: VanillaSpec,
    pub state: OperationState,
    pub seq: u64,
    pub start_time: UnixMillis,
    pub finish_time: Option<UnixMillis>,
    pub error: Option<String>,
    pub tasks: Vec<Task>,
    /// The attempts held in memory: running ones, finished ones not yet settled (see the
    /// module comment), and settled ones kept in the operation's record
    /// (`inline_attempts.rs`).
    pub jobs: super::job_map::JobMap,
    /// The state of every attempt by its sequence number (`Waiting`: not recorded).
    pub(crate) attempts: Vec<JobState>,
    /// Attempts per state, kept with `attempts`.
    pub(crate) tally: AttemptTally,
    pub failed_job_count: u32,
    /// Jobs that asked to run again by their task's `restart_exit_code`, since this
    /// scheduler took the operation (held to `MAX_REQUESTED_RESTARTS`).
    pub requested_restarts: u32,
    /// Indexes held back from waiting: a restart back-off, or an aborted attempt its node
    /// has not yet reported ended (`held_indexes.rs`); the core's tick and the node's
    /// report put them back to waiting.
    pub(crate) held: Vec<crate::jobs::hold::HeldIndex>,
    /// `suspend_operation` (SPEC 5.14): it keeps its place and running jobs but is given
    /// no new ones, and it wants no more than it uses.
    pub suspended: bool,
    /// A bounded ring (`record`): the submission, then the latest entries.
    pub history: Vec<HistoryEntry>,
    /// Entries dropped from the ring, counted rather than kept.
    pub history_dropped: u64,
    /// The submitter's token for this submission, if it sent one (see
    /// `start_operation_as`).
    pub idempotency_token: Option<ytsched_common::IdempotencyToken>,
    pub(crate) next_job_seq: u64,
    /// Attempt numbers below this are reserved in the store (`attempt_reservation.rs`).
    pub(crate) reserved_attempts: u64,
    /// The reservation grew and is not yet taken for the store.
    pub(crate) reservation_grew: bool,
    /// What changed since the store last took the changes: the operation's own fields,
    /// and which jobs.
    header_changed: bool,
    pub(crate) changed_jobs: Vec<JobId>,
    /// Outputs kept in the operation's own record (`inline_attempts.rs`).
    pub(crate) inline_outputs: Vec<crate::jobs::job_output::JobOutput>,
    /// Gang members `break_gang` aborted whose nodes the core has yet to hear of.
    pub(crate) gang_lost: Vec<(JobId, NodeId)>,
    /// Why a gang waits whole, as its last placement attempt found (`gang.rs`).
    pub gang_shortfall: Option<Box<crate::operations::gang_shortfall::GangShortfall>>,
}

/// How many attempts are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttemptTally {
    pub running: u64,
    pub completed: u64,
    pub failed: u64,
    pub aborted: u64,
}

impl AttemptTally {
    fn count(&mut self, state: JobState) -> Option<&mut u64> {
        match state {
            JobState::Running | JobState::Preparing => Some(&mut self.running),
            JobState::Completed => Some(&mut self.completed),
            JobState::Failed => Some(&mut self.failed),
            JobState::Aborted => Some(&mut self.aborted),
            JobState::Waiting => None,
        }
    }
}

/// Sets attempt `seq`'s state, keeping the tally (fields, not the operation, so that a
/// job can be borrowed alongside).
pub(crate) fn set_attempt(
    attempts: &mut Vec<JobState>,
    tally: &mut AttemptTally,
    seq: u64,
    state: JobState,
) {
    let Ok(seq) = usize::try_from(seq) else {
        return;
    };
    if attempts.len() <= seq {
        attempts.resize(seq + 1, JobState::Waiting);
    }
    if let Some(n) = tally.count(attempts[seq]) {
        *n -= 1;
    }
    attempts[seq] = state;
    if let Some(n) = tally.count(state) {
        *n += 1;
    }
}

/// An operation's slot in `tree`, taking only the slots (not the whole operation), so
/// that its jobs and tasks can be borrowed alongside.
pub(crate) fn slot_mut<'a>(
    trees: &'a mut [(TreeName, TreeSlot)],
    tree: &str,
) -> Option<&'a mut TreeSlot> {
    trees.iter_mut().find(|(t, _)| t == tree).map(|(_, s)| s)
}

/// What a job result did to its operation.
#[derive(Debug, PartialEq, Eq)]
pub enum ResultEffect {
    /// The job was not running here (duplicate or stale result): nothing changed.
    Ignored,
    Recorded,
    OperationCompleted,
    /// Too many failed jobs; carries the error for the operation.
    OperationFailed(String),
}

impl Operation {
    pub(crate) fn task_names(&self) -> Vec<String> {
        self.spec.tasks.keys().cloned().collect()
    }

    /// A new operation, running in the trees and pools of `placement`.
    pub fn new(
        id: OperationId,
        user: String,
        spec: VanillaSpec,
        placement: Placement,
        seq: u64,
        now: UnixMillis,
    ) -> Self {
        let tasks = spec
            .tasks
            .values()
            .map(|t| Task {
                waiting: (0..t.job_count).collect(),
                completed: 0,
            })
            .collect();
        let first_reservation = Self::first_reservation(spec.total_job_count());
        Self {
            id,
            user,
            trees: placement.trees,
            max_share_ratio: spec.max_share_ratio.unwrap_or(1.0),
            spec,
            state: if placement.pending {
                OperationState::Pending
            } else {
                OperationState::Running
            },
            seq,
            start_time: now,
            finish_time: None,
            error: None,
            tasks,
            jobs: Default::default(),
            attempts: Vec::new(),
            tally: AttemptTally::default(),
            failed_job_count: 0,
            requested_restarts: 0,
            held: Vec::new(),
            suspended: false,
            history_dropped: 0,
            history: vec![HistoryEntry {
                time: now,
                event: if placement.pending {
                    "submitted; pending until its pool may run another operation".into()
                } else {
                    "submitted; running".into()
                },
            }],
            idempotency_token: None,
            next_job_seq: 0,
            reserved_attempts: first_reservation,
            reservation_grew: false,
            header_changed: true,
            changed_jobs: vec![],
            inline_outputs: vec![],
            gang_lost: vec![],
            gang_shortfall: None,
        }
    }

    /// Takes in jobs restored from the store and recomputes what derives from them:
    /// waiting indices, completed and failed counts, usage per tree, the next job number.
    pub(crate) fn adopt_jobs(&mut self, jobs: Vec<Job>) {
        // Per task: indices completed, and indices taken (completed or running).
        let mut done = vec![std::collections::BTreeSet::new(); self.tasks.len()];
        let mut taken = done.clone();
        for job in jobs {
            self.next_job_seq = self.next_job_seq.max(job.seq + 1);
            set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
            match job.state {
                JobState::Running => {
                    if let Some(slot) = slot_mut(&mut self.trees, &job.tree) {
                        slot.usage += job.resources;
                    }
                    taken[job.task].insert(job.index);
                }
                JobState::Completed => {
                    done[job.task].insert(job.index);
                    taken[job.task].insert(job.index);
                }
                JobState::Failed => self.failed_job_count += 1,
                _ => {}
            }
            if !job.settled() {
                self.jobs.insert(Box::new(job));
            }
        }
        let finished = self.state.is_finished();
        let counts = self.spec.tasks.values().map(|t| t.job_count);
        for ((i, task), count) in self.tasks.iter_mut().enumerate().zip(counts) {
            task.completed = done[i].len() as u32;
            task.waiting = if finished {
                VecDeque::new()
            } else {
                (0..count).filter(|x| !taken[i].contains(x)).collect()
            };
        }
    }

    /// Whether a task of it has `job_speculation_timeout` (SPEC 5.8): only such
    /// operations are looked at by the speculative stage.
    pub fn uses_speculation(&self) -> bool {
        self.spec
            .tasks
            .values()
            .any(|t| t.job_speculation_timeout.is_some())
    }

    pub fn all_jobs_completed(&self) -> bool {
        self.with_specs()
            .all(|(t, spec)| t.completed == spec.job_count)
    }

    /// A pending operation got its running slot.
    pub fn promote(&mut self, now: UnixMillis) {
        self.state = OperationState::Running;
        self.record(now, "running".into());
    }

    /// Adds a history line (and marks the operation for the store).
    pub fn record(&mut self, now: UnixMillis, event: String) {
        let event = cut(event, MAX_HISTORY_EVENT_BYTES);
        if self.history.len() >= MAX_HISTORY_ENTRIES {
            // The submission stays first; the oldest after it goes, counted.
            self.history.remove(1);
            self.history_dropped += 1;
        }
        self.history.push(HistoryEntry { time: now, event });
        self.header_changed = true;
    }

    pub(crate) fn mark_header_changed(&mut self) {
        self.header_changed = true;
    }

    /// Takes what changed since the last call: whether the operation's own fields did,
    /// and the jobs that did (each once).
    pub fn take_changes(&mut self) -> (bool, Vec<JobId>) {
        let mut jobs = std::mem::take(&mut self.changed_jobs);
        jobs.sort();
        jobs.dedup();
        (std::mem::take(&mut self.header_changed), jobs)
    }

    pub fn waiting_job_count(&self) -> u64 {
        self.tasks.iter().map(|t| t.waiting.len() as u64).sum()
    }

    pub fn total_job_count(&self) -> u64 {
        self.spec.total_job_count()
    }

    /// How many attempts it has made (their sequence numbers are `0..` this).
    pub fn attempt_count(&self) -> u64 {
        self.next_job_seq
    }

    /// The state of attempt `seq`, held in memory or not (`Waiting`: none recorded).
    pub fn attempt_state(&self, seq: u64) -> JobState {
        usize::try_from(seq)
            .ok()
            .and_then(|s| self.attempts.get(s).copied())
            .unwrap_or(JobState::Waiting)
    }

    /// The id of attempt `seq`.
    pub fn attempt_id(&self, seq: u64) -> JobId {
        JobId::attempt(&self.id, seq)
    }

    /// The sequence number of one of its attempts' ids (`None`: not one of its ids).
    pub fn attempt_seq(&self, job: &JobId) -> Option<u64> {
        let seq = job.attempt_seq(&self.id)?;
        (self.attempt_state(seq) != JobState::Waiting).then_some(seq)
    }

    pub fn tally(&self) -> AttemptTally {
        self.tally
    }

    /// Lets go of the settled ones among `ids` (their last records were just taken for
    /// the store); returns them.
    pub fn release_settled(&mut self, ids: &[JobId]) -> Vec<JobId> {
        let mut released = Vec::new();
        for id in ids {
            if self.jobs.get(id).is_some_and(|j| j.settled()) {
                self.jobs.remove(id);
                released.push(id.clone());
            }
        }
        released
    }

    pub fn running_job_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs
            .values()
            .filter(|j| j.state == JobState::Running)
            .map(|j| j.id.clone())
    }

    /// The first tree the spec named: where the operation is listed by default.
    /// Nodes its jobs may run on (`scheduling_tag_filter`; empty: any node of its
    /// trees). Kept once, parsed, in its spec.
    pub fn tag_filter(&self) -> &TagFilter {
        TagFilter::or_any(self.spec.scheduling_tag_filter.as_ref())
    }

    pub fn main_tree(&self) -> &TreeName {
        &self.trees[0].0
    }

    /// Its pool in the first tree.
    pub fn main_pool(&self) -> &TreePoolName {
        &self.trees[0].1.pool
    }

    pub fn slot(&self, tree: &str) -> Option<&TreeSlot> {
        self.trees.iter().find(|(t, _)| t == tree).map(|(_, s)| s)
    }

    pub fn tree_names(&self) -> impl Iterator<Item = &str> {
        self.trees.iter().map(|(t, _)| t.as_str())
    }

    /// What all its running jobs hold, over every tree.
    pub fn usage(&self) -> ResourceVector {
        self.trees.iter().map(|(_, s)| s.usage).sum()
    }

    /// What it still wants in `tree`: what runs there plus every waiting job, which any
    /// of its trees may take (YTsaurus gives each tree the whole pending demand). A
    /// suspended operation wants only what it uses, so it holds no share it cannot use.
    pub fn demand_in(&self, tree: &str) -> ResourceVector {
        let usage = self.slot(tree).map_or(ResourceVector::ZERO, |s| s.usage);
        if self.suspended {
            return usage;
        }
        usage
            + self
                .with_specs()
                .map(|(t, spec)| spec.job_resources().scale(t.waiting.len() as f64))
                .sum()
    }

    /// Why it may not be given jobs now (SPEC 6.2 `unschedulable_reason`; `None`: it may).
    pub fn unschedulable_reason(&self) -> Option<&'static str> {
        if self.suspended {
            Some("suspended")
        } else if self.state == OperationState::Pending {
            Some("pending")
        } else if self.gang_shortfall.is_some() && self.gang_waits_whole() {
            Some("gang_does_not_fit")
        } else {
            None
        }
    }

    /// What it may still start in `tree` under its own limits there.
    pub fn room_in(&self, tree: &str) -> ResourceVector {
        self.slot(tree)
            .map_or(ResourceVector::ZERO, |s| s.resource_limits - s.usage)
    }

    /// The component-wise minimum of its waiting jobs' resources: no waiting job of it
    /// fits where this does not. A suspended operation has none to give a node, which
    /// keeps it out of every placement index.
    pub fn smallest_waiting(&self) -> Option<ResourceVector> {
        // A gang's jobs start only together (`gang_placement.rs`), never one per node.
        if self.suspended || self.spec.is_gang {
            return None;
        }
        self.with_specs()
            .filter(|(t, _)| !t.waiting.is_empty())
            .map(|(_, spec)| spec.job_resources())
            .reduce(|a, b| a.component_min(&b))
    }

    /// The first task with a waiting job that fits into `free`.
    pub fn next_fitting_task(&self, free: &ResourceVector) -> Option<usize> {
        if self.suspended || self.spec.is_gang {
            return None;
        }
        self.with_specs()
            .position(|(t, spec)| !t.waiting.is_empty() && spec.job_resources().fits_in(free))
    }

    /// Task `i`'s spec, held once, in the operation's spec. (Tasks are made from the
    /// spec's and a spec's tasks never change, so every task index has one.)
    pub fn task_spec(&self, i: usize) -> &TaskSpec {
        self.spec
            .tasks
            .get_indexed(i)
            .map(|(_, t)| t)
            .expect("a task of the spec")
    }

    /// Task `i`'s name.
    pub fn task_name(&self, i: usize) -> &str {
        self.spec
            .tasks
            .get_indexed(i)
            .map_or("", |(n, _)| n.as_str())
    }

    /// Each task's progress with its spec.
    pub fn with_specs(&self) -> impl Iterator<Item = (&Task, &TaskSpec)> {
        self.tasks.iter().zip(self.spec.tasks.values())
    }

    /// The name and spec of each task with a job waiting.
    pub fn waiting_tasks(&self) -> impl Iterator<Item = (&String, &TaskSpec)> {
        self.tasks
            .iter()
            .zip(self.spec.tasks.iter())
            .filter(|(t, _)| !t.waiting.is_empty())
            .map(|(_, named)| named)
    }

    pub fn finish(&mut self, state: OperationState, error: Option<String>, now: UnixMillis) {
        self.state = state;
        self.finish_time = Some(now);
        self.record(
            now,
            match &error {
                Some(e) => format!("{state}: {e}"),
                None => state.to_string(),
            },
        );
        self.error = error;
        for t in &mut self.tasks {
            t.waiting.clear();
        }
    }
}

/// `s` cut to at most `max` bytes (on a character boundary), saying how long it was.
fn cut(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let len = s.len();
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str(&format!("… ({len} bytes)"));
    s
}
