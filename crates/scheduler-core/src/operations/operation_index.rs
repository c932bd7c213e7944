//! Sums over operations kept as operations change, instead of scanned on hot paths.
//!
//! Every change to an operation passes through `SchedulerCore::touch` (it must reach the
//! store anyway), so an index re-counts exactly the operations touched since it last
//! looked: it remembers what each operation contributed, takes that back and adds what
//! the operation contributes now. A configuration change (pools created, removed, moved)
//! or a revival rebuilds it all. Each index checks itself against a scan in debug builds.

use std::collections::{BTreeSet, HashMap};
use ytsched_common::OperationId;

/// What an index sums: each operation contributes some parts.
pub(crate) trait Aggregate: Default {
    type Part;
    fn add(&mut self, part: &Self::Part);
    fn remove(&mut self, part: &Self::Part);
}

#[derive(Clone, Debug)]
pub(crate) struct OperationIndex<A: Aggregate> {
    sum: A,
    parts: HashMap<OperationId, Vec<A::Part>>,
    pub(crate) dirty: BTreeSet<OperationId>,
    /// Rebuild everything at the next read.
    pub(crate) stale: bool,
}

impl<A: Aggregate> Default for OperationIndex<A> {
    fn default() -> Self {
        Self {
            sum: A::default(),
            parts: HashMap::new(),
            dirty: BTreeSet::new(),
            stale: true,
        }
    }
}

impl<A: Aggregate> OperationIndex<A> {
    /// The sum brought up to date: `all` lists every operation (for a rebuild),
    /// `parts_of` says what one contributes now.
    pub(crate) fn refresh(
        &mut self,
        all: impl FnOnce() -> Vec<OperationId>,
        parts_of: impl Fn(&OperationId) -> Vec<A::Part>,
    ) -> &A {
        let ids: Vec<OperationId> = if self.stale {
            *self = Self {
                stale: false,
                ..Self::default()
            };
            all()
        } else {
            std::mem::take(&mut self.dirty).into_iter().collect()
        };
        for id in ids {
            if let Some(old) = self.parts.remove(&id) {
                old.iter().for_each(|p| self.sum.remove(p));
            }
            let new = parts_of(&id);
            new.iter().for_each(|p| self.sum.add(p));
            if !new.is_empty() {
                self.parts.insert(id, new);
            }
        }
        &self.sum
    }
}
