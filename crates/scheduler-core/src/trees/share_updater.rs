//! Fair-share updates run inside the core (the simulator, tests, and a tree placement
//! cannot do without): which are due, one tree computed and taken in, and the pools'
//! shares told to the event log about once a minute. The service computes them away
//! from the core (`share_updates_due`, `ShareUpdate::compute`) and hands each back here.

use crate::fair_share::ElementKind;
use crate::fair_share::PoolVolumes;
use crate::jobs::job_index::JobIndex;
use crate::nodes::nudges::nudger;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::queries::share_history::ShareHistory;
use crate::trees::pool_samples::CONFIGURATION_EVERY_MS;
use crate::trees::share_update::{share_prep, ComputedShares, SharePrep, Superseded};
use crate::trees::tree_state::TreeSnapshot;
use crate::trees::tree_state::TreeStates;
use crate::ClusterConfig;
use crate::CoreConfig;
use crate::CoreEvent;
use crate::Node;
use crate::PoolShareSample;
use std::collections::BTreeMap;
use std::sync::Arc;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::Resource;
use ytsched_common::NodeId;

/// What taking in an update moves and reads, borrowed from the core.
pub(crate) struct ShareUpdater<'a> {
    pub(crate) config: &'a CoreConfig,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) trees: &'a mut TreeStates,
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) jobs: &'a JobIndex,
    pub(crate) config_revision: u64,
    pub(crate) share_history: &'a mut ShareHistory,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) nudge_cursor: &'a mut Option<NodeId>,
    pub(crate) configuration_told_at: &'a mut Option<UnixMillis>,
}

/// `ShareUpdater` over a core's parts.
macro_rules! share_updater {
    ($core:expr) => {
        $crate::trees::share_updater::ShareUpdater {
            config: &$core.config,
            cluster: &$core.cluster,
            trees: &mut $core.trees,
            operations: &mut $core.operations,
            nodes: &$core.nodes,
            jobs: &$core.jobs,
            config_revision: $core.config_revision,
            share_history: &mut $core.share_history,
            outbox: &mut $core.outbox,
            nudge_cursor: &mut $core.nudge_cursor,
            configuration_told_at: &mut $core.configuration_told_at,
        }
    };
}
pub(crate) use share_updater;

