//! Monotone piecewise linear functions on a closed interval, possibly discontinuous.
//!
//! A function is its plot: points with non-decreasing abscissas joined by straight lines.
//! Two consecutive points with the same abscissa are a jump (a vertical piece). The
//! functions are left-continuous: the value at a jump is the value reached from the left,
//! and at the left bound it is the first point's value. Every function the fair share
//! update builds is non-decreasing, which is what makes transposition (the inverse) and
//! composition well defined.

pub use crate::plf_value::Value;

/// Compressing functions drops breakpoints that move values by less than this.
pub(crate) const COMPRESS_EPSILON: f64 = 1e-12;

/// Abscissas closer than this are one abscissa: a piece that steep is a jump.
const SAME_X: f64 = 1e-13;

#[derive(Clone, Debug, PartialEq)]
pub struct Plf<V> {
    /// At least one point; abscissas non-decreasing; at most two points per abscissa.
    points: Vec<(f64, V)>,
}

/// Adds points left to right, merging what would break the representation.
pub struct Builder<V> {
    points: Vec<(f64, V)>,
}

impl<V: Value> Builder<V> {
    pub fn new() -> Self {
        Self { points: vec![] }
    }

    pub fn with_capacity(n: usize) -> Self {
        Self {
            points: Vec::with_capacity(n),
        }
    }

    /// Builds in `buffer`'s storage (emptied first): one buffer serves function after
    /// function, so a function made per operation per update allocates nothing.
    pub fn in_buffer(mut buffer: Vec<(f64, V)>) -> Self {
        buffer.clear();
        Self { points: buffer }
    }

    pub fn push(&mut self, x: f64, y: V) {
        let n = self.points.len();
        if let Some(&(lx, ly)) = self.points.last() {
            let x = if x - lx <= SAME_X * lx.abs().max(1.0) {
                lx
            } else {
                x
            };
            if x == lx && y == ly {
                return;
            }
            // A third point at one abscissa: the middle one says nothing.
            if x == lx && n >= 2 && self.points[n - 2].0 == x {
                self.points[n - 1].1 = y;
                return;
            }
            self.points.push((x, y));
        } else {
            self.points.push((x, y));
        }
    }

    pub fn finish(self) -> Plf<V> {
        assert!(!self.points.is_empty(), "a function needs a point");
        Plf {
            points: self.points,
        }
    }
}

impl<V: Value> Default for Builder<V> {
    fn default() -> Self {
        Self::new()
    }
}

/// The value reached from the left at `x` of the function plotted by `p` (at least one
/// point, abscissas non-decreasing): what [`Plf::value_at`] reads, for plots kept
/// side by side in one buffer.
pub fn value_at<V: Value>(p: &[(f64, V)], x: f64) -> V {
    if x <= p[0].0 {
        return p[0].1;
    }
    let i = p.partition_point(|q| q.0 < x);
    if i == p.len() {
        return p[p.len() - 1].1;
    }
    if p[i].0 == x {
        return p[i].1;
    }
    lerp(p[i - 1], p[i], x)
}

fn lerp<V: Value>(a: (f64, V), b: (f64, V), x: f64) -> V {
    if b.0 <= a.0 {
        return b.1;
    }
    let t = ((x - a.0) / (b.0 - a.0)).clamp(0.0, 1.0);
    a.1 + (b.1 - a.1).times(t)
}

impl<V: Value> Plf<V> {
    pub fn constant(left: f64, right: f64, y: V) -> Self {
        let mut b = Builder::new();
        b.push(left, y);
        b.push(right, y);
        b.finish()
    }

    pub fn points(&self) -> &[(f64, V)] {
        &self.points
    }

    /// The storage back, for the next [`Builder::in_buffer`].
    pub fn into_points(self) -> Vec<(f64, V)> {
        self.points
    }

    pub fn left_bound(&self) -> f64 {
        self.points[0].0
    }

    pub fn right_bound(&self) -> f64 {
        self.points[self.points.len() - 1].0
    }

    pub fn left_value(&self) -> V {
        self.points[0].1
    }

    pub fn right_value(&self) -> V {
        self.points[self.points.len() - 1].1
    }

    /// The value reached from the left (the first value at the left bound).
    pub fn value_at(&self, x: f64) -> V {
        value_at(&self.points, x)
    }

