//! An operation's *fair share by suggestion* in closed form.
//!
//! Operations are most of a tree's elements, and their functions have the same shape
//! every time, so the general construction (path → max fit factor → composition) is
//! replaced here by what it works out to. With usage `u`, demand `d`, `U = max u` and
//! limits `l` (clamped to `[0, d]`), offered `s` the operation takes the furthest point of
//! its path inside the box `b(s) = min(s, l)`:
//!
//! * while some resource's usage does not fit (`u_r > b_r(s)`), it is on the first part
//!   of its path: `min(u, c)` componentwise with `c = min(s, L₁)`, `L₁` the smallest limit
//!   below its usage (none: `c = s`, until `s = U`);
//! * once usage fits it goes towards demand: `u + t(s)·(d − u)` with
//!   `t(s) = min(1, min over resources still wanting more of (b_r(s) − u_r)/(d_r − u_r))`.
//!   At `s = U` the value from the left is `u` and the function may jump.
//!
//! `t` is the lower envelope of a few two-piece linear functions, so evaluating it at
//! every limit, every crossing and every point where a term reaches 1 gives it exactly.
//! A unit test checks this against the general construction on random operations.

use crate::piecewise::{Builder, Plf};
use crate::vector;
use ytsched_common::resources::{Resource, ResourceVector};

#[cfg(test)]
pub(crate) fn by_suggestion(
    usage: ResourceVector,
    demand: ResourceVector,
    limits: ResourceVector,
) -> Plf<ResourceVector> {
    by_suggestion_in(Vec::new(), usage, demand, limits)
}

/// What an operation's function is made of: its usage, demand and clamped limits, and
/// the two ways its path goes (up to its usage, then towards its demand).
struct OperationPath {
    u: ResourceVector,
    d: ResourceVector,
    l: ResourceVector,
    /// The largest usage component: where the path turns towards demand.
    top: f64,
    /// The smallest limit below its usage, if any: the path never gets past it.
    below_usage: f64,
    wanting: [Resource; 4],
    wanting_len: usize,
}

impl OperationPath {
    fn new(usage: ResourceVector, demand: ResourceVector, limits: ResourceVector) -> Self {
        let l = limits.map(|r, v| v.max(0.0).min(demand.get(r)));
        let below_usage = Resource::ALL
            .iter()
            .filter(|&&r| l.get(r) < usage.get(r))
            .map(|&r| l.get(r))
            .fold(f64::INFINITY, f64::min);
        let mut wanting = [Resource::Cpu; 4];
        let mut wanting_len = 0;
        for r in Resource::ALL {
            if demand.get(r) > usage.get(r) {
                wanting[wanting_len] = r;
                wanting_len += 1;
            }
        }
        Self {
            u: usage,
            d: demand,
            l,
            top: vector::max_component(&usage),
            below_usage,
            wanting,
            wanting_len,
        }
    }

    fn wanting(&self) -> &[Resource] {
        &self.wanting[..self.wanting_len]
    }

    /// How far from usage towards demand the path goes, offered `s` past the usage.
    fn t(&self, s: f64) -> f64 {
        let (u, d, l) = (&self.u, &self.d, &self.l);
        self.wanting()
            .iter()
            .map(|&r| (s.min(l.get(r)) - u.get(r)) / (d.get(r) - u.get(r)))
            .fold(1.0f64, f64::min)
            .max(0.0)
    }

    fn at(&self, s: f64) -> ResourceVector {
        self.u + (self.d - self.u).scale(self.t(s))
    }

    /// The first part of the path, where every resource rises together up to its usage.
    fn rising(&self, c: f64) -> ResourceVector {
        vector::min(&self.u, &vector::splat(c))
    }

    /// Where the first part of the path stops when usage fits: the top usage level, or
    /// the largest one within `[0, 1]` when usage exceeds the whole tree somewhere.
    fn end_of_rising(&self) -> f64 {
        if self.top <= 1.0 {
            return self.top;
        }
        Resource::ALL
            .iter()
            .map(|&r| self.u.get(r))
            .filter(|&v| v > 0.0 && v <= 1.0)
            .fold(0.0, f64::max)
    }
}

