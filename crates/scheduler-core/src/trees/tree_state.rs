//! What the core keeps per pool tree besides the admins' configuration of it: the sum of
//! its nodes, the snapshot of its last fair-share update that placement and preemption
//! read, and what changed since. One value per tree, so a tree that is removed takes all
//! of it away at once, and nothing per tree is kept in step by hand across maps.

use crate::operations::table::OperationTable;
use crate::trees::fair_share::TreeShares;
use crate::trees::live_usage::LiveTree;
use crate::trees::starvation::{StarvationStatus, TreeStarvation};
use std::collections::BTreeMap;
use std::sync::Arc;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::ResourceVector;
use ytsched_common::{NodeId, OperationId};

/// Time one element of a tree is allowed to add between updates brought forward by
/// changes: an update of 10,000 operations (≈ 20–30 ms) then runs at most every 100 ms
/// on changes, a small tree's at once.
const STALE_UPDATE_MICROS_PER_ELEMENT: u64 = 10;

pub(crate) fn min_stale_update_interval_ms(elements: usize) -> u64 {
    elements as u64 * STALE_UPDATE_MICROS_PER_ELEMENT / 1000
}

/// The result of one fair-share update, never changed after it is made: placement
/// and preemption hold it by `Arc` while they change the core around it, as
/// YTsaurus's heartbeats read their tree's snapshot.
#[derive(Clone, Debug)]
pub(crate) struct TreeSnapshot {
    pub shares: Arc<TreeShares>,
    /// When the update was computed.
    pub taken_at: UnixMillis,
    /// Starving operations with waiting jobs, in the order the preemptive stage tries
    /// them (worked out once per update, not per heartbeat).
    pub starving_order: Arc<Vec<(OperationId, StarvationStatus)>>,
    /// Some pool or operation used more than its `resource_limits` at the update (a
    /// limit was lowered): only such trees' heartbeats look for jobs to take back.
    pub over_limit: bool,
    /// What the shares were computed from, where that is all they depend on.
    pub computed_from: Option<crate::trees::update_key::UpdateKey>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct TreeState {
    /// Sum of the limits of the tree's schedulable nodes: what its shares are fractions of.
    pub resources: ResourceVector,
    /// The tree's schedulable nodes (online and registered in it), with the limits
    /// counted in `resources`.
    pub members: BTreeMap<NodeId, ResourceVector>,
    /// `None` until the first update.
    pub snapshot: Option<TreeSnapshot>,
    /// Live usage and smallest waiting job per element of the snapshot, kept up to date
    /// between updates (see `live_usage.rs`).
    pub live: LiveTree,
    /// Scheduling and starvation status of the tree's elements as of the last update
    /// (shared with the update being computed, which starts from them).
    pub starvation: Arc<TreeStarvation>,
    /// Integral volume (share × seconds) of the tree's burst and relaxed pools: state
    /// the store keeps.
    pub integral_volumes: crate::trees::fair_share::PoolVolumes,
    /// Operations, configuration or nodes changed since the last update: it is updated
    /// before the next placement rather than a period later.
    pub stale: bool,
    /// The driver is computing its update (background updates).
    pub updating: bool,
    /// Where the preemptive stage's rotating share of the starving list starts next
    /// (see `preemption::starving_to_try`).
    pub preemption_cursor: usize,
    /// When its pools' shares were last told to the event log (`pool_samples.rs`).
    pub pool_sample_at: Option<UnixMillis>,
}

impl TreeState {
    pub fn shares(&self) -> Option<&Arc<TreeShares>> {
        self.snapshot.as_ref().map(|s| &s.shares)
    }

    pub fn last_update(&self) -> Option<UnixMillis> {
        self.snapshot.as_ref().map(|s| s.taken_at)
    }
}

/// Every configured tree's state, by name: the part of the core that owns them.
#[derive(Clone, Debug, Default)]
pub(crate) struct TreeStates(BTreeMap<TreeName, TreeState>);

impl TreeStates {
    /// Brings one node's membership up to date with its registration, whether it is
    /// online and its limits: only the trees it left or joined change (their totals
    /// summed again from their members, so they never drift), and only they are stale.
    /// Returns whether any tree's membership changed.
    pub(crate) fn account_node(
        &mut self,
        nodes: &BTreeMap<NodeId, crate::Node>,
        id: &NodeId,
    ) -> bool {
        let counted = nodes
            .get(id)
            .filter(|n| n.online && !n.maintenance.banned)
            .and_then(|n| Some((n.registered_tree()?, n.resource_limits)));
        self.account(id, counted)
    }

