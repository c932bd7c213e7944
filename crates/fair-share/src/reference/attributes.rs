//! The update's first steps (crate documentation, steps 1 to 3): nodes built from the
//! input, guarantees inferred bottom-up, demand, usage and limits shares accumulated,
//! FIFO children ranked, and guarantees adjusted to what limits and parents allow.

use super::{Node, Update};
use crate::input::{ElementKind, IntegralKind, Mode};
use crate::output::Alert;
use crate::vector;
use ytsched_common::resources::{Resource, ResourceVector};

impl Update<'_> {
    pub(crate) fn build_nodes(&mut self) {
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
    pub(crate) fn infer_guarantees(&mut self) {
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

    pub(crate) fn cumulative_attributes(&mut self) {
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
    pub(crate) fn adjust_guarantees(&mut self) {
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
}
