//! The orchid (SPEC 6.2): every fair share figure of the last update, per tree, pool and
//! operation, under YTsaurus's names. Share vectors are fractions of the tree's
//! `resource_limits`; resource vectors are absolute.

use crate::operations::operation_counts::PoolCounts;
use crate::queries::reads::CoreReads;
use crate::trees::fair_share::{Element, ElementKind, IntegralView, TreeShares};
use crate::trees::pool_lines::satisfaction;
use crate::trees::starvation::ElementKey;
use serde_json::{json, Map, Value};
use ytsched_common::pool_config::{IntegralGuaranteeType, PoolMode};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

fn share_vector(v: &ResourceVector) -> Value {
    json!({"cpu": v.cpu, "memory": v.memory, "gpu": v.gpu, "user_slots": v.user_slots})
}

fn resource_vector(v: &ResourceVector) -> Value {
    json!({"cpu": v.cpu, "memory": v.memory.round(), "gpu": v.gpu, "user_slots": v.user_slots})
}

/// Satisfaction as the orchid shows it: finite (a large number stands for "none yet").
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        1e9
    }
}

/// Fields pools and operations share.
fn common_fields(e: &Element, shares: &TreeShares) -> Map<String, Value> {
    let t = &shares.total;
    let fs = &e.fair_share;
    let mut m = Map::new();
    m.insert("fair_share_ratio".into(), json!(fs.total.max_component()));
    m.insert("usage_ratio".into(), json!(e.usage_share.max_component()));
    m.insert("demand_ratio".into(), json!(e.demand_share.max_component()));
    m.insert(
        "dominant_resource".into(),
        json!(e.dominant_resource.name()),
    );
    m.insert("weight".into(), json!(e.weight));
    m.insert(
        "detailed_fair_share".into(),
        json!({
            "total": share_vector(&fs.total),
            "strong_guarantee": share_vector(&fs.strong_guarantee),
            "integral_guarantee": share_vector(&fs.integral_guarantee),
            "weight_proportional": share_vector(&fs.weight_proportional),
        }),
    );
    m.insert("usage_share".into(), share_vector(&e.usage_share));
    m.insert("demand_share".into(), share_vector(&e.demand_share));
    m.insert("limits_share".into(), share_vector(&e.limits_share));
    let abs = |s: &ResourceVector| s.map(|r, v| v * t.get(r));
    m.insert(
        "resource_usage".into(),
        resource_vector(&abs(&e.usage_share)),
    );
    m.insert(
        "resource_demand".into(),
        resource_vector(&abs(&e.demand_share)),
    );
    m.insert(
        "limited_resource_demand".into(),
        resource_vector(&abs(&e.limited_demand_share)),
    );
    m
}

/// What one operation of a tree's snapshot shows in the orchid.
struct OpFacts {
    state: OperationState,
    pool: Option<String>,
    user: String,
    lightweight: bool,
    running: usize,
    pending: u64,
    preemptible: (usize, usize),
    resource_limits: Option<ytsched_common::spec::ResourceAmounts>,
    suspended: bool,
    unschedulable_reason: Option<&'static str>,
    is_gang: bool,
}

/// A pending operation (no share yet), as the orchid lists it.
struct PendingFacts {
    id: String,
    pool: String,
    user: String,
    weight: f64,
    lightweight: bool,
    demand: ResourceVector,
    pending: u64,
    resource_limits: Option<ytsched_common::spec::ResourceAmounts>,
    suspended: bool,
    unschedulable_reason: Option<&'static str>,
    is_gang: bool,
}

/// What the orchid of one tree is made of, taken from the core (under its lock, in the
/// service); the JSON is made from it afterwards, so a 10,000-operation orchid holds the
/// lock only for these facts, not for building and serialising its maps.
pub struct TreeFacts {
    name: String,
    tree: ytsched_common::pool_tree::PoolTree,
    shares: std::sync::Arc<TreeShares>,
    counts: crate::operations::operation_counts::PoolCountMap,
    starvation: Option<std::sync::Arc<crate::trees::starvation::TreeStarvation>>,
    ops: std::collections::HashMap<ytsched_common::OperationId, OpFacts>,
    pending: Vec<PendingFacts>,
    node_count: usize,
    resources: ResourceVector,
    /// How far `add_facts` has got.
    progress: FactsProgress,
}

