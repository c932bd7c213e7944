//! Gang operations (SPEC 5.15): all jobs run together or none does. Placement never
//! starts a gang job on its own (`smallest_waiting` and `next_fitting_task` hide a
//! gang's jobs from per-node placement); `gang_placement.rs` places a whole gang in one
//! decision. Here: what keeps a running gang whole. When one member ends other than
//! completed, every other running member is aborted as `gang_member_lost` and goes back
//! to waiting with it, so the gang waits again as a whole. The member's own failure
//! counts once; completed members stay completed.

use crate::operations::operation::{set_attempt, slot_mut, Operation};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::states::{AbortReason, JobState};
use ytsched_common::{JobId, NodeId};

impl Operation {
    /// Every waiting job of the gang: (task, resources), largest first.
    pub(crate) fn gang_jobs(&self) -> Vec<(usize, ytsched_common::resources::ResourceVector)> {
        let op = self;
        let mut jobs: Vec<(usize, ytsched_common::resources::ResourceVector)> = op
            .with_specs()
            .enumerate()
            .flat_map(|(i, (t, spec))| {
                std::iter::repeat_n((i, spec.job_resources()), t.waiting.len())
            })
            .collect();
        jobs.sort_by(|a, b| {
            let key = |r: &ytsched_common::resources::ResourceVector| (r.cpu, r.memory, r.gpu);
            key(&b.1)
                .partial_cmp(&key(&a.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        jobs
    }

    pub fn is_gang(&self) -> bool {
        self.spec.is_gang
    }

    /// After member `lost` ended other than completed (failed, aborted, preempted,
    /// lost), aborts every other running member as `gang_member_lost`; they wait again.
    /// Their nodes are told by the core (`gang_lost`). Returns how many were aborted.
    pub(crate) fn break_gang(&mut self, lost: &JobId, now: UnixMillis) -> usize {
        if !self.spec.is_gang || self.state.is_finished() {
            return 0;
        }
        let Some(reason) = self.jobs.get(lost).and_then(|j| match j.state {
            JobState::Failed => Some("failed".to_string()),
            JobState::Aborted => Some(
                j.abort_reason
                    .map_or("aborted".to_string(), |r| r.name().to_string()),
            ),
            _ => None,
        }) else {
            return 0;
        };
        // Members on the same lost node were lost with it (fenced, never heard): they
        // are `node_lost` too, and wait again at once, as the node cannot still run them.
        let lost_node = self
            .jobs
            .get(lost)
            .filter(|j| j.abort_reason == Some(AbortReason::NodeLost))
            .map(|j| j.node.clone());
        let others: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running && &j.id != lost)
            .map(|j| j.id.clone())
            .collect();
        for id in &others {
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            job.state = JobState::Aborted;
            set_attempt(&mut self.attempts, &mut self.tally, job.seq, job.state);
            let with_node = lost_node.as_ref() == Some(&job.node);
            job.abort_reason = Some(if with_node {
                AbortReason::NodeLost
            } else {
                AbortReason::GangMemberLost
            });
            job.error = Some(format!(
                "gang member {lost} ended ({reason}): the gang restarts whole"
            ));
            job.finish_time = Some(now);
            job.interrupting = None;
            if let Some(slot) = slot_mut(&mut self.trees, &job.tree) {
                slot.usage -= job.resources;
            }
            let (node, task, index) = (job.node.clone(), job.task, job.index);
            if with_node {
                self.tasks[task].waiting.push_front(index);
            } else {
                // Its node may still run it: the index waits for the node's word.
                self.hold_until_stopped(id, now);
            }
            self.changed_jobs.push(id.clone());
            self.gang_lost.push((id.clone(), node));
        }
        if !others.is_empty() {
            self.record(
                now,
                format!(
                    "gang member {lost} ended ({reason}): {} running member(s) aborted; the gang waits to start whole again",
                    others.len()
                ),
            );
        }
        others.len()
    }

    /// The members `break_gang` aborted since the last call, with their nodes.
    pub(crate) fn take_gang_lost(&mut self) -> Vec<(JobId, NodeId)> {
        std::mem::take(&mut self.gang_lost)
    }

    /// A gang none of whose unfinished jobs runs or is held back (an aborted member whose
    /// node has not said it stopped, a back-off): what gang placement may start.
    pub fn gang_waits_whole(&self) -> bool {
        self.spec.is_gang
            && self.tally.running == 0
            && self.held.is_empty()
            && self.tasks.iter().any(|t| !t.waiting.is_empty())
    }
}
