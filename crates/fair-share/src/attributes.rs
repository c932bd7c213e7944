//! The update's first steps (crate documentation, steps 1 to 3): rows built from the
//! input, guarantees inferred bottom-up, demand, usage and limits shares accumulated,
//! FIFO children ranked, and guarantees adjusted to what limits and parents allow.

use crate::input::{ElementKind, IntegralKind, Mode};
use crate::layout::{Pool, NONE};
use crate::output::Alert;
use crate::update::Update;
use crate::vector;
use ytsched_common::resources::{Resource, ResourceVector};

impl Update<'_> {
    /// Rows for every element, a record for every pool, each pool's children listed.
    pub(crate) fn build_elements(&mut self) {
        let els = &self.input.elements;
        self.el.reset(els.len());
        for (i, e) in els.iter().enumerate() {
            self.el.parent[i] = e.parent.unwrap_or(NONE);
            self.el.weight[i] = e.weight;
            if let ElementKind::Pool { mode, integral, .. } = &e.kind {
                let mut p = Pool::new(*mode);
                if let Some(ig) = integral {
                    p.integral_kind = ig.kind;
                    p.volume = ig.volume;
                    p.last_share_ratio = ig.last_share_ratio;
                    p.multiplier = ig.relaxed_share_multiplier_limit;
                }
                self.el.pool[i] = self.pools.len();
                self.pools.push(p);
            }
            if let Some(parent) = e.parent {
                let is_pool = self.el.pool[i] != NONE;
                let parent = self.pool_mut(parent);
                parent.children.push(i);
                if is_pool {
                    parent.child_pools.push(i);
                }
            }
        }
    }

    /// Explicit guarantees plus implicit ones for the components a pool leaves out
    /// (proportional to its share of the parent's cpu guarantee), absolute. Operations
    /// hold none, explicit or implicit.
    pub(crate) fn infer_guarantees(&mut self) {
        self.pools[0].inferred_guarantee = self.input.total;
        for p in 0..self.pools.len() {
            if self.pools[p].child_pools.is_empty() {
                continue;
            }
            let children = std::mem::take(&mut self.pools[p].child_pools);
            self.infer_children_guarantees(p, &children);
            self.pools[p].child_pools = children;
        }
    }

    /// The guarantees of pool record `p`'s child pools (`children`).
    fn infer_children_guarantees(&mut self, p: usize, children: &[usize]) {
        let input = self.input;
        let explicit = |c: usize| match &input.elements[c].kind {
            ElementKind::Pool {
                strong_guarantee, ..
            } => Some(*strong_guarantee),
            ElementKind::Operation { .. } => None,
        };
        let mut total_explicit = ResourceVector::ZERO;
        for &c in children {
            if let Some(g) = explicit(c) {
                let v = ResourceVector::ZERO.map(|r, _| g.get(r).unwrap_or(0.0));
                self.pool_mut(c).inferred_guarantee = v;
                total_explicit += v;
            }
        }
        let parent = self.pools[p].inferred_guarantee;
        let residual = vector::non_negative(&(parent - total_explicit));
        let mut implicit: Vec<(usize, f64)> = vec![];
        for r in Resource::ALL {
            if r == Resource::Cpu {
                continue;
            }
            implicit.clear();
            let mut sum = 0.0;
            for &c in children {
                if explicit(c).is_none_or(|g| g.get(r).is_some()) {
                    continue;
                }
                let ratio = if parent.cpu > 0.0 {
                    self.pool(c).map_or(0.0, |g| g.inferred_guarantee.cpu) / parent.cpu
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
            for &(c, v) in &implicit {
                self.pool_mut(c).inferred_guarantee.set(r, v * k);
            }
        }
    }

    /// Demand, usage and limits shares, bottom-up, and each pool's strong guarantee
    /// share and integral ratios; FIFO pools' children ranked.
    pub(crate) fn cumulative_attributes(&mut self) {
        let total = self.input.total;
        for i in (0..self.el.parent.len()).rev() {
            let e = &self.input.elements[i];
            let mut limits = vector::min(
                &vector::share(&e.resource_limits, &total),
                &vector::splat(1.0),
            );
            limits = vector::min(&limits, &vector::splat(e.max_share_ratio));
            // A resource the tree lacks has share 0 everywhere.
            limits = limits.map(|r, v| if total.get(r) > 0.0 { v } else { 0.0 });
            self.el.limits_share[i] = limits;
            match &e.kind {
                ElementKind::Operation { demand, usage, .. } => {
                    let demand = self.share(demand);
                    self.el.demand_share[i] = demand;
                    self.el.usage_share[i] = vector::min(&self.share(usage), &demand);
                }
                ElementKind::Pool { integral, .. } => {
                    let (burst, flow) = match integral {
                        Some(ig) if ig.kind != IntegralKind::None => (
                            vector::max_ratio(&ig.burst_guarantee, &total),
                            vector::max_ratio(&ig.resource_flow, &total),
                        ),
                        _ => (0.0, 0.0),
                    };
                    self.pool_attributes(i, burst, flow);
                }
            }
        }
        let root_sgs: ResourceVector = self.pools[0]
            .child_pools
            .iter()
            .map(|&c| self.strong_guarantee_share(c))
            .sum();
        self.pools[0].strong_guarantee_share = root_sgs;
        // Integral pools in tree order (pre-order), as they are served.
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            match self.pool(i).map(|p| p.integral_kind) {
                Some(IntegralKind::Burst) => self.burst_pools.push(i),
                Some(IntegralKind::Relaxed) => self.relaxed_pools.push(i),
                _ => {}
            }
            stack.extend(
                self.children(i)
                    .iter()
                    .rev()
                    .filter(|&&c| !self.is_operation(c)),
            );
        }
    }

    /// A pool's sums over its children, and its own ratios.
    fn pool_attributes(&mut self, i: usize, burst: f64, flow: f64) {
        let (mut demand, mut usage, mut total_burst, mut total_flow) =
            (ResourceVector::ZERO, ResourceVector::ZERO, burst, flow);
        for &c in self.children(i) {
            demand += self.el.demand_share[c];
            usage += self.el.usage_share[c];
        }
        for &c in &self.pool(i).expect("a pool").child_pools {
            let ch = self.pool(c).expect("a pool");
            total_burst += ch.total_burst_ratio;
            total_flow += ch.total_flow_ratio;
        }
        self.el.demand_share[i] = demand;
        self.el.usage_share[i] = usage;
        let sgs = self.share(&self.pool(i).expect("a pool").inferred_guarantee);
        let n = self.pool_mut(i);
        n.burst_ratio = burst;
        n.specified_burst_ratio = burst;
        n.flow_ratio = flow;
        n.total_burst_ratio = total_burst;
        n.total_flow_ratio = total_flow;
        n.strong_guarantee_share = sgs;
        if n.mode == Mode::Fifo {
            self.rank_fifo_children(i);
        }
    }

    /// A FIFO pool's children in serving order (operations by their FIFO rank, pools
    /// last), each with its index in that order.
    fn rank_fifo_children(&mut self, i: usize) {
        let mut order = std::mem::take(&mut self.pool_mut(i).children);
        let rank = |c: usize| match self.input.elements[c].kind {
            ElementKind::Operation { fifo_rank, .. } => fifo_rank,
            ElementKind::Pool { .. } => u64::MAX,
        };
        order.sort_by_key(|&c| (rank(c), c));
        for (k, &c) in order.iter().enumerate() {
            self.el.fifo_index[c] = k;
        }
        self.pool_mut(i).children = order;
    }

    /// Limits beat guarantees; children's guarantees that do not fit their parent's
    /// shrink by one common factor, from the root down. At the root, strong plus burst
    /// guarantees above the cluster are first scaled together.
    pub(crate) fn adjust_guarantees(&mut self) {
        self.fit_root_guarantees();
        for i in 0..self.el.parent.len() {
            if self.is_operation(i) {
                continue;
            }
            let limits = self.el.limits_share[i];
            let n = self.pool_mut(i);
            n.strong_guarantee_share = vector::min(&n.strong_guarantee_share, &limits);
            let cap = n.strong_guarantee_share;
            let children = std::mem::take(&mut n.child_pools);
            let sum: ResourceVector = children
                .iter()
                .map(|&c| self.strong_guarantee_share(c))
                .sum();
            if !vector::dominates(&cap, &sum) {
                let f = vector::largest_satisfying(0.0, 1.0, |f| {
                    vector::dominates(&cap, &sum.scale(f))
                });
                for &c in &children {
                    let p = self.pool_mut(c);
                    p.strong_guarantee_share = p.strong_guarantee_share.scale(f);
                }
            }
            self.pool_mut(i).child_pools = children;
        }
    }

    /// Strong and burst guarantees above the cluster are scaled by one common factor;
    /// strong ones and flows above it are an alert.
    fn fit_root_guarantees(&mut self) {
        let total = self.input.total;
        let strong: ResourceVector = self.pools[0]
            .child_pools
            .iter()
            .filter_map(|&c| self.pool(c).map(|p| p.inferred_guarantee))
            .sum();
        let flows = total.scale(self.pools[0].total_flow_ratio);
        let burst = total.scale(self.pools[0].total_burst_ratio);
        if !vector::dominates(&total, &(strong + flows)) {
            self.alerts.push(Alert::FlowsOvercommit { strong, flows });
        }
        if !vector::dominates(&total, &(strong + burst)) {
            let root_sgs = self.pools[0].strong_guarantee_share;
            let bursts: f64 = self
                .burst_pools
                .iter()
                .map(|&b| self.pool(b).expect("a pool").burst_ratio)
                .sum();
            let factor = vector::largest_satisfying(0.0, 1.0, |f| {
                vector::dominates(
                    &vector::splat(1.0),
                    &(root_sgs + vector::splat(bursts)).scale(f),
                )
            });
            self.pools[0].strong_guarantee_share = root_sgs.scale(factor);
            for b in self.burst_pools.clone() {
                self.pool_mut(b).burst_ratio *= factor;
            }
            self.overcommit_factor = factor;
            self.alerts.push(Alert::BurstOvercommit {
                strong,
                burst,
                factor,
            });
        }
    }
}