/// Where the next `add_facts` goes on from: the snapshot's elements (by index), then the
/// core's operations (after an id) for the pending ones, then nothing.
enum FactsProgress {
    Elements(usize),
    Pending(Option<OperationId>),
    Done,
}

/// A pending operation of the tree, as the orchid lists it (`None`: not one).
fn pending_facts(op: &crate::Operation, tree_name: &str) -> Option<PendingFacts> {
    if op.state != OperationState::Pending {
        return None;
    }
    let slot = op.slot(tree_name)?;
    Some(PendingFacts {
        id: op.id.to_string(),
        pool: slot.pool.to_string(),
        user: op.user.clone(),
        weight: slot.weight,
        lightweight: slot.lightweight,
        demand: op.demand_in(tree_name),
        pending: op.waiting_job_count(),
        resource_limits: op.spec.resource_limits_in(tree_name).cloned(),
        suspended: op.suspended,
        unschedulable_reason: op.unschedulable_reason(),
        is_gang: op.is_gang(),
    })
}

/// `//sys/scheduler/orchid/scheduler` from its facts: every tree, and operations by id.
pub fn orchid_of(facts: Vec<TreeFacts>) -> Value {
    let mut trees = Map::new();
    let mut operations = Map::new();
    for f in facts {
        let o = f.orchid();
        if let Some(ops) = o.get("operations").and_then(|v| v.as_object()) {
            for (id, v) in ops {
                operations.insert(id.clone(), v.clone());
            }
        }
        trees.insert(f.name, o);
    }
    json!({"scheduler": {"pool_trees": trees, "operations": operations}})
}

