//! The scheduler core: no I/O, no NATS, no wall clock. Every method takes `now`
//! (Unix milliseconds supplied by the caller), so the service, the simulator and tests
//! drive exactly the same code, and the same inputs give the same decisions.

mod admin;
mod clock;
mod effects;
pub mod event_records;
mod events;
#[cfg(any(test, feature = "harness"))]
/// A Nomad-style test world (simulated nodes, a moved clock, every call's effects
/// recorded); public for the crate's own integration tests.
#[doc(hidden)]
pub mod harness;
mod heartbeat;
mod jobs;
pub mod nodes;
mod operations;
mod outbox;
mod queries;
pub mod records;
mod resource_minimum;
mod trees;
pub mod virtual_cluster;

pub use admin::path::AdminPath;
pub use admin::{config_file, delegation_budget};
pub use effects::Effects;
pub use events::{AttemptFacts, CoreEvent, PoolShareSample};
pub use jobs::job_info::job_info;
pub use jobs::job_output::JobOutput;
pub use jobs::start_tokens::StartKey;
pub use nodes::membership;
pub use nodes::node::Node;
pub use operations::access::{authorize_operation_of, controls_operation_of};
pub use operations::operation::{Job, Operation, Task};
pub use operations::retention;
pub use queries::orchid;
pub use queries::pages::{page_limit, parse_cursor, JobEntry, JobPagePlan};
pub use queries::reads::CoreReads;
pub use queries::share_history::ShareSample;
pub use trees::share_update::{ComputedShares, ShareUpdate};
pub use trees::{fair_share, starvation};
pub use ytsched_common::pool_tree;
pub use ytsched_common::pool_tree::{ClusterConfig, ConfigError, PoolTree, DEFAULT_TREE};

use crate::jobs::adoption::StartHold;
use crate::jobs::job_life::job_life;
use crate::nodes::node_life::node_life;
use crate::nodes::nudges::nudger;
use crate::operations::operation_life::operation_life;
use crate::operations::retirement::Retirement;
use crate::trees::preemption::preemptor;
use crate::trees::share_updater::share_updater;
use std::collections::BTreeMap;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::{NodeId, OperationId};

/// Integral volumes (share × seconds) by tree, then pool: state the store keeps.
pub type IntegralVolumes = BTreeMap<TreeName, trees::fair_share::PoolVolumes>;

#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Period the scheduler asks nodes to heartbeat at.
    pub heartbeat_period_ms: u64,
    /// Initial `node_heartbeat_timeout` of the default tree of a fresh installation.
    pub node_heartbeat_timeout_ms: u64,
    /// Fair-share updates are computed by the driver away from the core
    /// (`share_updates_due` → `ShareUpdate::compute` → `apply_share_update`) instead of
    /// inline in `tick` and before placement: heartbeats never wait for one. The service
    /// sets it; the simulator and tests compute inline, deterministically.
    pub background_share_updates: bool,
    /// How often each tree's pool shares go to the event log (SPEC 5.16: a minute).
    pub pool_sample_period_ms: u64,
    /// The largest record the store takes (the bus's payload limit less a margin): a
    /// spec whose operation's record could not be stored is refused
    /// (`operations/record_room.rs`).
    pub max_record_bytes: usize,
    /// Nodes are declared by the driver (the simulator: a scenario's or an event log's
    /// nodes), not claimed by a node key: approvals and trust on first use do not bound
    /// them, so a scenario's node with 100,000 user slots has them.
    pub nodes_declared: bool,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            heartbeat_period_ms: 1000,
            node_heartbeat_timeout_ms: 30_000,
            background_share_updates: false,
            pool_sample_period_ms: trees::pool_samples::POOL_SAMPLE_EVERY_MS,
            // NATS's default payload limit less the service's margin.
            max_record_bytes: (1 << 20) - 16 * 1024,
            nodes_declared: false,
        }
    }
}

