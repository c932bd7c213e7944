//! Speculative jobs (SPEC 5.8): a job of a task with `job_speculation_timeout` that has
//! run longer than that gets one copy on a different node. The first attempt to finish
//! wins; the other is aborted as `speculative_lost`, and the job counts once.
//!
//! The stage that starts the copies is the job lifecycle's: a copy starts as any job does.

use crate::jobs::job_life::JobLife;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::trees::preemptibility::JobAge;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::{JobId, OperationId};

impl JobLife<'_> {
    /// Starts copies of overdue jobs of this node's tree that run on other nodes, while
    /// they fit the node's free resources and their operation's limits.
    pub(crate) fn speculative_stage(&mut self, ctx: &mut HeartbeatContext) {
        let (node_id, now) = (&ctx.node.clone(), ctx.now);
        let mut free = ctx.free();
        let Some(node) = self.nodes.get(node_id) else {
            return;
        };
        let Some(tree) = self.cluster.tree_of(node).cloned() else {
            return;
        };
        let tree = &tree;
        let node_tags = &node.all_tags;
        let mut overdue: Vec<(JobAge, OperationId, JobId, ResourceVector)> = vec![];
        for op in self
            .operations
            .speculating
            .iter()
            .filter_map(|id| self.operations.get(id))
        {
            if op.slot(tree).is_none()
                || op.state != OperationState::Running
                || op.suspended
                || !op.tag_filter().matches(node_tags)
            {
                continue;
            }
            for job in op.jobs.values() {
                let Some(timeout) = op.task_spec(job.task).job_speculation_timeout else {
                    continue;
                };
                if job.state == JobState::Running
                    && !job.speculative
                    && job.copy.is_none()
                    && &job.node != node_id
                    && now.saturating_sub(job.start_time) >= timeout.0
                {
                    overdue.push((
                        (job.start_time, op.seq, job.seq),
                        op.id.clone(),
                        job.id.clone(),
                        job.resources,
                    ));
                }
            }
        }
        overdue.sort_by_key(|o| o.0);
        for (_, op_id, job_id, resources) in overdue {
            let room = self.operations[&op_id].room_in(tree);
            if !resources.fits_in(&free) || !resources.fits_in(&room) {
                continue;
            }
            let spec = (self.operations.edit(&op_id).expect("listed"))
                .start_copy(&job_id, node_id, tree, now);
            free -= resources;
            self.record_start(node_id, &op_id, &spec);
            ctx.start(spec);
        }
    }
}
