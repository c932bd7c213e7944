//! The scheduler's side of fair share (SPEC 5.1, 5.7): turns one pool tree and its
//! running operations into the input of `ytsched-fair-share`, and keeps the result
//! indexed by pool and operation for placement, preemption, starvation and the orchid.
//! The maths lives in that crate; this module only translates.

use std::collections::HashMap;
use ytsched_common::names::TreePoolName;
use ytsched_common::pool_config::{
    limits_vector, FifoSortParameter, IntegralGuaranteeType, PoolMode, ROOT_POOL,
};
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::tag_filter::TagFilter;
use ytsched_common::OperationId;
use ytsched_fair_share as fs;

use ytsched_common::pool_tree::PoolTree;

pub use ytsched_fair_share::DetailedShare;

/// What the engine needs to know about one schedulable (running) operation.
#[derive(Clone, Debug, PartialEq)]
pub struct OperationInput {
    pub id: OperationId,
    pub pool: TreePoolName,
    pub weight: f64,
    /// Absolute resources: running plus waiting jobs.
    pub demand: ResourceVector,
    pub usage: ResourceVector,
    /// Absolute limits (`INFINITY` where unset).
    pub resource_limits: ResourceVector,
    pub max_share_ratio: f64,
    /// Submission order: the `start_time` FIFO key and the final tie-breaker.
    pub seq: u64,
    pub pending_job_count: u64,
    /// Its fair share in a FIFO pool is all or nothing (`fifo_truncation.rs`).
    pub is_gang: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ElementKind {
    Pool { name: TreePoolName, mode: PoolMode },
    Operation { id: OperationId },
}

/// A pool's integral guarantee figures after an update.
#[derive(Clone, Debug, PartialEq)]
pub struct IntegralView {
    pub kind: IntegralGuaranteeType,
    pub specified_burst_ratio: f64,
    pub specified_resource_flow_ratio: f64,
    /// Accumulated volume as a share of the tree × seconds.
    pub volume_ratio: f64,
    /// The integral share ratio given in this update (what the volume pays for next).
    pub last_share_ratio: f64,
}

impl IntegralView {
    /// Burst and relaxed pools accumulate volume; `none` ones do not.
    pub fn accrues(&self) -> bool {
        self.kind != IntegralGuaranteeType::None
    }
}

/// One pool or operation after an update: every share the orchid shows. A snapshot
/// holds one per operation, so what only pools have is boxed apart (`PoolFigures`):
/// an operation's element is the shares placement, preemption and starvation read.
#[derive(Clone, Debug)]
pub struct Element {
    pub kind: ElementKind,
    pub parent: Option<usize>,
    pub weight: f64,
    pub demand_share: ResourceVector,
    pub usage_share: ResourceVector,
    pub limits_share: ResourceVector,
    /// The end of the element's path (SPEC 5.1): what it would take offered everything.
    pub limited_demand_share: ResourceVector,
    /// The element's fair share; its split into parts is `detailed_fair_share`.
    pub fair_share: ResourceVector,
    pub dominant_resource: Resource,
    /// Position in a FIFO pool's order (operations in FIFO pools only).
    pub fifo_index: Option<usize>,
    /// A pool's own figures; `None` for an operation.
    pub pool: Option<Box<PoolFigures>>,
}

/// What only a pool's element has.
#[derive(Clone, Debug, Default)]
pub struct PoolFigures {
    pub children: Vec<usize>,
    /// The pool's fair share split into its strong guarantee, integral guarantee and
    /// weight-proportional parts (an operation's is all weight-proportional).
    pub detailed_fair_share: DetailedShare,
    /// After the overcommit factor and limits.
    pub strong_guarantee_share: ResourceVector,
    /// Explicit plus implicit guarantee, absolute, unscaled.
    pub effective_strong_guarantee: ResourceVector,
    pub total_burst_ratio: f64,
    pub total_resource_flow_ratio: f64,
    pub integral: Option<IntegralView>,
    /// The pool's own `scheduling_tag_filter`: its subtree runs only on matching nodes.
    pub tag_filter: Option<TagFilter>,
}

impl Element {
    pub fn name(&self) -> &str {
        match &self.kind {
            ElementKind::Pool { name, .. } => name,
            ElementKind::Operation { id } => id.as_str(),
        }
    }