    /// Only the tests' reference constructions use this.
    #[cfg(test)]
    /// The value reached from the right (the last value at the right bound).
    pub fn right_limit_at(&self, x: f64) -> V {
        let p = &self.points;
        let j = p.partition_point(|q| q.0 <= x);
        if j == 0 {
            return p[0].1;
        }
        let j = j - 1;
        if p[j].0 == x || j + 1 == p.len() {
            return p[j].1;
        }
        lerp(p[j], p[j + 1], x)
    }

    /// Drops a jump at the right bound: the function ends at its value from the left.
    pub fn trim_right(mut self) -> Self {
        let n = self.points.len();
        if n >= 2 && self.points[n - 2].0 == self.points[n - 1].0 {
            self.points.pop();
        }
        self
    }

    /// Only the tests' reference constructions use this.
    #[cfg(test)]
    /// `g(x) = self(x · k)`: the domain shrinks by `k`.
    pub fn scale_argument(&self, k: f64) -> Self {
        let mut b = Builder::with_capacity(self.points.len() + 1);
        for &(x, y) in &self.points {
            b.push(x / k, y);
        }
        b.finish()
    }

    /// Only the tests' reference constructions use this.
    #[cfg(test)]
    /// Continues the function with its last value up to `right`.
    pub fn extend_right(mut self, right: f64) -> Self {
        let (x, y) = self.points[self.points.len() - 1];
        if right > x {
            self.points.push((right, y));
        }
        self
    }

    /// Removes points that lie on the line through their neighbours (within `eps` on
    /// every component), so sums up the tree do not carry every leaf's breakpoints.
    pub fn compress(mut self, eps: f64) -> Self {
        let p = &mut self.points;
        if p.len() <= 2 {
            return self;
        }
        let n = p.len();
        // `w` is the next kept slot; points before it are kept.
        let mut w = 1;
        for i in 1..n - 1 {
            let a = p[w - 1];
            let (b, c) = (p[i], p[i + 1]);
            let keep = a.0 == b.0 || b.0 == c.0 || !b.1.near(lerp(a, c, b.0), eps);
            if keep {
                p[w] = b;
                w += 1;
            }
        }
        p[w] = p[n - 1];
        p.truncate(w + 1);
        self
    }

    /// `h(s) = self(g(s))` for a non-decreasing `g` whose values lie in this domain.
    /// At a jump of `self` that `g` passes through, `h` jumps too; where `g` rests on
    /// the jump, `h` takes the value from the left.
    pub fn compose(&self, g: &Plf<f64>) -> Self {
        // (s, g(s)) at g's points and where g crosses this function's breakpoints.
        let mut crit: Vec<(f64, f64)> = Vec::with_capacity(g.points.len() + self.points.len());
        let gp = &g.points;
        let mut lo = 0;
        for k in 0..gp.len() {
            crit.push(gp[k]);
            if k + 1 < gp.len() {
                let (a, b) = (gp[k], gp[k + 1]);
                if b.0 > a.0 && b.1 > a.1 {
                    // g is non-decreasing: the breakpoints it passes come in order.
                    while lo < self.points.len() && self.points[lo].0 <= a.1 {
                        lo += 1;
                    }
                    let mut hi = lo;
                    while hi < self.points.len() && self.points[hi].0 < b.1 {
                        hi += 1;
                    }
                    let mut last = f64::NAN;
                    for q in &self.points[lo..hi] {
                        if q.0 != last {
                            last = q.0;
                            let s = a.0 + (q.0 - a.1) / (b.1 - a.1) * (b.0 - a.0);
                            crit.push((s, q.0));
                        }
                    }
                }
            }
        }
        let mut out = Builder::with_capacity(crit.len() * 2);
        let mut outer = Cursor::new(self);
        for i in 0..crit.len() {
            let (s, m) = crit[i];
            let (from_left, from_right) = outer.limits(m);
            if i == 0 || crit[i - 1].0 != s {
                out.push(s, from_left);
            }
            if i + 1 == crit.len() || crit[i + 1].0 != s {
                let rising = i + 1 < crit.len() && crit[i + 1].1 > m;
                out.push(s, if rising { from_right } else { from_left });
            }
        }
        out.finish().trim_right()
    }

    /// Only the tests' reference constructions use this.
    #[cfg(test)]
    /// The sum of functions that share the left bound, over the shortest domain.
    pub fn sum(funcs: &[Plf<V>]) -> Self {
        assert!(!funcs.is_empty());
        let right = funcs
            .iter()
            .map(|f| f.right_bound())
            .fold(f64::INFINITY, f64::min);
        let parts: Vec<(&[(f64, V)], f64)> = funcs.iter().map(|f| (f.points(), 1.0)).collect();
        Self::sum_scaled(&parts, right)
    }
}

