//! Job indexes that may not run yet although no attempt runs them: one that asked to run
//! again waits out its back-off, and one whose attempt the scheduler aborted on a live
//! node waits until that node says the attempt has ended.
//!
//! The second hold is what keeps a job from running twice at once (issue 42's campaign
//! found it): a preempted job, or a gang member aborted because another member failed,
//! still runs on its node until the abort reaches the node and its process is killed.
//! Were its index put back to waiting at once, it could start on another node in that
//! window. The hold ends when the node reports the attempt ended (any result), or once
//! the tree's `node_heartbeat_timeout` has passed since the abort or the node's last
//! report of it as running: a node cut off that long has fenced its jobs (SPEC 5.11),
//! and a node heard that long without a word of it no longer runs it.

use crate::jobs::hold::{HeldIndex, Hold};
use crate::operations::operation::{Operation, ResultEffect};
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{FinishedJob, UnixMillis};
use ytsched_common::states::{AbortReason, JobState};

/// Whether an abort for `reason` leaves the attempt on a node that may still run it.
/// A lost node's jobs were fenced before the node was declared lost.
pub(crate) fn node_may_still_run(reason: AbortReason) -> bool {
    reason != AbortReason::NodeLost
}

impl Operation {
    /// Holds the index of aborted attempt `id` until its node reports it ended (or the
    /// tree's node timeout from `now`, or from the node's last report of it).
    pub(crate) fn hold_until_stopped(&mut self, id: &ytsched_common::JobId, now: UnixMillis) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        self.held.push(HeldIndex {
            task: job.task,
            index: job.index,
            hold: Hold::Stopping {
                seq: job.seq,
                tree: job.tree.clone(),
                node: job.node.clone(),
                since: now,
            },
        });
    }

    /// Whether an attempt aborted on `node` still holds its index.
    pub(crate) fn holds_on(&self, node: &ytsched_common::NodeId) -> bool {
        self.held
            .iter()
            .any(|h| matches!(&h.hold, Hold::Stopping { node: n, .. } if n == node))
    }

    /// Node `node` is lost while attempts aborted on it were still unconfirmed: the
    /// node never said how they ended, and it may have completed them before the abort
    /// reached it (issue 42's campaign, seed 5476110688920267643, saw both members of a
    /// gang exit 0 on a node cut off just before one was preempted). Their fate is
    /// unknown, as a lost job's is, so each is recorded `node_lost`, not by the reason
    /// of the abort that never landed; its index waits again at once, as the node has
    /// fenced its jobs by now. Returns the attempts so relabelled.
    pub(crate) fn lose_holds_on(
        &mut self,
        node: &ytsched_common::NodeId,
    ) -> Vec<ytsched_common::JobId> {
        let lost: Vec<HeldIndex> = {
            let (lost, kept) = std::mem::take(&mut self.held)
                .into_iter()
                .partition(|h| matches!(&h.hold, Hold::Stopping { node: n, .. } if n == node));
            self.held = kept;
            lost
        };
        let mut ids = Vec::new();
        for h in &lost {
            let Hold::Stopping { seq, .. } = h.hold else {
                continue;
            };
            let Some(job) = self.jobs.values_mut().find(|j| j.seq == seq) else {
                continue;
            };
            let was = job.abort_reason.map_or("aborted", |r| r.name());
            job.error = Some(format!(
                "{was}, but its node was lost before it confirmed the abort: how it ended is unknown; {}",
                job.error.as_deref().unwrap_or("no error")
            ));
            job.abort_reason = Some(AbortReason::NodeLost);
            ids.push(job.id.clone());
            self.changed_jobs.push(job.id.clone());
            if !self.state.is_finished() {
                self.wait_again(h);
            }
        }
        ids
    }

    /// Holds `index` of `task` for a restart back-off, until `at`.
    pub(crate) fn hold_for_backoff(&mut self, task: usize, index: u32, at: UnixMillis) {
        self.held.push(HeldIndex {
            task,
            index,
            hold: Hold::Backoff(at),
        });
    }

    /// Whether any held index is free to wait again by `now`, or the operation ended.
    pub(crate) fn holds_due(
        &self,
        now: UnixMillis,
        node_timeout: &dyn Fn(&TreeName) -> u64,
    ) -> bool {
        self.state.is_finished() || self.held.iter().any(|h| h.due(now, node_timeout))
    }

    /// Puts the indexes whose hold is over by `now` back to waiting: a stopped job's at
    /// the front, as an abort puts it, a back-off's behind the task's other waiting jobs.
    /// Returns whether any went.
    pub(crate) fn release_held(
        &mut self,
        now: UnixMillis,
        node_timeout: &dyn Fn(&TreeName) -> u64,
    ) -> bool {
        if self.state.is_finished() {
            self.held.clear();
            return false;
        }
        let (due, kept): (Vec<HeldIndex>, Vec<HeldIndex>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.due(now, node_timeout));
        self.held = kept;
        for h in &due {
            self.wait_again(h);
        }
        !due.is_empty()
    }

    fn wait_again(&mut self, h: &HeldIndex) {
        let waiting = &mut self.tasks[h.task].waiting;
        match h.hold {
            Hold::Backoff(_) => waiting.push_back(h.index),
            Hold::Stopping { .. } => waiting.push_front(h.index),
        }
    }

    /// A node reports the end of an attempt the scheduler had already aborted. Its hold,
    /// if any, is over. A job that completed (it ended before the abort reached its node,
    /// since a node reports a job it stopped as aborted) counts as completed, as SPEC 5.15
    /// keeps completed gang jobs, unless its index already runs again or completed
    /// meanwhile (then the attempt stays aborted).
    pub(crate) fn aborted_attempt_ended(&mut self, result: &FinishedJob) -> ResultEffect {
        let Some(job) = self.jobs.get(&result.job_id) else {
            return ResultEffect::Ignored;
        };
        let (seq, task, index) = (job.seq, job.task, job.index);
        let held = self
            .held
            .iter()
            .position(|h| matches!(h.hold, Hold::Stopping { seq: s, .. } if s == seq))
            .map(|at| self.held.remove(at));
        if self.state.is_finished() {
            return ResultEffect::Ignored;
        }
        if result.state != JobState::Completed {
            if let Some(h) = held {
                self.wait_again(&h);
            }
            return ResultEffect::Ignored;
        }
        if held.is_none() {
            // Released already: taken only while the index still waits.
            let waiting = &mut self.tasks[task].waiting;
            let Some(at) = waiting.iter().position(|&i| i == index) else {
                return ResultEffect::Ignored;
            };
            waiting.remove(at);
        }
        let Some(job) = self.jobs.get_mut(&result.job_id) else {
            return ResultEffect::Ignored;
        };
        job.abort_reason = None;
        job.error = None;
        job.finish_time = Some(result.finish_time);
        self.changed_jobs.push(result.job_id.clone());
        self.settle_by_result(result, false)
    }

    /// Its node still reports aborted attempt `id` as running: the hold on its index,
    /// if any, counts its node timeout from `now`. A node that is heard reporting the
    /// attempt has not fenced it, so the timeout may only run from its last report (a
    /// hold that ran from the abort let a job whose completion was delayed on a lossy
    /// link run again: issue 42's campaign, seed 42). Returns whether it was held.
    pub(crate) fn renew_hold(&mut self, id: &ytsched_common::JobId, now: UnixMillis) -> bool {
        let Some(seq) = self.jobs.get(id).map(|j| j.seq) else {
            return false;
        };
        let held = self.held.iter_mut().find_map(|h| match &mut h.hold {
            Hold::Stopping { seq: s, since, .. } if *s == seq => Some(since),
            _ => None,
        });
        match held {
            Some(since) => {
                *since = now.max(*since);
                true
            }
            None => false,
        }
    }

    /// Whether aborted attempt `id` left its index waiting (not held, not running again):
    /// read only, so a node that keeps reporting the attempt changes nothing by itself.
    pub(crate) fn index_waits_after_abort(&self, id: &ytsched_common::JobId) -> bool {
        let Some(job) = self.jobs.get(id) else {
            return false;
        };
        job.state == JobState::Aborted
            && !self.state.is_finished()
            && self.tasks[job.task].waiting.contains(&job.index)
    }

    /// Its node still runs aborted attempt `id` (a revived scheduler did not know of the
    /// hold, or the node outlived its timeout still killing it): its index is held again
    /// until the node says the attempt ended.
    pub(crate) fn hold_again(&mut self, id: &ytsched_common::JobId, now: UnixMillis) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if job.state != JobState::Aborted || self.state.is_finished() {
            return;
        }
        let waiting = &mut self.tasks[job.task].waiting;
        if let Some(at) = waiting.iter().position(|&i| i == job.index) {
            waiting.remove(at);
            self.hold_until_stopped(id, now);
        }
    }

    /// What the held indexes wait for, for `explain`: aborted attempts' nodes, then
    /// restart back-offs.
    pub(crate) fn held_reasons(&self) -> Vec<ytsched_common::explain::Reason> {
        use ytsched_common::explain::Reason;
        let mut nodes = std::collections::BTreeSet::new();
        let (mut stopping, mut backing_off, mut until) = (0, 0, u64::MAX);
        for h in &self.held {
            match &h.hold {
                Hold::Stopping { node, .. } => {
                    stopping += 1;
                    nodes.insert(node.to_string());
                }
                Hold::Backoff(at) => {
                    backing_off += 1;
                    until = until.min(*at);
                }
            }
        }
        let mut out = Vec::new();
        if stopping > 0 {
            out.push(Reason::AbortedAttemptsStopping {
                jobs: stopping,
                nodes: nodes.into_iter().collect(),
            });
        }
        if backing_off > 0 {
            out.push(Reason::RestartBackoff {
                jobs: backing_off,
                until,
            });
        }
        out
    }
}