    pub fn pool_name(&self) -> Option<&TreePoolName> {
        match &self.kind {
            ElementKind::Pool { name, .. } => Some(name),
            ElementKind::Operation { .. } => None,
        }
    }

    /// A pool's children (none for an operation).
    pub fn children(&self) -> &[usize] {
        self.pool.as_ref().map_or(&[], |p| &p.children)
    }

    /// A pool's `scheduling_tag_filter`, if it has one.
    pub fn tag_filter(&self) -> Option<&TagFilter> {
        self.pool.as_ref()?.tag_filter.as_ref()
    }

    /// The fair share split into parts. Only a pool's is kept split: an operation's is
    /// all weight-proportional (`DetailedShare::unguaranteed`), so each of 100,000
    /// operation elements holds one vector, not four.
    pub fn detailed_fair_share(&self) -> DetailedShare {
        self.pool.as_ref().map_or_else(
            || DetailedShare::unguaranteed(self.fair_share),
            |p| p.detailed_fair_share,
        )
    }

    /// A pool's integral guarantee figures, if it has an integral guarantee.
    pub fn integral(&self) -> Option<&IntegralView> {
        self.pool.as_ref()?.integral.as_ref()
    }
}

/// The result of one update of one tree.
#[derive(Clone, Debug, Default)]
pub struct TreeShares {
    /// The tree these shares are of (set by the caller that names trees).
    pub tree: String,
    /// Element 0 is `<Root>`; parents come before their children.
    pub elements: Vec<Element>,
    pub pool_index: HashMap<TreePoolName, usize>,
    pub operation_index: HashMap<OperationId, usize>,
    pub total: ResourceVector,
    /// Human-readable problems with the configuration (guarantee overcommit...).
    pub alerts: Vec<String>,
}

impl TreeShares {
    /// `idx` and its ancestors up to the root, nearest first.
    pub fn path(&self, idx: usize) -> Vec<usize> {
        let mut out = vec![];
        let mut cur = Some(idx);
        while let Some(i) = cur {
            out.push(i);
            cur = self.elements[i].parent;
        }
        out
    }

    /// Whether a node with `tags` may run jobs of element `idx`: every pool above it
    /// with a `scheduling_tag_filter` must admit the node.
    pub fn admits(&self, idx: usize, tags: &std::collections::BTreeSet<String>) -> bool {
        let mut cur = Some(idx);
        while let Some(i) = cur {
            if let Some(f) = self.elements[i].tag_filter() {
                if !f.matches(tags) {
                    return false;
                }
            }
            cur = self.elements[i].parent;
        }
        true
    }
}

/// Accumulated integral volume of each pool of one tree (share × seconds).
pub type PoolVolumes = HashMap<TreePoolName, f64>;

/// What an update needs besides the tree and its operations: state carried from the
/// previous update, and what the nodes offer.
#[derive(Clone, Debug, Default)]
pub struct UpdateContext {
    /// Accumulated integral volume of each pool (share × seconds).
    pub volumes: PoolVolumes,
    /// The integral share ratio each pool was given in the previous update.
    pub last_share_ratios: HashMap<TreePoolName, f64>,
    /// Seconds since the previous update, if any.
    pub since_previous_s: Option<f64>,
    /// For pools with a `scheduling_tag_filter`: the resources of the nodes it matches.
    pub filter_resources: HashMap<TreePoolName, ResourceVector>,
}

/// Computes fair shares for one tree with no history.
pub fn compute(
    tree: &PoolTree,
    total: ResourceVector,
    operations: &[OperationInput],
) -> TreeShares {
    compute_in(tree, total, operations, &UpdateContext::default())
}

/// Computes fair shares for one tree: the tree and its operations become the fair-share
/// crate's input (pools breadth-first so parents precede children, then operations),
/// the crate computes, and each element's result is joined with what placement needs.
pub fn compute_in(
    tree: &PoolTree,
    total: ResourceVector,
    operations: &[OperationInput],
    ctx: &UpdateContext,
) -> TreeShares {
    let mut b = InputBuilder::new(tree.pools.len() + 1 + operations.len());
    b.add_pools(tree, total, ctx);
    b.add_operations(operations);
    let InputBuilder {
        elements,
        kinds,
        filters,
        pool_index,
        operation_index,
        ..
    } = b;
    let mut out = TreeShares {
        total,
        pool_index,
        operation_index,
        ..Default::default()
    };
    let smooth = tree.config.integral_guarantees.smooth_period.0 as f64 / 1000.0;
    let input = fs::TreeInput {
        total,
        elements,
        integral: fs::IntegralOptions {
            smooth_period_s: smooth,
            saturation_period_s: tree.config.integral_guarantees.capacity_seconds(),
        },
        since_previous_s: ctx.since_previous_s,
        truncate_gangs_in_fifo_pools: tree.config.enable_fair_share_truncation_in_fifo_pool,
    };
    // Each result becomes an `Element` as it comes: the crate's results are never all
    // held beside the snapshot made of them.
    let mut joiner = Joiner::new(&input, kinds, filters);
    let result = fs::Solver::default().compute_each(&input, |i, r| joiner.push(i, r));
    match result {
        Ok(tree) => {
            out.alerts = tree.alerts.iter().map(|a| a.to_string()).collect();
            out.elements = joiner.out;
        }
        Err(e) => {
            // Every number here went through validation; say so loudly if one did not.
            tracing::error!(error = %e, "fair share input refused; shares are zero this update");
            out.alerts
                .push(format!("fair share could not be computed: {e}"));
        }
    }
    out
}

/// The fair-share crate's input for one tree, built with what placement keeps per
/// element (kind, and a pool's tag filter) at the same indices.
struct InputBuilder<'t> {
    elements: Vec<fs::ElementInput>,
    kinds: Vec<ElementKind>,
    /// Per pool element (pools come first): its tag filter.
    filters: Vec<Option<TagFilter>>,
    /// Per pool element: its FIFO sort keys, if it is a FIFO pool.
    fifo_keys: Vec<Option<&'t [FifoSortParameter]>>,
    pool_index: HashMap<TreePoolName, usize>,
    operation_index: HashMap<OperationId, usize>,
}

