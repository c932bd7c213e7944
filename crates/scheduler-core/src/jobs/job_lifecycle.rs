//! A job attempt's life inside its operation: started from the waiting queue (or as a
//! speculative copy), running, then finished by its node's result or aborted (preempted
//! or lost jobs go back to waiting). Each step keeps the attempt tally and the tree's
//! usage in step with the job.

use crate::jobs::held_indexes;
use crate::operations::operation::{
    restart_backoff_ms, set_attempt, slot_mut, Job, Operation, ResultEffect, MAX_REQUESTED_RESTARTS,
};
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{AttemptOf, FinishedJob, JobStartSpec, UnixMillis};
use ytsched_common::states::{AbortReason, JobState, OperationState};
use ytsched_common::{JobId, NodeId};

impl Operation {
    /// Starts the next waiting job of `task` on `node` of `tree`; returns what the node
    /// needs to run it.
    pub fn start_job(
        &mut self,
        task: usize,
        node: &NodeId,
        tree: &TreeName,
        now: UnixMillis,
    ) -> JobStartSpec {
        let index = self.tasks[task]
            .waiting
            .pop_front()
            .expect("caller checked a job waits");
        self.launch(task, index, node, tree, now)
    }

    /// Starts a speculative copy of running job `original` on `node` (SPEC 5.8).
    pub fn start_copy(
        &mut self,
        original: &JobId,
        node: &NodeId,
        tree: &TreeName,
        now: UnixMillis,
    ) -> JobStartSpec {
        let (task, index) = {
            let j = &self.jobs[original];
            (j.task, j.index)
        };
        let spec = self.launch(task, index, node, tree, now);
        if let Some(j) = self.jobs.get_mut(original) {
            j.copy = Some(spec.job_id.clone());
        }
        if let Some(c) = self.jobs.get_mut(&spec.job_id) {
            c.copy = Some(original.clone());
            c.speculative = true;
        }
        spec
    }

    /// The running other attempt of a job, if any.
    pub fn running_copy(&self, id: &JobId) -> Option<&Job> {
        let copy = self.jobs.get(id)?.copy.as_ref()?;
        self.jobs.get(copy).filter(|c| c.state == JobState::Running)
    }

    fn launch(
        &mut self,
        task: usize,
        index: u32,
        node: &NodeId,
        tree: &TreeName,
        now: UnixMillis,
    ) -> JobStartSpec {
        let seq = self.next_job_seq;
        let id = self.run_attempt(seq, task, index, node, tree, now);
        self.start_spec(&id).expect("inserted above")
    }

    /// Takes in attempt `seq` that `node` of `tree` runs although nothing recorded it: a
    /// previous scheduler started it and stopped before the store had it (starts are
    /// not stored). It becomes the running attempt of its job when that job still
    /// waits; otherwise the job was given to another attempt, and the caller aborts
    /// this one. Returns whether it was adopted.
    pub fn adopt_as_attempt(
        &mut self,
        seq: u64,
        of: &AttemptOf,
        node: &NodeId,
        tree: &TreeName,
        start_time: UnixMillis,
    ) -> bool {
        let Some((task, at)) = self.adoptable(seq, of, tree) else {
            return false;
        };
        self.tasks[task].waiting.remove(at);
        self.run_attempt(seq, task, of.job_index, node, tree, start_time);
        true
    }

    /// Where attempt `seq` of job `of` would be taken from (its task, and its place in
    /// the task's waiting queue), if it may be adopted: read only, so that the repeated
    /// results of settled attempts, which arrive here too, change nothing.
    pub fn adoptable(&self, seq: u64, of: &AttemptOf, tree: &TreeName) -> Option<(usize, usize)> {
        if self.state != OperationState::Running || self.slot(tree).is_none() {
            return None;
        }
        self.awaited_attempt(seq, of)
    }

    /// Where job `of` waits for attempt `seq` (its task, and its place in the task's
    /// waiting queue), if `seq` is a number an earlier scheduler could have given out (a
    /// revived one numbers on past all of them) and this one has not.
    fn awaited_attempt(&self, seq: u64, of: &AttemptOf) -> Option<(usize, usize)> {
        if seq >= self.next_job_seq || self.attempt_state(seq) != JobState::Waiting {
            return None;
        }
        let task = self
            .spec
            .tasks
            .keys()
            .position(|name| *name == of.task_name)?;
        let at = self.tasks[task]
            .waiting
            .iter()
            .position(|&i| i == of.job_index)?;
        Some((task, at))
    }

    /// Whether attempt `seq` of job `of`, not adoptable now, may be once this operation
    /// runs: it is unfinished but not running (a revived operation held pending behind
    /// its pool's running limit), and the job still waits for that attempt. A node's
    /// result of such an attempt is kept by the node (not acknowledged) until then; were
    /// it acknowledged and dropped, the job would run again although it had completed
    /// (issue 42's campaign, seed 12147801398023703156).
    pub fn may_adopt_later(&self, seq: u64, of: &AttemptOf) -> bool {
        !self.state.is_finished()
            && self.state != OperationState::Running
            && self.awaited_attempt(seq, of).is_some()
    }

