//! The sum of scaled functions (`Plf::sum_scaled`): a `fair_share` pool's path is its
//! children's shares summed as a common level rises, each child going at its weight.

use crate::piecewise::{Builder, Plf, Value};

impl<V: Value> Plf<V> {
    /// `Σ f_c(x · k_c)` on `[0, right]`, each `f_c` (defined from 0) continued with its
    /// last value beyond its own domain. One sweep over all breakpoints keeps the running
    /// value and slope, so the cost is the total number of points times the log of the
    /// number of functions, not their product.
    pub fn sum_scaled(parts: &[(&[(f64, V)], f64)], right: f64) -> Self {
        assert!(!parts.is_empty());
        let mut sweep = Sweep::new(parts, right);
        // Every function starts at 0: its points there are taken in at once, not sorted
        // with the rest (a sixth of a leaf pool's points).
        let mut events: Vec<(f64, u32, u32)> =
            Vec::with_capacity(parts.iter().map(|p| p.0.len()).sum());
        let first: V = parts.iter().fold(V::ZERO, |acc, (f, _)| acc + f[0].1);
        let mut from_right = V::ZERO;
        for c in 0..parts.len() {
            let mut j = 0;
            if sweep.x_of(c, 0) == 0.0 {
                j = sweep.take(c, 0, 0.0, &mut from_right) + 1;
            }
            sweep.events_of(c, j, &mut events);
        }
        sweep.out.push(0.0, first);
        sweep.out.push(0.0, from_right);
        sweep.value = from_right;
        // One event per function and abscissa, so (abscissa, function) orders them all
        // and an unstable sort gives that one order. Abscissas are never negative (nor
        // NaN), so their bits order as they do: integer keys sort fastest.
        debug_assert!(events.iter().all(|e| e.0.is_sign_positive()));
        events.sort_unstable_by_key(|e| (e.0.to_bits(), e.1));
        let mut i = 0;
        while i < events.len() {
            let x = events[i].0;
            let from_left = sweep.value_at(x);
            let mut from_right = from_left;
            while i < events.len() && events[i].0 == x {
                let (_, c, j) = events[i];
                sweep.take(c as usize, j as usize, x, &mut from_right);
                i += 1;
            }
            sweep.out.push(x, from_left);
            sweep.out.push(x, from_right);
            sweep.value = from_right;
            sweep.at = x;
        }
        if sweep.at < right {
            let end = sweep.value_at(right);
            sweep.out.push(right, end);
        }
        sweep.out.finish()
    }
}

/// `sum_scaled`'s running state: where it is, the value there, and each function's
/// slope and their (compensated) total.
struct Sweep<'a, V> {
    parts: &'a [(&'a [(f64, V)], f64)],
    inverse: Vec<f64>,
    right: f64,
    slope: Vec<V>,
    total_slope: V,
    slope_error: V,
    value: V,
    at: f64,
    out: Builder<V>,
}

impl<'a, V: Value> Sweep<'a, V> {
    fn new(parts: &'a [(&'a [(f64, V)], f64)], right: f64) -> Self {
        let points: usize = parts.iter().map(|p| p.0.len()).sum();
        Self {
            parts,
            inverse: parts.iter().map(|p| 1.0 / p.1).collect(),
            right,
            slope: vec![V::ZERO; parts.len()],
            total_slope: V::ZERO,
            slope_error: V::ZERO,
            value: V::ZERO,
            at: 0.0,
            out: Builder::with_capacity(points * 2 + 1),
        }
    }

    fn x_of(&self, c: usize, j: usize) -> f64 {
        self.parts[c].0[j].0 * self.inverse[c]
    }

    fn value_at(&self, x: f64) -> V {
        self.value + (self.total_slope + self.slope_error).times(x - self.at)
    }

    /// One event per abscissa of function `c` from its point `j` on, up to `right`.
    fn events_of(&self, c: usize, mut j: usize, events: &mut Vec<(f64, u32, u32)>) {
        let f = self.parts[c].0;
        while j < f.len() {
            let x = self.x_of(c, j);
            if x > self.right {
                break;
            }
            events.push((x, c as u32, j as u32));
            while j < f.len() && self.x_of(c, j) == x {
                j += 1;
            }
        }
    }

    /// Function `c`'s points at `x`, from its point `j`: its jump goes into
    /// `from_right` and its next piece's slope into the total. Returns its last point
    /// at `x`.
    fn take(&mut self, c: usize, j: usize, x: f64, from_right: &mut V) -> usize {
        let f = self.parts[c].0;
        let mut k = j;
        while k + 1 < f.len() && self.x_of(c, k + 1) == x {
            k += 1;
        }
        let (y_in, y_out) = (f[j].1, f[k].1);
        // Before its first point a function contributes nothing yet.
        if j == 0 {
            *from_right = *from_right + y_out;
        } else {
            *from_right = *from_right + (y_out - y_in);
        }
        let new_slope = if k + 1 < f.len() && x < self.right {
            let nx = self.x_of(c, k + 1);
            (f[k + 1].1 - y_out).times(1.0 / (nx - x))
        } else {
            V::ZERO
        };
        // Compensated: a child whose pieces are steep (a heavy sibling's path squeezed
        // near 0) leaves, when it ends, no rounding behind that would swamp a light
        // sibling's slope on another resource.
        let (total, error) = (&mut self.total_slope, &mut self.slope_error);
        *total = total.add_compensated(error, V::ZERO - self.slope[c]);
        *total = total.add_compensated(error, new_slope);
        self.slope[c] = new_slope;
        k
    }
}
