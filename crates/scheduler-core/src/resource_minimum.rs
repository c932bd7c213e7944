//! The per-resource smallest of many amounts, kept as amounts come and go: each resource
//! counts how many amounts hold each value, so the smallest is the first count and
//! taking one out costs O(log distinct values), not a walk over every amount. The
//! smallest waiting job of a tree (`waiting_jobs.rs`) and of each pool's children
//! (`live_usage.rs`) are both kept this way.

use std::collections::BTreeMap;
use ytsched_common::resources::{Resource, ResourceVector};

/// How many amounts hold each value, per resource.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResourceMinimum([BTreeMap<u64, u32>; 4]);

/// An amount as a key that sorts as the amount does (amounts are never negative; a
/// negative zero counts as zero).
fn key(v: f64) -> u64 {
    if v > 0.0 {
        v.to_bits()
    } else {
        0
    }
}

impl ResourceMinimum {
    pub(crate) fn add(&mut self, v: &ResourceVector) {
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            *self.0[i].entry(key(v.get(r))).or_insert(0) += 1;
        }
    }

    /// Takes out one amount added before (one never added is ignored).
    pub(crate) fn remove(&mut self, v: &ResourceVector) {
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let k = key(v.get(r));
            if let Some(c) = self.0[i].get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    self.0[i].remove(&k);
                }
            }
        }
    }

    /// The component-wise smallest amount held (`None`: none is).
    pub(crate) fn smallest(&self) -> Option<ResourceVector> {
        let mut out = ResourceVector::ZERO;
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let (&k, _) = self.0[i].first_key_value()?;
            out.set(r, f64::from_bits(k));
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::ResourceMinimum;
    use ytsched_common::resources::ResourceVector;

    /// The smallest per resource, from different amounts; it moves up as they are taken
    /// out, and a value held twice stays until both are gone.
    #[test]
    fn the_smallest_follows_the_amounts_held() {
        let a = ResourceVector::new(1.0, 4.0, 0.0, 1.0);
        let b = ResourceVector::new(2.0, 2.0, 1.0, 1.0);
        let mut m = ResourceMinimum::default();
        assert_eq!(m.smallest(), None);
        m.add(&a);
        m.add(&b);
        m.add(&b);
        assert_eq!(m.smallest(), Some(ResourceVector::new(1.0, 2.0, 0.0, 1.0)));
        m.remove(&a);
        assert_eq!(m.smallest(), Some(b));
        m.remove(&b);
        assert_eq!(m.smallest(), Some(b));
        m.remove(&b);
        assert_eq!(m.smallest(), None);
    }
}
