//! One fair share update: the steps of the crate documentation, in order.

use crate::input::{ElementKind, IntegralKind, Mode, TreeInput};
use crate::output::{Alert, DetailedShare, ElementOutput, IntegralOutput, TreeOutput};
use crate::piecewise::Plf;
use crate::vector::{self, EPSILON};
use ytsched_common::resources::{Resource, ResourceVector};

/// Why an input cannot be computed at all.
#[derive(Clone, Debug, PartialEq)]
pub enum InputError {
    NoRoot,
    /// Element `index` names a parent that is not an earlier pool.
    BadParent {
        index: usize,
    },
    /// A number that must be finite and non-negative is not.
    BadNumber {
        index: usize,
        what: &'static str,
    },
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::NoRoot => write!(f, "the tree has no root element"),
            InputError::BadParent { index } => {
                write!(f, "element {index}: its parent must be an earlier pool")
            }
            InputError::BadNumber { index, what } => {
                write!(f, "element {index}: {what} must be finite and not negative")
            }
        }
    }
}

impl std::error::Error for InputError {}

/// Compressing functions drops breakpoints that move values by less than this.
pub(crate) const COMPRESS_EPSILON: f64 = 1e-12;

/// Per-element working state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Node {
    pub parent: Option<usize>,
    /// In FIFO order for FIFO pools.
    pub children: Vec<usize>,
    pub weight: f64,
    pub is_operation: bool,
    pub mode: Option<Mode>,
    pub limits_share: ResourceVector,
    pub demand_share: ResourceVector,
    pub usage_share: ResourceVector,
    pub inferred_guarantee: ResourceVector,
    pub strong_guarantee_share: ResourceVector,
    pub proposed_integral_share: ResourceVector,
    pub integral_kind: IntegralKind,
    pub burst_ratio: f64,
    pub specified_burst_ratio: f64,
    pub flow_ratio: f64,
    pub total_burst_ratio: f64,
    pub total_flow_ratio: f64,
    pub volume: ResourceVector,
    pub last_share_ratio: f64,
    pub multiplier: f64,
    pub fifo_index: Option<usize>,
    pub max_fit_factor: Option<Plf<f64>>,
    pub by_suggestion: Option<Plf<ResourceVector>>,
    pub fair_share: DetailedShare,
}

impl Node {
    fn guarantee_share(&self) -> ResourceVector {
        self.strong_guarantee_share + self.proposed_integral_share
    }
}

pub(crate) struct Update<'a> {
    pub input: &'a TreeInput,
    pub nodes: Vec<Node>,
    pub alerts: Vec<Alert>,
    pub overcommit_factor: f64,
    pub burst_pools: Vec<usize>,
    pub relaxed_pools: Vec<usize>,
}

/// Computes every element's fair share for one tree.
pub fn compute(input: &TreeInput) -> Result<TreeOutput, InputError> {
    check(input)?;
    let mut u = Update {
        input,
        nodes: vec![],
        alerts: vec![],
        overcommit_factor: 1.0,
        burst_pools: vec![],
        relaxed_pools: vec![],
    };
    let t0 = std::time::Instant::now();
    u.build_nodes();
    let ta = std::time::Instant::now();
    u.infer_guarantees();
    let tb = std::time::Instant::now();
    u.cumulative_attributes();
    let tc = std::time::Instant::now();
    u.refill_volumes();
    u.adjust_guarantees();
    u.burst_integral_shares();
    u.relaxed_integral_shares();
    let t1 = std::time::Instant::now();
    u.prepare(0);
    let t2 = std::time::Instant::now();
    u.set_fair_share(0, 1.0);
    u.root_fair_share();
    let t3 = std::time::Instant::now();
    let o = u.output();
    let t4 = std::time::Instant::now();
    if std::env::var("YTS_T").is_ok() {
        eprintln!(
            "T build {:?} infer {:?} cumul {:?} rest {:?} prepare {:?} topdown {:?} output {:?}",
            ta - t0,
            tb - ta,
            tc - tb,
            t1 - tc,
            t2 - t1,
            t3 - t2,
            t4 - t3
        );
    }
    Ok(o)
}

/// Not NaN and not negative (infinity allowed: "no limit").
fn non_negative(x: f64) -> bool {
    x >= 0.0
}

