//! Which tree a node is in, as the configuration says: asked by membership, the job
//! lifecycle, nudges and preemption alike.

use ytsched_common::names::TreeName;

/// Which tree a node belongs to, and the timeout its tree sets.
pub(crate) trait NodeTrees {
    fn tree_of(&self, node: &crate::Node) -> Option<&TreeName>;
    fn node_timeout_ms(&self, n: &crate::Node, default: u64) -> u64;
}

impl NodeTrees for crate::ClusterConfig {
    /// The configured tree an online node is in (its name as the configuration holds it).
    fn tree_of(&self, node: &crate::Node) -> Option<&TreeName> {
        let name = node.registered_tree().filter(|_| node.online)?;
        self.tree_name(name).ok()
    }

    /// The `node_heartbeat_timeout` of a node's tree (`default` without one): the
    /// silence after which its jobs run elsewhere.
    fn node_timeout_ms(&self, n: &crate::Node, default: u64) -> u64 {
        self.tree_of(n)
            .and_then(|t| self.trees.get(t))
            .map_or(default, |t| t.config.node_heartbeat_timeout.0)
    }
}