impl TreeFacts {
    /// `fair_share_ratio` of each pool and operation the orchid lists, as it shows it
    /// (a pending operation's is 0): what what-if compares, read without the JSON.
    pub fn fair_share_ratios(&self) -> impl Iterator<Item = (&'static str, String, f64)> + '_ {
        let elements = self.shares.elements.iter().filter_map(|e| {
            match &e.kind {
                ElementKind::Pool { name, .. } => Some(("pool", name.to_string())),
                ElementKind::Operation { id } => self
                    .ops
                    .contains_key(id)
                    .then(|| ("operation", id.to_string())),
            }
            .map(|(kind, name)| (kind, name, e.fair_share.total.max_component()))
        });
        let pending = self
            .pending
            .iter()
            .map(|p| ("operation", p.id.clone(), 0.0));
        elements.chain(pending)
    }

    fn insert_statuses(&self, m: &mut Map<String, Value>, key: ElementKey) {
        if let Some(s) = self.starvation.as_ref().and_then(|st| st.get(&key)) {
            m.insert("scheduling_status".into(), json!(s.scheduling));
            m.insert("starvation_status".into(), json!(s.starvation.name()));
        }
    }

    /// The tree's orchid.
    pub fn orchid(&self) -> Value {
        let shares = &*self.shares;
        let mut pools = Map::new();
        let mut operations = Map::new();
        for e in &shares.elements {
            match &e.kind {
                ElementKind::Pool { name, mode } => {
                    pools.insert(
                        name.to_string(),
                        Value::Object(self.pool_orchid(e, name, *mode)),
                    );
                }
                ElementKind::Operation { id } => {
                    if let Some(m) = self.operation_orchid(e, id) {
                        operations.insert(id.to_string(), Value::Object(m));
                    }
                }
            }
        }
        self.insert_pending(&shares.total, &mut operations);
        json!({
            "resource_limits": resource_vector(&self.resources),
            "config": self.tree.config.to_attributes(),
            "node_count": self.node_count,
            "alerts": shares.alerts,
            "pools": pools,
            "operations": operations,
        })
    }

    /// One pool's entry: its shares, statuses, counts against limits, and guarantees.
    fn pool_orchid(
        &self,
        e: &Element,
        name: &ytsched_common::names::TreePoolName,
        mode: PoolMode,
    ) -> Map<String, Value> {
        let (tree, shares) = (&self.tree, &*self.shares);
        let mut m = common_fields(e, shares);
        let sat = e
            .children()
            .iter()
            .map(|&c| element_satisfaction(&shares.elements[c]))
            .fold(f64::INFINITY, f64::min);
        m.insert("satisfaction_ratio".into(), json!(finite(sat)));
        self.insert_statuses(&mut m, ElementKey::Pool(name.clone()));
        m.insert(
            "mode".into(),
            json!(match mode {
                PoolMode::FairShare => "fair_share",
                PoolMode::Fifo => "fifo",
            }),
        );
        let pool = tree.pools.get(name);
        m.insert(
            "parent".into(),
            match e.parent {
                Some(p) => json!(shares.elements[p].name()),
                None => Value::Null,
            },
        );
        m.insert(
            "is_ephemeral".into(),
            json!(pool.is_some_and(|p| p.ephemeral_user.is_some())),
        );
        let c: PoolCounts = self.counts.get(name.as_str()).copied().unwrap_or_default();
        m.insert("operation_count".into(), json!(c.total));
        m.insert("running_operation_count".into(), json!(c.running));
        m.insert(
            "lightweight_running_operation_count".into(),
            json!(c.lightweight_running),
        );
        m.insert(
            "max_operation_count".into(),
            json!(tree.max_operation_count(name)),
        );
        m.insert(
            "max_running_operation_count".into(),
            json!(tree.max_running_operation_count(name)),
        );
        // (A pool's element always has them.)
        if let Some(own) = e.pool.as_deref() {
            m.insert(
                "strong_guarantee_share".into(),
                share_vector(&own.strong_guarantee_share),
            );
            m.insert(
                "effective_strong_guarantee_resources".into(),
                resource_vector(&own.effective_strong_guarantee),
            );
            m.insert("total_burst_ratio".into(), json!(own.total_burst_ratio));
            m.insert(
                "total_resource_flow_ratio".into(),
                json!(own.total_resource_flow_ratio),
            );
            if let Some(ig) = &own.integral {
                insert_integral(&mut m, tree, ig, shares);
            }
        }
        if let Some(p) = pool {
            if let Some(l) = &p.config.resource_limits {
                m.insert("resource_limits".into(), json!(l));
            }
            if let Some(g) = &p.config.strong_guarantee_resources {
                m.insert("strong_guarantee_resources".into(), json!(g));
            }
        }
        m
    }

    /// One running operation's entry (`None` if the facts no longer hold it).
    fn operation_orchid(
        &self,
        e: &Element,
        id: &ytsched_common::OperationId,
    ) -> Option<Map<String, Value>> {
        let op = self.ops.get(id)?;
        let mut m = common_fields(e, &self.shares);
        m.insert(
            "satisfaction_ratio".into(),
            json!(finite(element_satisfaction(e))),
        );
        self.insert_statuses(&mut m, ElementKey::Operation(id.clone()));
        m.insert("state".into(), json!(op.state.name()));
        m.insert("pool".into(), json!(op.pool));
        m.insert("user".into(), json!(op.user));
        m.insert("lightweight".into(), json!(op.lightweight));
        m.insert("running_job_count".into(), json!(op.running));
        m.insert("pending_job_count".into(), json!(op.pending));
        let (preemptible, aggressive) = op.preemptible;
        m.insert("preemptible_job_count".into(), json!(preemptible));
        m.insert(
            "aggressively_preemptible_job_count".into(),
            json!(aggressive),
        );
        if let Some(l) = &op.resource_limits {
            m.insert("resource_limits".into(), json!(l));
        }
        m.insert("suspended".into(), json!(op.suspended));
        m.insert("is_gang".into(), json!(op.is_gang));
        if let Some(r) = op.unschedulable_reason {
            m.insert("unschedulable_reason".into(), json!(r));
        }
        if let Some(f) = e.fifo_index {
            m.insert("fifo_index".into(), json!(f));
        }
        Some(m)
    }

    /// Pending operations (SPEC 5.4, 6.2): listed with their pool and demand; they have
    /// no fair share and no usage yet.
    fn insert_pending(&self, total: &ResourceVector, out: &mut Map<String, Value>) {
        let zero = share_vector(&ResourceVector::ZERO);
        for op in &self.pending {
            let demand = op.demand;
            let demand_share = demand.share_of(total);
            let mut m = Map::new();
            m.insert("state".into(), json!(OperationState::Pending.name()));
            m.insert("pool".into(), json!(op.pool));
            m.insert("user".into(), json!(op.user));
            m.insert("weight".into(), json!(op.weight));
            m.insert("lightweight".into(), json!(op.lightweight));
            m.insert("fair_share_ratio".into(), json!(0.0));
            m.insert("usage_ratio".into(), json!(0.0));
            m.insert("demand_ratio".into(), json!(demand_share.max_component()));
            m.insert(
                "dominant_resource".into(),
                json!(ytsched_fair_share::vector::dominant_resource(&demand, total).name()),
            );
            m.insert(
                "detailed_fair_share".into(),
                json!({"total": zero, "strong_guarantee": zero, "integral_guarantee": zero, "weight_proportional": zero}),
            );
            m.insert("usage_share".into(), zero.clone());
            m.insert("demand_share".into(), share_vector(&demand_share));
            m.insert(
                "resource_usage".into(),
                resource_vector(&ResourceVector::ZERO),
            );
            m.insert("resource_demand".into(), resource_vector(&demand));
            m.insert("running_job_count".into(), json!(0));
            m.insert("pending_job_count".into(), json!(op.pending));
            if let Some(l) = &op.resource_limits {
                m.insert("resource_limits".into(), json!(l));
            }
            m.insert("suspended".into(), json!(op.suspended));
            m.insert("is_gang".into(), json!(op.is_gang));
            m.insert(
                "unschedulable_reason".into(),
                json!(op.unschedulable_reason),
            );
            out.insert(op.id.clone(), Value::Object(m));
        }
    }
}

/// SPEC 5.7 fields of a pool with `integral_guarantees`.
fn insert_integral(
    m: &mut Map<String, Value>,
    tree: &ytsched_common::pool_tree::PoolTree,
    ig: &IntegralView,
    shares: &TreeShares,
) {
    let total = &shares.total;
    let volume = ig.volume_ratio;
    let k = tree.config.integral_guarantees.capacity_seconds();
    m.insert("integral_guarantee_type".into(), json!(ig.kind));
    m.insert(
        "specified_resource_flow_ratio".into(),
        json!(ig.specified_resource_flow_ratio),
    );
    m.insert(
        "specified_burst_ratio".into(),
        json!(ig.specified_burst_ratio),
    );
    m.insert("accumulated_resource_ratio_volume".into(), json!(volume));
    m.insert(
        "accumulated_resource_volume".into(),
        resource_vector(&total.scale(volume)),
    );
    m.insert(
        "integral_pool_capacity".into(),
        resource_vector(&total.scale(k * ig.specified_resource_flow_ratio)),
    );
    if ig.kind == IntegralGuaranteeType::Burst {
        // How long the volume lasts at the burst share, with the flow still coming in.
        let drain = ig.specified_burst_ratio - ig.specified_resource_flow_ratio;
        let seconds = if drain > 1e-12 {
            volume / drain
        } else {
            f64::MAX
        };
        m.insert(
            "estimated_burst_usage_duration_seconds".into(),
            json!(finite(seconds)),
        );
    }
}

fn element_satisfaction(e: &Element) -> f64 {
    satisfaction(&e.usage_share, &e.fair_share.total, &e.demand_share)
}

impl<'a> CoreReads<'a> {
    /// The orchid of one tree as of its last fair share update.
    pub fn tree_orchid(&self, tree_name: &str) -> Option<Value> {
        Some(self.tree_facts(tree_name)?.orchid())
    }

