//! Each pool's children in the order placement tries them, kept with the live arrays
//! (`live_usage.rs`) between heartbeats: least satisfied first, then the earliest in a
//! FIFO pool, then the first element. Placement used to rebuild a pool's order on every
//! heartbeat, O(children) each time: with 100,000 small operations in a few pools that
//! was a quarter of the scheduler's time under a burst (issue 26). Kept here, it is
//! built with the live arrays at each fair-share update and re-keyed only along the path
//! of an operation whose usage or waiting jobs changed, O(depth × log children).
//!
//! A child with no job waiting in its subtree is left out of its pool's line, so the
//! thousands of operations that run their one job cost placement nothing.

use crate::trees::fair_share::TreeShares;
use std::collections::{BTreeSet, HashMap};
use ytsched_common::resources::{Resource, ResourceVector, EPSILON};

/// How satisfied an element is: how far along its fair share its usage is, on the
/// resources it needs (the largest ratio). Zero fair share with demand is never satisfied
/// enough to go first: it sorts last.
pub fn satisfaction(
    usage: &ResourceVector,
    fair_share: &ResourceVector,
    demand: &ResourceVector,
) -> f64 {
    let mut ratio: f64 = 0.0;
    let mut any = false;
    for r in Resource::ALL {
        if demand.get(r) <= EPSILON {
            continue;
        }
        any = true;
        let fs = fair_share.get(r);
        if fs <= EPSILON {
            return f64::INFINITY;
        }
        ratio = ratio.max(usage.get(r) / fs);
    }
    if any {
        ratio
    } else {
        f64::INFINITY
    }
}

/// A child's place in its pool's line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LineKey {
    pub satisfaction: f64,
    pub fifo: usize,
    pub element: usize,
}

impl Ord for LineKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.satisfaction
            .total_cmp(&other.satisfaction)
            .then(self.fifo.cmp(&other.fifo))
            .then(self.element.cmp(&other.element))
    }
}

impl PartialOrd for LineKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for LineKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for LineKey {}

/// Per pool of one snapshot (by element index), its children with a job waiting, in
/// line order.
#[derive(Clone, Debug, Default)]
pub(crate) struct PoolLines {
    lines: HashMap<usize, BTreeSet<LineKey>>,
    /// Each element's key in its parent's line (`None`: not in it).
    keys: Vec<Option<LineKey>>,
}

impl PoolLines {
    /// The lines of a snapshot from its live arrays.
    pub(crate) fn build(
        shares: &TreeShares,
        usage: &[ResourceVector],
        waiting: &[Option<ResourceVector>],
    ) -> PoolLines {
        let mut lines = PoolLines {
            lines: HashMap::new(),
            keys: vec![None; shares.elements.len()],
        };
        for e in 0..shares.elements.len() {
            lines.rekey(shares, usage, waiting, e);
        }
        lines
    }

    /// Puts element `e` where its usage and waiting jobs now place it.
    pub(crate) fn rekey(
        &mut self,
        shares: &TreeShares,
        usage: &[ResourceVector],
        waiting: &[Option<ResourceVector>],
        e: usize,
    ) {
        let Some(parent) = shares.elements[e].parent else {
            return;
        };
        let key = waiting[e].map(|_| key_of(shares, usage, e));
        let old = self.keys[e];
        if old == key {
            return;
        }
        let line = self.lines.entry(parent).or_default();
        if let Some(old) = old {
            line.remove(&old);
        }
        if let Some(key) = key {
            line.insert(key);
        }
        self.keys[e] = key;
    }

    /// A pool's children with a job waiting, the least satisfied first.
    pub(crate) fn line(&self, pool: usize) -> impl Iterator<Item = usize> + '_ {
        self.lines
            .get(&pool)
            .into_iter()
            .flat_map(|line| line.iter().map(|k| k.element))
    }

    /// Whether the lines are those the live arrays make (debug builds check it).
    #[cfg(debug_assertions)]
    pub(crate) fn agrees_with(
        &self,
        shares: &TreeShares,
        usage: &[ResourceVector],
        waiting: &[Option<ResourceVector>],
    ) -> bool {
        let fresh = PoolLines::build(shares, usage, waiting);
        let nonempty = |l: &HashMap<usize, BTreeSet<LineKey>>| {
            l.iter()
                .filter(|(_, line)| !line.is_empty())
                .map(|(p, line)| {
                    (
                        *p,
                        line.iter()
                            .map(|k| (k.satisfaction.to_bits(), k.element))
                            .collect::<Vec<_>>(),
                    )
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        fresh.keys.len() == self.keys.len() && nonempty(&fresh.lines) == nonempty(&self.lines)
    }
}

fn key_of(shares: &TreeShares, usage: &[ResourceVector], e: usize) -> LineKey {
    let element = &shares.elements[e];
    LineKey {
        satisfaction: satisfaction(
            &usage[e].share_of(&shares.total),
            &element.fair_share,
            &element.demand_share,
        ),
        fifo: element.fifo_index.unwrap_or(0),
        element: e,
    }
}

#[cfg(test)]
mod tests {
    use super::LineKey;
    use std::collections::BTreeSet;

    /// A line gives a pool's children in the order a full sort by satisfaction, FIFO
    /// index and element did: least satisfied first, ties to the earlier.
    #[test]
    fn a_line_is_in_sorted_order() {
        let keys: [(f64, usize, usize); 7] = [
            (0.5, 0, 3),
            (0.1, 2, 7),
            (0.1, 1, 9),
            (0.1, 1, 4),
            (-0.0, 0, 1),
            (0.0, 0, 0),
            (2.0, 0, 2),
        ];
        let mut sorted = keys.to_vec();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let line: BTreeSet<LineKey> = keys
            .iter()
            .map(|&(satisfaction, fifo, element)| LineKey {
                satisfaction,
                fifo,
                element,
            })
            .collect();
        let order: Vec<usize> = line.iter().map(|k| k.element).collect();
        let want: Vec<usize> = sorted.iter().map(|k| k.2).collect();
        assert_eq!(order, want);
        assert_eq!(&order[..3], [1, 0, 4]);
    }
}