/// Finite and not negative.
fn amount(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn amounts(v: &ResourceVector) -> bool {
    Resource::ALL.iter().all(|&r| amount(v.get(r)))
}

fn check(input: &TreeInput) -> Result<(), InputError> {
    let Some(root) = input.elements.first() else {
        return Err(InputError::NoRoot);
    };
    if root.parent.is_some() || root.is_operation() {
        return Err(InputError::NoRoot);
    }
    if !amounts(&input.total) {
        return Err(InputError::BadNumber {
            index: 0,
            what: "the tree's total resources",
        });
    }
    for (index, e) in input.elements.iter().enumerate().skip(1) {
        match e.parent {
            Some(p) if p < index && !input.elements[p].is_operation() => {}
            _ => return Err(InputError::BadParent { index }),
        }
        let bad = |what| Err(InputError::BadNumber { index, what });
        if !(e.weight.is_finite() && e.weight > 0.0) {
            return bad("weight (positive)");
        }
        if !non_negative(e.max_share_ratio) {
            return bad("max_share_ratio");
        }
        if !Resource::ALL
            .iter()
            .all(|&r| non_negative(e.resource_limits.get(r)))
        {
            return bad("resource_limits");
        }
        match &e.kind {
            ElementKind::Operation { demand, usage, .. } => {
                if !amounts(demand) || !amounts(usage) {
                    return bad("demand and usage");
                }
            }
            ElementKind::Pool {
                strong_guarantee,
                integral,
                ..
            } => {
                if !strong_guarantee
                    .amounts
                    .iter()
                    .flatten()
                    .all(|&v| amount(v))
                {
                    return bad("strong_guarantee_resources");
                }
                if let Some(i) = integral {
                    let ok = amounts(&i.resource_flow)
                        && amounts(&i.burst_guarantee)
                        && amounts(&i.volume)
                        && amount(i.last_share_ratio)
                        && amount(i.relaxed_share_multiplier_limit);
                    if !ok {
                        return bad("integral_guarantees");
                    }
                }
            }
        }
    }
    Ok(())
}

impl Update<'_> {
    pub(crate) fn share(&self, abs: &ResourceVector) -> ResourceVector {
        vector::share(abs, &self.input.total)
    }

    fn build_nodes(&mut self) {
        let els = &self.input.elements;
        self.nodes = vec![Node::default(); els.len()];
        for (i, e) in els.iter().enumerate() {
            let n = &mut self.nodes[i];
            n.parent = e.parent;
            n.weight = e.weight;
            n.is_operation = e.is_operation();
            if let ElementKind::Pool { mode, integral, .. } = &e.kind {
                n.mode = Some(*mode);
                if let Some(ig) = integral {
                    n.integral_kind = ig.kind;
                    n.volume = ig.volume;
                    n.last_share_ratio = ig.last_share_ratio;
                    n.multiplier = ig.relaxed_share_multiplier_limit;
                }
            }
            if let Some(p) = e.parent {
                self.nodes[p].children.push(i);
            }
        }
    }

    /// Explicit guarantees plus implicit ones for the components a pool leaves out
    /// (proportional to its share of the parent's cpu guarantee), absolute.
    fn infer_guarantees(&mut self) {
        self.nodes[0].inferred_guarantee = self.input.total;
        for p in 0..self.nodes.len() {
            if self.nodes[p].is_operation || self.nodes[p].children.is_empty() {
                continue;
            }
            let children = self.nodes[p].children.clone();
            let explicit = |c: usize| match &self.input.elements[c].kind {
                ElementKind::Pool {
                    strong_guarantee, ..
                } => *strong_guarantee,
                ElementKind::Operation { .. } => Default::default(),
            };
            let mut total_explicit = ResourceVector::ZERO;
            for &c in &children {
                let g = explicit(c);
                let v = ResourceVector::ZERO.map(|r, _| g.get(r).unwrap_or(0.0));
                self.nodes[c].inferred_guarantee = v;
                total_explicit += v;
            }
            let parent = self.nodes[p].inferred_guarantee;
            let residual = vector::non_negative(&(parent - total_explicit));
            for r in Resource::ALL {
                if r == Resource::Cpu {
                    continue;
                }
                let mut implicit: Vec<(usize, f64)> = vec![];
                let mut sum = 0.0;
                for &c in &children {
                    if explicit(c).get(r).is_some() {
                        continue;
                    }
                    let ratio = if parent.cpu > 0.0 {
                        self.nodes[c].inferred_guarantee.cpu / parent.cpu
                    } else {
                        0.0
                    };
                    let v = ratio * parent.get(r);
                    sum += v;
                    implicit.push((c, v));
                }
                // Below the root implicit guarantees shrink to what explicit ones leave;
                // at the root an overcommit is handled by one common factor later.
                let k = if p != 0 && sum > residual.get(r) {
                    residual.get(r) / sum
                } else {
                    1.0
                };
                for (c, v) in implicit {
                    self.nodes[c].inferred_guarantee.set(r, v * k);
                }
            }
        }
    }

    fn cumulative_attributes(&mut self) {
        let total = self.input.total;
        for i in (0..self.nodes.len()).rev() {
            let e = &self.input.elements[i];
            let mut limits = vector::min(
                &vector::share(&e.resource_limits, &total),
                &vector::splat(1.0),
            );
            limits = vector::min(&limits, &vector::splat(e.max_share_ratio));
            // A resource the tree lacks has share 0 everywhere.
            limits = limits.map(|r, v| if total.get(r) > 0.0 { v } else { 0.0 });
            let (mut burst, mut flow) = (0.0, 0.0);
            if let ElementKind::Pool {
                integral: Some(ig), ..
            } = &e.kind
            {
                if ig.kind != IntegralKind::None {
                    burst = vector::max_ratio(&ig.burst_guarantee, &total);
                    flow = vector::max_ratio(&ig.resource_flow, &total);
                }
            }
            let (mut demand, mut usage, mut total_burst, mut total_flow) =
                (ResourceVector::ZERO, ResourceVector::ZERO, burst, flow);
            match &e.kind {
                ElementKind::Operation {
                    demand: d,
                    usage: u,
                    ..
                } => {
                    demand = self.share(d);
                    usage = vector::min(&self.share(u), &demand);
                }
                ElementKind::Pool { .. } => {
                    for &c in &self.nodes[i].children {
                        let ch = &self.nodes[c];
                        demand += ch.demand_share;
                        usage += ch.usage_share;
                        total_burst += ch.total_burst_ratio;
                        total_flow += ch.total_flow_ratio;
                    }
                }
            }
            let sgs = self.share(&self.nodes[i].inferred_guarantee);
            let n = &mut self.nodes[i];
            n.limits_share = limits;
            n.demand_share = demand;
            n.usage_share = usage;
            n.burst_ratio = burst;
            n.specified_burst_ratio = burst;
            n.flow_ratio = flow;
            n.total_burst_ratio = total_burst;
            n.total_flow_ratio = total_flow;
            n.strong_guarantee_share = sgs;
            if n.mode == Some(Mode::Fifo) {
                self.rank_fifo_children(i);
            }
        }
        let root_sgs: ResourceVector = self.nodes[0]
            .children
            .iter()
            .map(|&c| self.nodes[c].strong_guarantee_share)
            .sum();
        self.nodes[0].strong_guarantee_share = root_sgs;
        // Integral pools in tree order (pre-order), as they are served.
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            match self.nodes[i].integral_kind {
                IntegralKind::Burst => self.burst_pools.push(i),
                IntegralKind::Relaxed => self.relaxed_pools.push(i),
                IntegralKind::None => {}
            }
            stack.extend(self.nodes[i].children.iter().rev());
        }
    }

    /// A FIFO pool's children in serving order (operations by their FIFO rank, pools
    /// last), each with its index in that order.
    fn rank_fifo_children(&mut self, i: usize) {
        let mut order = self.nodes[i].children.clone();
        let rank = |c: usize| match self.input.elements[c].kind {
            ElementKind::Operation { fifo_rank, .. } => fifo_rank,
            ElementKind::Pool { .. } => u64::MAX,
        };
        order.sort_by_key(|&c| (rank(c), c));
        for (k, &c) in order.iter().enumerate() {
            self.nodes[c].fifo_index = Some(k);
        }
        self.nodes[i].children = order;
    }

    /// Limits beat guarantees; children's guarantees that do not fit their parent's
    /// shrink by one common factor, from the root down. At the root, strong plus burst
    /// guarantees above the cluster are first scaled together.
    fn adjust_guarantees(&mut self) {
        let total = self.input.total;
        let strong: ResourceVector = self.nodes[0]
            .children
            .iter()
            .map(|&c| self.nodes[c].inferred_guarantee)
            .sum();
        let flows = total.scale(self.nodes[0].total_flow_ratio);
        let burst = total.scale(self.nodes[0].total_burst_ratio);
        if !vector::dominates(&total, &(strong + flows)) {
            self.alerts.push(Alert::FlowsOvercommit { strong, flows });
        }
        if !vector::dominates(&total, &(strong + burst)) {
            let root_sgs = self.nodes[0].strong_guarantee_share;
            let bursts: f64 = self
                .burst_pools
                .iter()
                .map(|&b| self.nodes[b].burst_ratio)
                .sum();
            let factor = vector::largest_satisfying(0.0, 1.0, |f| {
                vector::dominates(
                    &vector::splat(1.0),
                    &(root_sgs + vector::splat(bursts)).scale(f),
                )
            });
            self.nodes[0].strong_guarantee_share = root_sgs.scale(factor);
            for &b in &self.burst_pools {
                self.nodes[b].burst_ratio *= factor;
            }
            self.overcommit_factor = factor;
            self.alerts.push(Alert::BurstOvercommit {
                strong,
                burst,
                factor,
            });
        }
        for p in 0..self.nodes.len() {
            if self.nodes[p].is_operation {
                continue;
            }
            let n = &mut self.nodes[p];
            n.strong_guarantee_share = vector::min(&n.strong_guarantee_share, &n.limits_share);
            let cap = n.strong_guarantee_share;
            let children = n.children.clone();
            let sum: ResourceVector = children
                .iter()
                .map(|&c| self.nodes[c].strong_guarantee_share)
                .sum();
            if !vector::dominates(&cap, &sum) {
                let f = vector::largest_satisfying(0.0, 1.0, |f| {
                    vector::dominates(&cap, &sum.scale(f))
                });
                for c in children {
                    let g = &mut self.nodes[c].strong_guarantee_share;
                    *g = g.scale(f);
                }
            }
        }
    }

    /// How far above its guarantees an element may go before it or an ancestor hits
    /// its limits.
    pub(crate) fn available_limits_share(&self, i: usize) -> ResourceVector {
        let mut out = vector::splat(1.0);
        let mut cur = i;
        while let Some(p) = self.nodes[cur].parent {
            let n = &self.nodes[cur];
            out = vector::min(&out, &(n.limits_share - n.guarantee_share()));
            cur = p;
        }
        vector::non_negative(&out)
    }

    /// Adds an integral share to an element and its ancestors, never past a non-root
    /// element's limits.
    pub(crate) fn increase_integral_share(&mut self, i: usize, delta: ResourceVector) {
        let mut cur = Some(i);
        while let Some(k) = cur {
            let n = &mut self.nodes[k];
            let mut proposed = n.proposed_integral_share + delta;
            if n.parent.is_some() {
                proposed = fit_integral(&n.limits_share, &n.strong_guarantee_share, proposed);
            }
            n.proposed_integral_share = proposed;
            cur = n.parent;
        }
    }

    /// Builds an element's functions (and its descendants' that are not built yet).
    pub(crate) fn prepare(&mut self, i: usize) {
        if self.nodes[i].by_suggestion.is_some() {
            return;
        }
        let children = std::mem::take(&mut self.nodes[i].children);
        for &c in &children {
            self.prepare(c);
        }
        self.nodes[i].children = children;
        let children = &self.nodes[i].children;
        if self.nodes[i].is_operation {
            // Operations never hold a guarantee (strong or integral): their function
            // has a closed form.
            let n = &self.nodes[i];
            let by_s = crate::operation_share::by_suggestion(
                n.usage_share,
                n.demand_share,
                n.limits_share,
            )
            .compress(COMPRESS_EPSILON);
            self.nodes[i].by_suggestion = Some(by_s);
            return;
        }
        let by_ff = if children.is_empty() {
            Plf::constant(0.0, 1.0, ResourceVector::ZERO)
        } else if self.nodes[i].mode == Some(Mode::Fifo) {
            self.fifo_path(children)
        } else {
            self.fair_share_path(children)
        };
        // Sums of many pieces may dip by rounding where they should be flat; a dip would
        // read as the end of the path coming early.
        let by_ff = by_ff.monotone(|a, b| vector::max(&a, &b));
        let mff = max_fit_factor(&by_ff, &self.nodes[i]);
        let by_s = by_ff.compose(&mff).compress(COMPRESS_EPSILON);
        let n = &mut self.nodes[i];
        n.max_fit_factor = Some(mff);
        n.by_suggestion = Some(by_s);
    }

    pub(crate) fn reset(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.max_fit_factor = None;
        n.by_suggestion = None;
    }

    fn min_child_weight(&self, children: &[usize]) -> f64 {
        children
            .iter()
            .map(|&c| self.nodes[c].weight)
            .filter(|&w| w > EPSILON)
            .fold(f64::MAX, f64::min)
    }

    fn by_suggestion(&self, i: usize) -> &Plf<ResourceVector> {
        self.nodes[i]
            .by_suggestion
            .as_ref()
            .expect("functions are prepared before they are read")
    }

    /// A `fair_share` pool's path: the sum of its children's shares, child `c` offered
    /// `min(1, f · w_c / w_min)` at level `f ∈ [0, 1]`.
    fn fair_share_path(&self, children: &[usize]) -> Plf<ResourceVector> {
        let min_w = self.min_child_weight(children);
        let parts: Vec<(&Plf<ResourceVector>, f64)> = children
            .iter()
            .map(|&c| {
                let k = (self.nodes[c].weight / min_w).max(EPSILON);
                (self.by_suggestion(c), k)
            })
            .collect();
        Plf::sum_scaled(&parts, 1.0)
    }

    /// A FIFO pool's path: its children's paths one after another, child `k` on
    /// `[k, k + 1]`, on top of the ends of those before it.
    fn fifo_path(&self, children: &[usize]) -> Plf<ResourceVector> {
        let mut b = crate::piecewise::Builder::new();
        let mut prefix = ResourceVector::ZERO;
        for (k, &c) in children.iter().enumerate() {
            let f = self.by_suggestion(c);
            for &(x, y) in f.points() {
                b.push(x + k as f64, y + prefix);
            }
            prefix += f.right_value();
        }
        b.finish()
    }

    /// What child number `k` of pool `i` is offered at `fit_factor` (`min_w`: the
    /// smallest child weight, for `fair_share` pools).
    fn child_suggestion(&self, i: usize, k: usize, fit_factor: f64, min_w: f64) -> f64 {
        if self.nodes[i].mode == Some(Mode::Fifo) {
            let whole = fit_factor.floor();
            match (k as f64).total_cmp(&whole) {
                std::cmp::Ordering::Less => 1.0,
                std::cmp::Ordering::Equal => fit_factor - whole,
                std::cmp::Ordering::Greater => 0.0,
            }
        } else {
            let c = self.nodes[i].children[k];
            (fit_factor * self.nodes[c].weight / min_w).min(1.0)
        }
    }

    fn children_total(&self, i: usize, fit_factor: f64, min_w: f64) -> ResourceVector {
        let mut sum = ResourceVector::ZERO;
        for (k, &c) in self.nodes[i].children.iter().enumerate() {
            let s = self.child_suggestion(i, k, fit_factor, min_w);
            sum += self.by_suggestion(c).value_at(s);
        }
        sum
    }

    /// Top-down: an element offered `suggestion` takes its path's value there and hands
    /// its children the largest level whose total fits it.
    fn set_fair_share(&mut self, i: usize, suggestion: f64) {
        let total = self.by_suggestion(i).value_at(suggestion);
        if !self.nodes[i].is_operation && !self.nodes[i].children.is_empty() {
            let min_w = self.min_child_weight(&self.nodes[i].children);
            let cap = total + vector::splat(EPSILON);
            let fits = |u: &Self, ff: f64| vector::dominates(&cap, &u.children_total(i, ff, min_w));
            let mut ff = self.nodes[i]
                .max_fit_factor
                .as_ref()
                .expect("prepared")
                .value_at(suggestion);
            if !fits(self, ff) {
                ff = vector::largest_satisfying(0.0, ff, |f| fits(self, f));
            }
            let suggestions: Vec<f64> = (0..self.nodes[i].children.len())
                .map(|k| self.child_suggestion(i, k, ff, min_w))
                .collect();
            let children = std::mem::take(&mut self.nodes[i].children);
            for (&c, s) in children.iter().zip(suggestions) {
                self.set_fair_share(c, s);
            }
            self.nodes[i].children = children;
        } else if !self.nodes[i].is_operation {
            self.nodes[i].fair_share = detailed(&self.nodes[i], ResourceVector::ZERO);
            return;
        }
        self.nodes[i].fair_share = detailed(&self.nodes[i], total);
    }

    /// The root's share is its children's sum; its strong part is what they use of
    /// their strong guarantees.
    fn root_fair_share(&mut self) {
        let (mut strong, mut total) = (ResourceVector::ZERO, ResourceVector::ZERO);
        for &c in &self.nodes[0].children {
            strong += self.nodes[c].fair_share.strong_guarantee;
            total += self.nodes[c].fair_share.total;
        }
        let root = &self.nodes[0];
        let strong_part = vector::min(&total, &strong);
        let integral = vector::min(
            &vector::non_negative(&(total - strong_part)),
            &root.proposed_integral_share,
        );
        self.nodes[0].fair_share = DetailedShare {
            total,
            strong_guarantee: strong_part,
            integral_guarantee: integral,
            weight_proportional: vector::non_negative(&(total - strong_part - integral)),
        };
    }

    fn output(self) -> TreeOutput {
        let total = self.input.total;
        // Shares are already fractions; this only marks which resources the tree has.
        let present = total.map(|_, v| if v > 0.0 { 1.0 } else { 0.0 });
        let mut elements = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let e = &self.input.elements[i];
            // By usage once there is some, else by demand (YTsaurus's rule).
            let dominant = if vector::max_component(&n.usage_share) > 0.0 {
                vector::dominant_resource(&n.usage_share, &present)
            } else {
                vector::dominant_resource(&n.demand_share, &present)
            };
            let integral = match &e.kind {
                ElementKind::Pool {
                    integral: Some(_), ..
                } => Some(IntegralOutput {
                    specified_burst_ratio: n.specified_burst_ratio,
                    specified_resource_flow_ratio: n.flow_ratio,
                    volume: n.volume,
                    last_share_ratio: n.last_share_ratio,
                }),
                _ => None,
            };
            elements.push(ElementOutput {
                fair_share: n.fair_share,
                demand_share: n.demand_share,
                usage_share: n.usage_share,
                limits_share: n.limits_share,
                limited_demand_share: n
                    .by_suggestion
                    .as_ref()
                    .map(|f| f.right_value())
                    .unwrap_or_default(),
                strong_guarantee_share: n.strong_guarantee_share,
                effective_strong_guarantee_resources: if n.is_operation {
                    ResourceVector::ZERO
                } else {
                    n.inferred_guarantee
                },
                total_burst_ratio: n.total_burst_ratio,
                total_resource_flow_ratio: n.total_flow_ratio,
                integral,
                fifo_index: n.fifo_index,
                dominant_resource: dominant,
            });
        }
        TreeOutput {
            elements,
            alerts: self.alerts,
            overcommit_factor: self.overcommit_factor,
        }
    }
}

