//! Bottom-up (steps 4 and 5 of the crate documentation): each element's fair share by
//! suggestion, built from its children's. Operations' functions have a closed form: a
//! pool's are built into one reused buffer just before its path is summed from them, and
//! dropped after. Every pool's function's points go into the update's shared buffer, so
//! reading a child's function is reading a slice.

use crate::fit_factor::max_fit_factor;
use crate::input::Mode;
use crate::piecewise::{value_at, Builder, Plf, COMPRESS_EPSILON};
use crate::update::Update;
use crate::vector::{self, EPSILON};
use ytsched_common::resources::ResourceVector;

/// The largest speed ratio between siblings the solver tells apart (`weight_ratio`).
const MAX_WEIGHT_RATIO: f64 = 1e6;

impl Update<'_> {
    /// Builds a pool's function (and its descendants' that are not built yet). Its
    /// operations' functions are built for it alone, in the operations' buffer, and
    /// dropped once its own is made: the top-down pass reads an operation's share
    /// without its function (`share_at`), so 100,000 operations' points are never all
    /// held.
    pub(crate) fn prepare(&mut self, i: usize) {
        let (start, end) = self.el.function[i];
        if end > start {
            return;
        }
        debug_assert!(
            !self.is_operation(i),
            "an operation's function is its pool's to build"
        );
        let children = std::mem::take(&mut self.pool_mut(i).children);
        for &c in &children {
            if !self.is_operation(c) {
                self.prepare(c);
            }
        }
        self.prepare_operations(&children);
        let by_ff = if children.is_empty() {
            Plf::constant(0.0, 1.0, ResourceVector::ZERO)
        } else if self.mode(i) == Some(Mode::Fifo) {
            self.fifo_path(&children)
        } else {
            self.fair_share_path(&children)
        };
        for &c in &children {
            if self.is_operation(c) {
                self.el.function[c] = (0, 0);
            }
        }
        self.pool_mut(i).children = children;
        // Sums of many pieces may dip by rounding where they should be flat; a dip would
        // read as the end of the path coming early.
        let by_ff = by_ff.monotone(|a, b| vector::max(&a, &b));
        let guarantee = self.guarantee_share(i);
        let mff = max_fit_factor(&by_ff, guarantee, self.el.limits_share[i]);
        let by_s = by_ff.compose(&mff).compress(COMPRESS_EPSILON);
        self.pool_mut(i).max_fit_factor = Some(mff);
        let start = self.el.points.len();
        self.el.points.extend_from_slice(by_s.points());
        self.el.function[i] = (start, self.el.points.len());
        self.el.limited_demand_share[i] = by_s.right_value();
    }

    /// The functions of a pool's operations, in the operations' buffer (emptied first).
    /// Operations never hold a guarantee (strong or integral): their function has a
    /// closed form.
    fn prepare_operations(&mut self, children: &[usize]) {
        self.el.operation_points.clear();
        let mut buffer = std::mem::take(&mut self.el.scratch);
        for &c in children {
            if !self.is_operation(c) {
                continue;
            }
            let by_s = crate::operation_share::by_suggestion_in(
                buffer,
                self.el.usage_share[c],
                self.el.demand_share[c],
                self.el.limits_share[c],
            )
            .compress(COMPRESS_EPSILON);
            let start = self.el.operation_points.len();
            self.el.operation_points.extend_from_slice(by_s.points());
            self.el.function[c] = (start, self.el.operation_points.len());
            self.el.limited_demand_share[c] = by_s.right_value();
            buffer = by_s.into_points();
        }
        self.el.scratch = buffer;
    }

    /// Element `i`'s share offered `suggestion`.
    pub(crate) fn share_at(&self, i: usize, suggestion: f64) -> ResourceVector {
        if self.is_operation(i) {
            let el = &self.el;
            return crate::operation_share::share_at(
                el.usage_share[i],
                el.demand_share[i],
                el.limits_share[i],
                suggestion,
            );
        }
        value_at(self.by_suggestion(i), suggestion)
    }

    /// Forgets the functions of an element and of its whole subtree, to be built again
    /// (their old points stay unused in the shared buffer until the next update), as
    /// YTsaurus's `ResetFairShareFunctions` does. Forgetting the element's alone left a
    /// pool between two nested integral pools with a function built from the inner one's
    /// temporary one: stale numbers, and a panic when the inner one was read unbuilt
    /// (found by the equivalence test, `reference/equivalence.rs`).
    pub(crate) fn reset(&mut self, i: usize) {
        self.el.function[i] = (0, 0);
        let Some(p) = self.pools.get_mut(self.el.pool[i]) else {
            return;
        };
        p.max_fit_factor = None;
        let children = std::mem::take(&mut p.children);
        for &c in &children {
            self.reset(c);
        }
        self.pool_mut(i).children = children;
    }

    /// Element `i`'s function: a pool's, or an operation's while its pool's is made.
    pub(crate) fn by_suggestion(&self, i: usize) -> &[(f64, ResourceVector)] {
        let (start, end) = self.el.function[i];
        assert!(end > start, "functions are prepared before they are read");
        if self.is_operation(i) {
            &self.el.operation_points[start..end]
        } else {
            &self.el.points[start..end]
        }
    }

    /// The weight a pool's slowest children go at: the lightest child's, but never below
    /// the heaviest's over `MAX_WEIGHT_RATIO` (see `weight_ratio`).
    pub(crate) fn min_child_weight(&self, children: &[usize]) -> f64 {
        let weights = children
            .iter()
            .map(|&c| self.el.weight[c])
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
    pub(crate) fn weight_ratio(&self, c: usize, min_w: f64) -> f64 {
        (self.el.weight[c].max(min_w) / min_w).max(EPSILON)
    }

    /// A `fair_share` pool's path: the sum of its children's shares, child `c` offered
    /// `min(1, f · w_c / w_min)` at level `f ∈ [0, 1]`.
    fn fair_share_path(&self, children: &[usize]) -> Plf<ResourceVector> {
        let min_w = self.min_child_weight(children);
        let parts: Vec<(&[(f64, ResourceVector)], f64)> = children
            .iter()
            .map(|&c| (self.by_suggestion(c), self.weight_ratio(c, min_w)))
            .collect();
        Plf::sum_scaled(&parts, 1.0)
    }

    /// A FIFO pool's path: its children's paths one after another, child `k` on
    /// `[k, k + 1]`, on top of the ends of those before it.
    fn fifo_path(&self, children: &[usize]) -> Plf<ResourceVector> {
        let mut b = Builder::new();
        let mut prefix = ResourceVector::ZERO;
        for (k, &c) in children.iter().enumerate() {
            let f = self.by_suggestion(c);
            for &(x, y) in f {
                b.push(x + k as f64, y + prefix);
            }
            prefix += f[f.len() - 1].1;
        }
        b.finish()
    }
}