impl<V: Value> Plf<V> {
    /// Keeps a function that should be non-decreasing from dipping by rounding: each
    /// value is at least the one before it (componentwise, by `max`).
    pub fn monotone(mut self, max: impl Fn(V, V) -> V) -> Self {
        for i in 1..self.points.len() {
            let prev = self.points[i - 1].1;
            self.points[i].1 = max(self.points[i].1, prev);
        }
        self
    }
}

/// Reads a function left to right at non-decreasing abscissas in amortised constant time.
struct Cursor<'a, V> {
    points: &'a [(f64, V)],
    /// First point with abscissa ≥ the last one asked about.
    at: usize,
}

impl<'a, V: Value> Cursor<'a, V> {
    fn new(f: &'a Plf<V>) -> Self {
        Self {
            points: &f.points,
            at: 0,
        }
    }

    /// (value from the left, value from the right) at `x`.
    fn limits(&mut self, x: f64) -> (V, V) {
        let p = self.points;
        while self.at < p.len() && p[self.at].0 < x {
            self.at += 1;
        }
        if self.at == p.len() {
            let last = p[p.len() - 1].1;
            return (last, last);
        }
        if p[self.at].0 == x {
            let mut k = self.at;
            while k + 1 < p.len() && p[k + 1].0 == x {
                k += 1;
            }
            return (p[self.at].1, p[k].1);
        }
        if self.at == 0 {
            return (p[0].1, p[0].1);
        }
        let v = lerp(p[self.at - 1], p[self.at], x);
        (v, v)
    }
}

#[cfg(test)]
impl Plf<f64> {
    /// The pointwise minimum of non-decreasing functions on the same domain: one merge
    /// over their breakpoints, adding the points where the smallest one changes between
    /// breakpoints.
    pub fn pointwise_min(funcs: &[Plf<f64>]) -> Plf<f64> {
        assert!(!funcs.is_empty() && funcs.len() <= MAX_MIN_ARGS);
        // A function that starts at or above where another ends is never the minimum.
        let lowest_end = funcs
            .iter()
            .map(|f| f.right_value())
            .fold(f64::INFINITY, f64::min);
        let mut live: [&Plf<f64>; MAX_MIN_ARGS] = [&funcs[0]; MAX_MIN_ARGS];
        let mut n = 0;
        for f in funcs.iter().filter(|f| f.left_value() <= lowest_end) {
            live[n] = f;
            n += 1;
        }
        if n <= 1 {
            return live[0].clone();
        }
        let live = &live[..n];
        let mut cursors: [Cursor<f64>; MAX_MIN_ARGS] =
            std::array::from_fn(|k| Cursor::new(live[k.min(n - 1)]));
        let mut next = [0usize; MAX_MIN_ARGS];
        let mut left = [0.0; MAX_MIN_ARGS];
        let mut right = [0.0; MAX_MIN_ARGS];
        let mut prev_right = [0.0; MAX_MIN_ARGS];
        let total: usize = live.iter().map(|f| f.points.len()).sum();
        let mut out = Builder::with_capacity(total + 4);
        let mut prev: Option<(f64, usize)> = None;
        let argmin =
            |v: &[f64]| (0..v.len()).fold(0, |best, k| if v[k] < v[best] { k } else { best });
        loop {
            // The next abscissa any function has a point at.
            let mut x = f64::INFINITY;
            for k in 0..n {
                if let Some(p) = live[k].points.get(next[k]) {
                    x = x.min(p.0);
                }
            }
            if !x.is_finite() {
                break;
            }
            for k in 0..n {
                let (l, r) = cursors[k].limits(x);
                left[k] = l;
                right[k] = r;
                while next[k] < live[k].points.len() && live[k].points[next[k]].0 <= x {
                    next[k] += 1;
                }
            }
            // Where the smallest function changed since the last abscissa, the lines
            // crossed in between.
            if let Some((px, pk)) = prev {
                if argmin(&left[..n]) != pk && x > px {
                    let mut crossings = [f64::NAN; MAX_MIN_ARGS * MAX_MIN_ARGS];
                    let mut c = 0;
                    for a in 0..n {
                        for b in a + 1..n {
                            let d0 = prev_right[a] - prev_right[b];
                            let d1 = left[a] - left[b];
                            if (d0 < 0.0 && d1 > 0.0) || (d0 > 0.0 && d1 < 0.0) {
                                crossings[c] = px + d0 / (d0 - d1) * (x - px);
                                c += 1;
                            }
                        }
                    }
                    let crossings = &mut crossings[..c];
                    crossings.sort_by(f64::total_cmp);
                    for &cx in crossings.iter() {
                        if cx > px && cx < x {
                            let t = (cx - px) / (x - px);
                            let v = (0..n)
                                .map(|k| prev_right[k] + (left[k] - prev_right[k]) * t)
                                .fold(f64::INFINITY, f64::min);
                            out.push(cx, v);
                        }
                    }
                }
            }
            let l = left[..n].iter().copied().fold(f64::INFINITY, f64::min);
            let r = right[..n].iter().copied().fold(f64::INFINITY, f64::min);
            out.push(x, l);
            out.push(x, r);
            prev = Some((x, argmin(&right[..n])));
            prev_right = right;
        }
        out.finish()
    }
}