/// Splits a share into its strong part, then its integral part, then the rest.
fn detailed(n: &Node, total: ResourceVector) -> DetailedShare {
    let strong = vector::min(&total, &n.strong_guarantee_share);
    let integral = vector::min(
        &vector::non_negative(&(total - strong)),
        &n.proposed_integral_share,
    );
    DetailedShare {
        total,
        strong_guarantee: strong,
        integral_guarantee: integral,
        weight_proportional: vector::non_negative(&(total - strong - integral)),
    }
}

/// Cuts an integral share so that strong plus integral stays within limits.
pub(crate) fn fit_integral(
    limits: &ResourceVector,
    strong: &ResourceVector,
    proposed: ResourceVector,
) -> ResourceVector {
    proposed.map(|r, v| {
        let room = (limits.get(r) - strong.get(r)).max(0.0);
        v.min(room).max(0.0)
    })
}

/// An operation's path on fit factor `[0, 2]`: on `[0, 1]` every resource rises
/// together up to its usage (`min(usage_r, f · max usage)`), then straight to demand.
/// The reference the closed form (`operation_share`) is checked against.
#[cfg(test)]
fn operation_path(n: &Node) -> Plf<ResourceVector> {
    let usage = n.usage_share;
    let demand = n.demand_share;
    let mut b = crate::piecewise::Builder::with_capacity(7);
    let max_usage = vector::max_component(&usage);
    b.push(0.0, ResourceVector::ZERO);
    if max_usage > 0.0 {
        let mut levels: Vec<f64> = Resource::ALL.iter().map(|&r| usage.get(r)).collect();
        levels.sort_by(f64::total_cmp);
        for level in levels {
            if level > 0.0 {
                b.push(
                    level / max_usage,
                    vector::min(&vector::splat(level), &usage),
                );
            }
        }
    } else {
        b.push(1.0, ResourceVector::ZERO);
    }
    b.push(1.0, usage);
    b.push(2.0, demand);
    b.finish()
}