    /// Makes attempt `seq` the running attempt of job `index` of `task` on `node`.
    fn run_attempt(
        &mut self,
        seq: u64,
        task: usize,
        index: u32,
        node: &NodeId,
        tree: &TreeName,
        now: UnixMillis,
    ) -> JobId {
        let resources = self.task_spec(task).job_resources();
        let id = self.attempt_id(seq);
        self.reserve_through(seq);
        self.next_job_seq = self.next_job_seq.max(seq + 1);
        set_attempt(&mut self.attempts, &mut self.tally, seq, JobState::Running);
        if let Some(slot) = slot_mut(&mut self.trees, tree) {
            slot.usage += resources;
        }
        let job = Job {
            id: id.clone(),
            task,
            index,
            state: JobState::Running,
            node: node.clone(),
            tree: tree.clone(),
            resources,
            start_time: now,
            seq,
            finish_time: None,
            error: None,
            abort_reason: None,
            statistics: None,
            copy: None,
            speculative: false,
            interrupting: None,
            preparing: false,
        };
        self.jobs.insert(Box::new(job));
        self.changed_jobs.push(id.clone());
        id
    }

    /// What a node needs to run job attempt `id`: made at its start, and again when the
    /// reply that carried the start went unread.
    pub fn start_spec(&self, id: &JobId) -> Option<JobStartSpec> {
        let job = self.jobs.get(id)?;
        let (name, t) = self.spec.tasks.get_indexed(job.task)?;
        Some(JobStartSpec {
            job_id: id.clone(),
            operation_id: self.id.clone(),
            task_name: name.clone(),
            job_index: job.index,
            job_count: t.job_count,
            command: t.command.clone(),
            environment: t.environment.clone(),
            stdin: t.stdin.clone(),
            resources: job.resources,
            disk_space: t.disk_request.map(|d| d.disk_space.0),
            interruption_signal: t.interruption_signal,
            // Stamped for its node as the reply is made (`stamp_starts`).
            start_token: None,
            files: t.file_paths.clone(),
            layers: t.layer_paths.clone(),
        })
    }

    /// Marks a running job aborted; preempted and lost jobs go back to waiting.
    /// Returns the node it ran on.
    pub fn abort_job(
        &mut self,
        id: &JobId,
        reason: AbortReason,
        now: UnixMillis,
    ) -> Option<NodeId> {
        let copy_runs = self.running_copy(id).is_some();
        let job = self.jobs.get_mut(id)?;
        if job.state != JobState::Running {
            return None;
        }
        job.state = JobState::Aborted;
        set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
        job.abort_reason = Some(reason);
        job.finish_time = Some(now);
        if let Some(slot) = slot_mut(&mut self.trees, &job.tree) {
            slot.usage -= job.resources;
        }
        self.changed_jobs.push(id.clone());
        // The index runs again unless the operation is over, the other copy still runs
        // it, or it lost the race to that copy.
        let requeue = !matches!(
            reason,
            AbortReason::OperationAborted | AbortReason::SpeculativeLost
        ) && !copy_runs
            && !self.state.is_finished();
        let (task, index, node) = (job.task, job.index, job.node.clone());
        if requeue && held_indexes::node_may_still_run(reason) {
            self.hold_until_stopped(id, now);
        } else if requeue {
            self.tasks[task].waiting.push_front(index);
        }
        // Stopping the whole operation (or all its jobs) is not losing a member.
        if !matches!(
            reason,
            AbortReason::OperationAborted | AbortReason::SpeculativeLost | AbortReason::Suspended
        ) {
            self.break_gang(id, now);
        }
        Some(node)
    }

    /// Applies a result a node reported for one of this operation's jobs.
    pub fn record_result(
        &mut self,
        node: &NodeId,
        result: &FinishedJob,
        now: UnixMillis,
    ) -> ResultEffect {
        let copy_runs = self.running_copy(&result.job_id).is_some();
        let Some(job) = self.jobs.get_mut(&result.job_id) else {
            return ResultEffect::Ignored;
        };
        if &job.node != node {
            return ResultEffect::Ignored;
        }
        // Output and statistics are kept even for jobs the scheduler already aborted:
        // they are what a person looks at to see what happened.
        if job.statistics.is_none() {
            job.statistics = Some(result.statistics.clone());
            job.start_time = result.start_time;
            self.changed_jobs.push(result.job_id.clone());
        }
        if job.state == JobState::Aborted {
            return self.aborted_attempt_ended(result);
        }
        if job.state != JobState::Running {
            return ResultEffect::Ignored;
        }
        job.finish_time = Some(result.finish_time);
        if let Some(slot) = slot_mut(&mut self.trees, &job.tree) {
            slot.usage -= job.resources;
        }
        self.changed_jobs.push(result.job_id.clone());
        let task = job.task;
        let restart_code = restart_exit_code(&self.spec, task);
        // A gracefully preempted job its node stopped (it checkpointed and exited, or was
        // killed at its timeout) was preempted: it runs again, no failure (one that
        // completed or failed on its own before its node got the word counts as such).
        // So does a job that asked to by its task's `restart_exit_code`.
        let interrupted = job.interrupting.take().is_some();
        match requeue_reason(interrupted, result, restart_code, &job.error) {
            Some((reason, error)) => self.requeue(result, reason, error, copy_runs, now),
            None => self.settle_by_result(result, copy_runs),
        }
    }

