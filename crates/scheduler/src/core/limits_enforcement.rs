//! Taking back what no longer fits: a node whose limits were lowered below its jobs
//! (`resource_overcommit`), and operations or pools over `resource_limits` lowered at
//! run time (`resource_limits_violation`). Newest jobs on the node go first.

use super::preemption::JobAge;
use super::SchedulerCore;
use std::collections::{HashMap, HashSet};
use ytsched_common::pool_config::limits_vector;
use ytsched_common::protocol::{JobAbort, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{AbortReason, OperationState};
use ytsched_common::{JobId, NodeId, OperationId};

impl SchedulerCore {
    /// Aborts what must go from this node now; returns the aborts and what they held.
    pub(super) fn enforce_limits(
        &mut self,
        node_id: &NodeId,
        now: UnixMillis,
    ) -> (Vec<JobAbort>, ResourceVector) {
        let mut aborts = Vec::new();
        let mut freed = ResourceVector::ZERO;
        let Some(node) = self.nodes.get(node_id) else {
            return (aborts, freed);
        };
        let Some(tree_name) = self.node_tree(node).map(String::from) else {
            return (aborts, freed);
        };
        let node_limits = node.resource_limits;
        // Newest first.
        let mut jobs: Vec<(JobAge, JobId, OperationId, ResourceVector)> = node
            .jobs
            .iter()
            .filter_map(|j| {
                let op_id = self.job_owner.get(j)?;
                let op = self.operations.get(op_id)?;
                let job = op.jobs.get(j)?;
                Some((
                    (job.start_time, op.seq, job.seq),
                    j.clone(),
                    op_id.clone(),
                    job.resources,
                ))
            })
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.0));
        let mut used: ResourceVector = jobs.iter().map(|j| j.3).sum();
        let mut taken = HashSet::new();
        for (_, job, owner, res) in &jobs {
            if used.fits_in(&node_limits) {
                break;
            }
            let message = format!("node {node_id} now offers {node_limits} and its jobs use more");
            self.abort_running_job(
                node_id,
                owner,
                job,
                AbortReason::ResourceOvercommit,
                &message,
                now,
            );
            aborts.push(JobAbort {
                job_id: job.clone(),
                reason: AbortReason::ResourceOvercommit,
                message,
            });
            used -= *res;
            freed += *res;
            taken.insert(job.clone());
        }
        // Pools with limits, and their current usage.
        let Some(tree) = self.cluster.trees.get(&tree_name) else {
            return (aborts, freed);
        };
        let limited: HashMap<String, ResourceVector> = tree
            .pools
            .iter()
            .filter_map(|(name, p)| {
                p.config
                    .resource_limits
                    .as_ref()
                    .map(|l| (name.clone(), limits_vector(Some(l))))
            })
            .collect();
        let mut pool_usage: HashMap<String, ResourceVector> = HashMap::new();
        if !limited.is_empty() {
            for op in self
                .operations
                .values()
                .filter(|o| o.tree == tree_name && o.state == OperationState::Running)
            {
                for p in tree.ancestry(&op.pool) {
                    if limited.contains_key(p) {
                        *pool_usage.entry(p.to_string()).or_default() += op.usage;
                    }
                }
            }
        }
        for (_, job, owner, res) in &jobs {
            if taken.contains(job) {
                continue;
            }
            let op = &self.operations[owner];
            let over = if !op.usage.fits_in(&op.resource_limits) {
                Some(format!("operation {owner}"))
            } else {
                self.cluster.trees[&tree_name]
                    .ancestry(&op.pool)
                    .into_iter()
                    .find(|p| {
                        limited.get(*p).is_some_and(|l| {
                            !pool_usage.get(*p).copied().unwrap_or_default().fits_in(l)
                        })
                    })
                    .map(|p| format!("pool {p}"))
            };
            let Some(what) = over else { continue };
            let ancestry: Vec<String> = self.cluster.trees[&tree_name]
                .ancestry(&op.pool)
                .into_iter()
                .map(String::from)
                .collect();
            let message = format!("{what} is over its resource_limits");
            self.abort_running_job(
                node_id,
                owner,
                job,
                AbortReason::ResourceLimitsViolation,
                &message,
                now,
            );
            for p in ancestry {
                if let Some(u) = pool_usage.get_mut(&p) {
                    *u -= *res;
                }
            }
            aborts.push(JobAbort {
                job_id: job.clone(),
                reason: AbortReason::ResourceLimitsViolation,
                message,
            });
            freed += *res;
        }
        (aborts, freed)
    }
}
