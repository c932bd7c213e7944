//! The operations by id. Lookups go to a hash map: every heartbeat looks up the
//! operation of each job its node runs, and in a B-tree of 10,000 ids that was a dozen
//! text compares per lookup, each reading an id's text through its pointer (a cache
//! miss). Walks go over the ids in order beside it, so that the core stays deterministic
//! (a hash map's own order is not) and pages go on from an id.

use super::operation::Operation;
use std::collections::{btree_set, BTreeSet, HashMap};
use std::ops::Bound;
use ytsched_common::OperationId;

#[derive(Clone, Debug, Default)]
pub(crate) struct ById {
    /// Boxed: an operation is ~700 bytes, and the map's spare slots would each hold one.
    map: HashMap<OperationId, Box<Operation>>,
    /// The ids of `map`, in order; only `insert` and `remove` change either.
    order: BTreeSet<OperationId>,
}

impl ById {
    pub(crate) fn get(&self, id: &OperationId) -> Option<&Operation> {
        self.map.get(id).map(|op| &**op)
    }

    pub(crate) fn get_mut(&mut self, id: &OperationId) -> Option<&mut Operation> {
        self.map.get_mut(id).map(|op| &mut **op)
    }

    pub(crate) fn contains_key(&self, id: &OperationId) -> bool {
        self.map.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every id, in order.
    pub(crate) fn keys(&self) -> btree_set::Iter<'_, OperationId> {
        self.order.iter()
    }

    /// Every operation, in id order.
    pub(crate) fn values(&self) -> impl DoubleEndedIterator<Item = &Operation> + Clone {
        self.order.iter().filter_map(|id| self.get(id))
    }

    /// The operations after `after` in id order (all of them without it).
    pub(crate) fn values_after(
        &self,
        after: Option<&OperationId>,
    ) -> impl Iterator<Item = &Operation> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.order
            .range::<OperationId, _>((from, Bound::Unbounded))
            .filter_map(|id| self.get(id))
    }

    /// Holds `op`, returning the operation it replaces.
    pub(crate) fn insert(&mut self, op: Operation) -> Option<Box<Operation>> {
        let id = op.id.clone();
        let old = self.map.insert(id.clone(), Box::new(op));
        if old.is_none() {
            self.order.insert(id);
        }
        old
    }

    pub(crate) fn remove(&mut self, id: &OperationId) -> Option<Box<Operation>> {
        let op = self.map.remove(id)?;
        self.order.remove(id);
        Some(op)
    }
}