/// At most this many functions go into one pointwise minimum (one per resource).
#[cfg(test)]
pub const MAX_MIN_ARGS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn f(points: &[(f64, f64)]) -> Plf<f64> {
        let mut b = Builder::new();
        for &(x, y) in points {
            b.push(x, y);
        }
        b.finish()
    }

    #[test]
    fn values_are_taken_from_the_left_at_jumps() {
        // 0 → 1 on [0, 1], a jump to 3 at 1, then flat.
        let g = f(&[(0.0, 0.0), (1.0, 1.0), (1.0, 3.0), (2.0, 3.0)]);
        assert_eq!(g.value_at(1.0), 1.0);
        assert_eq!(g.right_limit_at(1.0), 3.0);
        assert_eq!(g.value_at(0.5), 0.5);
        assert_eq!(g.value_at(1.5), 3.0);
        assert_eq!(g.value_at(0.0), 0.0);
    }

    #[test]
    fn sums_keep_jumps_and_slopes() {
        let a = f(&[(0.0, 0.0), (1.0, 1.0)]);
        let b = f(&[(0.0, 1.0), (0.5, 1.0), (0.5, 2.0), (1.0, 2.0)]);
        let s = Plf::sum(&[a, b]);
        assert!((s.value_at(0.25) - 1.25).abs() < 1e-12);
        assert!((s.value_at(0.5) - 1.5).abs() < 1e-12);
        assert!((s.right_limit_at(0.5) - 2.5).abs() < 1e-12);
        assert!((s.value_at(1.0) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn minimum_bends_where_functions_cross() {
        // x and 0.25 + x/2 cross at 0.5.
        let a = f(&[(0.0, 0.0), (1.0, 1.0)]);
        let b = f(&[(0.0, 0.25), (1.0, 0.75)]);
        let m = Plf::pointwise_min(&[a, b]);
        assert!((m.value_at(0.5) - 0.5).abs() < 1e-12);
        assert!((m.value_at(0.25) - 0.25).abs() < 1e-12);
        assert!((m.value_at(0.75) - 0.625).abs() < 1e-12);
        // One that starts above where another ends never matters.
        let c = f(&[(0.0, 2.0), (1.0, 3.0)]);
        let m = Plf::pointwise_min(&[f(&[(0.0, 0.0), (1.0, 1.0)]), c]);
        assert_eq!(m.points().len(), 2);
    }

    #[test]
    fn composition_follows_the_inner_function() {
        // outer: 2x on [0, 2]; inner: x² approximated by 0 → 0.25 → 1 at 0, 0.5, 1.
        let outer = f(&[(0.0, 0.0), (2.0, 4.0)]);
        let inner = f(&[(0.0, 0.0), (0.5, 0.25), (1.0, 1.0)]);
        let h = outer.compose(&inner);
        assert!((h.value_at(0.5) - 0.5).abs() < 1e-12);
        assert!((h.value_at(0.75) - 1.25).abs() < 1e-12);
        // A jump of the outer function that the inner one rises through becomes a jump.
        let outer = f(&[(0.0, 0.0), (0.5, 0.5), (0.5, 1.0), (1.0, 1.5)]);
        let inner = f(&[(0.0, 0.0), (1.0, 1.0)]);
        let h = outer.compose(&inner);
        assert!((h.value_at(0.5) - 0.5).abs() < 1e-12);
        assert!((h.right_limit_at(0.5) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn compression_drops_only_collinear_points() {
        let g = f(&[(0.0, 0.0), (0.5, 0.5), (1.0, 1.0), (1.0, 2.0), (2.0, 2.0)]).compress(1e-12);
        assert_eq!(g.points().len(), 4);
        assert_eq!(g.value_at(0.5), 0.5);
    }
}
