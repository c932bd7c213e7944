//! The max fit factor (step 5 of the crate documentation): for each suggestion, the
//! largest fit factor at which an element stays within its guarantee plus the
//! suggestion and its limits. Apart from the update that uses it, with the reference
//! constructions its tests check it against.

use crate::piecewise::Plf;
use crate::piecewise::COMPRESS_EPSILON;
#[cfg(test)]
use crate::vector;
use ytsched_common::resources::{Resource, ResourceVector};

/// An operation's path on fit factor `[0, 2]`: on `[0, 1]` every resource rises
/// together up to its usage (`min(usage_r, f · max usage)`), then straight to demand.
/// The reference the closed form (`operation_share`) is checked against.
#[cfg(test)]
fn operation_path(usage: ResourceVector, demand: ResourceVector) -> Plf<ResourceVector> {
    let mut b = crate::piecewise::Builder::with_capacity(7);
    let max_usage = vector::max_component(&usage);
    b.push(0.0, ResourceVector::ZERO);
    if max_usage > 0.0 {
        let mut levels: Vec<f64> = Resource::ALL.iter().map(|&r| usage.get(r)).collect();
        levels.sort_by(f64::total_cmp);
        for level in levels {
            if level > 0.0 {
                b.push(
                    level / max_usage,
                    vector::min(&vector::splat(level), &usage),
                );
            }
        }
    } else {
        b.push(1.0, ResourceVector::ZERO);
    }
    b.push(1.0, usage);
    b.push(2.0, demand);
    b.finish()
}

/// The resources that can stop an element, each with its guarantee and limit clamped
/// into the range its path covers. A flat component never stops the element.
fn bounds(
    by_ff: &Plf<ResourceVector>,
    guarantee: ResourceVector,
    limits: ResourceVector,
) -> ([(Resource, f64, f64); 4], usize) {
    let pts = by_ff.points();
    let mut rs = [(Resource::Cpu, 0.0, 0.0); 4];
    let mut k = 0;
    for r in Resource::ALL {
        let (first, last) = (pts[0].1.get(r), pts[pts.len() - 1].1.get(r));
        if last <= first {
            continue;
        }
        let limit = limits.get(r).max(first).min(last);
        rs[k] = (r, guarantee.get(r).max(first).min(limit), limit);
        k += 1;
    }
    (rs, k)
}

/// For each suggestion `s`, the largest fit factor at which every resource stays within
/// `min(guarantee + s, limits)`.
///
/// Rather than inverting each resource's component and taking their minimum, one pass
/// over the path computes how much suggestion each fit factor needs,
/// `need(f) = max_r (P_r(f) − g_r)`, up to where the first limit is reached, and inverts
/// that: `M(s) = inf {f : need(f) ≥ s}` (the largest `f` with `need(f) ≤ 0` at `s = 0`).
/// A unit test checks it against the resource-by-resource construction.
pub(crate) fn max_fit_factor(
    by_ff: &Plf<ResourceVector>,
    guarantee: ResourceVector,
    limits: ResourceVector,
) -> Plf<f64> {
    let (rs, k) = bounds(by_ff, guarantee, limits);
    if k == 0 {
        return Plf::constant(0.0, 1.0, by_ff.right_bound());
    }
    invert_need(need_along_path(by_ff.points(), &rs[..k]))
}

/// A resource's (which, guarantee share, limit share) along a path.
type Bound = (Resource, f64, f64);

