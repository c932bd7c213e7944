//! Which pool tree each node belongs to (SPEC 5.9): the one tree whose `nodes_filter`
//! its tags (system, configured and admin-set user tags) satisfy. A node matching
//! several trees is refused, one matching none is idle. Membership is re-evaluated the
//! moment tags or filters change; jobs a node still runs for a tree it left are aborted
//! at its next heartbeat (nudged to come at once), where the abort travels to the agent.

use crate::outbox::Outbox;
use crate::{ClusterConfig, ConfigError, CoreEvent, Node, PoolTree};
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use ytsched_common::names::TreeName;

use ytsched_common::protocol::Registration;

use ytsched_common::NodeId;

/// Trees whose filter a tag set satisfies, in name order.
pub fn matching_trees<'a>(cluster: &'a ClusterConfig, tags: &BTreeSet<String>) -> Vec<&'a str> {
    cluster
        .trees
        .iter()
        .filter(|(_, t)| t.config.nodes_filter.matches(tags))
        .map(|(name, _)| name.as_str())
        .collect()
}

/// What registration a node with these tags gets.
pub fn registration_for(cluster: &ClusterConfig, tags: &BTreeSet<String>) -> Registration {
    match matching_trees(cluster, tags).as_slice() {
        [] => Registration::Idle,
        [one] => Registration::Registered {
            tree: one.to_string(),
        },
        [init @ .., last] => Registration::Refused {
            error: format!(
                "node matches pool trees {} and {last}; exactly one tree's nodes_filter may match a node",
                init.join(", ")
            ),
        },
    }
}

/// Every tag of a node: what the agent reports plus what an admin set.
pub fn all_tags(node: &Node, cluster: &ClusterConfig) -> BTreeSet<String> {
    node.system_tags
        .iter()
        .chain(&node.tags)
        .chain(cluster.user_tags(&node.id))
        .cloned()
        .collect()
}

/// Recomputes one node's tags and registration; the caller recomputes tree totals.
pub(crate) fn reassign_node(
    nodes: &mut BTreeMap<NodeId, Node>,
    cluster: &ClusterConfig,
    outbox: &mut Outbox,
    id: &NodeId,
) {
    let Some(node) = nodes.get(id) else {
        return;
    };
    let tags = all_tags(node, cluster);
    let registration = registration_for(cluster, &tags);
    let maintenance = cluster.maintenance(id);
    let node = nodes.get_mut(id).expect("looked up above");
    node.all_tags = tags;
    if node.maintenance != maintenance {
        node.maintenance = maintenance;
        // A banned node gives its jobs back at its next heartbeat.
        node.evict_pending |= maintenance.banned;
        if node.online {
            outbox.event(CoreEvent::NodeMaintenance {
                id: id.clone(),
                maintenance,
            });
            // That heartbeat now.
            outbox.nudge(id.clone());
        }
    }
    let node = nodes.get_mut(id).expect("looked up above");
    if node.registration == registration {
        return;
    }
    node.registration = registration.clone();
    node.evict_pending = true;
    if node.online {
        outbox.event(CoreEvent::NodeMembership {
            id: id.clone(),
            registration,
        });
        outbox.nudge(id.clone());
    }
}

/// Why a job runs again elsewhere when its node left the tree it ran in.
pub(crate) fn tree_change_message(
    nodes: &BTreeMap<NodeId, Node>,
    node_id: &NodeId,
    tree: &str,
    current: Option<&str>,
) -> String {
    match current {
        Some(now_in) => format!(
            "node {node_id} moved from pool tree '{tree}' to '{now_in}'; the job runs again in '{tree}'"
        ),
        None => format!(
            "node {node_id} left pool tree '{tree}' ({}); the job runs again in '{tree}'",
            match &nodes[node_id].registration {
                Registration::Refused { error } => error.clone(),
                _ => "no tree's nodes_filter matches it".to_string(),
            }
        ),
    }
}

/// Nodes that match more than one tree under `next` but did not match exactly those
/// trees before: a filter change that would do this is refused.
pub(crate) fn new_overlaps(
    nodes: &BTreeMap<NodeId, Node>,
    current: &ClusterConfig,
    next: &ClusterConfig,
) -> Vec<String> {
    nodes
        .values()
        .filter_map(|n| {
            let now_matches = matching_trees(next, &all_tags(n, next));
            if now_matches.len() < 2 {
                return None;
            }
            let before = matching_trees(current, &all_tags(n, current));
            (before != now_matches)
                .then(|| format!("{} (would match {})", n.id, now_matches.join(" and ")))
        })
        .collect()
}

/// Refuses a tree (new or changed) whose `nodes_filter` would make current nodes match
/// several trees; names the nodes.
pub(crate) fn refuse_overlaps(
    nodes: &BTreeMap<NodeId, Node>,
    cluster: &ClusterConfig,
    name: &TreeName,
    tree: &PoolTree,
) -> Result<(), ConfigError> {
    let mut next = cluster.clone();
    next.trees.insert(name.clone(), tree.clone());
    let overlaps = new_overlaps(nodes, cluster, &next);
    if overlaps.is_empty() {
        return Ok(());
    }
    Err(ConfigError::invalid(format!(
        "nodes_filter '{}' of pool tree '{name}' would put nodes in several pool trees: {}",
        tree.config.nodes_filter,
        overlaps.join(", ")
    )))
}