    /// The facts of one tree's orchid.
    pub fn tree_facts(&self, tree_name: &str) -> Option<TreeFacts> {
        let mut facts = self.tree_facts_head(tree_name)?;
        while self.add_facts(&mut facts, usize::MAX) {}
        Some(facts)
    }

    /// A tree's facts without those of its operations, which `add_facts` adds a part
    /// at a time, so that a caller holding the core behind a lock can let go of it
    /// between parts (O(operations) in all).
    pub fn tree_facts_head(&self, tree_name: &str) -> Option<TreeFacts> {
        let tree = self.cluster.trees.get(tree_name)?;
        Some(TreeFacts {
            name: tree_name.to_string(),
            tree: tree.clone(),
            shares: self.trees.shares(tree_name).unwrap_or_default(),
            counts: self.operations.pool_counts(self.cluster, tree_name),
            starvation: self.trees.get(tree_name).map(|t| t.starvation.clone()),
            ops: std::collections::HashMap::new(),
            pending: Vec::new(),
            node_count: self.trees.get(tree_name).map_or(0, |t| t.members.len()),
            resources: self.trees.resources(tree_name),
            progress: FactsProgress::Elements(0),
        })
    }

    /// Adds the facts of up to `limit` more operations as they are now: first those of
    /// the tree's snapshot, then the pending ones (looking at up to `limit` of the core's
    /// operations per call). Whether there is more to add.
    pub fn add_facts(&self, facts: &mut TreeFacts, limit: usize) -> bool {
        let tree_name = facts.name.clone();
        facts.progress = match std::mem::replace(&mut facts.progress, FactsProgress::Done) {
            FactsProgress::Elements(from) => {
                let shares = facts.shares.clone();
                let mut next = shares.elements.len();
                let mut taken = 0;
                for (i, e) in shares.elements.iter().enumerate().skip(from) {
                    if taken == limit {
                        next = i;
                        break;
                    }
                    if let ElementKind::Operation { id } = &e.kind {
                        taken += 1;
                        if let Some(f) = self.operation_facts(id, &tree_name) {
                            facts.ops.insert(id.clone(), f);
                        }
                    }
                }
                if next < shares.elements.len() {
                    FactsProgress::Elements(next)
                } else {
                    FactsProgress::Pending(None)
                }
            }
            FactsProgress::Pending(after) => {
                let mut last = None;
                let mut seen = 0;
                for op in self.operations.values_after(after.as_ref()).take(limit) {
                    seen += 1;
                    last = Some(op.id.clone());
                    if let Some(p) = pending_facts(op, &tree_name) {
                        facts.pending.push(p);
                    }
                }
                if seen == limit {
                    FactsProgress::Pending(last)
                } else {
                    FactsProgress::Done
                }
            }
            FactsProgress::Done => FactsProgress::Done,
        };
        !matches!(facts.progress, FactsProgress::Done)
    }

