//! The update as it was before it ran on flat arrays (one `Node` per element, one
//! function allocated per element): kept for the tests only, which check that the flat
//! layout computes the same numbers on random trees.

mod attributes;
#[cfg(test)]
mod equivalence;
mod fifo_truncation;
mod integral;

use crate::fit_factor::max_fit_factor;
use crate::input::{ElementKind, IntegralKind, Mode, TreeInput};
use crate::input_check::check;
use crate::input_check::InputError;
use crate::output::{Alert, DetailedShare, ElementOutput, IntegralOutput, TreeOutput};
use crate::piecewise::{Plf, COMPRESS_EPSILON};
pub(crate) use crate::update::fit_integral;
use crate::vector::{self, EPSILON};
use ytsched_common::resources::ResourceVector;

/// The largest speed ratio between siblings the solver tells apart (`weight_ratio`).
const MAX_WEIGHT_RATIO: f64 = 1e6;

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
    pub(crate) fn guarantee_share(&self) -> ResourceVector {
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
    u.build_nodes();
    u.infer_guarantees();
    u.cumulative_attributes();
    u.refill_volumes();
    u.adjust_guarantees();
    u.burst_integral_shares();
    u.relaxed_integral_shares();
    u.prepare(0);
    u.set_fair_share(0, 1.0);
    u.root_fair_share();
    u.truncate_gangs_in_fifo_pools();
    Ok(u.output())
}

impl Update<'_> {
    pub(crate) fn share(&self, abs: &ResourceVector) -> ResourceVector {
        vector::share(abs, &self.input.total)
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
            let by_s = crate::operation_share::by_suggestion_in(
                Vec::new(),
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
        let n = &self.nodes[i];
        let mff = max_fit_factor(&by_ff, n.guarantee_share(), n.limits_share);
        let by_s = by_ff.compose(&mff).compress(COMPRESS_EPSILON);
        let n = &mut self.nodes[i];
        n.max_fit_factor = Some(mff);
        n.by_suggestion = Some(by_s);
    }

    /// With its subtree, as YTsaurus's `ResetFairShareFunctions` does (the fix the
    /// equivalence test found; see `share_functions.rs`).
    pub(crate) fn reset(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.max_fit_factor = None;
        n.by_suggestion = None;
        for c in self.nodes[i].children.clone() {
            self.reset(c);
        }
    }

    /// The weight a pool's slowest children go at: the lightest child's, but never below
    /// the heaviest's over `MAX_WEIGHT_RATIO` (see `weight_ratio`).
    fn min_child_weight(&self, children: &[usize]) -> f64 {
        let weights = children
            .iter()
            .map(|&c| self.nodes[c].weight)
            .filter(|&w| w > EPSILON);
        let (min, max) = weights.fold((f64::MAX, 0.0f64), |(lo, hi), w| (lo.min(w), hi.max(w)));
        min.max(max / MAX_WEIGHT_RATIO)
    }

    /// How much faster than the slowest sibling child `c` goes along its parent's path.
    /// Users may set weights that span 1/ε of an f64 (YTsaurus's bounds); at such a ratio
    /// the heaviest child's whole path would lie within the functions' compression
    /// epsilon near 0 and be lost, leaving the pool nothing. So a child lighter than the
    /// heaviest over `MAX_WEIGHT_RATIO` goes as if it were that light: its share is under
    /// 1e-6 of the heaviest's either way, below what placement can tell, and the ratios
    /// between the others stay exact.
    fn weight_ratio(&self, c: usize, min_w: f64) -> f64 {
        (self.nodes[c].weight.max(min_w) / min_w).max(EPSILON)
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
        let parts: Vec<(&[(f64, ResourceVector)], f64)> = children
            .iter()
            .map(|&c| (self.by_suggestion(c).points(), self.weight_ratio(c, min_w)))
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
            (fit_factor * self.weight_ratio(c, min_w)).min(1.0)
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
