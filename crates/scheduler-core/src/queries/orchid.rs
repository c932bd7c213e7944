//! The orchid (SPEC 6.2): every fair share figure of the last update, per tree, pool and
//! operation, under YTsaurus's names. Share vectors are fractions of the tree's
//! `resource_limits`; resource vectors are absolute. Made from a tree's facts
//! (`orchid_facts.rs`) as typed entries (`orchid_entries.rs`), each made as it is
//! written: the text of a 10,000-operation orchid is written without building a map per
//! operation first.

use crate::queries::orchid_entries::{
    element_satisfaction, finite, IntegralFields, PendingEntry, PoolEntry, PoolGuarantees,
    RunningEntry, ShareFields, Statuses,
};
pub use crate::queries::orchid_facts::TreeFacts;
use crate::queries::orchid_facts::{OpFacts, PendingFacts};
use crate::queries::reads::CoreReads;
use crate::trees::fair_share::{DetailedShare, Element, ElementKind};
use crate::trees::starvation::ElementKey;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use ytsched_common::names::TreePoolName;
use ytsched_common::pool_config::PoolMode;
use ytsched_common::pool_config::TreeConfig;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// `//sys/scheduler/orchid/scheduler` from its facts: every tree, and operations by id.
pub struct Orchid<'a> {
    trees: Vec<TreeOrchid<'a>>,
}

/// `//sys/scheduler/orchid/scheduler` from the facts of every tree.
pub fn orchid_of(facts: &[TreeFacts]) -> Orchid<'_> {
    Orchid {
        trees: facts.iter().map(TreeOrchid::new).collect(),
    }
}

impl Serialize for Orchid<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// An operation in more than one tree is listed as its last tree shows it.
        struct Operations<'b>(&'b [TreeOrchid<'b>]);
        impl Serialize for Operations<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut all: BTreeMap<&str, OperationEntry<'_>> = BTreeMap::new();
                for t in self.0 {
                    all.extend(t.operations.iter().map(|(&id, &e)| (id, e)));
                }
                s.collect_map(all)
            }
        }
        struct Trees<'b>(&'b [TreeOrchid<'b>]);
        impl Serialize for Trees<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_map(self.0.iter().map(|t| (t.facts.name.as_str(), t)))
            }
        }
        #[derive(Serialize)]
        struct Scheduler<'b> {
            pool_trees: Trees<'b>,
            operations: Operations<'b>,
        }
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(
            "scheduler",
            &Scheduler {
                pool_trees: Trees(&self.trees),
                operations: Operations(&self.trees),
            },
        )?;
        m.end()
    }
}

/// One tree's orchid: its pools and operations in name order, each entry made as it
/// is written.
pub struct TreeOrchid<'a> {
    facts: &'a TreeFacts,
    pools: Vec<(&'a TreePoolName, PoolMode, &'a Element)>,
    operations: BTreeMap<&'a str, OperationEntry<'a>>,
}

/// Where an operation's entry comes from.
#[derive(Clone, Copy)]
enum Source<'a> {
    Running(&'a Element, &'a OpFacts),
    Pending(&'a PendingFacts),
}

/// An operation's entry, made when it is written.
#[derive(Clone, Copy)]
struct OperationEntry<'a> {
    facts: &'a TreeFacts,
    source: Source<'a>,
}

impl Serialize for OperationEntry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.source {
            Source::Running(e, op) => self.facts.running_entry(e, op).serialize(s),
            Source::Pending(p) => self.facts.pending_entry(p).serialize(s),
        }
    }
}

