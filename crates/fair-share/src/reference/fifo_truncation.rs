//! Gang operations in FIFO pools (SPEC 5.15, YTsaurus `TruncateFairShareInFifoPools`):
//! a gang runs whole or not at all, so a fair share below its whole demand is of no use
//! to it. With the tree's `enable_fair_share_truncation_in_fifo_pool`, such a gang's
//! fair share becomes 0 and what it had is taken off its pool and every ancestor: the
//! share function of a gang is a step, not a slope. It is not given to anyone else in
//! this update (the next one sees the gang's demand unmet and shares anew).

use super::Update;
use crate::fifo_truncation::subtract;
use crate::input::{ElementKind, Mode};
use crate::vector::{self, EPSILON};

impl Update<'_> {
    pub(crate) fn truncate_gangs_in_fifo_pools(&mut self) {
        if !self.input.truncate_gangs_in_fifo_pools {
            return;
        }
        for i in 0..self.nodes.len() {
            let ElementKind::Operation { is_gang: true, .. } = self.input.elements[i].kind else {
                continue;
            };
            let Some(parent) = self.nodes[i].parent else {
                continue;
            };
            if self.nodes[parent].mode != Some(Mode::Fifo) {
                continue;
            }
            let n = &self.nodes[i];
            if vector::max_component(&(n.demand_share - n.fair_share.total)) <= EPSILON {
                continue;
            }
            let taken = std::mem::take(&mut self.nodes[i].fair_share);
            let mut cur = Some(parent);
            while let Some(k) = cur {
                let f = &mut self.nodes[k].fair_share;
                *f = subtract(f, &taken);
                cur = self.nodes[k].parent;
            }
        }
    }
}