/// The operation's share offered `s`: its function's value there, without building the
/// function (`by_suggestion_in` builds the same plot; a unit test compares them). The
/// top-down pass reads each operation's share once, so its function need not be kept.
pub(crate) fn share_at(
    usage: ResourceVector,
    demand: ResourceVector,
    limits: ResourceVector,
    s: f64,
) -> ResourceVector {
    let p = OperationPath::new(usage, demand, limits);
    if p.below_usage.is_finite() {
        return p.rising(s.min(p.below_usage));
    }
    if p.top >= 1.0 {
        return p.rising(s.min(p.end_of_rising()));
    }
    if s <= p.top {
        return p.rising(s);
    }
    p.at(s)
}

/// The function, built in `buffer`'s storage: this runs once per operation per update.
pub(crate) fn by_suggestion_in(
    buffer: Vec<(f64, ResourceVector)>,
    usage: ResourceVector,
    demand: ResourceVector,
    limits: ResourceVector,
) -> Plf<ResourceVector> {
    let p = OperationPath::new(usage, demand, limits);
    let mut b = Builder::in_buffer(buffer);
    b.push(0.0, ResourceVector::ZERO);
    // Small fixed buffers: this runs once per operation per update.
    let mut levels = [f64::INFINITY; 4];
    for (k, &r) in Resource::ALL.iter().enumerate() {
        if p.u.get(r) > 0.0 {
            levels[k] = p.u.get(r);
        }
    }
    insertion_sort(&mut levels);
    let levels: &[f64] = &levels[..levels.partition_point(|v| v.is_finite())];
    if p.below_usage.is_finite() {
        // Usage never fits: up the first part of the path to the lowest such limit.
        for &c in levels.iter().filter(|&&c| c < p.below_usage) {
            b.push(c, p.rising(c));
        }
        let end = p.rising(p.below_usage);
        b.push(p.below_usage, end);
        if p.below_usage < 1.0 {
            b.push(1.0, end);
        }
        return b.finish();
    }
    for &c in levels.iter().filter(|&&c| c <= 1.0) {
        b.push(c, p.rising(c));
    }
    if p.top >= 1.0 {
        return b.finish();
    }
    let (mut bends_buf, nb) = bend_points(p.wanting(), p.u, p.d, p.l);
    // Only the bends within `(U, 1]` matter, and they are few: kept, then sorted.
    let mut kept = 0;
    for k in 0..nb {
        let s = bends_buf[k];
        if s.is_finite() && s > p.top && s <= 1.0 {
            bends_buf[kept] = s;
            kept += 1;
        }
    }
    let bends = &mut bends_buf[..kept];
    insertion_sort(bends);
    // At `U` the value from the left is the usage; from the right the path moves on.
    b.push(p.top, p.at(p.top));
    for &s in bends.iter() {
        b.push(s, p.at(s));
    }
    b.finish()
}

