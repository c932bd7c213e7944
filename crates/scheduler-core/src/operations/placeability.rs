//! Operations whose jobs can never run: a job that fits no node its operation may use
//! (its trees, pool filters and tag filter) fails the operation at once, naming the
//! resource that is short, instead of leaving it waiting forever.
//!
//! Every operation is checked when it arrives; all of them again only when what the
//! nodes offer changed (`NodeOffer`): a thousand nodes of one size joining one by one
//! cost one pass over the operations, not a thousand (issue 26: with 100,000 operations
//! waiting, each pass held the core for a few hundred ms).

use crate::operations::table::OperationTable;
use crate::trees::pool_rules::PoolRules;
use crate::trees::tree_state::TreeStates;
use crate::Operation;
use crate::{ClusterConfig, Node};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use ytsched_common::resources::ResourceVector;
use ytsched_common::NodeId;
use ytsched_common::OperationId;

/// The limit vectors no other one covers: a request fits one of `limits` exactly when
/// it fits one of these. Nodes of a cluster mostly come in a few sizes, so this is short.
fn maximal_limits(limits: impl Iterator<Item = ResourceVector>) -> Vec<ResourceVector> {
    let mut out: Vec<ResourceVector> = vec![];
    for l in limits {
        if out.iter().any(|m| l.fits_in(m)) {
            continue;
        }
        out.retain(|m| !m.fits_in(&l));
        out.push(l);
    }
    out
}

/// What each tree's nodes offer, as far as placeability can tell them apart: the
/// distinct pairs of limits and tags of its members. Equal offers give every operation
/// the same verdict.
pub(crate) type NodeOffer = BTreeMap<String, BTreeSet<[u64; 5]>>;

/// When operations were last checked for jobs no node can hold.
#[derive(Clone, Debug, Default)]
pub(crate) struct PlaceabilityWatch {
    /// Nodes joined, left or changed since the last check.
    pub(crate) stale: bool,
    /// What the nodes offered at the last full check, by tree; `None`: check
    /// everything at the next chance.
    pub(crate) offer: Option<NodeOffer>,
    /// Full passes over the operations, counted so tests can see them.
    pub(crate) passes: u64,
}
/// What deciding placeability reads, borrowed from the core.
pub(crate) struct Placeability<'a> {
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) trees: &'a TreeStates,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) operations: &'a OperationTable,
}

macro_rules! placeability {
    ($core:expr) => {
        $crate::operations::placeability::Placeability {
            cluster: &$core.cluster,
            trees: &$core.trees,
            nodes: &$core.nodes,
            operations: &$core.operations,
        }
    };
}

pub(crate) use placeability;

impl Placeability<'_> {
    /// What each tree's nodes offer, as kinds of node (limits and tags).
    pub(crate) fn offer(&self) -> NodeOffer {
        self.cluster
            .trees
            .keys()
            .map(|tree| {
                let kinds = self
                    .trees
                    .members(tree, self.nodes)
                    .map(|n| {
                        let l = n.resource_limits;
                        // Deterministic (fixed keys): the same tags give the same digest.
                        let mut tags = std::collections::hash_map::DefaultHasher::new();
                        n.all_tags.hash(&mut tags);
                        [
                            l.cpu.to_bits(),
                            l.memory.to_bits(),
                            l.gpu.to_bits(),
                            l.user_slots.to_bits(),
                            tags.finish(),
                        ]
                    })
                    .collect();
                (tree.to_string(), kinds)
            })
            .collect()
    }

    /// The operations (all, or `only`) with a job no node they may use can hold, each
    /// with why.
    pub(crate) fn unplaceable(&self, only: Option<&OperationId>) -> Vec<(OperationId, String)> {
        // What the nodes an operation may use offer depends only on its tree, pool and
        // tag filter: worked out once per such combination, as the few largest limit
        // vectors (a job fits some node exactly when it fits one of them), not per
        // operation over every node.
        let mut offered: HashMap<(&str, &str, &str), Vec<ResourceVector>> = HashMap::new();
        let mut doomed = Vec::new();
        let candidates: Box<dyn Iterator<Item = &Operation>> = match only {
            Some(id) => Box::new(self.operations.get(id).into_iter()),
            None => Box::new(self.operations.values()),
        };
        for op in candidates.filter(|o| !o.state.is_finished()) {
            let mut limits: Vec<ResourceVector> = vec![];
            for (tree, slot) in &op.trees {
                let key = (tree.as_str(), slot.pool.as_str(), op.tag_filter().as_str());
                let maximal = offered.entry(key).or_insert_with(|| {
                    let pool_filters = self.cluster.pool_filters(tree, &slot.pool);
                    maximal_limits(
                        self.trees
                            .members(tree, self.nodes)
                            .filter(|n| pool_filters.iter().all(|f| f.matches(&n.all_tags)))
                            .filter(|n| op.tag_filter().matches(&n.all_tags))
                            .map(|n| n.resource_limits),
                    )
                });
                limits.extend(maximal.iter().copied());
            }
            if limits.is_empty() {
                continue;
            }
            let largest = limits
                .iter()
                .fold(ResourceVector::ZERO, |a, b| a.component_max(b));
            for (name, spec) in op.waiting_tasks() {
                let need = spec.job_resources();
                if limits.iter().any(|l| need.fits_in(l)) {
                    continue;
                }
                let resource = need
                    .first_excess(&largest)
                    .or_else(|| need.first_excess(&limits[0]))
                    .expect("a job that fits no node exceeds some resource");
                let filter = if op.tag_filter().is_empty() {
                    String::new()
                } else {
                    format!(" matching '{}'", op.tag_filter())
                };
                doomed.push((
                    op.id.clone(),
                    format!(
                        "a job of task '{}' needs {resource} = {} but no node{filter} of pool tree(s) {} has that much (largest node: {resource} = {})",
                        name,
                        need.get(resource),
                        op.tree_names().collect::<Vec<_>>().join(", "),
                        largest.get(resource),
                    ),
                ));
                break;
            }
        }
        doomed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_limits_no_other_covers_are_kept() {
        let v = |cpu, mem| ResourceVector::new(cpu, mem, 0.0, 8.0);
        let kept = maximal_limits(
            [
                v(4.0, 8.0),
                v(4.0, 8.0),
                v(2.0, 4.0),
                v(8.0, 2.0),
                v(8.0, 16.0),
            ]
            .into_iter(),
        );
        assert_eq!(kept, vec![v(8.0, 16.0)]);
        let kept = maximal_limits([v(4.0, 16.0), v(8.0, 2.0), v(2.0, 1.0)].into_iter());
        assert_eq!(kept, vec![v(4.0, 16.0), v(8.0, 2.0)]);
    }
}