    /// A job that runs again, no failure: a graceful preemption ended, or it asked to
    /// by its task's `restart_exit_code` (held for a back-off, within a limit).
    fn requeue(
        &mut self,
        result: &FinishedJob,
        reason: AbortReason,
        error: Option<String>,
        copy_runs: bool,
        now: UnixMillis,
    ) -> ResultEffect {
        let Some(job) = self.jobs.get_mut(&result.job_id) else {
            return ResultEffect::Ignored;
        };
        let task = job.task;
        let restart_code = restart_exit_code(&self.spec, task);
        job.state = JobState::Aborted;
        set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
        job.abort_reason = Some(reason);
        job.error = error;
        let index = job.index;
        if reason == AbortReason::RestartRequested {
            self.requested_restarts += 1;
            if self.requested_restarts > MAX_REQUESTED_RESTARTS {
                return ResultEffect::OperationFailed(format!(
                    "its jobs asked to run again (restart_exit_code {}) {} times, more than the limit of {MAX_REQUESTED_RESTARTS} per operation; last: job {} of task '{}'",
                    restart_code.unwrap_or_default(),
                    self.requested_restarts,
                    result.job_id,
                    self.task_name(task),
                ));
            }
            // Back to waiting after a back-off (`restart_backoff_ms`), behind the
            // task's other waiting jobs.
            if !copy_runs && !self.state.is_finished() {
                let wait = restart_backoff_ms(self.requested_restarts, self.total_job_count());
                self.hold_for_backoff(task, index, now + wait);
            }
            return ResultEffect::Recorded;
        }
        if !copy_runs && !self.state.is_finished() {
            self.tasks[task].waiting.push_front(index);
        }
        ResultEffect::Recorded
    }

    /// A job settled by its own result: completed, failed (within
    /// `max_failed_job_count`), or given up by its node.
    pub(crate) fn settle_by_result(
        &mut self,
        result: &FinishedJob,
        copy_runs: bool,
    ) -> ResultEffect {
        let Some(job) = self.jobs.get_mut(&result.job_id) else {
            return ResultEffect::Ignored;
        };
        let task = job.task;
        match result.state {
            JobState::Completed => {
                job.state = JobState::Completed;
                set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
                self.tasks[task].completed += 1;
                if self.all_jobs_completed() {
                    return ResultEffect::OperationCompleted;
                }
                ResultEffect::Recorded
            }
            JobState::Failed => {
                job.state = JobState::Failed;
                set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
                job.error = result.error.clone();
                self.failed_job_count += 1;
                let index = job.index;
                if self.failed_job_count > self.spec.max_failed_job_count {
                    return ResultEffect::OperationFailed(format!(
                        "{} job(s) failed, more than max_failed_job_count = {}; last error: job {} of task '{}': {}",
                        self.failed_job_count,
                        self.spec.max_failed_job_count,
                        result.job_id,
                        self.task_name(task),
                        result.error.as_deref().unwrap_or("unknown error"),
                    ));
                }
                if !copy_runs {
                    self.tasks[task].waiting.push_back(index);
                }
                ResultEffect::Recorded
            }
            // The node gave the job up on its own (e.g. the agent was stopped): like a
            // lost job, it runs again and is no failure.
            _ => {
                job.state = JobState::Aborted;
                set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
                job.abort_reason = Some(AbortReason::NodeLost);
                job.error = result.error.clone();
                let index = job.index;
                if !copy_runs {
                    self.tasks[task].waiting.push_front(index);
                }
                ResultEffect::Recorded
            }
        }
    }
}

/// Why a job whose result came in runs again instead of settling, with the error it
/// keeps: its node stopped it after a graceful preemption, or it exited with its task's
/// `restart_exit_code`.
fn requeue_reason(
    interrupted: bool,
    result: &FinishedJob,
    restart_code: Option<u8>,
    error: &Option<String>,
) -> Option<(AbortReason, Option<String>)> {
    if interrupted && result.state == JobState::Aborted {
        Some((AbortReason::Preempted, error.clone()))
    } else if result.state == JobState::Failed
        && restart_code.is_some_and(|c| result.statistics.exit_code == Some(c as i32))
    {
        Some((
            AbortReason::RestartRequested,
            Some(format!(
                "exited with its task's restart_exit_code {}: it runs again",
                restart_code.unwrap_or_default()
            )),
        ))
    } else {
        None
    }
}

/// Task `task`'s `restart_exit_code`, read from the spec alone (the caller holds one of
/// the operation's jobs).
fn restart_exit_code(spec: &ytsched_common::spec::VanillaSpec, task: usize) -> Option<u8> {
    spec.tasks
        .get_indexed(task)
        .and_then(|(_, t)| t.restart_exit_code)
}