    /// Sum of the limits of a tree's schedulable nodes: what its shares are fractions of.
    pub(crate) fn resources(&self, tree: &str) -> ResourceVector {
        self.get(tree).map_or(ResourceVector::ZERO, |t| t.resources)
    }

    /// Whether a tree's `fair_share_update_period` has passed since its last update (or
    /// it never had one).
    pub(crate) fn due_by_period(
        &self,
        cluster: &crate::ClusterConfig,
        tree: &str,
        now: UnixMillis,
    ) -> bool {
        let period = cluster
            .trees
            .get(tree)
            .map_or(0, |t| t.config.fair_share_update_period.0);
        self.get(tree)
            .and_then(|t| t.last_update())
            .is_none_or(|last| now.saturating_sub(last) >= period)
    }

    /// An operation's starvation status at its tree's last update.
    pub(crate) fn starvation_status(
        &self,
        tree: &str,
        id: &ytsched_common::OperationId,
    ) -> crate::starvation::StarvationStatus {
        self.get(tree)
            .and_then(|t| t.snapshot.as_ref())
            .and_then(|s| s.starving_order.iter().find(|(o, _)| o == id))
            .map_or(
                crate::starvation::StarvationStatus::NonStarving,
                |(_, s)| *s,
            )
    }

    /// The nodes a tree schedules onto.
    pub(crate) fn members<'a>(
        &'a self,
        tree: &str,
        nodes: &'a BTreeMap<NodeId, crate::Node>,
    ) -> impl Iterator<Item = &'a crate::Node> + 'a {
        self.get(tree)
            .into_iter()
            .flat_map(|t| t.members.keys())
            .filter_map(|id| nodes.get(id))
    }

    /// Where this stage's rotating window over a tree's starving operations starts; the
    /// next one starts `step` further on.
    pub(crate) fn next_preemption_window(&mut self, tree: &str, step: usize) -> usize {
        self.get_mut(tree).map_or(0, |t| {
            let start = t.preemption_cursor;
            t.preemption_cursor = start.wrapping_add(step);
            start
        })
    }

    /// Whether a tree changed since its last update and the minimum interval its size
    /// allows has passed (or it never had an update).
    pub(crate) fn due_by_change(&self, tree: &str, now: UnixMillis) -> bool {
        match self
            .get(tree)
            .and_then(|t| t.snapshot.as_ref().map(|s| (t.stale, s)))
        {
            Some((stale, snap)) => {
                stale
                    && now.saturating_sub(snap.taken_at)
                        >= min_stale_update_interval_ms(snap.shares.elements.len())
            }
            None => true,
        }
    }

    pub(crate) fn get(&self, tree: &str) -> Option<&TreeState> {
        self.0.get(tree)
    }

    pub(crate) fn get_mut(&mut self, tree: &str) -> Option<&mut TreeState> {
        self.0.get_mut(tree)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TreeName, &TreeState)> {
        self.0.iter()
    }

    /// The snapshot of a tree's last update, if it had one.
    pub(crate) fn shares(&self, tree: &str) -> Option<Arc<TreeShares>> {
        self.0.get(tree)?.shares().cloned()
    }

    /// A tree's operations, configuration or nodes changed: it is updated before the
    /// next placement reads it.
    pub(crate) fn mark_stale(&mut self, tree: &str) {
        if let Some(t) = self.0.get_mut(tree) {
            t.stale = true;
        }
    }

    pub(crate) fn mark_all_stale(&mut self) {
        for t in self.0.values_mut() {
            t.stale = true;
        }
    }

    /// Names of the configured trees.
    pub(crate) fn names(&self) -> Vec<TreeName> {
        self.0.keys().cloned().collect()
    }