impl<'a> TreeOrchid<'a> {
    pub fn new(facts: &'a TreeFacts) -> Self {
        let mut pools = vec![];
        let mut operations = BTreeMap::new();
        for e in &facts.shares.elements {
            match &e.kind {
                ElementKind::Pool { name, mode } => pools.push((name, *mode, e)),
                ElementKind::Operation { id } => {
                    if let Some(op) = facts.ops.get(id) {
                        let source = Source::Running(e, op);
                        operations.insert(id.as_str(), OperationEntry { facts, source });
                    }
                }
            }
        }
        pools.sort_unstable_by(|a, b| a.0.cmp(b.0));
        // A pending operation's facts are newer than its place in the snapshot.
        for p in &facts.pending {
            let source = Source::Pending(p);
            operations.insert(p.id.as_str(), OperationEntry { facts, source });
        }
        Self {
            facts,
            pools,
            operations,
        }
    }

    /// One operation's entry, if the tree lists it.
    fn operation_value(&self, id: &str) -> Option<Value> {
        serde_json::to_value(self.operations.get(id)?).ok()
    }
}

impl Serialize for TreeOrchid<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Pools<'b>(&'b TreeOrchid<'b>);
        impl Serialize for Pools<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let f = self.0.facts;
                let entries = self
                    .0
                    .pools
                    .iter()
                    .map(|&(name, mode, e)| (name.as_str(), f.pool_entry(e, name, mode)));
                s.collect_map(entries)
            }
        }
        #[derive(Serialize)]
        struct Tree<'b> {
            resource_limits: crate::queries::orchid_entries::Amounts,
            config: &'b TreeConfig,
            node_count: usize,
            alerts: &'b [String],
            pools: Pools<'b>,
            operations: &'b BTreeMap<&'b str, OperationEntry<'b>>,
        }
        let f = self.facts;
        Tree {
            resource_limits: (&f.resources).into(),
            config: &f.tree.config,
            node_count: f.node_count,
            alerts: &f.shares.alerts,
            pools: Pools(self),
            operations: &self.operations,
        }
        .serialize(s)
    }
}

impl TreeFacts {
    /// The tree's orchid, as a value (for reads that walk into it).
    pub fn orchid(&self) -> Value {
        serde_json::to_value(TreeOrchid::new(self)).unwrap_or_default()
    }

    fn statuses(&self, key: ElementKey) -> Statuses {
        self.starvation.as_ref().and_then(|st| st.get(&key)).into()
    }

