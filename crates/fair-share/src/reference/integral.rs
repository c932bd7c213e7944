//! Integral guarantees (SPEC 5.7): volumes fill at the flow and pay for the integral
//! share given; burst pools are served first, relaxed pools then share what strong
//! guarantees and burst shares leave.

use super::{fit_integral, Update};
use crate::input::IntegralKind;
use crate::vector;
use ytsched_common::resources::{Resource, ResourceVector};

impl Update<'_> {
    /// Since the previous update, volume came in at the flow and went out at the
    /// integral share given then, used or not; it never drops below zero nor rises past
    /// `saturation × flow` (or the volume held before, if the capacity shrank).
    pub(crate) fn refill_volumes(&mut self) {
        let total = self.input.total;
        let Some(dt) = self.input.since_previous_s else {
            return;
        };
        if Resource::ALL.iter().all(|&r| total.get(r) <= 0.0) {
            return;
        }
        let saturation = self.input.integral.saturation_period_s;
        let pools: Vec<usize> = self
            .burst_pools
            .iter()
            .chain(&self.relaxed_pools)
            .copied()
            .collect();
        for i in pools {
            let n = &mut self.nodes[i];
            let old = n.volume;
            let capacity = total.scale(n.flow_ratio * saturation);
            let moved = old + total.scale(dt * n.flow_ratio) - total.scale(dt * n.last_share_ratio);
            let upper = vector::max(&old, &capacity);
            n.volume = vector::min(&vector::non_negative(&moved), &upper);
        }
    }

    fn ratio_by_volume(&self, i: usize) -> f64 {
        let smooth = self.input.integral.smooth_period_s.max(1e-3);
        vector::min_ratio(&self.nodes[i].volume, &self.input.total) / smooth
    }

    /// Each burst pool, with its burst share (as far as volume allows and limits leave
    /// room) added to its guarantee, takes what it would at suggestion 0; what that is
    /// above its strong guarantee is its integral share.
    pub(crate) fn burst_integral_shares(&mut self) {
        for b in self.burst_pools.clone() {
            let ratio = self.nodes[b].burst_ratio.min(self.ratio_by_volume(b));
            let mut proposed = vector::min(&vector::splat(ratio), &self.available_limits_share(b));
            proposed = fit_integral(
                &self.nodes[b].limits_share,
                &self.nodes[b].strong_guarantee_share,
                proposed,
            );
            self.nodes[b].proposed_integral_share = proposed;
            self.prepare(b);
            self.nodes[b].proposed_integral_share = ResourceVector::ZERO;
            let within = self.nodes[b]
                .by_suggestion
                .as_ref()
                .expect("prepared")
                .value_at(0.0);
            let integral = vector::non_negative(&(within - self.nodes[b].strong_guarantee_share));
            self.increase_integral_share(b, integral);
            self.reset(b);
            self.nodes[b].last_share_ratio = vector::max_component(&integral);
        }
    }

    /// Relaxed pools share what the root's children's guarantees (as far as they have
    /// demand) leave of the cluster, filled together by one level weighted by each
    /// pool's volume ratio, each capped at `min(volume ratio, multiplier × flow)`.
    pub(crate) fn relaxed_integral_shares(&mut self) {
        if self.relaxed_pools.is_empty() {
            return;
        }
        let mut available = vector::splat(1.0);
        for &c in &self.nodes[0].children {
            let n = &self.nodes[c];
            available -= vector::min(
                &(n.strong_guarantee_share + n.proposed_integral_share),
                &n.demand_share,
            );
        }
        let available = vector::non_negative(&available);
        let mut pools = vec![];
        let mut weights = vec![];
        let mut original_limits = vec![];
        for r in self.relaxed_pools.clone() {
            let ratio = self.ratio_by_volume(r);
            if ratio == 0.0 {
                continue;
            }
            let n = &mut self.nodes[r];
            debug_assert_eq!(n.integral_kind, IntegralKind::Relaxed);
            pools.push(r);
            weights.push(ratio);
            original_limits.push(n.limits_share);
            let cap = vector::min(
                &vector::splat(ratio),
                &vector::splat(n.flow_ratio * n.multiplier),
            ) + n.strong_guarantee_share;
            n.limits_share = vector::min(&n.limits_share, &cap);
            self.prepare(r);
        }
        if pools.is_empty() {
            return;
        }
        let min_w = weights.iter().copied().fold(f64::INFINITY, f64::min);
        for w in &mut weights {
            *w /= min_w;
        }
        let integral_at = |u: &Self, k: usize, f: f64| -> ResourceVector {
            let p = pools[k];
            let s = (f * weights[k]).min(1.0);
            let fs = u.nodes[p]
                .by_suggestion
                .as_ref()
                .expect("prepared")
                .value_at(s);
            vector::non_negative(&(fs - u.nodes[p].strong_guarantee_share))
        };
        let fit = vector::largest_satisfying(0.0, 1.0, |f| {
            let sum: ResourceVector = (0..pools.len()).map(|k| integral_at(self, k, f)).sum();
            vector::dominates(&available, &sum)
        });
        // Read before any is reset: resetting a pool forgets its subtree's functions,
        // a nested relaxed pool's among them.
        let integrals: Vec<ResourceVector> = (0..pools.len())
            .map(|k| integral_at(self, k, fit))
            .collect();
        for (k, integral) in integrals.into_iter().enumerate() {
            let p = pools[k];
            self.nodes[p].limits_share = original_limits[k];
            let limited = vector::min(&integral, &self.available_limits_share(p));
            self.increase_integral_share(p, limited);
            self.reset(p);
            self.nodes[p].last_share_ratio = vector::max_component(&limited);
        }
    }
}
