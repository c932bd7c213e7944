//! What the orchid of a tree is made of, taken from the core: its snapshot's shares and,
//! per operation, what the orchid shows of it now. The facts are taken a part at a time
//! (the service holds the core's lock for one part only); `orchid.rs` makes the orchid
//! from them afterwards.

use crate::queries::reads::CoreReads;
use crate::trees::fair_share::{ElementKind, TreeShares};
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::ResourceAmounts;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// What one operation of a tree's snapshot shows in the orchid.
pub(crate) struct OpFacts {
    pub(crate) state: OperationState,
    pub(crate) pool: Option<String>,
    pub(crate) user: String,
    pub(crate) lightweight: bool,
    pub(crate) running: usize,
    pub(crate) pending: u64,
    pub(crate) preemptible: (usize, usize),
    pub(crate) resource_limits: Option<ResourceAmounts>,
    pub(crate) suspended: bool,
    pub(crate) unschedulable_reason: Option<&'static str>,
    pub(crate) is_gang: bool,
}

/// A pending operation (no share yet), as the orchid lists it.
pub(crate) struct PendingFacts {
    pub(crate) id: String,
    pub(crate) pool: String,
    pub(crate) user: String,
    pub(crate) weight: f64,
    pub(crate) lightweight: bool,
    pub(crate) demand: ResourceVector,
    pub(crate) pending: u64,
    pub(crate) resource_limits: Option<ResourceAmounts>,
    pub(crate) suspended: bool,
    pub(crate) unschedulable_reason: Option<&'static str>,
    pub(crate) is_gang: bool,
}

/// What the orchid of one tree is made of, taken from the core (under its lock, in the
/// service); the JSON is made from it afterwards, so a 10,000-operation orchid holds the
/// lock only for these facts, not for building and serialising its maps.
pub struct TreeFacts {
    pub(crate) name: String,
    pub(crate) tree: ytsched_common::pool_tree::PoolTree,
    pub(crate) shares: std::sync::Arc<TreeShares>,
    pub(crate) counts: crate::operations::operation_counts::PoolCountMap,
    pub(crate) starvation: Option<std::sync::Arc<crate::trees::starvation::TreeStarvation>>,
    pub(crate) ops: std::collections::HashMap<ytsched_common::OperationId, OpFacts>,
    pub(crate) pending: Vec<PendingFacts>,
    pub(crate) node_count: usize,
    pub(crate) resources: ResourceVector,
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
            .map(|(kind, name)| (kind, name, e.fair_share.max_component()))
        });
        let pending = self
            .pending
            .iter()
            .map(|p| ("operation", p.id.clone(), 0.0));
        elements.chain(pending)
    }
}

impl<'a> CoreReads<'a> {
    /// The facts of one tree's orchid.
    pub fn tree_facts(&self, tree_name: &str) -> Option<TreeFacts> {
        let mut facts = self.tree_facts_head(tree_name)?;
        while self.add_facts(&mut facts, usize::MAX) {}
        Some(facts)
    }

    /// A tree's facts with those of one operation only: what its own orchid entry is
    /// made from, without the facts of every other operation of the tree.
    pub fn one_operation_facts(&self, tree_name: &str, id: &OperationId) -> Option<TreeFacts> {
        let mut facts = self.tree_facts_head(tree_name)?;
        let op = self.operations.get(id)?;
        if let Some(f) = self.operation_facts(id, tree_name) {
            facts.ops.insert(id.clone(), f);
        }
        facts.pending.extend(pending_facts(op, tree_name));
        facts.progress = FactsProgress::Done;
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
}
