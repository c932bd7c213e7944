//! Taking back what no longer fits: a node whose limits were lowered below its jobs
//! (`resource_overcommit`), and operations or pools over `resource_limits` lowered at
//! run time (`resource_limits_violation`). Newest jobs on the node go first.

use crate::jobs::job_index::JobIndex;
use crate::jobs::job_life::job_life;
use crate::jobs::job_life::JobLife;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::table::OperationTable;
use crate::trees::fair_share::{ElementKind, TreeShares};
use crate::trees::preemptibility::JobAge;
use crate::trees::preemption::Preemptor;
use std::collections::HashSet;
use ytsched_common::pool_config::limits_vector;
use ytsched_common::protocol::{JobAbort, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::AbortReason;
use ytsched_common::{JobId, NodeId, OperationId};

/// A job on the node being checked: its age, id, operation and resources.
pub(crate) type NodeJob = (JobAge, JobId, OperationId, ResourceVector);

/// What one check took back from a node.
#[derive(Default)]
pub(crate) struct Taken {
    pub(crate) aborts: Vec<JobAbort>,
    pub(crate) freed: ResourceVector,
    pub(crate) jobs: HashSet<JobId>,
}

/// Absolute `resource_limits` of every element of `shares` (`None` where unset): pools'
/// from the tree, operations' from `operation_limits`.
fn element_limits(
    tree: Option<&crate::PoolTree>,
    shares: &TreeShares,
    operation_limits: impl Fn(&OperationId) -> Option<ResourceVector>,
) -> Vec<Option<ResourceVector>> {
    shares
        .elements
        .iter()
        .map(|e| match &e.kind {
            ElementKind::Pool { name, .. } => tree
                .and_then(|t| t.pools.get(name))
                .and_then(|p| p.config.resource_limits.as_ref())
                .map(|l| limits_vector(Some(l))),
            ElementKind::Operation { id } => operation_limits(id).filter(|l| {
                l.cpu.is_finite()
                    || l.memory.is_finite()
                    || l.gpu.is_finite()
                    || l.user_slots.is_finite()
            }),
        })
        .collect()
}

/// Whether some element of a fresh update uses more than its `resource_limits`, from
/// the update's own inputs: computed with the update, away from the core's lock.
pub(crate) fn exceeds_limits(
    tree: &crate::PoolTree,
    shares: &TreeShares,
    inputs: &[crate::trees::fair_share::OperationInput],
) -> bool {
    let by_id: std::collections::HashMap<&OperationId, &ResourceVector> =
        inputs.iter().map(|i| (&i.id, &i.resource_limits)).collect();
    let limits = element_limits(Some(tree), shares, |id| by_id.get(id).map(|l| **l));
    shares.elements.iter().zip(&limits).any(|(e, l)| {
        l.is_some_and(|l| {
            !e.usage_share
                .map(|r, v| v * shares.total.get(r))
                .fits_in(&l)
        })
    })
}

/// What a job's life takes back from an overcommitted node.
impl JobLife<'_> {
    /// The node's limits were lowered below what its jobs use: newest go first.
    pub(crate) fn take_back_overcommit(
        &mut self,
        node_id: &NodeId,
        jobs: &[NodeJob],
        now: UnixMillis,
        taken: &mut Taken,
    ) {
        let Some(node_limits) = self.nodes.get(node_id).map(|n| n.resource_limits) else {
            return;
        };
        let mut used: ResourceVector = jobs.iter().map(|j| j.3).sum();
        for (_, job, owner, res) in jobs {
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
            taken.aborts.push(JobAbort {
                job_id: job.clone(),
                reason: AbortReason::ResourceOvercommit,
                message,
                graceful_timeout_ms: None,
            });
            used -= *res;
            taken.freed += *res;
            taken.jobs.insert(job.clone());
        }
    }
}