    /// What one operation of a tree's snapshot shows now.
    fn operation_facts(&self, id: &OperationId, tree_name: &str) -> Option<OpFacts> {
        let op = self.operations.get(id)?;
        let slot = op.slot(tree_name);
        Some(OpFacts {
            state: op.state,
            pool: slot.map(|s| s.pool.to_string()),
            user: op.user.clone(),
            lightweight: slot.is_some_and(|s| s.lightweight),
            running: op.running_job_ids().count(),
            pending: op.waiting_job_count(),
            preemptible: self.victims().preemptible_counts(id, tree_name),
            resource_limits: op.spec.resource_limits_in(tree_name).cloned(),
            suspended: op.suspended,
            unschedulable_reason: op.unschedulable_reason(),
            is_gang: op.is_gang(),
        })
    }

    /// The facts of every tree's orchid: what `orchid_of` makes the orchid from.
    pub fn orchid_facts(&self) -> Vec<TreeFacts> {
        self.cluster
            .trees
            .keys()
            .filter_map(|name| self.tree_facts(name.as_str()))
            .collect()
    }

    /// The facts of every tree, without their operations' (`tree_facts_head`).
    pub fn orchid_facts_heads(&self) -> Vec<TreeFacts> {
        self.cluster
            .trees
            .keys()
            .filter_map(|name| self.tree_facts_head(name.as_str()))
            .collect()
    }

    /// `//sys/scheduler/orchid/scheduler`: every tree, and operations by id.
    pub fn orchid(&self) -> Value {
        orchid_of(self.orchid_facts())
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
                            e.fair_share.total.max_component(),
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
