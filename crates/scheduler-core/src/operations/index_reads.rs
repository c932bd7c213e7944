//! Reads of the operation table's incremental indexes (`core_indexes.rs`): each is
//! brought up to date with the operations changed since, then read; debug builds check
//! it against a scan of every operation.

use crate::operations::operation_counts::Contribution;
use crate::operations::operation_counts::{PoolCountMap, PoolCounts};
use crate::operations::table::OperationTable;
use crate::operations::waiting_jobs::waiting_of;
use crate::ClusterConfig;
use ytsched_common::names::TreePoolName;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// Operation counts per pool, kept in the table's index.
impl OperationTable {
    fn contributions_of(&self, cluster: &ClusterConfig, id: &OperationId) -> Vec<Contribution> {
        let Some(op) = self.get(id) else {
            return vec![];
        };
        if op.state.is_finished() {
            return vec![];
        }
        op.trees
            .iter()
            .filter_map(|(tree_name, slot)| {
                let tree = cluster.tree(tree_name).ok()?;
                Some(Contribution {
                    tree: tree_name.clone(),
                    chain: tree.lineage(&slot.pool).into_iter().cloned().collect(),
                    running: op.state == OperationState::Running,
                    lightweight: slot.lightweight,
                })
            })
            .collect()
    }

    /// Counts of unfinished operations per pool of `tree` (each counts in its pool and
    /// every ancestor, `<Root>` included).
    pub(crate) fn pool_counts(&self, cluster: &ClusterConfig, tree_name: &str) -> PoolCountMap {
        let mut counts = self.read_counts(cluster, tree_name, |c| c.cloned().unwrap_or_default());
        counts.retain(|_, c| *c != PoolCounts::default());
        debug_assert_eq!(
            counts,
            self.pool_counts_by_scan(cluster, tree_name),
            "operation counts of tree {tree_name}"
        );
        counts
    }

    /// Counts of one pool of `tree` (its subtree's unfinished operations), without
    /// copying the tree's map.
    pub(crate) fn pool_count(
        &self,
        cluster: &ClusterConfig,
        tree_name: &str,
        pool: &TreePoolName,
    ) -> PoolCounts {
        let counts = self.read_counts(cluster, tree_name, |c| {
            c.and_then(|c| c.get(pool)).copied().unwrap_or_default()
        });
        debug_assert_eq!(
            Some(&counts).filter(|c| **c != PoolCounts::default()),
            self.pool_counts_by_scan(cluster, tree_name).get(pool),
            "operation counts of pool {pool} of tree {tree_name}"
        );
        counts
    }

    /// Reads a tree's counts from the index, brought up to date first.
    fn read_counts<R>(
        &self,
        cluster: &ClusterConfig,
        tree_name: &str,
        read: impl FnOnce(Option<&PoolCountMap>) -> R,
    ) -> R {
        let mut indexes = self.indexes();
        let by_tree = indexes.counts.refresh(
            || self.keys().cloned().collect(),
            |id| self.contributions_of(cluster, id),
        );
        read(by_tree.0.get(tree_name))
    }

    /// The same counts the slow way: what the index must always agree with.
    fn pool_counts_by_scan(&self, cluster: &ClusterConfig, tree_name: &str) -> PoolCountMap {
        let mut counts = PoolCountMap::new();
        let Ok(tree) = cluster.tree(tree_name) else {
            return counts;
        };
        for op in self.values().filter(|o| !o.state.is_finished()) {
            let Some(slot) = op.slot(tree_name) else {
                continue;
            };
            for p in tree.lineage(&slot.pool) {
                let c = counts.entry(p.clone()).or_default();
                c.total += 1;
                if op.state == OperationState::Running {
                    if slot.lightweight {
                        c.lightweight_running += 1;
                    } else {
                        c.running += 1;
                    }
                }
            }
        }
        counts
    }
}

impl OperationTable {
    fn pending_part(&self, id: &OperationId) -> Vec<(u64, OperationId)> {
        self.get(id)
            .filter(|o| o.state == OperationState::Pending)
            .map(|o| vec![(o.seq, o.id.clone())])
            .unwrap_or_default()
    }

    /// Pending operations, oldest submission first.
    pub(crate) fn pending_operations(&self) -> Vec<OperationId> {
        let mut indexes = self.indexes();
        let pending: Vec<OperationId> = indexes
            .pending
            .refresh(
                || self.keys().cloned().collect(),
                |id| self.pending_part(id),
            )
            .0
            .iter()
            .map(|(_, id)| id.clone())
            .collect();
        drop(indexes);
        #[cfg(debug_assertions)]
        {
            let mut scan: Vec<(u64, OperationId)> = self
                .values()
                .filter(|o| o.state == OperationState::Pending)
                .map(|o| (o.seq, o.id.clone()))
                .collect();
            scan.sort();
            let scan: Vec<OperationId> = scan.into_iter().map(|(_, id)| id).collect();
            assert_eq!(pending, scan, "pending queue");
        }
        pending
    }
}

impl OperationTable {
    /// The per-resource minimum over every job waiting in `tree` (None: none waits).
    pub(crate) fn smallest_waiting_job(&self, tree: &str) -> Option<ResourceVector> {
        let mut indexes = self.indexes();
        let smallest = indexes
            .waiting
            .refresh(
                || self.keys().cloned().collect(),
                |id| waiting_of(self.get(id)),
            )
            .smallest(tree);
        drop(indexes);
        debug_assert_eq!(
            smallest,
            self.smallest_waiting_by_scan(tree),
            "smallest waiting job in tree {tree}"
        );
        smallest
    }

    fn smallest_waiting_by_scan(&self, tree: &str) -> Option<ResourceVector> {
        self.keys()
            .flat_map(|id| waiting_of(self.get(id)))
            .filter(|(t, _)| t == tree)
            .map(|(_, v)| v)
            .reduce(|a, b| a.map(|r, x| x.min(b.get(r))))
    }
}
