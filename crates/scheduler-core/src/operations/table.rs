//! The operations the core holds, and the one invariant every change to one must keep:
//! the store writes it and the indexes re-count it. The map is only reachable for
//! writing through `edit`, whose guard marks the operation when it goes out of scope, so
//! no caller can change an operation and forget either (before, three call sites inlined
//! the marking by hand to get around the borrow of the operation).

use super::by_id::ById;
use super::core_indexes::Indexes;
use super::operation::Operation;
use super::time_limits::Deadlines;
use std::cell::{RefCell, RefMut};
use std::collections::{btree_set, BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut, Index};
use ytsched_common::OperationId;

#[derive(Clone, Debug, Default)]
pub(crate) struct OperationTable {
    by_id: ById,
    marks: ChangeMarks,
    /// Every operation enters and leaves through `insert` and `remove`: its time limit
    /// is kept with it there (`time_limits.rs`).
    deadlines: Deadlines,
    /// Unfinished operations with a task that has `job_speculation_timeout`: the only
    /// ones the speculative stage of a heartbeat looks at.
    pub(crate) speculating: std::collections::BTreeSet<OperationId>,
    /// Unfinished gang operations: the only ones gang placement looks at.
    pub(crate) gangs: std::collections::BTreeSet<OperationId>,
    /// Each held operation's idempotency token, by its user: a retried submission finds
    /// its operation. Entries leave with their operation (retirement), so this is
    /// bounded by the operations in memory.
    pub(crate) idempotency: BTreeMap<(String, ytsched_common::IdempotencyToken), OperationId>,
    /// Submission sequence, the tie-breaker that keeps decisions deterministic.
    pub(crate) next_seq: u64,
    /// Finished operations still held, oldest first per tree: the order they retire in
    /// (`retention.rs`).
    pub(crate) finished_order: crate::operations::retention::FinishedOrder,
}

/// What a change to an operation must reach.
#[derive(Clone, Debug, Default)]
struct ChangeMarks {
    /// Changed since the store last took the changes.
    touched: BTreeSet<OperationId>,
    /// Sums over operations, refreshed lazily on reads that take `&self` (hence the
    /// `RefCell`); see `operation_index.rs`.
    indexes: RefCell<Indexes>,
    /// Operations holding job indexes back from waiting (`held_indexes.rs`), noted as
    /// they are edited (`release_held` lets them go).
    holding: BTreeSet<OperationId>,
}

impl ChangeMarks {
    fn mark(&mut self, id: &OperationId) {
        self.indexes.get_mut().mark(id);
        self.touched.insert(id.clone());
    }
}

/// A held operation open for change; dropping it marks the operation changed.
pub(crate) struct OperationEdit<'a> {
    op: &'a mut Operation,
    marks: &'a mut ChangeMarks,
}

impl Deref for OperationEdit<'_> {
    type Target = Operation;
    fn deref(&self) -> &Operation {
        self.op
    }
}

impl DerefMut for OperationEdit<'_> {
    fn deref_mut(&mut self) -> &mut Operation {
        self.op
    }
}

impl Drop for OperationEdit<'_> {
    fn drop(&mut self) {
        self.marks.mark(&self.op.id);
        if !self.op.held.is_empty() {
            self.marks.holding.insert(self.op.id.clone());
        }
    }
}

impl OperationTable {
    /// The facts of attempt `job` of operation `op`, if the table still holds it.
    pub(crate) fn attempt_facts(
        &self,
        op: &OperationId,
        job: &ytsched_common::JobId,
    ) -> Option<crate::AttemptFacts> {
        self.get(op)?.jobs.get(job).map(crate::AttemptFacts::of)
    }

    /// Unfinished operations in a tree, or in one pool of it.
    pub(crate) fn unfinished_in(&self, tree: &str, pool: Option<&str>) -> usize {
        self.values()
            .filter(|o| {
                !o.state.is_finished()
                    && o.slot(tree)
                        .is_some_and(|s| pool.is_none_or(|p| s.pool == p))
            })
            .count()
    }

    pub(crate) fn get(&self, id: &OperationId) -> Option<&Operation> {
        self.by_id.get(id)
    }

    pub(crate) fn contains_key(&self, id: &OperationId) -> bool {
        self.by_id.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn keys(&self) -> btree_set::Iter<'_, OperationId> {
        self.by_id.keys()
    }

    pub(crate) fn values(&self) -> impl DoubleEndedIterator<Item = &Operation> + Clone {
        self.by_id.values()
    }

    /// The operations after `after` in id order (all of them without it).
    pub(crate) fn values_after(
        &self,
        after: Option<&OperationId>,
    ) -> impl Iterator<Item = &Operation> {
        self.by_id.values_after(after)
    }

