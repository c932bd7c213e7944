//! When fair share is recomputed: every `fair_share_update_period` of each tree, and
//! right away (before the next placement) when the tree's operations, configuration or
//! nodes changed, so a new operation does not wait a whole period for its first job.

use crate::membership::reassign_node;
use crate::operations::operation_life::operation_life;
use crate::operations::table::OperationTable;
use crate::trees::fair_share::{self, OperationInput, UpdateContext};
use crate::trees::fair_share::{ElementKind, TreeShares};
use crate::trees::limits_enforcement::exceeds_limits;
use crate::trees::live_usage::{build_live, LiveTree};
use crate::trees::share_inputs::{ShareInput, TreeInputs};
use crate::trees::starvation::{self, StarvationStatus, TreeStarvation};
use crate::trees::tree_state::TreeSnapshot;
use crate::trees::tree_state::TreeStates;
use crate::trees::update_key::{moves_with_time, UpdateKey};
use crate::{ClusterConfig, Node};
use crate::{PoolTree, SchedulerCore};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::ResourceVector;
use ytsched_common::{NodeId, OperationId};

/// One tree's fair-share update, prepared from the core and computed away from it: the
/// heavy part (`ytsched_fair_share::compute`) needs nothing of the core.
pub struct ShareUpdate {
    tree_name: TreeName,
    tree: PoolTree,
    total: ResourceVector,
    /// Shared with the core's own (`share_inputs.rs`): taken in O(1) under its lock.
    inputs: TreeInputs,
    /// The snapshot this update follows: operations new since it are nudged for.
    previous: Option<Arc<fair_share::TreeShares>>,
    ctx: UpdateContext,
    /// Starvation statuses move on from these (only one update of a tree is in flight).
    previous_starvation: Arc<TreeStarvation>,
    config_revision: u64,
    now: UnixMillis,
    /// What this update is computed from, where that is all it depends on.
    key: Option<UpdateKey>,
    /// The previous snapshot's shares and limit check, when its key is this update's.
    reuse: Option<(Arc<fair_share::TreeShares>, bool)>,
}

/// What a tree held before an update replaced it: 100,000 operations' shares take
/// milliseconds to free, which a driver does after letting go of the core's lock.
#[derive(Default)]
pub struct Superseded {
    pub(crate) _snapshot: Option<TreeSnapshot>,
    pub(crate) _starvation: Option<Arc<TreeStarvation>>,
    pub(crate) _live: Option<LiveTree>,
}

/// A computed update, for `SchedulerCore::apply_share_update`.
pub struct ComputedShares {
    pub(crate) tree_name: TreeName,
    pub(crate) shares: Arc<fair_share::TreeShares>,
    /// What the shares were computed from (see `UpdateKey`).
    pub(crate) key: Option<UpdateKey>,
    pub(crate) starvation: TreeStarvation,
    pub(crate) starving_order: Vec<(OperationId, StarvationStatus)>,
    /// Live arrays as of the inputs (`live_usage.rs`); the core re-reads only the
    /// operations changed since. `None` for shares taken over: the core's own arrays,
    /// kept for those very elements, stay.
    pub(crate) live: Option<LiveTree>,
    /// Some element uses more than its `resource_limits`.
    pub(crate) over_limit: bool,
    /// Operations in this update and not in the previous one.
    pub(crate) arrived: Vec<OperationId>,
    pub(crate) total: ResourceVector,
    pub(crate) config_revision: u64,
    pub(crate) now: UnixMillis,
}

impl ShareUpdate {
    pub fn tree(&self) -> &str {
        &self.tree_name
    }