/// The resources that can stop an element, each with its guarantee and limit clamped
/// into the range its path covers. A flat component never stops the element.
fn bounds(by_ff: &Plf<ResourceVector>, n: &Node) -> ([(Resource, f64, f64); 4], usize) {
    let guarantee = n.guarantee_share();
    let pts = by_ff.points();
    let mut rs = [(Resource::Cpu, 0.0, 0.0); 4];
    let mut k = 0;
    for r in Resource::ALL {
        let (first, last) = (pts[0].1.get(r), pts[pts.len() - 1].1.get(r));
        if last <= first {
            continue;
        }
        let limit = n.limits_share.get(r).max(first).min(last);
        rs[k] = (r, guarantee.get(r).max(first).min(limit), limit);
        k += 1;
    }
    (rs, k)
}

/// For each suggestion `s`, the largest fit factor at which every resource stays within
/// `min(guarantee + s, limits)`.
///
/// Rather than inverting each resource's component and taking their minimum, one pass
/// over the path computes how much suggestion each fit factor needs,
/// `need(f) = max_r (P_r(f) − g_r)`, up to where the first limit is reached, and inverts
/// that: `M(s) = inf {f : need(f) ≥ s}` (the largest `f` with `need(f) ≤ 0` at `s = 0`).
/// A unit test checks it against the resource-by-resource construction.
fn max_fit_factor(by_ff: &Plf<ResourceVector>, n: &Node) -> Plf<f64> {
    let (rs, k) = bounds(by_ff, n);
    if k == 0 {
        return Plf::constant(0.0, 1.0, by_ff.right_bound());
    }
    invert_need(need_along_path(by_ff.points(), &rs[..k]))
}