    /// One pool's entry: its shares, statuses, counts against limits, and guarantees.
    fn pool_entry<'a>(
        &'a self,
        e: &'a Element,
        name: &TreePoolName,
        mode: PoolMode,
    ) -> PoolEntry<'a> {
        let (tree, shares) = (&self.tree, &*self.shares);
        let sat = e
            .children()
            .iter()
            .map(|&c| element_satisfaction(&shares.elements[c]))
            .fold(f64::INFINITY, f64::min);
        let pool = tree.pools.get(name);
        let counts = self.counts.get(name.as_str()).copied().unwrap_or_default();
        let capacity_seconds = tree.config.integral_guarantees.capacity_seconds();
        PoolEntry {
            shares: ShareFields::of(e, &shares.total),
            satisfaction_ratio: finite(sat),
            statuses: self.statuses(ElementKey::Pool(name.clone())),
            mode: match mode {
                PoolMode::FairShare => "fair_share",
                PoolMode::Fifo => "fifo",
            },
            parent: e.parent.map(|p| shares.elements[p].name()),
            is_ephemeral: pool.is_some_and(|p| p.ephemeral_user.is_some()),
            operation_count: counts.total,
            running_operation_count: counts.running,
            lightweight_running_operation_count: counts.lightweight_running,
            max_operation_count: tree.max_operation_count(name),
            max_running_operation_count: tree.max_running_operation_count(name),
            guarantees: e.pool.as_deref().map(|own| PoolGuarantees {
                strong_guarantee_share: (&own.strong_guarantee_share).into(),
                effective_strong_guarantee_resources: (&own.effective_strong_guarantee).into(),
                total_burst_ratio: own.total_burst_ratio,
                total_resource_flow_ratio: own.total_resource_flow_ratio,
                integral: own
                    .integral
                    .as_ref()
                    .map(|ig| IntegralFields::of(ig, &shares.total, capacity_seconds)),
            }),
            resource_limits: pool.and_then(|p| p.config.resource_limits.as_ref()),
            strong_guarantee_resources: pool
                .and_then(|p| p.config.strong_guarantee_resources.as_ref()),
        }
    }

    /// One running operation's entry.
    fn running_entry<'a>(&'a self, e: &'a Element, op: &'a OpFacts) -> RunningEntry<'a> {
        let ElementKind::Operation { id } = &e.kind else {
            unreachable!("only an operation's element has operation facts")
        };
        let (preemptible, aggressive) = op.preemptible;
        RunningEntry {
            shares: ShareFields::of(e, &self.shares.total),
            satisfaction_ratio: finite(element_satisfaction(e)),
            statuses: self.statuses(ElementKey::Operation(id.clone())),
            state: op.state.name(),
            pool: op.pool.as_deref(),
            user: &op.user,
            lightweight: op.lightweight,
            running_job_count: op.running,
            pending_job_count: op.pending,
            preemptible_job_count: preemptible,
            aggressively_preemptible_job_count: aggressive,
            resource_limits: op.resource_limits.as_ref(),
            suspended: op.suspended,
            is_gang: op.is_gang,
            unschedulable_reason: op.unschedulable_reason,
            fifo_index: e.fifo_index,
        }
    }

    /// A pending operation's entry: its pool and demand, no share and no usage.
    fn pending_entry<'a>(&'a self, op: &'a PendingFacts) -> PendingEntry<'a> {
        let total = &self.shares.total;
        let zero = &ResourceVector::ZERO;
        let demand_share = op.demand.share_of(total);
        PendingEntry {
            state: OperationState::Pending.name(),
            pool: &op.pool,
            user: &op.user,
            weight: op.weight,
            lightweight: op.lightweight,
            fair_share_ratio: 0.0,
            usage_ratio: 0.0,
            demand_ratio: demand_share.max_component(),
            dominant_resource: ytsched_fair_share::vector::dominant_resource(&op.demand, total)
                .name(),
            detailed_fair_share: (&DetailedShare::default()).into(),
            usage_share: zero.into(),
            demand_share: (&demand_share).into(),
            resource_usage: zero.into(),
            resource_demand: (&op.demand).into(),
            running_job_count: 0,
            pending_job_count: op.pending,
            resource_limits: op.resource_limits.as_ref(),
            suspended: op.suspended,
            is_gang: op.is_gang,
            unschedulable_reason: op.unschedulable_reason,
        }
    }
}

impl<'a> CoreReads<'a> {
    /// The orchid of one tree as of its last fair share update.
    pub fn tree_orchid(&self, tree_name: &str) -> Option<Value> {
        Some(self.tree_facts(tree_name)?.orchid())
    }

    /// One operation's entry in a tree's orchid, made alone.
    pub fn operation_orchid(&self, tree_name: &str, id: &OperationId) -> Option<Value> {
        let facts = self.one_operation_facts(tree_name, id)?;
        TreeOrchid::new(&facts).operation_value(id)
    }

    /// `//sys/scheduler/orchid/scheduler`: every tree, and operations by id.
    pub fn orchid(&self) -> Value {
        serde_json::to_value(orchid_of(&self.orchid_facts())).unwrap_or_default()
    }

    /// Each pool's fair share, usage and demand ratios (as the orchid shows them), per
    /// tree: what `/metrics` needs, without building the orchid of every operation.
    pub fn pool_ratios(&self) -> Vec<(String, String, [f64; 3])> {
        let mut out = vec![];
        for tree in self.cluster.trees.keys() {
            let Some(shares) = self.trees.shares(tree.as_str()) else {
                continue;
            };
            for e in &shares.elements {
                if let ElementKind::Pool { name, .. } = &e.kind {
                    out.push((
                        tree.to_string(),
                        name.to_string(),
                        [
                            e.fair_share.max_component(),
                            e.usage_share.max_component(),
                            e.demand_share.max_component(),
                        ],
                    ));
                }
            }
        }
        out
    }
}
