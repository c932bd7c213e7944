//! Gang operations in FIFO pools (SPEC 5.15, YTsaurus `TruncateFairShareInFifoPools`):
//! a gang runs whole or not at all, so a fair share below its whole demand is of no use
//! to it. With the tree's `enable_fair_share_truncation_in_fifo_pool`, such a gang's
//! fair share becomes 0 and what it had is taken off its pool and every ancestor: the
//! share function of a gang is a step, not a slope. It is not given to anyone else in
//! this update (the next one sees the gang's demand unmet and shares anew).

use crate::input::{ElementKind, Mode};
use crate::output::DetailedShare;
use crate::update::Update;
use crate::vector::{self, EPSILON};
use ytsched_common::resources::ResourceVector;

impl Update<'_> {
    pub(crate) fn truncate_gangs_in_fifo_pools(&mut self) {
        if !self.input.truncate_gangs_in_fifo_pools {
            return;
        }
        for i in 0..self.el.parent.len() {
            let ElementKind::Operation { is_gang: true, .. } = self.input.elements[i].kind else {
                continue;
            };
            let Some(parent) = self.parent(i) else {
                continue;
            };
            if self.mode(parent) != Some(Mode::Fifo) {
                continue;
            }
            let unmet = self.el.demand_share[i] - self.el.fair_share[i].total;
            if vector::max_component(&unmet) <= EPSILON {
                continue;
            }
            let taken = std::mem::take(&mut self.el.fair_share[i]);
            let mut cur = Some(parent);
            while let Some(k) = cur {
                let f = &mut self.el.fair_share[k];
                *f = subtract(f, &taken);
                cur = self.parent(k);
            }
        }
    }
}

pub(crate) fn subtract(from: &DetailedShare, what: &DetailedShare) -> DetailedShare {
    let less = |a: ResourceVector, b: ResourceVector| vector::non_negative(&(a - b));
    DetailedShare {
        total: less(from.total, what.total),
        strong_guarantee: less(from.strong_guarantee, what.strong_guarantee),
        integral_guarantee: less(from.integral_guarantee, what.integral_guarantee),
        weight_proportional: less(from.weight_proportional, what.weight_proportional),
    }
}