/// A resource's (which, guarantee share, limit share) along a path.
type Bound = (Resource, f64, f64);

/// How much suggestion the usage `v` needs: the most any resource exceeds its guarantee.
fn need(rs: &[Bound], v: &ResourceVector) -> f64 {
    rs.iter()
        .map(|&(r, g, _)| v.get(r) - g)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Which resource needs most at `v`.
fn neediest(rs: &[Bound], v: &ResourceVector) -> usize {
    (0..rs.len()).fold(0, |best, j| {
        let (r, g, _) = rs[j];
        let (rb, gb, _) = rs[best];
        if v.get(r) - g > v.get(rb) - gb {
            j
        } else {
            best
        }
    })
}

fn within(rs: &[Bound], v: &ResourceVector) -> bool {
    rs.iter().all(|&(r, _, l)| v.get(r) <= l)
}

/// (fit factor, needed suggestion) along the path `pts` until a limit is reached, with
/// a point wherever the resource needing most changes inside a piece.
fn need_along_path(pts: &[(f64, ResourceVector)], rs: &[Bound]) -> Vec<(f64, f64)> {
    let k = rs.len();
    let mut need_pts: Vec<(f64, f64)> = Vec::with_capacity(pts.len() + 4);
    need_pts.push((pts[0].0, need(rs, &pts[0].1)));
    for i in 1..pts.len() {
        let (a, b) = (pts[i - 1], pts[i]);
        // Where the resource needing most changes inside the piece, the lines crossed.
        if b.0 > a.0 && neediest(rs, &a.1) != neediest(rs, &b.1) {
            let mut crossings = [f64::NAN; 16];
            let mut c = 0;
            for p in 0..k {
                for q in p + 1..k {
                    let (rp, gp, _) = rs[p];
                    let (rq, gq, _) = rs[q];
                    let d0 = (a.1.get(rp) - gp) - (a.1.get(rq) - gq);
                    let d1 = (b.1.get(rp) - gp) - (b.1.get(rq) - gq);
                    if (d0 < 0.0 && d1 > 0.0) || (d0 > 0.0 && d1 < 0.0) {
                        crossings[c] = d0 / (d0 - d1);
                        c += 1;
                    }
                }
            }
            let crossings = &mut crossings[..c];
            crossings.sort_by(f64::total_cmp);
            for &t in crossings.iter() {
                let v = a.1 + (b.1 - a.1).scale(t);
                if !within(rs, &v) {
                    break;
                }
                need_pts.push((a.0 + t * (b.0 - a.0), need(rs, &v)));
            }
        }
        if within(rs, &b.1) {
            need_pts.push((b.0, need(rs, &b.1)));
            continue;
        }
        // The first limit is reached inside this piece: stop where it is.
        let t = rs
            .iter()
            .filter(|&&(r, _, _)| b.1.get(r) > a.1.get(r))
            .map(|&(r, _, l)| ((l - a.1.get(r)) / (b.1.get(r) - a.1.get(r))).clamp(0.0, 1.0))
            .fold(1.0f64, f64::min);
        let v = a.1 + (b.1 - a.1).scale(t);
        need_pts.push((a.0 + t * (b.0 - a.0), need(rs, &v)));
        break;
    }
    need_pts
}

/// The inverse of the need: suggestion → the largest fit factor it allows, on [0, 1].
fn invert_need(mut need_pts: Vec<(f64, f64)>) -> Plf<f64> {
    let mut running = f64::NEG_INFINITY;
    for p in need_pts.iter_mut() {
        running = running.max(p.1);
        p.1 = running;
    }
    let j = need_pts.partition_point(|p| p.1 <= 0.0);
    let start = if j == 0 {
        need_pts[0].0
    } else if j < need_pts.len() {
        let (a, b) = (need_pts[j - 1], need_pts[j]);
        if b.0 > a.0 && a.1 < 0.0 {
            a.0 + (0.0 - a.1) / (b.1 - a.1) * (b.0 - a.0)
        } else {
            a.0
        }
    } else {
        need_pts[j - 1].0
    };
    let mut out = crate::piecewise::Builder::with_capacity(need_pts.len() + 2);
    out.push(0.0, start);
    let mut last = (0.0, start);
    for i in j..need_pts.len() {
        let (x, sv) = need_pts[i];
        if sv >= 1.0 {
            // The suggestion never exceeds 1: end where the need reaches it.
            let (px, ps) = if i > 0 { need_pts[i - 1] } else { (x, sv) };
            let at = if sv > ps && x > px {
                px + (1.0 - ps.max(0.0)) / (sv - ps.max(0.0)) * (x - px)
            } else {
                px.max(last.1)
            };
            out.push(1.0, at.max(last.1).min(x));
            return out.finish().compress(COMPRESS_EPSILON);
        }
        out.push(sv, x);
        last = (sv, x);
    }
    out.push(1.0, last.1);
    out.finish().compress(COMPRESS_EPSILON)
}

/// The max fit factor built resource by resource (inverse, narrowed, shifted) and
/// combined by a pointwise minimum: the reference `max_fit_factor` must agree with.
#[cfg(test)]
pub(crate) fn max_fit_factor_general(by_ff: &Plf<ResourceVector>, n: &Node) -> Plf<f64> {
    let pts = by_ff.points();
    let end = by_ff.right_bound();
    let mut per_resource: Vec<Plf<f64>> = Vec::with_capacity(4);
    let (rs, k) = bounds(by_ff, n);
    for &(r, g, limit) in &rs[..k] {
        let inverse = Inverse { pts, r };
        let mut b = crate::piecewise::Builder::with_capacity(8);
        b.push(0.0, inverse.last_at_most(g));
        if limit > g {
            let lo = pts.partition_point(|p| p.1.get(r) <= g);
            let hi = pts.partition_point(|p| p.1.get(r) < limit);
            for &(x, y) in &pts[lo..hi.max(lo)] {
                b.push(y.get(r) - g, x);
            }
            b.push(limit - g, inverse.first_at_least(limit));
            b.push(limit - g, inverse.last_at_most(limit));
        }
        let f = b.finish();
        per_resource.push(if f.right_bound() < 1.0 {
            f.extend_right(1.0)
        } else {
            f.trim_right()
        });
    }
    if per_resource.is_empty() {
        return Plf::constant(0.0, 1.0, end);
    }
    Plf::pointwise_min(&per_resource).compress(COMPRESS_EPSILON)
}

/// One component of a non-decreasing path read backwards: the fit factor by value.
#[cfg(test)]
struct Inverse<'a> {
    pts: &'a [(f64, ResourceVector)],
    r: Resource,
}

