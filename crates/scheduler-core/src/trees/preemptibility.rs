//! Which jobs a starving operation may take (SPEC 5.3): each job's preemptibility in
//! its operation, the candidates on a node, and the fewest victims that make room. A
//! read of the operation table, the job index, the configuration and the trees'
//! snapshots, borrowed together for one stage.

use crate::jobs::job_index::JobIndex;
use crate::operations::table::OperationTable;
use crate::trees::pool_rules::PoolRules;
use crate::trees::tree_state::TreeStates;
use crate::ClusterConfig;
use serde::Serialize;
use std::collections::HashMap;
use ytsched_common::pool_config::limits_vector;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::{ResourceVector, EPSILON};
use ytsched_common::states::JobState;
use ytsched_common::{JobId, NodeId, OperationId};

/// Each operation's running jobs by preemptibility class, as one pass computes them.
pub(crate) type JobClasses = HashMap<OperationId, HashMap<JobId, Preemptibility>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Preemptibility {
    NonPreemptible,
    AggressivelyPreemptible,
    Preemptible,
}

/// When a job started: its start time, then its start order in the operation.
pub type StartKey = (UnixMillis, u64);

/// How recent a job is across operations: start time, the operation's submission order,
/// the job's start order. Larger is newer.
pub type JobAge = (UnixMillis, u64, u64);

/// Classes of an operation's running jobs, given its fair share and the tree's
/// thresholds. `jobs` are (id, start key, resources); `total` turns them into shares.
pub fn classify(
    jobs: &mut [(JobId, StartKey, ResourceVector)],
    fair_share: &ResourceVector,
    total: &ResourceVector,
    aggressive_threshold: f64,
    regular_threshold: f64,
    non_preemptible_usage: Option<&ResourceVector>,
) -> Vec<(JobId, Preemptibility)> {
    jobs.sort_by_key(|j| j.1);
    let (r, share) = fair_share.dominant();
    let mut before = ResourceVector::ZERO;
    jobs.iter()
        .map(|(id, _, res)| {
            let used = before.share_of(total).get(r);
            let mut class = if used + EPSILON < share * aggressive_threshold {
                Preemptibility::NonPreemptible
            } else if used + EPSILON < share * regular_threshold {
                Preemptibility::AggressivelyPreemptible
            } else {
                Preemptibility::Preemptible
            };
            before += *res;
            // The prefix below the usage threshold on every resource it sets is kept.
            if let Some(t) = non_preemptible_usage {
                if before.fits_in(t) {
                    class = Preemptibility::NonPreemptible;
                }
            }
            (id.clone(), class)
        })
        .collect()
}

/// A job that may be taken for someone else.
pub(crate) struct Candidate {
    pub(crate) job: JobId,
    pub(crate) operation: OperationId,
    start: JobAge,
    pub(crate) resources: ResourceVector,
}

/// What choosing victims reads, borrowed from the core.
pub(crate) struct Victims<'a> {
    pub(crate) operations: &'a OperationTable,
    pub(crate) jobs: &'a JobIndex,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) trees: &'a TreeStates,
}

/// `Victims` over a core's parts.
macro_rules! victims {
    ($core:expr) => {
        $crate::trees::preemptibility::Victims {
            operations: &$core.operations,
            jobs: &$core.jobs,
            cluster: &$core.cluster,
            trees: &$core.trees,
        }
    };
}
pub(crate) use victims;