impl<'t> InputBuilder<'t> {
    fn new(count: usize) -> Self {
        let mut b = Self {
            elements: Vec::with_capacity(count),
            kinds: Vec::with_capacity(count),
            filters: Vec::with_capacity(count),
            fifo_keys: Vec::new(),
            pool_index: HashMap::new(),
            operation_index: HashMap::new(),
        };
        b.elements.push(fs::ElementInput::root());
        b.kinds.push(ElementKind::Pool {
            name: TreePoolName::root(),
            mode: PoolMode::FairShare,
        });
        b.filters.push(None);
        b.fifo_keys.push(None);
        b.pool_index.insert(TreePoolName::root(), 0);
        b
    }

    /// Every pool, breadth-first so parents precede children.
    fn add_pools(&mut self, tree: &'t PoolTree, total: ResourceVector, ctx: &UpdateContext) {
        self.pool_index.reserve(tree.pools.len());
        let mut by_parent: HashMap<&str, Vec<(&TreePoolName, &ytsched_common::pool_tree::Pool)>> =
            HashMap::new();
        for (name, pool) in &tree.pools {
            by_parent
                .entry(pool.parent.as_str())
                .or_default()
                .push((name, pool));
        }
        let mut queue = std::collections::VecDeque::from([(ROOT_POOL, 0usize)]);
        while let Some((name, idx)) = queue.pop_front() {
            for &(child_name, pool) in by_parent.get(name).map(|v| v.as_slice()).unwrap_or(&[]) {
                let child = child_name.as_str();
                let c = &pool.config;
                let filter = c.tag_filter().cloned();
                let mut limits = limits_vector(c.resource_limits.as_ref());
                if filter.is_some() {
                    let offered = ctx
                        .filter_resources
                        .get(child_name)
                        .copied()
                        .unwrap_or_default();
                    limits = limits.map(|r, v| v.min(offered.get(r)));
                }
                let ci = self.elements.len();
                self.elements.push(fs::ElementInput {
                    parent: Some(idx),
                    weight: c.weight(),
                    resource_limits: limits,
                    max_share_ratio: c.max_share_ratio(),
                    kind: fs::ElementKind::Pool {
                        mode: match c.mode() {
                            PoolMode::FairShare => fs::Mode::FairShare,
                            PoolMode::Fifo => fs::Mode::Fifo,
                        },
                        strong_guarantee: c
                            .strong_guarantee_resources
                            .as_ref()
                            .map(|g| fs::Guarantee::from_vector(g.to_vector(0.0), g.specified()))
                            .unwrap_or_default(),
                        integral: integral_input(tree, child_name, total, ctx).map(Box::new),
                    },
                });
                self.kinds.push(ElementKind::Pool {
                    name: child_name.clone(),
                    mode: c.mode(),
                });
                self.filters.push(filter);
                self.fifo_keys
                    .push((c.mode() == PoolMode::Fifo).then(|| c.fifo_sort_parameters()));
                self.pool_index.insert(child_name.clone(), ci);
                queue.push_back((child, ci));
            }
        }
    }

