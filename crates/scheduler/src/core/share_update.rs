//! When fair share is recomputed: every `fair_share_update_period` of each tree, and
//! right away (before the next placement) when the tree's operations, configuration or
//! nodes changed, so a new operation does not wait a whole period for its first job.

use super::fair_share::{self, OperationInput, UpdateContext};
use super::{PoolTree, SchedulerCore};
use std::collections::HashMap;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// One tree's fair-share update, prepared from the core and computed away from it: the
/// heavy part (`ytsched_fair_share::compute`) needs nothing of the core.
pub struct ShareUpdate {
    tree_name: String,
    tree: PoolTree,
    total: ResourceVector,
    inputs: Vec<OperationInput>,
    ctx: UpdateContext,
    config_revision: u64,
    now: UnixMillis,
}

/// A computed update, for `SchedulerCore::apply_share_update`.
pub struct ComputedShares {
    tree_name: String,
    shares: fair_share::TreeShares,
    total: ResourceVector,
    config_revision: u64,
    now: UnixMillis,
}

impl ShareUpdate {
    pub fn tree(&self) -> &str {
        &self.tree_name
    }

    /// The update itself: pure, and safe to run on any thread.
    pub fn compute(self) -> ComputedShares {
        let shares = fair_share::compute_in(&self.tree, self.total, &self.inputs, &self.ctx);
        ComputedShares {
            tree_name: self.tree_name,
            shares,
            total: self.total,
            config_revision: self.config_revision,
            now: self.now,
        }
    }
}

/// Time one element of a tree is allowed to add between updates brought forward by
/// changes: an update of 10,000 operations (≈ 20–30 ms) then runs at most every 100 ms
/// on changes, a small tree's at once.
const STALE_UPDATE_MICROS_PER_ELEMENT: u64 = 10;

fn min_stale_update_interval_ms(elements: usize) -> u64 {
    elements as u64 * STALE_UPDATE_MICROS_PER_ELEMENT / 1000
}

impl SchedulerCore {
    /// Runs the updates that are due by their period. Stale trees are not updated here:
    /// placement updates them right before it needs them, and a stream of submissions
    /// must not turn every tick into a full update of a large tree.
    pub(super) fn update_due_shares(&mut self, now: UnixMillis) {
        if self.config.background_share_updates {
            return;
        }
        let trees: Vec<String> = self.cluster.trees.keys().cloned().collect();
        for tree in trees {
            if self.due_by_period(&tree, now) {
                self.update_tree_shares(&tree, now);
            }
        }
    }

    /// Whether a tree's `fair_share_update_period` has passed since its last update (or
    /// it never had one).
    fn due_by_period(&self, tree: &str, now: UnixMillis) -> bool {
        let period = self
            .cluster
            .trees
            .get(tree)
            .map_or(0, |t| t.config.fair_share_update_period.0);
        self.last_share_update
            .get(tree)
            .is_none_or(|&last| now.saturating_sub(last) >= period)
    }

    /// Whether a tree changed since its last update and the minimum interval its size
    /// allows has passed (or it never had an update).
    fn due_by_change(&self, tree: &str, now: UnixMillis) -> bool {
        match (self.shares.get(tree), self.last_share_update.get(tree)) {
            (Some(shares), Some(&last)) => {
                self.stale_trees.contains(tree)
                    && now.saturating_sub(last)
                        >= min_stale_update_interval_ms(shares.elements.len())
            }
            _ => true,
        }
    }

    /// Recomputes every tree now (the simulator's snapshots, admin changes).
    pub fn update_all_shares(&mut self, now: UnixMillis) {
        let trees: Vec<String> = self.cluster.trees.keys().cloned().collect();
        for tree in trees {
            self.update_tree_shares(&tree, now);
        }
    }

    /// Drops what was computed for trees the configuration no longer has.
    pub(super) fn forget_removed_trees(&mut self) {
        let trees = &self.cluster.trees;
        self.shares.retain(|t, _| trees.contains_key(t));
        self.live.retain(|t, _| trees.contains_key(t));
        self.starving_order.retain(|t, _| trees.contains_key(t));
        self.last_share_update.retain(|t, _| trees.contains_key(t));
        self.starvation.retain(|t, _| trees.contains_key(t));
        self.starving_operations
            .retain(|t, _| trees.contains_key(t));
        self.integral_volumes.retain(|t, _| trees.contains_key(t));
        self.over_limit_trees.retain(|t| trees.contains_key(t));
        self.stale_trees.retain(|t| trees.contains_key(t));
        self.updating.retain(|t| trees.contains_key(t));
    }

