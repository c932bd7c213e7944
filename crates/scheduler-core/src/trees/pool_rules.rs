//! What a pool's ancestors decide for it: which nodes its jobs may run on (their
//! `scheduling_tag_filter`s) and whether its jobs may be preempted. Asked of the
//! configuration, which owns the pools, rather than worked out at each call site.

use ytsched_common::names::TreePoolName;
use ytsched_common::pool_tree::ClusterConfig;
use ytsched_common::tag_filter::TagFilter;

/// Rules a pool inherits from its ancestors: node filters and preemption.
pub(crate) trait PoolRules {
    fn pool_filters(&self, tree: &str, pool: &TreePoolName) -> Vec<&TagFilter>;
    fn preemption_allowed(&self, tree: &str, pool: &TreePoolName, aggressive: bool) -> bool;
}

impl PoolRules for ClusterConfig {
    /// The `scheduling_tag_filter`s of a pool and its ancestors in a tree.
    fn pool_filters(&self, tree: &str, pool: &TreePoolName) -> Vec<&TagFilter> {
        let Some(t) = self.trees.get(tree) else {
            return vec![];
        };
        t.ancestry(pool)
            .into_iter()
            .filter_map(|p| t.pools.get(p)?.config.tag_filter())
            .collect()
    }

    /// Whether every pool above `pool` allows this kind of preemption.
    fn preemption_allowed(&self, tree: &str, pool: &TreePoolName, aggressive: bool) -> bool {
        let Some(t) = self.trees.get(tree) else {
            return false;
        };
        t.ancestry(pool).into_iter().all(|p| {
            let c = t.pools.get(p).map(|x| &x.config);
            let flag = c.and_then(|c| {
                if aggressive {
                    c.allow_aggressive_preemption
                } else {
                    c.allow_regular_preemption
                }
            });
            flag.unwrap_or(true)
        })
    }
}
