//! The fair share engine (SPEC 5.1): hierarchical vector fair share over one pool tree.
//!
//! Everything is in shares (fractions of the tree's total per resource). One update:
//! 1. bottom-up: demand, usage and limited demand (demand capped by limits) per element;
//! 2. top-down: strong guarantee shares, explicit ones plus implicit ones for the
//!    resources a pool leaves out, scaled where they do not fit;
//! 3. top-down: each parent's fair share is split among its children. In a `fair_share`
//!    pool a child gets `min(limited demand, guarantee + s·w·direction)` with one common
//!    suggestion `s`, the largest that fits; in a `fifo` pool operations are served in
//!    order, each up to its limited demand.
//!
//! It is a pure function of its input, so the scheduler, `ytsched simulate`, property
//! tests and benchmarks all call the same code. Integral guarantees (SPEC 5.7) slot in
//! between steps 2 and 3 (`integral_guarantee` stays zero until they land).

use std::collections::HashMap;
use ytsched_common::pool_config::{limits_vector, FifoSortParameter, PoolMode, ROOT_POOL};
use ytsched_common::resources::{Resource, ResourceVector, EPSILON};
use ytsched_common::OperationId;

use super::integral;
use super::pool_tree::PoolTree;

/// What the engine needs to know about one schedulable (running) operation.
#[derive(Clone, Debug)]
pub struct OperationInput {
    pub id: OperationId,
    pub pool: String,
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
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DetailedShare {
    pub total: ResourceVector,
    pub strong_guarantee: ResourceVector,
    pub integral_guarantee: ResourceVector,
    pub weight_proportional: ResourceVector,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ElementKind {
    Pool { name: String, mode: PoolMode },
    Operation { id: OperationId },
}

/// One pool or operation after an update: every share the orchid shows.
#[derive(Clone, Debug)]
pub struct Element {
    pub kind: ElementKind,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    pub weight: f64,
    pub demand_share: ResourceVector,
    pub usage_share: ResourceVector,
    pub limits_share: ResourceVector,
    /// Demand capped by limits (and, for pools, by what the children can take).
    pub limited_demand_share: ResourceVector,
    /// Effective strong guarantee (explicit and implicit, scaled, capped by limits).
    pub strong_guarantee_share: ResourceVector,
    /// Integral guarantee given in this update (own, plus descendants' for ancestors).
    pub integral_share: ResourceVector,
    pub fair_share: DetailedShare,
    /// Position in a FIFO pool's order (operations in FIFO pools only).
    pub fifo_index: Option<usize>,
    /// For operations: index into the input slice.
    input: usize,
}

impl Element {
    pub fn name(&self) -> &str {
        match &self.kind {
            ElementKind::Pool { name, .. } => name,
            ElementKind::Operation { id } => id.as_str(),
        }
    }
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
}

/// The result of one update of one tree.
#[derive(Clone, Debug)]
pub struct TreeShares {
    /// The tree these shares are of (set by the caller that names trees).
    pub tree: String,
    /// Element 0 is `<Root>`; parents come before their children.
    pub elements: Vec<Element>,
    pub pool_index: HashMap<String, usize>,
    pub operation_index: HashMap<OperationId, usize>,
    pub total: ResourceVector,
    /// Human-readable problems with the configuration (guarantee overcommit...).
    pub alerts: Vec<String>,
    /// Common factor that strong and burst guarantees were scaled by to fit (1 = none).
    pub burst_factor: f64,
    /// Integral settings of the tree's pools as shares of `total`.
    pub integral_pools: HashMap<String, integral::IntegralPool>,
}

impl Default for TreeShares {
    fn default() -> Self {
        Self {
            tree: String::new(),
            elements: vec![],
            pool_index: HashMap::new(),
            operation_index: HashMap::new(),
            total: ResourceVector::ZERO,
            alerts: vec![],
            burst_factor: 1.0,
            integral_pools: HashMap::new(),
        }
    }
}

const ONE: ResourceVector = ResourceVector {
    cpu: 1.0,
    memory: 1.0,
    gpu: 1.0,
    user_slots: 1.0,
};

fn vmin(a: &ResourceVector, b: &ResourceVector) -> ResourceVector {
    a.map(|r, v| v.min(b.get(r)))
}

/// A share vector with components of resources the tree lacks forced to zero.
fn present(total: &ResourceVector, v: ResourceVector) -> ResourceVector {
    v.map(|r, x| if total.get(r) > EPSILON { x } else { 0.0 })
}

/// Computes fair shares for one tree.
pub fn compute(
    tree: &PoolTree,
    total: ResourceVector,
    operations: &[OperationInput],
) -> TreeShares {
    compute_with_volumes(tree, total, operations, &HashMap::new())
}

/// As `compute`, with the integral volumes (share × seconds) pools have accumulated.
pub fn compute_with_volumes(
    tree: &PoolTree,
    total: ResourceVector,
    operations: &[OperationInput],
    volumes: &HashMap<String, f64>,
) -> TreeShares {
    let mut out = TreeShares {
        tree: String::new(),
        total,
        ..Default::default()
    };
    let integral_pools = integral::integral_pools(tree, &total);
    build_elements(tree, total, operations, &integral_pools, &mut out);
    aggregate_bottom_up(&mut out);
    let burst_sum: ResourceVector = integral_pools
        .values()
        .filter(|p| p.kind == ytsched_common::pool_config::IntegralGuaranteeType::Burst)
        .map(|p| p.burst_share)
        .sum();
    assign_guarantees(tree, burst_sum, &mut out);
    integral::assign(tree, &integral_pools, volumes, &mut out);
    out.integral_pools = integral_pools;
    let root_fs = vmin(&out.elements[0].limited_demand_share, &present(&total, ONE));
    out.elements[0].fair_share = DetailedShare {
        total: root_fs,
        strong_guarantee: root_fs,
        ..Default::default()
    };
    for i in 0..out.elements.len() {
        if !out.elements[i].children.is_empty() {
            split_among_children(tree, i, operations, &mut out);
        }
    }
    out
}

fn build_elements(
    tree: &PoolTree,
    total: ResourceVector,
    operations: &[OperationInput],
    integral_pools: &HashMap<String, integral::IntegralPool>,
    out: &mut TreeShares,
) {
    let mut by_parent: HashMap<&str, Vec<&str>> = HashMap::new();
    for (name, pool) in &tree.pools {
        by_parent
            .entry(pool.parent.as_str())
            .or_default()
            .push(name);
    }
    let all = present(&total, ONE);
    out.elements.push(Element {
        kind: ElementKind::Pool {
            name: ROOT_POOL.into(),
            mode: PoolMode::FairShare,
        },
        parent: None,
        children: vec![],
        weight: 1.0,
        demand_share: ResourceVector::ZERO,
        usage_share: ResourceVector::ZERO,
        limits_share: all,
        limited_demand_share: ResourceVector::ZERO,
        strong_guarantee_share: all,
        integral_share: ResourceVector::ZERO,
        fair_share: DetailedShare::default(),
        fifo_index: None,
        input: usize::MAX,
    });
    out.pool_index.insert(ROOT_POOL.into(), 0);
    // Breadth-first so parents precede children.
    let mut queue = std::collections::VecDeque::from([(ROOT_POOL, 0usize)]);
    while let Some((name, idx)) = queue.pop_front() {
        for child in by_parent.get(name).map(|v| v.as_slice()).unwrap_or(&[]) {
            let pool = &tree.pools[*child];
            let limits = limits_vector(pool.config.resource_limits.as_ref());
            let mut limits_share = present(
                &total,
                vmin(
                    &limits.share_of(&total),
                    &ONE.scale(pool.config.max_share_ratio()),
                ),
            );
            // Integral pools never hold more than their burst share / multiplier × flow.
            if let Some(cap) = integral_pools.get(*child).and_then(|p| p.share_cap()) {
                limits_share = vmin(&limits_share, &cap);
            }
            let ci = out.elements.len();
            out.elements.push(Element {
                kind: ElementKind::Pool {
                    name: (*child).to_string(),
                    mode: pool.config.mode(),
                },
                parent: Some(idx),
                children: vec![],
                weight: pool.config.weight(),
                demand_share: ResourceVector::ZERO,
                usage_share: ResourceVector::ZERO,
                limits_share,
                limited_demand_share: ResourceVector::ZERO,
                strong_guarantee_share: ResourceVector::ZERO,
                integral_share: ResourceVector::ZERO,
                fair_share: DetailedShare::default(),
                fifo_index: None,
                input: usize::MAX,
            });
            out.elements[idx].children.push(ci);
            out.pool_index.insert((*child).to_string(), ci);
            queue.push_back((child, ci));
        }
    }
    for (input, op) in operations.iter().enumerate() {
        let Some(&parent) = out.pool_index.get(op.pool.as_str()) else {
            continue;
        };
        let limits_share = present(
            &total,
            vmin(
                &op.resource_limits.share_of(&total),
                &ONE.scale(op.max_share_ratio),
            ),
        );
        let demand_share = present(&total, op.demand.share_of(&total));
        let ci = out.elements.len();
        out.elements.push(Element {
            kind: ElementKind::Operation { id: op.id.clone() },
            parent: Some(parent),
            children: vec![],
            weight: op.weight,
            demand_share,
            usage_share: present(&total, op.usage.share_of(&total)),
            limits_share,
            limited_demand_share: vmin(&demand_share, &limits_share),
            strong_guarantee_share: ResourceVector::ZERO,
            integral_share: ResourceVector::ZERO,
            fair_share: DetailedShare::default(),
            fifo_index: None,
            input,
        });
        out.elements[parent].children.push(ci);
        out.operation_index.insert(op.id.clone(), ci);
    }
}

/// Pools' demand, usage and limited demand are their children's sums.
fn aggregate_bottom_up(out: &mut TreeShares) {
    for i in (0..out.elements.len()).rev() {
        if matches!(out.elements[i].kind, ElementKind::Operation { .. }) {
            continue;
        }
        let (mut d, mut u, mut l) = (
            ResourceVector::ZERO,
            ResourceVector::ZERO,
            ResourceVector::ZERO,
        );
        for &c in &out.elements[i].children {
            let e = &out.elements[c];
            d += e.demand_share;
            u += e.usage_share;
            l += e.limited_demand_share;
        }
        let e = &mut out.elements[i];
        e.demand_share = d;
        e.usage_share = u;
        e.limited_demand_share = vmin(&l, &e.limits_share);
    }
}

/// Strong guarantee shares, top-down (SPEC 5.1 "Strong guarantee share").
fn assign_guarantees(tree: &PoolTree, burst_sum: ResourceVector, out: &mut TreeShares) {
    let total = out.total;
    for p in 0..out.elements.len() {
        let pool_children: Vec<usize> = out.elements[p]
            .children
            .iter()
            .copied()
            .filter(|&c| matches!(out.elements[c].kind, ElementKind::Pool { .. }))
            .collect();
        if pool_children.is_empty() {
            continue;
        }
        let parent_g = out.elements[p].strong_guarantee_share;
        // Explicit guarantees as shares, with which components are specified.
        let mut explicit: Vec<(ResourceVector, [bool; 4])> = pool_children
            .iter()
            .map(|&c| {
                let name = out.elements[c].name();
                match &tree.pools[name].config.strong_guarantee_resources {
                    Some(g) => (
                        present(&total, g.to_vector(0.0).share_of(&total)),
                        g.specified(),
                    ),
                    None => (ResourceVector::ZERO, [false; 4]),
                }
            })
            .collect();
        let mut explicit_sum: ResourceVector = explicit.iter().map(|e| e.0).sum();
        if p == 0 {
            // The root's children are never rejected against the cluster size: scale
            // them all by one factor so they fit, and say so.
            // Burst guarantees count here too (SPEC 5.7): strong plus burst above the
            // cluster are scaled together.
            let claimed = explicit_sum + burst_sum;
            let factor = Resource::ALL
                .iter()
                .filter(|&&r| claimed.get(r) > 1.0 + 1e-9)
                .map(|&r| 1.0 / claimed.get(r))
                .fold(1.0f64, f64::min);
            if factor < 1.0 {
                let over: Vec<String> = Resource::ALL
                    .iter()
                    .filter(|&&r| claimed.get(r) > 1.0 + 1e-9)
                    .map(|&r| format!("{r} {:.0}%", claimed.get(r) * 100.0))
                    .collect();
                out.alerts.push(format!(
                    "strong and burst guarantees exceed the cluster ({}); all of them are scaled by {factor:.4}",
                    over.join(", ")
                ));
                out.burst_factor = factor;
                for e in &mut explicit {
                    e.0 = e.0.scale(factor);
                }
                explicit_sum = explicit_sum.scale(factor);
            }
        }
        // Implicit guarantees for unspecified resources, proportional to the cpu share
        // of the parent's cpu guarantee; they shrink (only they) if they do not fit.
        let mut implicit = vec![ResourceVector::ZERO; pool_children.len()];
        let mut implicit_sum = ResourceVector::ZERO;
        for (k, (g, spec)) in explicit.iter().enumerate() {
            let cpu_ratio = if parent_g.cpu > EPSILON {
                (g.cpu / parent_g.cpu).min(1.0)
            } else {
                0.0
            };
            for (i, r) in Resource::ALL.into_iter().enumerate() {
                if !spec[i] && r != Resource::Cpu {
                    implicit[k].set(r, cpu_ratio * parent_g.get(r));
                }
            }
            implicit_sum += implicit[k];
        }
        let shrink = parent_g.map(|r, pg| {
            let left = (pg - explicit_sum.get(r)).max(0.0);
            let s = implicit_sum.get(r);
            if s > left + 1e-12 {
                left / s
            } else {
                1.0
            }
        });
        for (k, &c) in pool_children.iter().enumerate() {
            let g = explicit[k].0 + implicit[k].map(|r, v| v * shrink.get(r));
            let e = &mut out.elements[c];
            e.strong_guarantee_share = vmin(&g, &e.limits_share);
        }
    }
}

/// Splits parent `p`'s fair share among its children.
fn split_among_children(
    tree: &PoolTree,
    p: usize,
    operations: &[OperationInput],
    out: &mut TreeShares,
) {
    let parent_fs = out.elements[p].fair_share.total;
    let children = out.elements[p].children.clone();
    let fifo = matches!(
        out.elements[p].kind,
        ElementKind::Pool {
            mode: PoolMode::Fifo,
            ..
        }
    );
    if fifo {
        let keys = tree
            .pools
            .get(out.elements[p].name())
            .map(|pool| pool.config.fifo_sort_parameters().to_vec())
            .unwrap_or_default();
        split_fifo(&keys, &children, parent_fs, operations, out);
        return;
    }
    let caps: Vec<ResourceVector> = children
        .iter()
        .map(|&c| out.elements[c].limited_demand_share)
        .collect();
    let guarantees: Vec<ResourceVector> = children
        .iter()
        .zip(&caps)
        .map(|(&c, cap)| {
            let e = &out.elements[c];
            vmin(&(e.strong_guarantee_share + e.integral_share), cap)
        })
        .collect();
    let g_sum: ResourceVector = guarantees.iter().copied().sum();
    // Guarantees that do not fit the parent's share (its limit beat them) shrink together.
    let over = Resource::ALL
        .iter()
        .filter(|&&r| g_sum.get(r) > parent_fs.get(r) + 1e-12)
        .map(|&r| parent_fs.get(r) / g_sum.get(r))
        .fold(1.0f64, f64::min);
    if over < 1.0 {
        for (k, &c) in children.iter().enumerate() {
            let g = guarantees[k].scale(over);
            out.elements[c].fair_share = detailed(&out.elements[c], g);
        }
        return;
    }
    let min_weight = children
        .iter()
        .map(|&c| out.elements[c].weight)
        .fold(f64::INFINITY, f64::min)
        .max(EPSILON);
    // Growth direction: the demand's proportions, dominant component 1.
    let dirs: Vec<ResourceVector> = children
        .iter()
        .map(|&c| {
            let e = &out.elements[c];
            let dom = e.demand_share.dominant().1;
            let w = e.weight / min_weight;
            if dom > EPSILON {
                e.demand_share.scale(w / dom)
            } else {
                ResourceVector::ZERO
            }
        })
        .collect();
    let share_at = |s: f64, k: usize| -> ResourceVector {
        let g = guarantees[k];
        let d = dirs[k];
        let cap = caps[k];
        ResourceVector {
            cpu: (g.cpu + s * d.cpu).min(cap.cpu).max(g.cpu),
            memory: (g.memory + s * d.memory).min(cap.memory).max(g.memory),
            gpu: (g.gpu + s * d.gpu).min(cap.gpu).max(g.gpu),
            user_slots: (g.user_slots + s * d.user_slots)
                .min(cap.user_slots)
                .max(g.user_slots),
        }
    };
    let fits = |s: f64| -> bool {
        let mut sum = ResourceVector::ZERO;
        for k in 0..children.len() {
            sum += share_at(s, k);
        }
        Resource::ALL
            .iter()
            .all(|&r| sum.get(r) <= parent_fs.get(r) + 1e-12)
    };
    // The suggestion at which every child is saturated.
    let mut s_hi: f64 = 0.0;
    for k in 0..children.len() {
        for r in Resource::ALL {
            let d = dirs[k].get(r);
            if d > EPSILON {
                s_hi = s_hi.max((caps[k].get(r) - guarantees[k].get(r)).max(0.0) / d);
            }
        }
    }
    let s = if fits(s_hi) {
        s_hi
    } else {
        let (mut lo, mut hi) = (0.0, s_hi);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo <= 1e-12 * s_hi.max(1e-9) {
                break;
            }
        }
        lo
    };
    for (k, &c) in children.iter().enumerate() {
        let total = share_at(s, k);
        out.elements[c].fair_share = detailed(&out.elements[c], total);
    }
}

/// Splits a fair share into its strong guarantee part, then the integral part, then the
/// rest (weights).
fn detailed(e: &Element, total: ResourceVector) -> DetailedShare {
    let strong = vmin(&e.strong_guarantee_share, &total);
    let integral = vmin(&e.integral_share, &(total - strong).map(|_, v| v.max(0.0)));
    DetailedShare {
        total,
        strong_guarantee: strong,
        integral_guarantee: integral,
        weight_proportional: (total - strong - integral).map(|_, v| v.max(0.0)),
    }
}

/// FIFO: operations in `fifo_sort_parameters` order, each up to its limited demand while
/// the pool's share lasts; the one that does not fit gets what is left (scaled along
/// its demand), the rest nothing.
fn split_fifo(
    keys: &[FifoSortParameter],
    children: &[usize],
    parent_fs: ResourceVector,
    operations: &[OperationInput],
    out: &mut TreeShares,
) {
    let mut order: Vec<usize> = children.to_vec();
    order.sort_by(|&a, &b| {
        let (ea, eb) = (&out.elements[a], &out.elements[b]);
        if ea.input == usize::MAX || eb.input == usize::MAX {
            return a.cmp(&b);
        }
        let (oa, ob) = (&operations[ea.input], &operations[eb.input]);
        for key in keys {
            let ord = match key {
                FifoSortParameter::Weight => ob.weight.total_cmp(&oa.weight),
                FifoSortParameter::StartTime => oa.seq.cmp(&ob.seq),
                FifoSortParameter::PendingJobCount => {
                    oa.pending_job_count.cmp(&ob.pending_job_count)
                }
            };
            if ord != std::cmp::Ordering::Equal {
                return ord;
            }
        }
        oa.seq.cmp(&ob.seq)
    });
    let mut left = parent_fs;
    for (index, &c) in order.iter().enumerate() {
        let want = out.elements[c].limited_demand_share;
        let k = Resource::ALL
            .iter()
            .filter(|&&r| want.get(r) > EPSILON)
            .map(|&r| (left.get(r).max(0.0) / want.get(r)).min(1.0))
            .fold(1.0f64, f64::min);
        let got = want.scale(k);
        left = (left - got).map(|_, v| v.max(0.0));
        let e = &mut out.elements[c];
        e.fifo_index = Some(index);
        e.fair_share = DetailedShare {
            total: got,
            weight_proportional: got,
            ..Default::default()
        };
    }
}