/// Sorts a handful of numbers (no NaN among them) without the general sort's set-up,
/// which costs more than the sorting at this size.
fn insertion_sort(v: &mut [f64]) {
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1] > x {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// Where the envelope can bend: limits, crossings of the rising parts (of the
/// resources still `wanting`) with each other and with the flat parts, and where a
/// rising part reaches 1. A fixed buffer and its length: this runs once per operation
/// per update.
fn bend_points(
    wanting: &[Resource],
    u: ResourceVector,
    demand: ResourceVector,
    l: ResourceVector,
) -> ([f64; 1 + 4 * 8], usize) {
    let mut bends = [f64::NAN; 1 + 4 * 8];
    bends[0] = 1.0;
    let mut nb = 1;
    let mut bend = |s: f64| {
        bends[nb] = s;
        nb += 1;
    };
    for (k, &a) in wanting.iter().enumerate() {
        let (ua, da, la) = (u.get(a), demand.get(a) - u.get(a), l.get(a));
        bend(la);
        bend(ua + da);
        for &c in &wanting[k + 1..] {
            let (uc, dc) = (u.get(c), demand.get(c) - u.get(c));
            if da != dc {
                bend((ua * dc - uc * da) / (dc - da));
            }
        }
        for &c in wanting {
            if c != a {
                let (uc, dc, lc) = (u.get(c), demand.get(c) - u.get(c), l.get(c));
                bend(ua + da * (lc - uc) / dc);
            }
        }
    }
    (bends, nb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit_factor::general_operation_by_suggestion;
    use crate::piecewise::COMPRESS_EPSILON;
    use proptest::prelude::*;

    fn vector() -> impl Strategy<Value = ResourceVector> {
        (0u8..12, 0u8..12, 0u8..3, 0u8..12).prop_map(|(a, b, c, d)| {
            ResourceVector::new(
                a as f64 / 10.0,
                b as f64 / 10.0,
                c as f64 / 4.0,
                d as f64 / 10.0,
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The share read without the function is the function's value, at every
        /// suggestion: demands and usages past the whole tree (shares over 1) included.
        #[test]
        fn the_share_read_without_the_function_is_its_value(
            d in (0u8..30, 0u8..30, 0u8..3, 0u8..30),
            frac in (0u8..=10, 0u8..=10, 0u8..=10, 0u8..=10),
            l in vector(),
            limited in any::<[bool; 4]>(),
        ) {
            let d = ResourceVector::new(d.0 as f64 / 10.0, d.1 as f64 / 10.0, d.2 as f64 / 2.0, d.3 as f64 / 10.0);
            let u = ResourceVector::new(
                d.cpu * frac.0 as f64 / 10.0,
                d.memory * frac.1 as f64 / 10.0,
                d.gpu * frac.2 as f64 / 10.0,
                d.user_slots * frac.3 as f64 / 10.0,
            );
            let mut limits = vector::splat(f64::INFINITY);
            for (i, r) in Resource::ALL.into_iter().enumerate() {
                if limited[i] {
                    limits.set(r, l.get(r));
                }
            }
            let f = by_suggestion(u, d, limits).compress(COMPRESS_EPSILON);
            for k in 0..=100 {
                let s = k as f64 / 100.0;
                let (built, read) = (f.value_at(s), share_at(u, d, limits, s));
                prop_assert!(
                    Resource::ALL.iter().all(|&r| (built.get(r) - read.get(r)).abs() < 1e-9),
                    "at s = {s}: function {built:?}, read {read:?} (u {u:?}, d {d:?}, l {limits:?})"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The closed form is the general construction, point for point.
        #[test]
        fn closed_form_matches_the_general_construction(
            d in vector(),
            frac in (0u8..=10, 0u8..=10, 0u8..=10, 0u8..=10),
            l in vector(),
            limited in any::<[bool; 4]>(),
        ) {
            let d = d.map(|_, v| v.min(1.0));
            let u = ResourceVector::new(
                (d.cpu * frac.0 as f64 / 10.0 * 10.0).round() / 10.0,
                (d.memory * frac.1 as f64 / 10.0 * 10.0).round() / 10.0,
                (d.gpu * frac.2 as f64 / 10.0 * 4.0).round() / 4.0,
                (d.user_slots * frac.3 as f64 / 10.0 * 10.0).round() / 10.0,
            );
            let u = vector::min(&u, &d);
            let mut limits = vector::splat(1.0);
            for (i, r) in Resource::ALL.into_iter().enumerate() {
                if limited[i] {
                    limits.set(r, l.get(r));
                }
            }
            let fast = by_suggestion(u, d, limits).compress(COMPRESS_EPSILON);
            let slow = general_operation_by_suggestion(u, d, limits);
            for k in 0..=200 {
                let s = k as f64 / 200.0;
                for (name, f, g) in [("left", fast.value_at(s), slow.value_at(s)), ("right", fast.right_limit_at(s), slow.right_limit_at(s))] {
                    prop_assert!(
                        Resource::ALL.iter().all(|&r| (f.get(r) - g.get(r)).abs() < 1e-9),
                        "{name} at s = {s}: fast {f:?}, general {g:?} (u {u:?}, d {d:?}, l {limits:?})"
                    );
                }
            }
        }
    }
}