    /// The operation, open for change (marked changed when the guard drops).
    pub(crate) fn edit(&mut self, id: &OperationId) -> Option<OperationEdit<'_>> {
        let op = self.by_id.get_mut(id)?;
        Some(OperationEdit {
            op,
            marks: &mut self.marks,
        })
    }

    /// Its node still reports aborted attempt `job` of `id` as running: a hold on its
    /// index restarts its node timeout from `now`. Holds are not stored, so this is no
    /// change the store must write. Returns whether the attempt was held.
    pub(crate) fn renew_hold(
        &mut self,
        id: &OperationId,
        job: &ytsched_common::JobId,
        now: ytsched_common::protocol::UnixMillis,
    ) -> bool {
        self.by_id
            .get_mut(id)
            .is_some_and(|op| op.renew_hold(job, now))
    }

    /// Node `node` is lost: every attempt aborted on it and still unconfirmed is
    /// recorded `node_lost` and its index waits again (`Operation::lose_holds_on`).
    /// Returns those attempts with their operations.
    pub(crate) fn lose_holds_on(
        &mut self,
        node: &ytsched_common::NodeId,
    ) -> Vec<(OperationId, ytsched_common::JobId)> {
        let on_node: Vec<OperationId> = self
            .marks
            .holding
            .iter()
            .filter(|id| self.get(id).is_some_and(|op| op.holds_on(node)))
            .cloned()
            .collect();
        let mut lost = Vec::new();
        for id in on_node {
            if let Some(mut op) = self.edit(&id) {
                lost.extend(op.lose_holds_on(node).into_iter().map(|j| (id.clone(), j)));
            }
        }
        lost
    }

    /// Puts back to waiting the held job indexes whose hold is over by `now` (a restart
    /// back-off, or an aborted attempt's node timeout; `node_timeout` gives a tree's);
    /// returns the operations that got some. An operation is edited (and so written)
    /// only when one of its holds is due.
    pub(crate) fn release_held(
        &mut self,
        now: ytsched_common::protocol::UnixMillis,
        node_timeout: &dyn Fn(&ytsched_common::names::TreeName) -> u64,
    ) -> Vec<OperationId> {
        let holding: Vec<OperationId> = self.marks.holding.iter().cloned().collect();
        let mut released = Vec::new();
        for id in holding {
            // Gone, or no longer holding anything (a node's report let its holds go).
            let holds = self.get(&id).filter(|op| !op.held.is_empty());
            match holds.map(|op| op.holds_due(now, node_timeout)) {
                Some(true) => {}
                Some(false) => continue,
                None => {
                    self.marks.holding.remove(&id);
                    continue;
                }
            }
            self.marks.holding.remove(&id);
            if self
                .edit(&id)
                .is_some_and(|mut op| op.release_held(now, node_timeout))
            {
                released.push(id);
            }
        }
        released
    }

    /// A new (or revived) operation; `changed` says whether the store must write it.
    pub(crate) fn insert(&mut self, op: Operation, changed: bool) {
        let id = op.id.clone();
        if changed {
            self.marks.mark(&id);
        } else {
            self.marks.indexes.get_mut().mark(&id);
        }
        if let Some(old) = self.by_id.get(&id) {
            self.deadlines.remove(old);
        }
        self.deadlines.add(&op);
        self.by_id.insert(op);
    }

    /// Retires an operation from memory: the indexes forget it.
    pub(crate) fn remove(&mut self, id: &OperationId) -> Option<Operation> {
        let op = self.by_id.remove(id)?;
        self.deadlines.remove(&op);
        self.marks.indexes.get_mut().mark(id);
        Some(*op)
    }

    /// The operations whose time limit has run out by `now` (each handed out once).
    pub(crate) fn take_due_deadlines(
        &mut self,
        now: ytsched_common::protocol::UnixMillis,
    ) -> Vec<OperationId> {
        self.deadlines.take_due(now)
    }

    /// Whether the store has yet to take this operation's changes.
    pub(crate) fn is_touched(&self, id: &OperationId) -> bool {
        self.marks.touched.contains(id)
    }

    /// Hands each operation changed since the last call to `take`, and forgets that it
    /// changed: the store now has it.
    pub(crate) fn drain_changed(&mut self, mut take: impl FnMut(&mut Operation)) {
        for id in std::mem::take(&mut self.marks.touched) {
            if let Some(op) = self.by_id.get_mut(&id) {
                take(op);
            }
        }
    }

    /// Everything is re-counted at the next read (configuration changed, state revived).
    pub(crate) fn recount(&mut self) {
        self.marks.indexes.get_mut().invalidate();
    }

    /// The indexes, for a read that brings one up to date (see `operation_index.rs`).
    pub(crate) fn indexes(&self) -> RefMut<'_, Indexes> {
        self.marks.indexes.borrow_mut()
    }

    /// The operations changed since the live arrays last looked, or `None` when they
    /// must re-read everything.
    pub(crate) fn take_live_changes(&mut self) -> Option<BTreeSet<OperationId>> {
        self.marks.indexes.get_mut().take_live_changes()
    }

    /// A tree's fair-share input as the operations are now, and its version
    /// (`share_inputs.rs`).
    pub(crate) fn share_inputs(
        &mut self,
        tree: &str,
    ) -> (
        crate::trees::share_inputs::TreeInputs,
        crate::trees::share_inputs::InputsVersion,
    ) {
        self.marks
            .indexes
            .get_mut()
            .share_inputs
            .tree(tree, &self.by_id)
    }

    /// Operations the fair-share inputs have read so far.
    #[cfg(test)]
    pub(crate) fn share_input_reads(&self) -> u64 {
        self.marks.indexes.borrow().share_inputs.reads()
    }

    /// See `Indexes::track_since_prepare`.
    pub(crate) fn track_since_prepare(&mut self, tree: &str) {
        self.marks.indexes.get_mut().track_since_prepare(tree)
    }

    /// See `Indexes::take_since_prepare`.
    pub(crate) fn take_since_prepare(&mut self, tree: &str) -> Option<BTreeSet<OperationId>> {
        self.marks.indexes.get_mut().take_since_prepare(tree)
    }
}

impl Index<&OperationId> for OperationTable {
    type Output = Operation;
    fn index(&self, id: &OperationId) -> &Operation {
        self.by_id.get(id).expect("no operation with this id")
    }
}

impl OperationTable {
    /// Files a finished operation for retirement (at its finish, and at revival).
    pub(crate) fn note_finished(&mut self, id: &OperationId) {
        let Some(op) = self.get(id) else {
            return;
        };
        let Some(finished) = op.finish_time else {
            return;
        };
        let key = (finished, op.seq, id.clone());
        let tree = op.main_tree().clone();
        self.finished_order.entry(tree).or_default().insert(key);
    }
}
