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

/// The function, built in `buffer`'s storage: this runs once per operation per update.
pub(crate) fn by_suggestion_in(
    buffer: Vec<(f64, ResourceVector)>,
    usage: ResourceVector,
    demand: ResourceVector,
    limits: ResourceVector,
) -> Plf<ResourceVector> {
    let l = limits.map(|r, v| v.max(0.0).min(demand.get(r)));
    let u = usage;
    let top = vector::max_component(&u);
    let below_usage = Resource::ALL
        .iter()
        .filter(|&&r| l.get(r) < u.get(r))
        .map(|&r| l.get(r))
        .fold(f64::INFINITY, f64::min);
    let mut b = Builder::in_buffer(buffer);
    b.push(0.0, ResourceVector::ZERO);
    // Small fixed buffers: this runs once per operation per update.
    let mut levels = [f64::INFINITY; 4];
    for (k, &r) in Resource::ALL.iter().enumerate() {
        if u.get(r) > 0.0 {
            levels[k] = u.get(r);
        }
    }
    insertion_sort(&mut levels);
    let levels: &[f64] = &levels[..levels.partition_point(|v| v.is_finite())];
    if below_usage.is_finite() {
        // Usage never fits: up the first part of the path to the lowest such limit.
        for &c in levels.iter().filter(|&&c| c < below_usage) {
            b.push(c, vector::min(&u, &vector::splat(c)));
        }
        let end = vector::min(&u, &vector::splat(below_usage));
        b.push(below_usage, end);
        if below_usage < 1.0 {
            b.push(1.0, end);
        }
        return b.finish();
    }
    for &c in levels.iter().filter(|&&c| c <= 1.0) {
        b.push(c, vector::min(&u, &vector::splat(c)));
    }
    if top >= 1.0 {
        return b.finish();
    }
    let mut wanting_buf = [Resource::Cpu; 4];
    let mut w = 0;
    for r in Resource::ALL {
        if demand.get(r) > u.get(r) {
            wanting_buf[w] = r;
            w += 1;
        }
    }
    let wanting = &wanting_buf[..w];
    let t = |s: f64| -> f64 {
        wanting
            .iter()
            .map(|&r| (s.min(l.get(r)) - u.get(r)) / (demand.get(r) - u.get(r)))
            .fold(1.0f64, f64::min)
            .max(0.0)
    };
    let at = |s: f64| u + (demand - u).scale(t(s));
    let (mut bends_buf, nb) = bend_points(wanting, u, demand, l);
    // Only the bends within `(U, 1]` matter, and they are few: kept, then sorted.
    let mut kept = 0;
    for k in 0..nb {
        let s = bends_buf[k];
        if s.is_finite() && s > top && s <= 1.0 {
            bends_buf[kept] = s;
            kept += 1;
        }
    }
    let bends = &mut bends_buf[..kept];
    insertion_sort(bends);
    // At `U` the value from the left is the usage; from the right the path moves on.
    b.push(top, at(top));
    for &s in bends.iter() {
        b.push(s, at(s));
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