    /// Counts node `id` in `counted`'s tree with its limits (`None`: in none): only the
    /// trees it left or joined change, their totals summed again from their members so
    /// they never drift, and only they are stale. Whether any changed.
    fn account(&mut self, id: &NodeId, counted: Option<(&str, ResourceVector)>) -> bool {
        let mut changed = false;
        for (name, t) in self.0.iter_mut() {
            let want = counted
                .filter(|(tree, _)| *tree == name.as_str())
                .map(|(_, limits)| limits);
            if t.members.get(id).copied() == want {
                continue;
            }
            match want {
                Some(limits) => t.members.insert(id.clone(), limits),
                None => t.members.remove(id),
            };
            t.resources = t.members.values().copied().sum();
            t.stale = true;
            changed = true;
        }
        changed
    }

    /// One state per configured tree: new trees get theirs, removed ones lose it.
    pub(crate) fn sync<'a>(&mut self, configured: impl Iterator<Item = &'a TreeName> + Clone) {
        self.0
            .retain(|name, _| configured.clone().any(|c| c == name));
        for name in configured {
            self.0.entry(name.clone()).or_default();
        }
    }
}

/// Each tree's live arrays, kept with its snapshot.
impl TreeStates {
    /// Brings every tree's live arrays up to date with the operations changed since.
    pub(crate) fn refresh_live(&mut self, operations: &mut OperationTable) {
        let changed = operations.take_live_changes();
        for tree in self.names() {
            let Some(shares) = self.shares(tree.as_str()) else {
                continue;
            };
            let Some(state) = self.get_mut(tree.as_str()) else {
                continue;
            };
            let mut live = std::mem::take(&mut state.live);
            match &changed {
                None => live = crate::trees::live_usage::compute_live(operations, &shares),
                Some(ids) => {
                    for id in ids {
                        if let Some(&leaf) = shares.operation_index.get(id) {
                            let (usage, waiting) =
                                crate::trees::live_usage::live_leaf(operations, id, tree.as_str());
                            live.set_leaf(&shares, leaf, usage, waiting);
                        }
                    }
                }
            }
            if let Some(state) = self.get_mut(tree.as_str()) {
                state.live = live;
            }
        }
        #[cfg(debug_assertions)]
        self.check_live(operations);
    }

    /// Debug builds: the kept arrays are what a scan of every operation gives.
    #[cfg(debug_assertions)]
    fn check_live(&self, operations: &OperationTable) {
        for (tree, state) in self.iter() {
            if let Some(shares) = state.shares() {
                let live = &state.live;
                let scan = crate::trees::live_usage::compute_live(operations, shares);
                assert_eq!(live.waiting, scan.waiting, "live waiting of tree {tree}");
                assert!(
                    live.lines.agrees_with(shares, &live.usage, &live.waiting),
                    "pool lines of tree {tree} differ from the live arrays"
                );
                for (a, b) in live.usage.iter().zip(&scan.usage) {
                    assert!(
                        a.fits_in(b) && b.fits_in(a),
                        "live usage of tree {tree}: {a:?} != {b:?}"
                    );
                }
            }
        }
    }

    /// The live usage per element of `tree`'s snapshot `shares` (call `refresh_live`
    /// first): the kept arrays, or computed from every operation if none are kept.
    pub(crate) fn live_usage<'a>(
        &'a self,
        operations: &OperationTable,
        tree: &str,
        shares: &TreeShares,
    ) -> std::borrow::Cow<'a, [ResourceVector]> {
        match self.get(tree).map(|t| &t.live) {
            Some(live) if live.usage.len() == shares.elements.len() => {
                std::borrow::Cow::Borrowed(&live.usage)
            }
            _ => std::borrow::Cow::Owned(
                crate::trees::live_usage::compute_live(operations, shares).usage,
            ),
        }
    }

    /// Makes the tree's live arrays fit its snapshot (rebuilt when the snapshot changed
    /// shape since they were kept).
    pub(crate) fn ensure_live(
        &mut self,
        operations: &OperationTable,
        tree: &str,
        shares: &TreeShares,
    ) {
        let fits = self
            .get(tree)
            .is_some_and(|t| t.live.usage.len() == shares.elements.len());
        if !fits {
            let live = crate::trees::live_usage::compute_live(operations, shares);
            if let Some(t) = self.get_mut(tree) {
                t.live = live;
            }
        }
    }
}