impl Victims<'_> {
    /// (preemptible, aggressively preemptible) job counts of an operation in a tree.
    pub fn preemptible_counts(&self, op_id: &OperationId, tree: &str) -> (usize, usize) {
        let classes = self.job_classes(op_id, tree);
        let count = |c| classes.iter().filter(|(_, k)| *k == c).count();
        (
            count(Preemptibility::Preemptible),
            count(Preemptibility::AggressivelyPreemptible),
        )
    }

    /// Classes of the running jobs of `op` in `tree_name` as of that tree's last update.
    pub(crate) fn job_classes(
        &self,
        op_id: &OperationId,
        tree_name: &str,
    ) -> Vec<(JobId, Preemptibility)> {
        let Some(op) = self.operations.get(op_id) else {
            return vec![];
        };
        let (Some(shares), Some(tree), Some(slot)) = (
            self.trees.shares(tree_name),
            self.cluster.trees.get(tree_name),
            op.slot(tree_name),
        ) else {
            return vec![];
        };
        let fs = shares
            .operation_index
            .get(op_id)
            .map(|&i| shares.elements[i].fair_share)
            .unwrap_or_default();
        let mut jobs: Vec<(JobId, StartKey, ResourceVector)> = op
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running && j.tree == tree_name)
            .map(|j| (j.id.clone(), (j.start_time, j.seq), j.resources))
            .collect();
        // The nearest pool that sets a threshold, else the tree's.
        let threshold = tree
            .ancestry(&slot.pool)
            .into_iter()
            .find_map(|p| {
                tree.pools
                    .get(p)?
                    .config
                    .non_preemptible_resource_usage_threshold
                    .clone()
            })
            .or_else(|| tree.config.effective_non_preemptible_threshold())
            .map(|t| limits_vector(Some(&t)));
        classify(
            &mut jobs,
            &fs,
            &shares.total,
            tree.config.aggressive_preemption_satisfaction_threshold,
            tree.config.preemption_satisfaction_threshold,
            threshold.as_ref(),
        )
    }

    /// The fewest of `candidates` (latest started first) whose jobs, once preempted, let
    /// Whether `c` may be taken by a starving operation (as `choose_victims` decides).
    pub(crate) fn may_take(
        &self,
        tree: &str,
        c: &Candidate,
        class: Preemptibility,
        aggressive: bool,
    ) -> bool {
        let Some(pool) = self.operations.get(&c.operation).and_then(|o| o.slot(tree)) else {
            return false;
        };
        match class {
            Preemptibility::Preemptible => {
                self.cluster.preemption_allowed(tree, &pool.pool, false)
                    || (aggressive && self.cluster.preemption_allowed(tree, &pool.pool, true))
            }
            Preemptibility::AggressivelyPreemptible => {
                aggressive && self.cluster.preemption_allowed(tree, &pool.pool, true)
            }
            Preemptibility::NonPreemptible => false,
        }
    }

    /// a job needing `need` start on a node with `free`; `None` when no such set exists.
    pub(crate) fn choose_victims(
        &self,
        tree_name: &str,
        op_id: &OperationId,
        aggressive: bool,
        need: ResourceVector,
        free: ResourceVector,
        candidates: &[(Candidate, Preemptibility)],
    ) -> Option<Vec<(JobId, OperationId)>> {
        let mut available = free;
        let mut victims: Vec<&Candidate> = vec![];
        for (c, class) in candidates {
            if need.fits_in(&available) {
                break;
            }
            if &c.operation == op_id {
                continue;
            }
            if self.may_take(tree_name, c, *class, aggressive) {
                available += c.resources;
                victims.push(c);
            }
        }
        if !need.fits_in(&available) {
            return None;
        }
        // Keep only victims still needed, dropping the oldest chosen first.
        let mut kept: Vec<&Candidate> = victims.clone();
        for v in victims.iter().rev() {
            let without: ResourceVector = free
                + kept
                    .iter()
                    .filter(|k| k.job != v.job)
                    .map(|k| k.resources)
                    .sum();
            if need.fits_in(&without) {
                kept.retain(|k| k.job != v.job);
            }
        }
        Some(
            kept.iter()
                .map(|c| (c.job.clone(), c.operation.clone()))
                .collect(),
        )
    }

    /// Everything on this node that someone else could take, with its class, latest
    /// started first.
    pub(crate) fn preemption_candidates(
        &self,
        node_id: &NodeId,
        tree_name: &str,
    ) -> Vec<(Candidate, Preemptibility)> {
        self.preemption_candidates_with(node_id, tree_name, &mut HashMap::new())
    }

    /// As `preemption_candidates`, with each operation's job classes kept in `by_op`
    /// across calls: a gang looking at every node computes each operation's once.
    pub(crate) fn preemption_candidates_with(
        &self,
        node_id: &NodeId,
        tree_name: &str,
        by_op: &mut JobClasses,
    ) -> Vec<(Candidate, Preemptibility)> {
        let mut candidates: Vec<(Candidate, Preemptibility)> = vec![];
        for job_id in self.jobs.on(node_id) {
            let Some(op_id) = self.jobs.owner(job_id) else {
                continue;
            };
            let classes = by_op
                .entry(op_id.clone())
                .or_insert_with(|| self.job_classes(op_id, tree_name).into_iter().collect());
            let Some(&class) = classes.get(job_id) else {
                continue;
            };
            let owner = &self.operations[op_id];
            let job = &owner.jobs[job_id];
            // Already on its way out (graceful preemption): not taken twice.
            if job.interrupting.is_some() {
                continue;
            }
            candidates.push((
                Candidate {
                    job: job_id.clone(),
                    operation: op_id.clone(),
                    start: (job.start_time, owner.seq, job.seq),
                    resources: job.resources,
                },
                class,
            ));
        }
        candidates.sort_by_key(|c| std::cmp::Reverse(c.0.start));
        // Taking one job of a gang takes the gang (SPEC 5.15): its jobs on this node are
        // one candidate holding all their resources.
        let mut merged: Vec<(Candidate, Preemptibility)> = Vec::with_capacity(candidates.len());
        let mut gang_at: HashMap<OperationId, usize> = HashMap::new();
        for (c, class) in candidates {
            if self.operations[&c.operation].is_gang() {
                if let Some(&i) = gang_at.get(&c.operation) {
                    merged[i].0.resources += c.resources;
                    continue;
                }
                gang_at.insert(c.operation.clone(), merged.len());
            }
            merged.push((c, class));
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(n: usize) -> Vec<(JobId, StartKey, ResourceVector)> {
        (0..n)
            .map(|i| {
                (
                    JobId(format!("j{i:02}").into()),
                    (0, i as u64),
                    ResourceVector::new(1.0, 0.0, 0.0, 1.0),
                )
            })
            .collect()
    }

    #[test]
    fn newest_jobs_beyond_fair_share_are_preemptible() {
        let total = ResourceVector::new(24.0, 0.0, 0.0, 48.0);
        let fs = ResourceVector::new(12.0 / 24.0, 0.0, 0.0, 12.0 / 48.0);
        let mut j = jobs(20);
        j.reverse();
        let classes = classify(&mut j, &fs, &total, 0.2, 1.0, None);
        let count = |c| classes.iter().filter(|(_, k)| *k == c).count();
        // 0.2 × 12 = 2.4 cpus: jobs starting below it (0, 1, 2) are kept.
        assert_eq!(count(Preemptibility::NonPreemptible), 3);
        assert_eq!(count(Preemptibility::AggressivelyPreemptible), 9);
        assert_eq!(count(Preemptibility::Preemptible), 8);
        assert_eq!(classes[0].0, JobId("j00".into()), "oldest first");
        assert_eq!(classes[19].1, Preemptibility::Preemptible);
        // A usage threshold keeps a longer prefix.
        let t = ResourceVector::new(f64::INFINITY, f64::INFINITY, f64::INFINITY, 5.0);
        let classes = classify(&mut j, &fs, &total, 0.2, 1.0, Some(&t));
        let kept = classes
            .iter()
            .filter(|(_, k)| *k == Preemptibility::NonPreemptible)
            .count();
        assert_eq!(kept, 5);
    }
}