    /// Updates a tree whose operations, configuration or nodes changed before a
    /// placement reads it, but no more often than its size allows: an update costs time
    /// in proportion to the tree's elements, and thousands of nodes joining, or a stream
    /// of submissions, must not turn every heartbeat into a full update (placement then
    /// reads the last snapshot, as YTsaurus's always does, until the interval is over).
    pub(super) fn update_if_stale(&mut self, tree: &str, now: UnixMillis) {
        let due = if self.shares.contains_key(tree) {
            !self.config.background_share_updates && self.due_by_change(tree, now)
        } else {
            // A tree never updated: placement cannot do without it.
            !self.updating.contains(tree)
        };
        if due {
            self.update_tree_shares(tree, now);
        }
    }

    fn update_tree_shares(&mut self, tree_name: &str, now: UnixMillis) {
        if let Some(update) = self.prepare_share_update(tree_name, now) {
            self.apply_share_update(update.compute());
        }
    }

    /// The input of one tree's update, taken from the core as it is now. The tree counts
    /// as up to date from here: changes made while the update computes mark it stale
    /// again.
    fn prepare_share_update(&mut self, tree_name: &str, now: UnixMillis) -> Option<ShareUpdate> {
        let tree = self.cluster.trees.get(tree_name)?.clone();
        let total = self.tree_resources(tree_name);
        let inputs: Vec<OperationInput> = self
            .operations
            .values()
            .filter(|o| o.state == OperationState::Running)
            .filter_map(|o| Some((o, o.slot(tree_name)?)))
            .map(|(o, slot)| OperationInput {
                id: o.id.clone(),
                pool: slot.pool.clone(),
                weight: slot.weight,
                demand: o.demand_in(tree_name),
                usage: slot.usage,
                resource_limits: slot.resource_limits,
                max_share_ratio: o.max_share_ratio,
                seq: o.seq,
                pending_job_count: o.waiting_job_count(),
            })
            .collect();
        // Volumes move inside the update by the time since the previous one, paying for
        // the integral share given then (used or not).
        let previous = self.shares.get(tree_name);
        let ctx = UpdateContext {
            volumes: self
                .integral_volumes
                .get(tree_name)
                .cloned()
                .unwrap_or_default(),
            last_share_ratios: previous
                .map(|p| {
                    p.elements
                        .iter()
                        .filter_map(|e| {
                            Some((e.name().to_string(), e.integral.as_ref()?.last_share_ratio))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            since_previous_s: self
                .last_share_update
                .get(tree_name)
                .map(|&last| now.saturating_sub(last) as f64 / 1000.0),
            filter_resources: self.pool_filter_resources(tree_name),
        };
        self.stale_trees.remove(tree_name);
        self.updating.insert(tree_name.to_string());
        Some(ShareUpdate {
            tree_name: tree_name.to_string(),
            tree,
            total,
            inputs,
            ctx,
            config_revision: self.config_revision,
            now,
        })
    }

    /// Updates that are due, for a driver that computes them away from the core
    /// (`CoreConfig::background_share_updates`) and hands each back to
    /// `apply_share_update`: a tree whose period has passed, a changed tree past its
    /// minimum interval, or one without shares yet; none already computing.
    pub fn share_updates_due(&mut self, now: UnixMillis) -> Vec<ShareUpdate> {
        self.observe(now);
        let trees: Vec<String> = self.cluster.trees.keys().cloned().collect();
        let mut out = vec![];
        for tree in trees {
            if self.updating.contains(&tree) {
                continue;
            }
            if self.due_by_period(&tree, now) || self.due_by_change(&tree, now) {
                out.extend(self.prepare_share_update(&tree, now));
            }
        }
        out
    }

    /// An update the driver could not compute: the tree is tried again.
    pub fn abandon_share_update(&mut self, tree: &str) {
        self.updating.remove(tree);
        self.stale_trees.insert(tree.to_string());
    }

    /// Takes in a computed update. One prepared before a configuration change is
    /// dropped (its pools may be gone) and the tree is computed again.
    pub fn apply_share_update(&mut self, update: ComputedShares) {
        let ComputedShares {
            tree_name,
            mut shares,
            total,
            config_revision,
            now,
        } = update;
        self.updating.remove(&tree_name);
        if config_revision != self.config_revision || !self.cluster.trees.contains_key(&tree_name) {
            self.stale_trees.insert(tree_name);
            return;
        }
        // With no nodes there is nothing to measure volumes against: keep them as they are.
        if Resource::ALL.iter().any(|&r| total.get(r) > 0.0) {
            let volumes: HashMap<String, f64> = shares
                .elements
                .iter()
                .filter_map(|e| {
                    let ig = e.integral.as_ref().filter(|ig| ig.accrues())?;
                    Some((e.name().to_string(), ig.volume_ratio))
                })
                .collect();
            self.integral_volumes.insert(tree_name.clone(), volumes);
        }
        shares.tree = tree_name.clone();
        if self.exceeds_limits(&tree_name, &shares) {
            self.over_limit_trees.insert(tree_name.clone());
        } else {
            self.over_limit_trees.remove(&tree_name);
        }
        // Computed away from the core, an operation that arrived since the last update
        // can run only now: the nodes that could start it hear of it now.
        let arrived: Vec<OperationId> = if self.config.background_share_updates {
            let before = self.shares.get(&tree_name);
            shares
                .operation_index
                .keys()
                .filter(|id| before.is_none_or(|b| !b.operation_index.contains_key(*id)))
                .cloned()
                .collect()
        } else {
            vec![]
        };
        let live = self.compute_live(&shares);
        self.live.insert(tree_name.clone(), live);
        self.shares.insert(tree_name.clone(), shares);
        self.last_share_update.insert(tree_name.clone(), now);
        self.update_starvation(&tree_name, now);
        let order = self.starving_operations(&tree_name, &self.shares[&tree_name]);
        self.starving_order
            .insert(tree_name.clone(), std::sync::Arc::new(order));
        for id in arrived {
            self.nudge_for(&id);
        }
    }

    /// For each pool of a tree with a `scheduling_tag_filter`, what the tree's nodes
    /// that match it offer: the most its subtree can ever use.
    fn pool_filter_resources(&self, tree_name: &str) -> HashMap<String, ResourceVector> {
        let Some(tree) = self.cluster.trees.get(tree_name) else {
            return HashMap::new();
        };
        let mut out = HashMap::new();
        for (name, pool) in &tree.pools {
            let Some(filter) = pool.config.tag_filter() else {
                continue;
            };
            let offered: ResourceVector = self
                .nodes
                .values()
                .filter(|n| self.node_tree(n) == Some(tree_name) && filter.matches(&n.all_tags))
                .map(|n| n.resource_limits)
                .sum();
            out.insert(name.clone(), offered);
        }
        out
    }

    /// A pool's accumulated integral volume (share × seconds).
    pub fn integral_volume(&self, tree: &str, pool: &str) -> f64 {
        self.integral_volumes
            .get(tree)
            .and_then(|v| v.get(pool))
            .copied()
            .unwrap_or(0.0)
    }

    /// The tree a node is registered in, if any.
    pub(super) fn node_tree<'a>(&self, node: &'a super::Node) -> Option<&'a str> {
        node.registered_tree().filter(|_| node.online)
    }

    /// Sum of the limits of a tree's schedulable nodes: what its shares are fractions of.
    pub fn tree_resources(&self, tree: &str) -> ResourceVector {
        self.tree_resources.get(tree).copied().unwrap_or_default()
    }

    pub(super) fn recompute_tree_resources(&mut self) {
        self.placeability_stale = true;
        let mut totals = std::collections::BTreeMap::new();
        for node in self.nodes.values() {
            if let Some(tree) = self.node_tree(node) {
                *totals
                    .entry(tree.to_string())
                    .or_insert(ResourceVector::ZERO) += node.resource_limits;
            }
        }
        if totals != self.tree_resources {
            self.tree_resources = totals;
            let trees: Vec<String> = self.cluster.trees.keys().cloned().collect();
            self.stale_trees.extend(trees);
        }
    }

    /// After any configuration change: trees are recomputed before the next placement,
    /// nodes are re-sorted into trees by their filters, and pending operations may now fit.
    pub(super) fn on_config_changed(&mut self) {
        self.config_revision += 1;
        // Pools may have moved or gone: every operation's chain is counted again.
        self.recount_operations();
        self.forget_removed_trees();
        let trees: Vec<String> = self.cluster.trees.keys().cloned().collect();
        self.stale_trees.extend(trees);
        self.reassign_nodes();
        self.recompute_tree_resources();
        self.reevaluate_lightweight();
        self.promote_pending(self.latest_now);
        self.nudge_all_online();
    }
}