/// How much suggestion the usage `v` needs: the most any resource exceeds its guarantee.
fn need(rs: &[Bound], v: &ResourceVector) -> f64 {
    rs.iter()
        .map(|&(r, g, _)| v.get(r) - g)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Which resource needs most at `v`.
fn neediest(rs: &[Bound], v: &ResourceVector) -> usize {
    (0..rs.len()).fold(0, |best, j| {
        let (r, g, _) = rs[j];
        let (rb, gb, _) = rs[best];
        if v.get(r) - g > v.get(rb) - gb {
            j
        } else {
            best
        }
    })
}

fn within(rs: &[Bound], v: &ResourceVector) -> bool {
    rs.iter().all(|&(r, _, l)| v.get(r) <= l)
}

/// (fit factor, needed suggestion) along the path `pts` until a limit is reached, with
/// a point wherever the resource needing most changes inside a piece.
fn need_along_path(pts: &[(f64, ResourceVector)], rs: &[Bound]) -> Vec<(f64, f64)> {
    let k = rs.len();
    let mut need_pts: Vec<(f64, f64)> = Vec::with_capacity(pts.len() + 4);
    need_pts.push((pts[0].0, need(rs, &pts[0].1)));
    for i in 1..pts.len() {
        let (a, b) = (pts[i - 1], pts[i]);
        // Where the resource needing most changes inside the piece, the lines crossed.
        if b.0 > a.0 && neediest(rs, &a.1) != neediest(rs, &b.1) {
            let mut crossings = [f64::NAN; 16];
            let mut c = 0;
            for p in 0..k {
                for q in p + 1..k {
                    let (rp, gp, _) = rs[p];
                    let (rq, gq, _) = rs[q];
                    let d0 = (a.1.get(rp) - gp) - (a.1.get(rq) - gq);
                    let d1 = (b.1.get(rp) - gp) - (b.1.get(rq) - gq);
                    if (d0 < 0.0 && d1 > 0.0) || (d0 > 0.0 && d1 < 0.0) {
                        crossings[c] = d0 / (d0 - d1);
                        c += 1;
                    }
                }
            }
            let crossings = &mut crossings[..c];
            crossings.sort_by(f64::total_cmp);
            for &t in crossings.iter() {
                let v = a.1 + (b.1 - a.1).scale(t);
                if !within(rs, &v) {
                    break;
                }
                need_pts.push((a.0 + t * (b.0 - a.0), need(rs, &v)));
            }
        }
        if within(rs, &b.1) {
            need_pts.push((b.0, need(rs, &b.1)));
            continue;
        }
        // The first limit is reached inside this piece: stop where it is.
        let t = rs
            .iter()
            .filter(|&&(r, _, _)| b.1.get(r) > a.1.get(r))
            .map(|&(r, _, l)| ((l - a.1.get(r)) / (b.1.get(r) - a.1.get(r))).clamp(0.0, 1.0))
            .fold(1.0f64, f64::min);
        let v = a.1 + (b.1 - a.1).scale(t);
        need_pts.push((a.0 + t * (b.0 - a.0), need(rs, &v)));
        break;
    }
    need_pts
}

/// The inverse of the need: suggestion → the largest fit factor it allows, on [0, 1].
fn invert_need(mut need_pts: Vec<(f64, f64)>) -> Plf<f64> {
    let mut running = f64::NEG_INFINITY;
    for p in need_pts.iter_mut() {
        running = running.max(p.1);
        p.1 = running;
    }
    let j = need_pts.partition_point(|p| p.1 <= 0.0);
    let start = if j == 0 {
        need_pts[0].0
    } else if j < need_pts.len() {
        let (a, b) = (need_pts[j - 1], need_pts[j]);
        if b.0 > a.0 && a.1 < 0.0 {
            a.0 + (0.0 - a.1) / (b.1 - a.1) * (b.0 - a.0)
        } else {
            a.0
        }
    } else {
        need_pts[j - 1].0
    };
    let mut out = crate::piecewise::Builder::with_capacity(need_pts.len() + 2);
    out.push(0.0, start);
    let mut last = (0.0, start);
    for i in j..need_pts.len() {
        let (x, sv) = need_pts[i];
        if sv >= 1.0 {
            // The suggestion never exceeds 1: end where the need reaches it.
            let (px, ps) = if i > 0 { need_pts[i - 1] } else { (x, sv) };
            let at = if sv > ps && x > px {
                px + (1.0 - ps.max(0.0)) / (sv - ps.max(0.0)) * (x - px)
            } else {
                px.max(last.1)
            };
            out.push(1.0, at.max(last.1).min(x));
            return out.finish().compress(COMPRESS_EPSILON);
        }
        out.push(sv, x);
        last = (sv, x);
    }
    out.push(1.0, last.1);
    out.finish().compress(COMPRESS_EPSILON)
}

/// The max fit factor built resource by resource (inverse, narrowed, shifted) and
/// combined by a pointwise minimum: the reference `max_fit_factor` must agree with.
#[cfg(test)]
pub(crate) fn max_fit_factor_general(
    by_ff: &Plf<ResourceVector>,
    guarantee: ResourceVector,
    limits: ResourceVector,
) -> Plf<f64> {
    let pts = by_ff.points();
    let end = by_ff.right_bound();
    let mut per_resource: Vec<Plf<f64>> = Vec::with_capacity(4);
    let (rs, k) = bounds(by_ff, guarantee, limits);
    for &(r, g, limit) in &rs[..k] {
        let inverse = Inverse { pts, r };
        let mut b = crate::piecewise::Builder::with_capacity(8);
        b.push(0.0, inverse.last_at_most(g));
        if limit > g {
            let lo = pts.partition_point(|p| p.1.get(r) <= g);
            let hi = pts.partition_point(|p| p.1.get(r) < limit);
            for &(x, y) in &pts[lo..hi.max(lo)] {
                b.push(y.get(r) - g, x);
            }
            b.push(limit - g, inverse.first_at_least(limit));
            b.push(limit - g, inverse.last_at_most(limit));
        }
        let f = b.finish();
        per_resource.push(if f.right_bound() < 1.0 {
            f.extend_right(1.0)
        } else {
            f.trim_right()
        });
    }
    if per_resource.is_empty() {
        return Plf::constant(0.0, 1.0, end);
    }
    Plf::pointwise_min(&per_resource).compress(COMPRESS_EPSILON)
}

/// One component of a non-decreasing path read backwards: the fit factor by value.
#[cfg(test)]
struct Inverse<'a> {
    pts: &'a [(f64, ResourceVector)],
    r: Resource,
}

