//! Operation counts per pool, kept as operations change (an `OperationIndex`) instead of
//! counted on every submission, which scanned every operation ever seen: a few hundred
//! submissions a second at 10,000 operations. Each operation's contribution is
//! remembered with the pool chain it was counted under, so taking it back never depends
//! on how the pools look now.

use crate::operations::operation_index::Aggregate;
use std::collections::HashMap;
use ytsched_common::names::TreeName;
use ytsched_common::names::TreePoolName;

/// Operations counted in a pool and all its descendants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Running and pending.
    pub total: u32,
    /// Running, lightweight ones excluded.
    pub running: u32,
    pub lightweight_running: u32,
}

/// How one operation counts in one tree: its pool chain and whether it runs (and how).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Contribution {
    pub(crate) tree: TreeName,
    pub(crate) chain: Vec<TreePoolName>,
    pub(crate) running: bool,
    pub(crate) lightweight: bool,
}

/// Unfinished operations per pool, per tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct PoolCountsByTree(pub(crate) HashMap<TreeName, PoolCountMap>);

/// Unfinished operations per pool of one tree, `<Root>` included.
pub(crate) type PoolCountMap = HashMap<TreePoolName, PoolCounts>;

impl PoolCountsByTree {
    fn apply(&mut self, c: &Contribution, sign: i64) {
        let counts = self.0.entry(c.tree.clone()).or_default();
        for p in &c.chain {
            let e = counts.entry(p.clone()).or_default();
            let add = |v: &mut u32| *v = (*v as i64 + sign).max(0) as u32;
            add(&mut e.total);
            if c.running {
                if c.lightweight {
                    add(&mut e.lightweight_running);
                } else {
                    add(&mut e.running);
                }
            }
        }
    }
}

impl Aggregate for PoolCountsByTree {
    type Part = Contribution;
    fn add(&mut self, part: &Contribution) {
        self.apply(part, 1);
    }
    fn remove(&mut self, part: &Contribution) {
        self.apply(part, -1);
    }
}