pub(crate) fn jobs_newest_first(
    index: &JobIndex,
    operations: &OperationTable,
    node_id: &NodeId,
) -> Vec<NodeJob> {
    let mut jobs: Vec<NodeJob> = index
        .on(node_id)
        .filter_map(|j| {
            let op_id = index.owner(j)?;
            let op = operations.get(op_id)?;
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
    jobs
}

/// Absolute `resource_limits` of every element of an update (`None` where unset):
/// what lowered limits are enforced against. (`max_share_ratio` is not: nodes leaving
/// would make it preempt.)
pub(crate) fn limits_of_elements(
    cluster: &crate::ClusterConfig,
    operations: &OperationTable,
    tree_name: &str,
    shares: &TreeShares,
) -> Vec<Option<ResourceVector>> {
    element_limits(cluster.trees.get(tree_name), shares, |id| {
        operations
            .get(id)
            .and_then(|o| o.slot(tree_name))
            .map(|s| s.resource_limits)
    })
}

impl Preemptor<'_> {
    /// Aborts what must go from this node now, given what its jobs hold (`running`);
    /// says whether it took any back.
    pub(crate) fn enforce_limits(
        &mut self,
        ctx: &mut HeartbeatContext,
        running: ResourceVector,
    ) -> bool {
        let (node_id, now) = (&ctx.node, ctx.now);
        let mut taken = Taken::default();
        let Some(node) = self.nodes.get(node_id) else {
            return false;
        };
        let Some(tree_name) = self.cluster.tree_of(node).cloned() else {
            return false;
        };
        // Almost every heartbeat has nothing to give back: only a node whose limits were
        // lowered below what its jobs hold, or a tree over a lowered limit, has. Its jobs
        // are listed and sorted only then.
        let over_limit = self
            .trees
            .get(&tree_name)
            .and_then(|t| t.snapshot.as_ref())
            .is_some_and(|s| s.over_limit);
        if !over_limit && running.fits_in(&node.resource_limits) {
            return false;
        }
        let jobs = jobs_newest_first(self.jobs, self.operations, node_id);
        job_life!(self).take_back_overcommit(node_id, &jobs, now, &mut taken);
        self.take_back_over_limits(node_id, &tree_name, &jobs, now, &mut taken);
        // Jobs being killed hold their resources until the node reports them gone.
        let Taken { aborts, freed, .. } = taken;
        let took_back = !aborts.is_empty();
        for a in aborts {
            ctx.abort(a);
        }
        ctx.abort_dying_resources(freed);
        took_back
    }

    /// An operation or pool whose `resource_limits` were lowered below its usage: its
    /// newest jobs on this node go until it fits.
    fn take_back_over_limits(
        &mut self,
        node_id: &NodeId,
        tree_name: &str,
        jobs: &[NodeJob],
        now: UnixMillis,
        taken: &mut Taken,
    ) {
        // Placement never goes over a limit, so only a limit lowered since can be
        // exceeded; the fair share update (brought up to date by the caller) says
        // whether any is.
        let over_limit = self
            .trees
            .get(tree_name)
            .and_then(|t| t.snapshot.as_ref())
            .is_some_and(|s| s.over_limit);
        if !over_limit {
            return;
        }
        self.trees.refresh_live(self.operations);
        let Some(shares) = self.trees.shares(tree_name) else {
            return;
        };
        let limits = limits_of_elements(self.cluster, self.operations, tree_name, &shares);
        let mut usage = self
            .trees
            .live_usage(self.operations, tree_name, &shares)
            .into_owned();
        for (_, job, owner, res) in jobs {
            if taken.jobs.contains(job) {
                continue;
            }
            let Some(&leaf) = shares.operation_index.get(owner) else {
                continue;
            };
            let path = shares.path(leaf);
            let Some(&over) = path
                .iter()
                .find(|&&i| limits[i].is_some_and(|l| !usage[i].fits_in(&l)))
            else {
                continue;
            };
            let e = &shares.elements[over];
            let what = match &e.kind {
                ElementKind::Operation { id } => format!("operation {id}"),
                ElementKind::Pool { name, .. } => format!("pool {name}"),
            };
            let message = format!("{what} is over its resource_limits");
            job_life!(self).abort_running_job(
                node_id,
                owner,
                job,
                AbortReason::ResourceLimitsViolation,
                &message,
                now,
            );
            for &i in &path {
                usage[i] -= *res;
            }
            taken.aborts.push(JobAbort {
                job_id: job.clone(),
                reason: AbortReason::ResourceLimitsViolation,
                message,
                graceful_timeout_ms: None,
            });
            taken.freed += *res;
        }
    }
}
