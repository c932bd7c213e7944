//! Top-down (step 6 of the crate documentation): the root is offered the whole cluster,
//! and each pool hands its children the largest level whose total fits what it took.

use crate::input::Mode;
use crate::output::detailed;
use crate::piecewise::value_at;
use crate::update::Update;
use crate::vector::{self, EPSILON};
use ytsched_common::resources::ResourceVector;

impl Update<'_> {
    /// What child `c`, number `k` of its pool, is offered at `fit_factor` (`min_w`: the
    /// smallest child weight, for `fair_share` pools).
    fn child_suggestion(&self, fifo: bool, c: usize, k: usize, fit_factor: f64, min_w: f64) -> f64 {
        if fifo {
            let whole = fit_factor.floor();
            match (k as f64).total_cmp(&whole) {
                std::cmp::Ordering::Less => 1.0,
                std::cmp::Ordering::Equal => fit_factor - whole,
                std::cmp::Ordering::Greater => 0.0,
            }
        } else {
            (fit_factor * self.weight_ratio(c, min_w)).min(1.0)
        }
    }

    fn children_total(&self, i: usize, fit_factor: f64, min_w: f64) -> ResourceVector {
        let mut sum = ResourceVector::ZERO;
        let fifo = self.mode(i) == Some(Mode::Fifo);
        for (k, &c) in self.children(i).iter().enumerate() {
            let s = self.child_suggestion(fifo, c, k, fit_factor, min_w);
            sum += self.share_at(c, s);
        }
        sum
    }

    /// An element offered `suggestion` takes its path's value there and hands its
    /// children the largest level whose total fits it.
    pub(crate) fn set_fair_share(&mut self, i: usize, suggestion: f64) {
        let total = self.share_at(i, suggestion);
        let Some(pool) = self.pool(i) else {
            self.el.fair_share[i] = detailed(total, ResourceVector::ZERO, ResourceVector::ZERO);
            return;
        };
        let (strong, integral) = (pool.strong_guarantee_share, pool.proposed_integral_share);
        if pool.children.is_empty() {
            self.el.fair_share[i] = detailed(ResourceVector::ZERO, strong, integral);
            return;
        }
        let min_w = self.min_child_weight(&pool.children);
        let cap = total + vector::splat(EPSILON);
        let fits = |u: &Self, ff: f64| vector::dominates(&cap, &u.children_total(i, ff, min_w));
        let mut ff = value_at(
            pool.max_fit_factor.as_ref().expect("prepared").points(),
            suggestion,
        );
        if !fits(self, ff) {
            ff = vector::largest_satisfying(0.0, ff, |f| fits(self, f));
        }
        let fifo = pool.mode == Mode::Fifo;
        let children = std::mem::take(&mut self.pool_mut(i).children);
        // A child's share depends on nothing a sibling's setting changes.
        for (k, &c) in children.iter().enumerate() {
            let s = self.child_suggestion(fifo, c, k, ff, min_w);
            self.set_fair_share(c, s);
        }
        self.pool_mut(i).children = children;
        self.el.fair_share[i] = detailed(total, strong, integral);
    }
}