    /// Every operation under its pool; those of FIFO pools ranked by the pool's
    /// `fifo_sort_parameters`.
    fn add_operations(&mut self, operations: &[OperationInput]) {
        self.operation_index.reserve(operations.len());
        let mut fifo_members: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        for (k, op) in operations.iter().enumerate() {
            let Some(&parent) = self.pool_index.get(&op.pool) else {
                continue;
            };
            let ci = self.elements.len();
            self.elements.push(fs::ElementInput {
                parent: Some(parent),
                weight: op.weight,
                resource_limits: op.resource_limits,
                max_share_ratio: op.max_share_ratio,
                kind: fs::ElementKind::Operation {
                    demand: op.demand,
                    usage: op.usage,
                    fifo_rank: 0,
                    is_gang: op.is_gang,
                },
            });
            if self.fifo_keys[parent].is_some() {
                fifo_members.entry(parent).or_default().push((k, ci));
            }
            self.kinds
                .push(ElementKind::Operation { id: op.id.clone() });
            self.operation_index.insert(op.id.clone(), ci);
        }
        for (parent, mut members) in fifo_members {
            let keys = self.fifo_keys[parent].unwrap_or_default();
            members.sort_by(|&(a, _), &(b, _)| fifo_order(keys, &operations[a], &operations[b]));
            for (rank, (_, ci)) in members.into_iter().enumerate() {
                if let fs::ElementKind::Operation { fifo_rank, .. } = &mut self.elements[ci].kind {
                    *fifo_rank = rank as u64;
                }
            }
        }
    }
}

/// A pool's integral guarantee as the fair-share crate takes it, with the volume it has
/// accumulated.
fn integral_input(
    tree: &PoolTree,
    pool: &TreePoolName,
    total: ResourceVector,
    ctx: &UpdateContext,
) -> Option<fs::IntegralInput> {
    let ig = tree.pools.get(pool)?.config.integral_guarantees.as_ref()?;
    Some(fs::IntegralInput {
        kind: match ig.guarantee_type {
            IntegralGuaranteeType::None => fs::IntegralKind::None,
            IntegralGuaranteeType::Burst => fs::IntegralKind::Burst,
            IntegralGuaranteeType::Relaxed => fs::IntegralKind::Relaxed,
        },
        resource_flow: amounts(ig.resource_flow.as_ref()),
        burst_guarantee: amounts(ig.burst_guarantee_resources.as_ref()),
        relaxed_share_multiplier_limit: ig.relaxed_share_multiplier_limit.unwrap_or(
            tree.config
                .integral_guarantees
                .relaxed_share_multiplier_limit,
        ),
        volume: total.scale(ctx.volumes.get(pool).copied().unwrap_or(0.0)),
        last_share_ratio: ctx.last_share_ratios.get(pool).copied().unwrap_or(0.0),
    })
}

/// Each element's computed shares joined with its input, kind, children and filter,
/// one element at a time as the crate hands them over.
struct Joiner<'a> {
    input: &'a fs::TreeInput,
    /// Per pool element.
    children: Vec<Vec<usize>>,
    kinds: std::vec::IntoIter<ElementKind>,
    /// Per pool element, in order.
    filters: std::vec::IntoIter<Option<TagFilter>>,
    out: Vec<Element>,
}

