//! Which job runs where: fill a node's free resources, always serving the least
//! satisfied operation next (SPEC 5.2). Satisfaction here is the dominant usage share
//! per unit of weight; the fair share engine replaces it with usage / fair share.

use super::{CoreEvent, SchedulerCore};
use ytsched_common::protocol::{JobStartSpec, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::{NodeId, OperationId};

impl SchedulerCore {
    /// Sum of the limits of schedulable nodes: what shares are fractions of.
    pub fn cluster_resources(&self) -> ResourceVector {
        self.cluster_resources
    }

    pub(super) fn recompute_cluster_resources(&mut self) {
        self.cluster_resources = self
            .nodes
            .values()
            .filter(|n| n.is_schedulable())
            .map(|n| n.resource_limits)
            .sum();
    }

    pub(super) fn fill_node(
        &mut self,
        node_id: &NodeId,
        dying: ResourceVector,
        now: UnixMillis,
    ) -> Vec<JobStartSpec> {
        let node = &self.nodes[node_id];
        if !node.is_schedulable() {
            return vec![];
        }
        let used: ResourceVector = node
            .jobs
            .iter()
            .filter_map(|j| {
                let op = self.job_owner.get(j)?;
                Some(self.operations.get(op)?.jobs.get(j)?.resources)
            })
            .sum();
        let mut free = node.resource_limits - used - dying;
        let total = self.cluster_resources;
        let mut starts = Vec::new();
        while let Some((op_id, task)) = self.least_satisfied_fitting(&free, &total) {
            let op = self
                .operations
                .get_mut(&op_id)
                .expect("chosen from the map");
            let spec = op.start_job(task, node_id, now);
            free -= spec.resources;
            self.events.push(CoreEvent::JobStarted {
                id: spec.job_id.clone(),
                operation: op_id.clone(),
                node: node_id.clone(),
            });
            self.job_owner.insert(spec.job_id.clone(), op_id);
            self.nodes
                .get_mut(node_id)
                .expect("node exists")
                .jobs
                .insert(spec.job_id.clone());
            starts.push(spec);
        }
        starts
    }

    fn least_satisfied_fitting(
        &self,
        free: &ResourceVector,
        total: &ResourceVector,
    ) -> Option<(OperationId, usize)> {
        self.operations
            .values()
            .filter(|op| op.state == OperationState::Running)
            .filter_map(|op| {
                let task = op.next_fitting_task(free)?;
                let satisfaction = op.usage.share_of(total).dominant().1 / op.weight();
                Some((satisfaction, op.seq, op.id.clone(), task))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, _, id, task)| (id, task))
    }

    /// An operation whose job fits no node of a non-empty tree would wait forever:
    /// fail it now with the resource that is short.
    pub(super) fn fail_unplaceable(&mut self, now: UnixMillis) {
        let limits: Vec<ResourceVector> = self
            .nodes
            .values()
            .filter(|n| n.is_schedulable())
            .map(|n| n.resource_limits)
            .collect();
        if limits.is_empty() {
            return;
        }
        let largest = limits
            .iter()
            .fold(ResourceVector::ZERO, |a, b| a.component_max(b));
        let mut doomed = Vec::new();
        for op in self.operations.values().filter(|o| !o.state.is_finished()) {
            for task in op.tasks.iter().filter(|t| !t.waiting.is_empty()) {
                let need = task.spec.job_resources();
                if limits.iter().any(|l| need.fits_in(l)) {
                    continue;
                }
                let resource = need
                    .first_excess(&largest)
                    .or_else(|| need.first_excess(&limits[0]))
                    .expect("a job that fits no node exceeds some resource");
                doomed.push((
                    op.id.clone(),
                    format!(
                        "a job of task '{}' needs {resource} = {} but no node has that much (largest node: {resource} = {})",
                        task.name,
                        need.get(resource),
                        largest.get(resource),
                    ),
                ));
                break;
            }
        }
        for (id, error) in doomed {
            self.finish_operation(&id, OperationState::Failed, Some(error), now);
        }
    }
}
