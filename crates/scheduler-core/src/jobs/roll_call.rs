//! A revived scheduler's roll call. The revival window exists so that every node that may
//! run an attempt the store does not show says so before anything starts (`adoption.rs`),
//! and so that stored running jobs no node reports are lost only once their nodes had time
//! to speak. Once every node the store knows of has reported, nothing is left to learn:
//! the window ends then, not at its deadline. In issue 42's campaign a revival held every
//! start for the whole 10 s window after all three nodes had reported within one period,
//! and a fault striking inside one window stacked its recovery on the last.
//!
//! The roll is every node the scheduler could have started an attempt on: each node with
//! a stored trust record or named in the approvals file (a node registers before it is
//! given work, and the reply to its registration waits until its record is stored), and
//! each node of a stored running job. A node that never answers (gone for good, or cut
//! off) leaves the window to its deadline, as before.

use std::collections::BTreeSet;
use ytsched_common::NodeId;

#[derive(Clone, Debug)]
pub(crate) struct RollCall {
    awaiting: BTreeSet<NodeId>,
}

impl RollCall {
    /// The roll of `known` nodes; none when it is empty: a store that names no node (one
    /// written before nodes' records were) says nothing of who may run what, so the
    /// window runs to its deadline.
    pub(crate) fn new(known: impl IntoIterator<Item = NodeId>) -> Option<Self> {
        let awaiting: BTreeSet<NodeId> = known.into_iter().collect();
        (!awaiting.is_empty()).then_some(RollCall { awaiting })
    }

    /// `node` reported what it runs; returns whether every node on the roll now has.
    pub(crate) fn answered(&mut self, node: &NodeId) -> bool {
        self.awaiting.remove(node);
        self.awaiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId(name.into())
    }

    #[test]
    fn the_roll_is_complete_only_once_every_known_node_has_answered() {
        assert!(
            RollCall::new([]).is_none(),
            "an empty roll leaves the deadline"
        );
        let mut roll = RollCall::new([node("a"), node("b")]).unwrap();
        assert!(
            !roll.answered(&node("stranger")),
            "a node not on the roll completes nothing"
        );
        assert!(!roll.answered(&node("a")));
        assert!(
            !roll.answered(&node("a")),
            "one node answering twice is still one"
        );
        assert!(roll.answered(&node("b")));
    }
}