    /// The update itself, with the starvation statuses and preemption order that follow
    /// from it: pure, and safe to run on any thread (the core only swaps them in).
    pub fn compute(self) -> ComputedShares {
        let reused = self.reuse.is_some();
        let (shares, over_limit) = match self.reuse {
            Some(r) => r,
            None => {
                let inputs: Vec<OperationInput> =
                    self.inputs.iter().map(|(id, s)| s.input(id)).collect();
                let mut shares = fair_share::compute_in(&self.tree, self.total, &inputs, &self.ctx);
                shares.tree = self.tree_name.to_string();
                let over_limit = exceeds_limits(&self.tree, &shares, &inputs);
                (Arc::new(shares), over_limit)
            }
        };
        let by_element = inputs_by_element(&shares, &self.inputs);
        let overrides =
            |i: usize, _: &OperationId| by_element[i].map_or((None, None), |s| s.starvation());
        let starvation = starvation::update(
            &self.tree,
            &shares,
            overrides,
            &self.previous_starvation,
            self.now,
        );
        let starving_order = starvation::starving_order(&starvation, &shares, &self.inputs);
        // What the core used to work out under its lock, O(operations) each: here
        // from the inputs, off the lock.
        let live = (!reused).then(|| {
            build_live(&shares, |i, _| {
                by_element[i].map_or((ResourceVector::ZERO, None), |s| {
                    (s.usage, s.smallest_waiting)
                })
            })
        });
        // Reused shares are the previous snapshot's: no operation is new to them.
        let arrived = match (&self.previous, reused) {
            (Some(_), true) => vec![],
            (previous, _) => shares
                .operation_index
                .keys()
                .filter(|id| {
                    previous
                        .as_ref()
                        .is_none_or(|b| !b.operation_index.contains_key(*id))
                })
                .cloned()
                .collect(),
        };
        ComputedShares {
            tree_name: self.tree_name,
            shares,
            key: self.key,
            starvation,
            starving_order,
            live,
            over_limit,
            arrived,
            total: self.total,
            config_revision: self.config_revision,
            now: self.now,
        }
    }
}

/// What preparing one tree's update moves and reads, borrowed from the core: the
/// tree's state (marked as updating) and the operation table (which tracks what
/// changes while the update computes).
pub(crate) struct SharePrep<'a> {
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) trees: &'a mut TreeStates,
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) config_revision: u64,
}

macro_rules! share_prep {
    ($core:expr) => {
        SharePrep {
            cluster: &$core.cluster,
            trees: &mut $core.trees,
            operations: &mut $core.operations,
            nodes: &$core.nodes,
            config_revision: $core.config_revision,
        }
    };
}
pub(crate) use share_prep;