#[cfg(test)]
impl Inverse<'_> {
    fn y(&self, i: usize) -> f64 {
        self.pts[i].1.get(self.r)
    }

    /// The largest fit factor whose value is at most `y`.
    fn last_at_most(&self, y: f64) -> f64 {
        let pts = self.pts;
        let j = pts.partition_point(|p| p.1.get(self.r) <= y);
        if j == 0 {
            return pts[0].0;
        }
        let j = j - 1;
        if j + 1 == pts.len() || self.y(j) == y {
            return pts[j].0;
        }
        let t = (y - self.y(j)) / (self.y(j + 1) - self.y(j));
        pts[j].0 + t * (pts[j + 1].0 - pts[j].0)
    }

    /// The smallest fit factor whose value is at least `y`.
    fn first_at_least(&self, y: f64) -> f64 {
        let pts = self.pts;
        let i = pts.partition_point(|p| p.1.get(self.r) < y);
        if i == pts.len() {
            return pts[pts.len() - 1].0;
        }
        if i == 0 || self.y(i) == y {
            return pts[i].0;
        }
        let t = (y - self.y(i - 1)) / (self.y(i) - self.y(i - 1));
        pts[i - 1].0 + t * (pts[i].0 - pts[i - 1].0)
    }
}

/// An operation's function built the general way (path, max fit factor, composition):
/// what `operation_share` must agree with.
#[cfg(test)]
pub(crate) fn general_operation_by_suggestion(
    usage: ResourceVector,
    demand: ResourceVector,
    limits: ResourceVector,
) -> Plf<ResourceVector> {
    let n = Node {
        is_operation: true,
        usage_share: usage,
        demand_share: demand,
        limits_share: limits,
        ..Default::default()
    };
    let by_ff = operation_path(&n);
    let mff = max_fit_factor(&by_ff, &n);
    by_ff.compose(&mff).compress(COMPRESS_EPSILON)
}

