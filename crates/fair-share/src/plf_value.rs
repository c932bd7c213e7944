//! What a piecewise linear function can take as values: scalars and resource share
//! vectors, with the few operations the functions need of them.

use std::ops::{Add, Sub};
use ytsched_common::resources::{Resource, ResourceVector};

/// What a function can take as values: scalars and resource share vectors.
pub trait Value: Copy + PartialEq + Add<Output = Self> + Sub<Output = Self> {
    const ZERO: Self;
    fn times(self, k: f64) -> Self;
    /// Whether `self` is within `eps` of the segment's interpolation `other`, componentwise.
    fn near(self, other: Self, eps: f64) -> bool;
    /// `self + t`, with what rounding lost added to `error` (Neumaier's summation,
    /// componentwise): a running sum that takes a huge term in and out again keeps the
    /// small ones it held.
    fn add_compensated(self, error: &mut Self, t: Self) -> Self;
}

fn neumaier(sum: f64, error: &mut f64, t: f64) -> f64 {
    let s = sum + t;
    *error += if sum.abs() >= t.abs() {
        (sum - s) + t
    } else {
        (t - s) + sum
    };
    s
}

impl Value for f64 {
    const ZERO: f64 = 0.0;
    fn times(self, k: f64) -> f64 {
        self * k
    }
    fn near(self, other: f64, eps: f64) -> bool {
        (self - other).abs() <= eps
    }
    fn add_compensated(self, error: &mut f64, t: f64) -> f64 {
        neumaier(self, error, t)
    }
}

impl Value for ResourceVector {
    const ZERO: ResourceVector = ResourceVector::ZERO;
    fn times(self, k: f64) -> ResourceVector {
        self.scale(k)
    }
    fn near(self, other: ResourceVector, eps: f64) -> bool {
        Resource::ALL
            .iter()
            .all(|&r| (self.get(r) - other.get(r)).abs() <= eps)
    }
    fn add_compensated(self, error: &mut ResourceVector, t: ResourceVector) -> ResourceVector {
        ResourceVector::new(
            neumaier(self.cpu, &mut error.cpu, t.cpu),
            neumaier(self.memory, &mut error.memory, t.memory),
            neumaier(self.gpu, &mut error.gpu, t.gpu),
            neumaier(self.user_slots, &mut error.user_slots, t.user_slots),
        )
    }
}