#[derive(Clone)]
pub struct SchedulerCore {
    config: CoreConfig,
    nodes: BTreeMap<NodeId, Node>,
    /// Held operations, with the marks every change to one must leave (see
    /// `operations/table.rs`).
    operations: operations::table::OperationTable,
    /// Which operation each job belongs to and which jobs run on each node (a job's
    /// state itself is only in its operation; see `job_index.rs`).
    jobs: jobs::job_index::JobIndex,
    /// Pool trees and pools as admins configured them (what the store saves).
    cluster: ClusterConfig,
    /// Per configured tree: its nodes' total, last fair-share snapshot and what changed
    /// since (see `tree_state.rs`).
    trees: trees::tree_state::TreeStates,
    /// When operations were last checked for jobs no node can hold, against what
    /// (`operations/placeability.rs`).
    placeability: operations::placeability::PlaceabilityWatch,
    /// The store is further behind than the driver allows: heartbeats start no job
    /// until it has caught up (issue 26: backpressure rather than a backlog in memory;
    /// every start brings a result to store).
    store_behind: bool,
    /// The driver cannot be sure the leader lease is still this scheduler's (a pause
    /// outlasted it): no job starts, so a successor cannot start one twice with it.
    lease_unsure: bool,
    /// Walks of a tree looking for a job to place (one per job started, plus one that
    /// finds nothing): what a heartbeat costs, counted so tests can see it.
    placement_walks: u64,
    /// Bumped on every configuration change (admin or ephemeral pools), so the driver
    /// knows when to save.
    config_revision: u64,
    /// Where the last round of nudges for new work stopped (see `nudges.rs`).
    nudge_cursor: Option<NodeId>,
    /// The latest `now` any call brought: the time of changes that come from calls
    /// without one (admin changes promoting pending operations).
    latest_now: clock::LatestNow,
    /// Until when a revived scheduler waits for nodes to report the jobs it restored
    /// before it counts the unreported ones as lost.
    revival_deadline: Option<UnixMillis>,
    /// A revived scheduler starts nothing while nodes come back (see `adoption.rs`).
    start_hold: Option<jobs::adoption::StartHold>,
    /// The nodes a revived scheduler still waits to hear from (see `roll_call.rs`).
    roll_call: Option<jobs::roll_call::RollCall>,
    /// What the driver has yet to hear: nudges, events, outputs, retired operations.
    outbox: outbox::Outbox,
    /// Operations whose stored record could not be read at revival, with why.
    damaged: BTreeMap<OperationId, String>,
    /// Recent usage against fair share per operation, for the web page's chart.
    share_history: queries::share_history::ShareHistory,
    /// What nodes without an approval were trusted with (`nodes/trust.rs`).
    trust: nodes::trust::NodeTrust,
    /// When the whole configuration last went to the event log (`None`: never, as in
    /// the simulator, which tells it only when a replay asks).
    configuration_told_at: Option<UnixMillis>,
    /// The key of start tokens (`jobs/start_tokens.rs`), set by the service from the
    /// store before it takes heartbeats.
    start_key: jobs::start_tokens::StartKey,
}

impl SchedulerCore {
    pub fn new(config: CoreConfig) -> Self {
        let timeout = config.node_heartbeat_timeout_ms.max(1);
        let trust = if config.nodes_declared {
            nodes::trust::NodeTrust::declared()
        } else {
            nodes::trust::NodeTrust::default()
        };
        let mut core = Self {
            config,
            nodes: BTreeMap::new(),
            operations: Default::default(),
            jobs: Default::default(),
            cluster: {
                let mut c = ClusterConfig::default();
                if let Some(t) = c.trees.get_mut(DEFAULT_TREE) {
                    t.config.node_heartbeat_timeout = ytsched_common::DurationMs(timeout);
                }
                c
            },
            trees: Default::default(),
            placeability: Default::default(),
            store_behind: false,
            lease_unsure: false,
            placement_walks: 0,
            config_revision: 0,
            nudge_cursor: None,
            latest_now: Default::default(),
            revival_deadline: None,
            start_hold: None,
            roll_call: None,
            outbox: Default::default(),
            damaged: BTreeMap::new(),
            share_history: Default::default(),
            trust,
            configuration_told_at: None,
            start_key: Default::default(),
        };
        core.trees.sync(core.cluster.trees.keys());
        core
    }

    /// Runs one call and returns its answer with its effects: how the service, the
    /// simulator and tests that watch effects drive the core.
    pub fn run<R>(&mut self, call: impl FnOnce(&mut Self) -> R) -> (R, Effects) {
        let revision = self.config_revision;
        let answer = call(self);
        let config_changed = self.config_revision != revision;
        let effects = Effects {
            config_changed,
            changes: records::take_changes(
                &mut self.operations,
                &mut self.jobs,
                &mut self.outbox,
                &mut self.trust,
            ),
            retired: self.outbox.take_retired(),
            nudges: self.outbox.take_nudges(),
            events: self.outbox.take_events(),
            reply_after_store: self.outbox.take_reply_after_store(),
        };
        (answer, effects)
    }

    /// Tells the event log of an admin change the driver made on `who`'s behalf.
    pub fn note_admin_change(
        &mut self,
        who: &str,
        path: &str,
        old: Option<serde_json::Value>,
        new: Option<serde_json::Value>,
    ) {
        self.outbox.event(CoreEvent::AdminChanged {
            who: who.to_string(),
            path: path.to_string(),
            old: old.map(|v| v.to_string()),
            new: new.map(|v| v.to_string()),
        });
        let now = self.latest_now.get();
        self.note_configuration(now);
    }

