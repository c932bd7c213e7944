//! The scheduler's unit of account: a vector of `{cpu, memory, gpu, user_slots}`.
//!
//! All components are `f64` because fair share is share arithmetic (fractions of the
//! tree's total); memory is still serialised as whole bytes so that people and tools
//! reading messages see integers.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

/// Tolerance for comparisons of resource amounts that went through float arithmetic.
pub const EPSILON: f64 = 1e-9;

/// One of the four resources the scheduler tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    Cpu,
    Memory,
    Gpu,
    UserSlots,
}

impl Resource {
    pub const ALL: [Resource; 4] = [
        Resource::Cpu,
        Resource::Memory,
        Resource::Gpu,
        Resource::UserSlots,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Gpu => "gpu",
            Resource::UserSlots => "user_slots",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceVector {
    /// Fractional cores.
    #[serde(default)]
    pub cpu: f64,
    /// Bytes.
    #[serde(default, with = "whole_number")]
    pub memory: f64,
    /// Whole devices.
    #[serde(default, with = "whole_number")]
    pub gpu: f64,
    /// Number of jobs; every job takes exactly one.
    #[serde(default, with = "whole_number")]
    pub user_slots: f64,
}

impl ResourceVector {
    /// The largest component: a vector share read as one ratio (the orchid's
    /// `*_ratio`, the event log's pool shares).
    pub fn max_component(&self) -> f64 {
        Resource::ALL
            .iter()
            .map(|&r| self.get(r))
            .fold(0.0, f64::max)
    }

    pub const ZERO: ResourceVector = ResourceVector {
        cpu: 0.0,
        memory: 0.0,
        gpu: 0.0,
        user_slots: 0.0,
    };

    pub fn new(cpu: f64, memory: f64, gpu: f64, user_slots: f64) -> Self {
        Self {
            cpu,
            memory,
            gpu,
            user_slots,
        }
    }

    pub fn get(&self, r: Resource) -> f64 {
        match r {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
            Resource::Gpu => self.gpu,
            Resource::UserSlots => self.user_slots,
        }
    }

    pub fn set(&mut self, r: Resource, v: f64) {
        match r {
            Resource::Cpu => self.cpu = v,
            Resource::Memory => self.memory = v,
            Resource::Gpu => self.gpu = v,
            Resource::UserSlots => self.user_slots = v,
        }
    }

    pub fn map(&self, f: impl Fn(Resource, f64) -> f64) -> Self {
        let mut out = Self::ZERO;
        for r in Resource::ALL {
            out.set(r, f(r, self.get(r)));
        }
        out
    }

    pub fn scale(&self, k: f64) -> Self {
        ResourceVector {
            cpu: self.cpu * k,
            memory: self.memory * k,
            gpu: self.gpu * k,
            user_slots: self.user_slots * k,
        }
    }

    /// True if every component of `self` fits into `available` (within float tolerance).
    pub fn fits_in(&self, available: &ResourceVector) -> bool {
        Resource::ALL
            .iter()
            .all(|&r| self.get(r) <= available.get(r) + EPSILON * available.get(r).abs().max(1.0))
    }

    /// The first resource on which `self` does not fit into `available`.
    pub fn first_excess(&self, available: &ResourceVector) -> Option<Resource> {
        Resource::ALL
            .into_iter()
            .find(|&r| self.get(r) > available.get(r) + EPSILON * available.get(r).abs().max(1.0))
    }

    pub fn component_max(&self, other: &ResourceVector) -> Self {
        self.map(|r, v| v.max(other.get(r)))
    }

    pub fn component_min(&self, other: &ResourceVector) -> Self {
        self.map(|r, v| v.min(other.get(r)))
    }

    /// Per-component fraction of `total`; a resource the total lacks counts as share 0.
    pub fn share_of(&self, total: &ResourceVector) -> ResourceVector {
        self.map(|r, v| {
            let t = total.get(r);
            if t > EPSILON {
                v / t
            } else {
                0.0
            }
        })
    }

    /// The largest component and which resource it is (ties go to the earlier resource).
    pub fn dominant(&self) -> (Resource, f64) {
        let mut best = (Resource::Cpu, self.cpu);
        for r in Resource::ALL {
            if self.get(r) > best.1 + EPSILON {
                best = (r, self.get(r));
            }
        }
        best
    }

    /// What one node may offer: far beyond any machine, yet finite, so one node's
    /// report can never swamp a tree's totals (and with them every fair share).
    pub const NODE_MAXIMUM: ResourceVector = ResourceVector {
        cpu: 100_000.0,
        memory: (1u64 << 52) as f64,
        gpu: 4096.0,
        user_slots: 100_000.0,
    };

    /// Whether every component is finite and within `max`; else the first one that is not.
    pub fn check_within(&self, max: &ResourceVector) -> Result<(), (Resource, f64)> {
        for &r in Resource::ALL.iter() {
            let v = self.get(r);
            if !v.is_finite() || v < -EPSILON || v > max.get(r) {
                return Err((r, v));
            }
        }
        Ok(())
    }
}

impl Add for ResourceVector {
    type Output = ResourceVector;
    fn add(self, o: ResourceVector) -> ResourceVector {
        // Field by field: this is on the fair share update's hot path.
        ResourceVector {
            cpu: self.cpu + o.cpu,
            memory: self.memory + o.memory,
            gpu: self.gpu + o.gpu,
            user_slots: self.user_slots + o.user_slots,
        }
    }
}

impl AddAssign for ResourceVector {
    fn add_assign(&mut self, o: ResourceVector) {
        *self = *self + o;
    }
}

impl Sub for ResourceVector {
    type Output = ResourceVector;
    fn sub(self, o: ResourceVector) -> ResourceVector {
        ResourceVector {
            cpu: self.cpu - o.cpu,
            memory: self.memory - o.memory,
            gpu: self.gpu - o.gpu,
            user_slots: self.user_slots - o.user_slots,
        }
    }
}

impl SubAssign for ResourceVector {
    fn sub_assign(&mut self, o: ResourceVector) {
        *self = *self - o;
    }
}

impl std::iter::Sum for ResourceVector {
    fn sum<I: Iterator<Item = ResourceVector>>(iter: I) -> Self {
        iter.fold(ResourceVector::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for ResourceVector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{cpu={}; memory={}; gpu={}; user_slots={}}}",
            self.cpu,
            crate::units::ByteSize(self.memory.max(0.0) as u64),
            self.gpu,
            self.user_slots
        )
    }
}

/// Integral components travel as integers when they are whole, as floats otherwise
/// (shares of memory are fractional), and are accepted in either form.
mod whole_number {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.fract() == 0.0 && v.abs() < 9.0e15 {
            s.serialize_i64(*v as i64)
        } else {
            s.serialize_f64(*v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        f64::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_fit() {
        let a = ResourceVector::new(2.0, 1024.0, 0.0, 1.0);
        let b = ResourceVector::new(1.0, 512.0, 1.0, 1.0);
        let s = a + b;
        assert_eq!(s, ResourceVector::new(3.0, 1536.0, 1.0, 2.0));
        assert_eq!(s - b, a);
        assert!(a.fits_in(&s));
        assert!(!s.fits_in(&a));
        assert_eq!(s.first_excess(&a), Some(Resource::Cpu));
        let gpu_only = ResourceVector::new(1.0, 1.0, 1.0, 1.0);
        assert_eq!(gpu_only.first_excess(&a), Some(Resource::Gpu));
    }

    #[test]
    fn shares_and_dominant() {
        let total = ResourceVector::new(24.0, 60.0, 0.0, 100.0);
        let u = ResourceVector::new(6.0, 30.0, 0.0, 3.0);
        let share = u.share_of(&total);
        assert_eq!(share.gpu, 0.0);
        assert_eq!(share.dominant(), (Resource::Memory, 0.5));
    }

    #[test]
    fn roundtrips_through_msgpack_with_integral_memory() {
        let v = ResourceVector::new(1.5, 1073741824.0, 1.0, 1.0);
        let bytes = rmp_serde::to_vec_named(&v).unwrap();
        let back: ResourceVector = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(v, back);
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.contains("\"memory\":1073741824"), "{json}");
    }
}