impl ShareUpdater<'_> {
    /// Runs the updates that are due by their period. Stale trees are not updated here:
    /// placement updates them right before it needs them, and a stream of submissions
    /// must not turn every tick into a full update of a large tree.
    pub(crate) fn update_due(&mut self, now: UnixMillis) {
        if self.config.background_share_updates {
            return;
        }
        for tree in self.trees.names() {
            if self.trees.due_by_period(self.cluster, tree.as_str(), now) {
                self.update_tree(tree.as_str(), now);
            }
        }
    }

    /// Recomputes every tree now (the simulator's snapshots, admin changes).
    pub(crate) fn update_all(&mut self, now: UnixMillis) {
        for tree in self.trees.names() {
            self.update_tree(tree.as_str(), now);
        }
    }

    /// Updates a tree whose operations, configuration or nodes changed before a
    /// placement reads it, but no more often than its size allows: an update costs time
    /// in proportion to the tree's elements, and thousands of nodes joining, or a stream
    /// of submissions, must not turn every heartbeat into a full update (placement then
    /// reads the last snapshot, as YTsaurus's always does, until the interval is over).
    pub(crate) fn update_if_stale(&mut self, tree: &str, now: UnixMillis) {
        let Some(state) = self.trees.get(tree) else {
            return;
        };
        let due = if state.snapshot.is_some() {
            !self.config.background_share_updates && self.trees.due_by_change(tree, now)
        } else {
            // A tree never updated: placement cannot do without it.
            !state.updating
        };
        if due {
            self.update_tree(tree, now);
        }
    }

    pub(crate) fn update_tree(&mut self, tree_name: &str, now: UnixMillis) {
        if let Some(update) = share_prep!(self).prepare(tree_name, now) {
            let _ = self.apply(update.compute());
        }
    }

    /// Takes in a computed update. One prepared before a configuration change is
    /// dropped (its pools may be gone) and the tree is computed again. What it replaces
    /// is handed back, to be freed off the lock.
    pub(crate) fn apply(&mut self, update: ComputedShares) -> Superseded {
        let ComputedShares {
            tree_name,
            shares,
            key,
            starvation,
            starving_order,
            live,
            over_limit,
            arrived,
            total,
            config_revision,
            now,
        } = update;
        let changed = self.operations.take_since_prepare(&tree_name);
        let revision = self.config_revision;
        let Some(state) = self.trees.get_mut(&tree_name) else {
            return Superseded::default();
        };
        state.updating = false;
        if config_revision != revision {
            state.stale = true;
            return Superseded::default();
        }
        // With no nodes there is nothing to measure volumes against: keep them as they are.
        if Resource::ALL.iter().any(|&r| total.get(r) > 0.0) {
            let volumes: PoolVolumes = shares
                .elements
                .iter()
                .filter_map(|e| {
                    let ig = e.integral().filter(|ig| ig.accrues())?;
                    Some((e.pool_name()?.clone(), ig.volume_ratio))
                })
                .collect();
            state.integral_volumes = volumes;
        }
        let operations = &*self.operations;
        self.share_history.record(&tree_name, &shares, now, |id| {
            operations
                .get(id)
                .is_some_and(|o| o.main_tree().as_str() == tree_name.as_str())
        });
        // Computed away from the core, an operation that arrived since the last update
        // can run only now: the nodes that could start it hear of it now.
        let arrived = if self.config.background_share_updates {
            arrived
        } else {
            vec![]
        };
        let live = live.map(|live| {
            crate::trees::live_usage::live_after_update(self.operations, &shares, live, changed)
        });
        let mut superseded = Superseded::default();
        if let Some(state) = self.trees.get_mut(&tree_name) {
            superseded = Superseded {
                _live: live.map(|live| std::mem::replace(&mut state.live, live)),
                _starvation: Some(std::mem::replace(
                    &mut state.starvation,
                    Arc::new(starvation),
                )),
                _snapshot: state.snapshot.replace(TreeSnapshot {
                    shares,
                    taken_at: now,
                    starving_order: Arc::new(starving_order),
                    over_limit,
                    computed_from: key,
                }),
            };
        }
        for id in arrived {
            nudger!(self).nudge_for(&id);
        }
        self.sample_pools(&tree_name, now);
        superseded
    }

    /// Tells the pools' shares of `tree` if a sample is due.
    pub(crate) fn sample_pools(&mut self, tree: &str, now: UnixMillis) {
        if self
            .configuration_told_at
            .is_some_and(|at| now >= at.saturating_add(CONFIGURATION_EVERY_MS))
        {
            *self.configuration_told_at = Some(now);
            self.outbox.event(CoreEvent::Configuration);
        }
        let every = self.config.pool_sample_period_ms.max(1);
        let Some(state) = self.trees.get_mut(tree) else {
            return;
        };
        if state
            .pool_sample_at
            .is_some_and(|at| now < at.saturating_add(every))
        {
            return;
        }
        let Some(shares) = state.shares() else {
            return;
        };
        let pools: Vec<PoolShareSample> = shares
            .elements
            .iter()
            .filter_map(|e| match &e.kind {
                ElementKind::Pool { name, .. } => Some(PoolShareSample {
                    pool: name.clone(),
                    fair_share_ratio: e.fair_share.max_component(),
                    usage_ratio: e.usage_share.max_component(),
                    demand_ratio: e.demand_share.max_component(),
                }),
                _ => None,
            })
            .collect();
        state.pool_sample_at = Some(now);
        let Some(tree) = self
            .cluster
            .trees
            .get_key_value(tree)
            .map(|(t, _)| t.clone())
        else {
            return;
        };
        self.outbox.event(CoreEvent::PoolShares { tree, pools });
    }
}