    /// Tells the event log the whole configuration as it is now: at a leader's start,
    /// after each admin change and once an hour, so a replay starts from what was
    /// configured rather than from defaults.
    pub fn note_configuration(&mut self, now: UnixMillis) {
        self.configuration_told_at = Some(now);
        self.outbox.event(CoreEvent::Configuration);
    }

    /// Recomputes every tree now (the simulator's snapshots, admin changes).
    pub fn update_all_shares(&mut self, now: UnixMillis) {
        share_updater!(self).update_all(now);
    }

    /// Takes in a computed update. One prepared before a configuration change is
    /// dropped (its pools may be gone) and the tree is computed again. What it replaces
    /// is handed back, to be freed off the lock.
    pub fn apply_share_update(
        &mut self,
        update: ComputedShares,
    ) -> trees::share_update::Superseded {
        share_updater!(self).apply(update)
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Replaces the whole configuration (loaded from the store or a config file).
    pub fn set_cluster_config(&mut self, cluster: ClusterConfig) -> Result<(), ConfigError> {
        cluster.validate()?;
        self.cluster = cluster;
        self.on_config_changed();
        Ok(())
    }

    /// Replaces the node approvals (the scheduler's `--node-approvals` file); each node
    /// is held to its own from its next heartbeat.
    pub fn set_node_approvals(&mut self, approvals: ytsched_common::node_approval::NodeApprovals) {
        self.trust.set_approvals(approvals);
    }

    pub fn cluster_config(&self) -> &ClusterConfig {
        &self.cluster
    }

    pub fn integral_volumes(&self) -> IntegralVolumes {
        self.trees
            .iter()
            .filter(|(_, t)| !t.integral_volumes.is_empty())
            .map(|(name, t)| (name.clone(), t.integral_volumes.clone()))
            .collect()
    }

    /// Restores saved volumes (at start, after the configuration, before any update).
    /// Volumes of trees the configuration does not have are dropped.
    pub fn set_integral_volumes(&mut self, volumes: IntegralVolumes) {
        for (tree, v) in volumes {
            if let Some(t) = self.trees.get_mut(&tree) {
                t.integral_volumes = v;
            }
        }
    }

    /// Periodic housekeeping: nodes that went silent, operations that can never run,
    /// fair share updates that are due.
    pub fn tick(&mut self, now: UnixMillis) {
        self.latest_now.observe(now);
        node_life!(self).expire_silent(now);
        job_life!(self).end_revival_if_due(&mut self.revival_deadline, now);
        if self.revival_deadline.is_none() {
            self.roll_call = None;
        }
        operation_life!(self).enforce_time_limits(now);
        // Jobs whose restart back-off is over, or whose aborted attempt's node is past
        // its timeout, wait again, and nodes hear of them.
        let (cluster, default_timeout) = (&self.cluster, self.config.node_heartbeat_timeout_ms);
        let node_timeout = |tree: &ytsched_common::names::TreeName| {
            cluster
                .trees
                .get(tree)
                .map_or(default_timeout, |t| t.config.node_heartbeat_timeout.0)
        };
        for id in self.operations.release_held(now, &node_timeout) {
            nudger!(self).announce_new_work(&id);
        }
        if std::mem::take(&mut self.placeability.stale) {
            operation_life!(self).fail_unplaceable_if_offer_changed(now);
        }
        share_updater!(self).update_due(now);
        let gangs_may_start =
            !self.operations.gangs.is_empty() && !self.store_behind && !self.lease_unsure;
        if gangs_may_start
            && !StartHold::holds(&mut self.start_hold, &mut self.outbox, &self.nodes, now)
        {
            preemptor!(self).place_gangs(now);
        }
        Retirement {
            cluster: &self.cluster,
            operations: &mut self.operations,
            jobs: &mut self.jobs,
            outbox: &mut self.outbox,
            share_history: &mut self.share_history,
        }
        .retire_due(now);
    }

    /// The read model: every query of the API goes through it.
    pub fn reads(&self) -> CoreReads<'_> {
        CoreReads {
            operations: &self.operations,
            trees: &self.trees,
            cluster: &self.cluster,
            nodes: &self.nodes,
            jobs: &self.jobs,
            damaged: &self.damaged,
            share_history: &self.share_history,
            finished_order: &self.operations.finished_order,
            latest_now: self.latest_now.get(),
        }
    }
}

#[cfg(test)]
mod tests;