#[cfg(test)]
impl Inverse<'_> {
    fn y(&self, i: usize) -> f64 {
        self.pts[i].1.get(self.r)
    }

    /// The largest fit factor whose value is at most `y`.
    fn last_at_most(&self, y: f64) -> f64 {
        let pts = self.pts;
        let j = pts.partition_point(|p| p.1.get(self.r) <= y);
        if j == 0 {
            return pts[0].0;
        }
        let j = j - 1;
        if j + 1 == pts.len() || self.y(j) == y {
            return pts[j].0;
        }
        let t = (y - self.y(j)) / (self.y(j + 1) - self.y(j));
        pts[j].0 + t * (pts[j + 1].0 - pts[j].0)
    }

    /// The smallest fit factor whose value is at least `y`.
    fn first_at_least(&self, y: f64) -> f64 {
        let pts = self.pts;
        let i = pts.partition_point(|p| p.1.get(self.r) < y);
        if i == pts.len() {
            return pts[pts.len() - 1].0;
        }
        if i == 0 || self.y(i) == y {
            return pts[i].0;
        }
        let t = (y - self.y(i - 1)) / (self.y(i) - self.y(i - 1));
        pts[i - 1].0 + t * (pts[i].0 - pts[i - 1].0)
    }
}

/// An operation's function built the general way (path, max fit factor, composition):
/// what `operation_share` must agree with.
#[cfg(test)]
pub(crate) fn general_operation_by_suggestion(
    usage: ResourceVector,
    demand: ResourceVector,
    limits: ResourceVector,
) -> Plf<ResourceVector> {
    let by_ff = operation_path(usage, demand);
    let mff = max_fit_factor(&by_ff, ResourceVector::ZERO, limits);
    by_ff.compose(&mff).compress(COMPRESS_EPSILON)
}

#[cfg(test)]
mod max_fit_factor_tests {
    use super::*;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = Vec<(f64, [u8; 4])>> {
        // Increments per step (some zero: flat pieces; some at the same abscissa: jumps).
        prop::collection::vec((0u8..3, [0u8..4, 0u8..4, 0u8..4, 0u8..4]), 1..8).prop_map(|steps| {
            let mut x = 0.0;
            steps
                .into_iter()
                .map(|(dx, dy)| {
                    x += dx as f64 / 4.0;
                    (x, dy)
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn one_pass_inverse_matches_the_resource_by_resource_construction(
            steps in path(),
            g in [0u8..6, 0u8..6, 0u8..6, 0u8..6],
            l in [1u8..12, 1u8..12, 1u8..12, 1u8..12],
        ) {
            let mut b = crate::piecewise::Builder::new();
            let mut y = ResourceVector::ZERO;
            b.push(0.0, y);
            for (x, dy) in &steps {
                y += ResourceVector::new(dy[0] as f64, dy[1] as f64, dy[2] as f64, dy[3] as f64).scale(0.05);
                b.push(*x, y);
            }
            let path = b.finish().monotone(|a, b| vector::max(&a, &b));
            let guarantee = ResourceVector::new(g[0] as f64, g[1] as f64, g[2] as f64, g[3] as f64).scale(0.05);
            let limits = ResourceVector::new(l[0] as f64, l[1] as f64, l[2] as f64, l[3] as f64).scale(0.05);
            let fast = max_fit_factor(&path, guarantee, limits);
            let slow = max_fit_factor_general(&path, guarantee, limits);
            // Off the grid the inputs are on, so no sample sits exactly on a jump (where
            // rounding alone decides the side).
            for k in 0..400 {
                let s = (k as f64 + 0.37) / 400.0;
                let (a, b) = (fast.value_at(s), slow.value_at(s));
                prop_assert!((a - b).abs() < 1e-9, "at {s}: one pass {a}, general {b}\npath {:?}\nfast {:?}\nslow {:?}", path.points(), fast.points(), slow.points());
                // The shares there agree too, unless the path jumps right at that fit
                // factor: then a rounding-sized difference picks the side of the jump.
                let jump_near = path.points().windows(2).any(|w| {
                    w[0].0 == w[1].0 && (w[0].0 - a).abs() < 1e-9
                });
                if !jump_near {
                    let (fa, fb) = (path.value_at(a), path.value_at(b));
                    prop_assert!(Resource::ALL.iter().all(|&r| (fa.get(r) - fb.get(r)).abs() < 1e-6), "{fa:?} vs {fb:?}");
                }
            }
        }
    }
}
