//! Share-vector arithmetic the update needs beyond `ResourceVector`'s own.

use ytsched_common::resources::{Resource, ResourceVector};

/// Shares closer than this are equal (YTsaurus compares ratios at this precision).
pub const EPSILON: f64 = 1e-9;

pub fn splat(x: f64) -> ResourceVector {
    ResourceVector::new(x, x, x, x)
}

pub fn min(a: &ResourceVector, b: &ResourceVector) -> ResourceVector {
    ResourceVector {
        cpu: a.cpu.min(b.cpu),
        memory: a.memory.min(b.memory),
        gpu: a.gpu.min(b.gpu),
        user_slots: a.user_slots.min(b.user_slots),
    }
}

pub fn max(a: &ResourceVector, b: &ResourceVector) -> ResourceVector {
    ResourceVector {
        cpu: a.cpu.max(b.cpu),
        memory: a.memory.max(b.memory),
        gpu: a.gpu.max(b.gpu),
        user_slots: a.user_slots.max(b.user_slots),
    }
}

pub fn non_negative(a: &ResourceVector) -> ResourceVector {
    a.map(|_, v| v.max(0.0))
}

/// Whether `a ≥ b` on every resource.
pub fn dominates(a: &ResourceVector, b: &ResourceVector) -> bool {
    a.cpu >= b.cpu && a.memory >= b.memory && a.gpu >= b.gpu && a.user_slots >= b.user_slots
}

pub fn max_component(a: &ResourceVector) -> f64 {
    a.cpu.max(a.memory).max(a.gpu).max(a.user_slots).max(0.0)
}

/// Per-resource fraction of `total`; a resource the tree lacks is share 0.
pub fn share(abs: &ResourceVector, total: &ResourceVector) -> ResourceVector {
    abs.map(|r, v| {
        let t = total.get(r);
        if t > 0.0 {
            v / t
        } else {
            0.0
        }
    })
}

/// The largest share of `abs` in `total` over the resources the tree has.
pub fn max_ratio(abs: &ResourceVector, total: &ResourceVector) -> f64 {
    max_component(&share(abs, total))
}

/// The smallest share of `abs` in `total` over the resources the tree has (0 if none).
pub fn min_ratio(abs: &ResourceVector, total: &ResourceVector) -> f64 {
    let ratios: Vec<f64> = Resource::ALL
        .iter()
        .filter(|&&r| total.get(r) > 0.0)
        .map(|&r| abs.get(r) / total.get(r))
        .collect();
    if ratios.is_empty() {
        0.0
    } else {
        ratios.into_iter().fold(f64::INFINITY, f64::min)
    }
}

/// The resource with the largest share; ties go to the first of user_slots, cpu, gpu,
/// memory (YTsaurus's order).
pub fn dominant_resource(abs: &ResourceVector, total: &ResourceVector) -> Resource {
    let s = share(abs, total);
    let mut best = (Resource::Cpu, f64::NEG_INFINITY);
    for r in [
        Resource::UserSlots,
        Resource::Cpu,
        Resource::Gpu,
        Resource::Memory,
    ] {
        if s.get(r) > best.1 {
            best = (r, s.get(r));
        }
    }
    best.0
}

/// The largest `x` in `[lo, hi]` for which `pred` holds, given that it holds at `lo` and
/// fails from some point on.
pub fn largest_satisfying(lo: f64, hi: f64, mut pred: impl FnMut(f64) -> bool) -> f64 {
    if pred(hi) {
        return hi;
    }
    let (mut lo, mut hi) = (lo, hi);
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if pred(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}