impl SharePrep<'_> {
    /// The input of one tree's update, taken from the core as it is now. The tree counts
    /// as up to date from here: changes made while the update computes mark it stale
    /// again.
    pub(crate) fn prepare(&mut self, tree_name: &str, now: UnixMillis) -> Option<ShareUpdate> {
        let (name, tree) = self.cluster.trees.get_key_value(tree_name)?;
        let (name, tree) = (name.clone(), tree.clone());
        let total = self.trees.resources(tree_name);
        let (inputs, version) = self.operations.share_inputs(tree_name);
        let filter_resources = self.pool_filter_resources(tree_name);
        let key = (!moves_with_time(&tree)).then(|| UpdateKey {
            inputs: version,
            config_revision: self.config_revision,
            total,
            filter_resources: filter_resources.clone(),
        });
        let state = self.trees.get(tree_name)?;
        let reuse = state
            .snapshot
            .as_ref()
            .filter(|s| key.is_some() && s.computed_from == key)
            .map(|s| (s.shares.clone(), s.over_limit));
        let previous_starvation = state.starvation.clone();
        let previous = state.shares();
        // Volumes move inside the update by the time since the previous one, paying for
        // the integral share given then (used or not).
        let ctx = UpdateContext {
            volumes: state.integral_volumes.clone(),
            last_share_ratios: previous
                .map(|p| {
                    p.elements
                        .iter()
                        .filter_map(|e| {
                            Some((e.pool_name()?.clone(), e.integral()?.last_share_ratio))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            since_previous_s: state
                .last_update()
                .map(|last| now.saturating_sub(last) as f64 / 1000.0),
            filter_resources,
        };
        let previous = previous.cloned();
        let state = self.trees.get_mut(tree_name)?;
        state.stale = false;
        state.updating = true;
        self.operations.track_since_prepare(tree_name);
        Some(ShareUpdate {
            tree_name: name,
            tree,
            total,
            inputs,
            previous,
            ctx,
            previous_starvation,
            config_revision: self.config_revision,
            now,
            key,
            reuse,
        })
    }

    /// For each pool of a tree with a `scheduling_tag_filter`, what the tree's nodes
    /// that match it offer: the most its subtree can ever use.
    fn pool_filter_resources(&self, tree_name: &str) -> HashMap<TreePoolName, ResourceVector> {
        let Some(tree) = self.cluster.trees.get(tree_name) else {
            return HashMap::new();
        };
        let mut out = HashMap::new();
        for (name, pool) in &tree.pools {
            let Some(filter) = pool.config.tag_filter() else {
                continue;
            };
            let offered: ResourceVector = self
                .trees
                .members(tree_name, self.nodes)
                .filter(|n| filter.matches(&n.all_tags))
                .map(|n| n.resource_limits)
                .sum();
            out.insert(name.clone(), offered);
        }
        out
    }
}

impl SchedulerCore {
    /// Updates that are due, for a driver that computes them away from the core
    /// (`CoreConfig::background_share_updates`) and hands each back to
    /// `apply_share_update`: a tree whose period has passed, a changed tree past its
    /// minimum interval, or one without shares yet; none already computing.
    pub fn share_updates_due(&mut self, now: UnixMillis) -> Vec<ShareUpdate> {
        self.latest_now.observe(now);
        let mut out = vec![];
        for tree in self.trees.names() {
            if self.trees.get(tree.as_str()).is_none_or(|t| t.updating) {
                continue;
            }
            if self.trees.due_by_period(&self.cluster, tree.as_str(), now)
                || self.trees.due_by_change(tree.as_str(), now)
            {
                out.extend(share_prep!(self).prepare(tree.as_str(), now));
            }
        }
        out
    }

    /// An update the driver could not compute: the tree is tried again.
    pub fn abandon_share_update(&mut self, tree: &str) {
        self.operations.take_since_prepare(tree);
        if let Some(t) = self.trees.get_mut(tree) {
            t.updating = false;
            t.stale = true;
        }
    }

    /// After any configuration change: trees are recomputed before the next placement,
    /// nodes are re-sorted into trees by their filters, and pending operations may now fit.
    pub(crate) fn on_config_changed(&mut self) {
        self.config_revision += 1;
        // Pools may have moved or gone: every operation's chain is counted again.
        self.operations.recount();
        self.trees.sync(self.cluster.trees.keys());
        self.trees.mark_all_stale();
        // Every node's membership again (tags or filters may have changed).
        let ids: Vec<NodeId> = self.nodes.keys().cloned().collect();
        for id in ids {
            reassign_node(&mut self.nodes, &self.cluster, &mut self.outbox, &id);
        }
        self.placeability.stale = true;
        // Pool filters may have changed with the configuration: check every operation.
        self.placeability.offer = None;
        for id in self.nodes.keys() {
            self.placeability.stale |= self.trees.account_node(&self.nodes, id);
        }
        let now = self.latest_now.get();
        let mut life = operation_life!(self);
        life.reevaluate_lightweight();
        life.promote_pending(now);
        self.outbox
            .nudge_all(crate::nodes::node::online_ids(&self.nodes));
    }
}

/// Each element's kept input, by element index. `compute_in` adds a tree's operations in
/// its inputs' order, so one walk over both pairs them, each step an id compared with the
/// next input's (the same `Arc`, so a pointer compare); an element out of that order (none
/// today) is looked up.
fn inputs_by_element<'a>(
    shares: &TreeShares,
    inputs: &'a TreeInputs,
) -> Vec<Option<&'a ShareInput>> {
    let mut next = inputs.iter().peekable();
    shares
        .elements
        .iter()
        .map(|e| {
            let ElementKind::Operation { id } = &e.kind else {
                return None;
            };
            if let Some((_, s)) = next.next_if(|(k, _)| *k == id) {
                return Some(&**s);
            }
            // Inputs with no element (their pool is not in the tree) are passed over.
            while next.next_if(|(k, _)| *k < id).is_some() {}
            next.next_if(|(k, _)| *k == id)
                .or_else(|| inputs.get_key_value(id))
                .map(|(_, s)| &**s)
        })
        .collect()
}