#[cfg(test)]
mod max_fit_factor_tests {
    use super::*;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = Vec<(f64, [u8; 4])>> {
        // Increments per step (some zero: flat pieces; some at the same abscissa: jumps).
        prop::collection::vec((0u8..3, [0u8..4, 0u8..4, 0u8..4, 0u8..4]), 1..8).prop_map(|steps| {
            let mut x = 0.0;
            steps
                .into_iter()
                .map(|(dx, dy)| {
                    x += dx as f64 / 4.0;
                    (x, dy)
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn one_pass_inverse_matches_the_resource_by_resource_construction(
            steps in path(),
            g in [0u8..6, 0u8..6, 0u8..6, 0u8..6],
            l in [1u8..12, 1u8..12, 1u8..12, 1u8..12],
        ) {
            let mut b = crate::piecewise::Builder::new();
            let mut y = ResourceVector::ZERO;
            b.push(0.0, y);
            for (x, dy) in &steps {
                y += ResourceVector::new(dy[0] as f64, dy[1] as f64, dy[2] as f64, dy[3] as f64).scale(0.05);
                b.push(*x, y);
            }
            let path = b.finish().monotone(|a, b| vector::max(&a, &b));
            let n = Node {
                strong_guarantee_share: ResourceVector::new(g[0] as f64, g[1] as f64, g[2] as f64, g[3] as f64).scale(0.05),
                limits_share: ResourceVector::new(l[0] as f64, l[1] as f64, l[2] as f64, l[3] as f64).scale(0.05),
                ..Default::default()
            };
            let fast = max_fit_factor(&path, &n);
            let slow = max_fit_factor_general(&path, &n);
            // Off the grid the inputs are on, so no sample sits exactly on a jump (where
            // rounding alone decides the side).
            for k in 0..400 {
                let s = (k as f64 + 0.37) / 400.0;
                let (a, b) = (fast.value_at(s), slow.value_at(s));
                prop_assert!((a - b).abs() < 1e-9, "at {s}: one pass {a}, general {b}\npath {:?}\nfast {:?}\nslow {:?}", path.points(), fast.points(), slow.points());
                // The shares there agree too, unless the path jumps right at that fit
                // factor: then a rounding-sized difference picks the side of the jump.
                let jump_near = path.points().windows(2).any(|w| {
                    w[0].0 == w[1].0 && (w[0].0 - a).abs() < 1e-9
                });
                if !jump_near {
                    let (fa, fb) = (path.value_at(a), path.value_at(b));
                    prop_assert!(Resource::ALL.iter().all(|&r| (fa.get(r) - fb.get(r)).abs() < 1e-6), "{fa:?} vs {fb:?}");
                }
            }
        }
    }
}