impl<'a> Joiner<'a> {
    fn new(
        input: &'a fs::TreeInput,
        kinds: Vec<ElementKind>,
        filters: Vec<Option<TagFilter>>,
    ) -> Self {
        // Pools come first, and only they have children or a filter.
        let mut children: Vec<Vec<usize>> = vec![vec![]; filters.len()];
        for (i, e) in input.elements.iter().enumerate() {
            if let Some(p) = e.parent {
                children[p].push(i);
            }
        }
        Self {
            input,
            children,
            kinds: kinds.into_iter(),
            filters: filters.into_iter(),
            out: Vec::with_capacity(input.elements.len()),
        }
    }

    /// Element `i`'s result; they come in the input's order.
    fn push(&mut self, i: usize, r: fs::ElementOutput) {
        let Some(kind) = self.kinds.next() else {
            return;
        };
        let input = self.input;
        let integral = r.integral.map(|ig| IntegralView {
            kind: match &input.elements[i].kind {
                fs::ElementKind::Pool {
                    integral: Some(x), ..
                } => match x.kind {
                    fs::IntegralKind::None => IntegralGuaranteeType::None,
                    fs::IntegralKind::Burst => IntegralGuaranteeType::Burst,
                    fs::IntegralKind::Relaxed => IntegralGuaranteeType::Relaxed,
                },
                _ => IntegralGuaranteeType::None,
            },
            specified_burst_ratio: ig.specified_burst_ratio,
            specified_resource_flow_ratio: ig.specified_resource_flow_ratio,
            volume_ratio: fs::vector::min_ratio(&ig.volume, &input.total),
            last_share_ratio: ig.last_share_ratio,
        });
        let e = &input.elements[i];
        let pool = matches!(e.kind, fs::ElementKind::Pool { .. }).then(|| {
            Box::new(PoolFigures {
                children: std::mem::take(&mut self.children[i]),
                detailed_fair_share: r.fair_share,
                strong_guarantee_share: r.strong_guarantee_share,
                effective_strong_guarantee: r.effective_strong_guarantee_resources,
                total_burst_ratio: r.total_burst_ratio,
                total_resource_flow_ratio: r.total_resource_flow_ratio,
                integral,
                tag_filter: self.filters.next().flatten(),
            })
        });
        self.out.push(Element {
            kind,
            parent: e.parent,
            weight: e.weight,
            demand_share: r.demand_share,
            usage_share: r.usage_share,
            limits_share: r.limits_share,
            limited_demand_share: r.limited_demand_share,
            fair_share: r.fair_share.total,
            dominant_resource: r.dominant_resource,
            fifo_index: r.fifo_index,
            pool,
        });
    }
}

fn amounts(a: Option<&ytsched_common::spec::ResourceAmounts>) -> ResourceVector {
    a.map(|a| a.to_vector(0.0)).unwrap_or_default()
}

/// `fifo_sort_parameters` order between two operations of one FIFO pool; submission
/// order breaks ties.
fn fifo_order(
    keys: &[FifoSortParameter],
    oa: &OperationInput,
    ob: &OperationInput,
) -> std::cmp::Ordering {
    for key in keys {
        let ord = match key {
            FifoSortParameter::Weight => ob.weight.total_cmp(&oa.weight),
            FifoSortParameter::StartTime => oa.seq.cmp(&ob.seq),
            FifoSortParameter::PendingJobCount => oa.pending_job_count.cmp(&ob.pending_job_count),
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    oa.seq.cmp(&ob.seq)
}

/// An element for tests: `usage`, `fair` share and `demand` as shares along a fixed
/// vector shape (cpu `x`, memory `x/2`, slots `x/4`), no guarantees or limits.
#[cfg(test)]
pub(crate) fn element(kind: ElementKind, usage: f64, fair: f64, demand: f64) -> Element {
    let v = |x: f64| ResourceVector::new(x, x / 2.0, 0.0, x / 4.0);
    let pool = matches!(kind, ElementKind::Pool { .. }).then(|| {
        Box::new(PoolFigures {
            detailed_fair_share: DetailedShare {
                total: v(fair),
                ..Default::default()
            },
            ..Default::default()
        })
    });
    Element {
        kind,
        parent: None,
        weight: 1.0,
        demand_share: v(demand),
        usage_share: v(usage),
        limits_share: v(1.0),
        limited_demand_share: v(demand.min(fair)),
        fair_share: v(fair),
        dominant_resource: Resource::Cpu,
        fifo_index: None,
        pool,
    }
}
