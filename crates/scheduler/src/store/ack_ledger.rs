//! Results taken but not yet stored. A heartbeat's reply goes out at once, without
//! waiting for the store; the results it took are acknowledged only once the store has
//! them (the agent holds a result, and sends it again, until it is acknowledged), so
//! they go out in a later reply to the same node. Each result waits here with the
//! writer's position at the call that took it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use ytsched_common::{JobId, NodeId};

/// The most acknowledgements held for one node; past it the oldest are dropped (the
/// agent sends those results again and they are acknowledged then).
const MAX_PER_NODE: usize = 20_000;
/// The most nodes with acknowledgements held; a node past it gets its own next time.
const MAX_NODES: usize = 100_000;

#[derive(Default)]
pub struct AckLedger {
    held: Mutex<HashMap<NodeId, NodeAcks>>,
}

/// One node's held acknowledgements, oldest first. A result the agent sends again
/// before it is acknowledged is held once, at the position of the call that took it
/// first (whose writes carry it).
#[derive(Default)]
struct NodeAcks {
    queue: VecDeque<(u64, JobId)>,
    ids: HashSet<JobId>,
}

impl NodeAcks {
    fn hold(&mut self, jobs: Vec<JobId>, position: u64) {
        for j in jobs {
            if self.ids.insert(j.clone()) {
                self.queue.push_back((position, j));
            }
        }
        while self.queue.len() > MAX_PER_NODE {
            if let Some((_, j)) = self.queue.pop_front() {
                self.ids.remove(&j);
            }
        }
    }

    /// Takes what is stored by `stored_through`: positions only grow along the queue.
    fn take_stored(&mut self, stored_through: u64) -> Vec<JobId> {
        let mut ready = Vec::new();
        while self
            .queue
            .front()
            .is_some_and(|(p, _)| *p <= stored_through)
        {
            if let Some((_, j)) = self.queue.pop_front() {
                self.ids.remove(&j);
                ready.push(j);
            }
        }
        ready
    }
}

impl AckLedger {
    /// Holds `jobs`, taken by a call whose writes are at writer position `position`,
    /// and returns what `node` may be told now: everything held for it (these
    /// included) that is stored by `stored_through`.
    pub fn settle(
        &self,
        node: &NodeId,
        jobs: Vec<JobId>,
        position: u64,
        stored_through: u64,
    ) -> Vec<JobId> {
        let mut held = self.held.lock().expect("ack ledger lock");
        if !held.contains_key(node) && (jobs.is_empty() || held.len() >= MAX_NODES) {
            // Nothing held for it: these are ready now, or are sent again later.
            return if position <= stored_through {
                jobs
            } else {
                vec![]
            };
        }
        let acks = held.entry(node.clone()).or_default();
        acks.hold(jobs, position);
        let ready = acks.take_stored(stored_through);
        if acks.queue.is_empty() {
            held.remove(node);
        }
        ready
    }

    /// Nodes with acknowledgements held (for tests and metrics).
    pub fn nodes_held(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> JobId {
        JobId::parse(&format!("op-{n}")).unwrap()
    }

    fn node(n: &str) -> NodeId {
        NodeId::parse(n).unwrap()
    }

    #[test]
    fn a_result_is_acknowledged_only_once_its_position_is_stored() {
        let l = AckLedger::default();
        assert!(l.settle(&node("a"), vec![job(1)], 5, 4).is_empty());
        assert!(l.settle(&node("a"), vec![job(2)], 7, 4).is_empty());
        assert_eq!(l.settle(&node("a"), vec![], 7, 5), vec![job(1)]);
        assert_eq!(l.settle(&node("a"), vec![], 9, 9), vec![job(2)]);
        assert_eq!(l.nodes_held(), 0, "nothing left behind");
    }

    #[test]
    fn nodes_do_not_get_each_others_acknowledgements() {
        let l = AckLedger::default();
        assert!(l.settle(&node("a"), vec![job(1)], 3, 2).is_empty());
        assert!(l.settle(&node("b"), vec![], 3, 3).is_empty());
        assert_eq!(l.settle(&node("a"), vec![], 3, 3), vec![job(1)]);
    }

    #[test]
    fn results_already_stored_are_acknowledged_at_once() {
        let l = AckLedger::default();
        assert_eq!(l.settle(&node("a"), vec![job(1)], 3, 3), vec![job(1)]);
        assert_eq!(l.nodes_held(), 0);
    }

    #[test]
    fn a_result_sent_again_is_held_once_at_its_first_position() {
        let l = AckLedger::default();
        assert!(l.settle(&node("a"), vec![job(1)], 3, 2).is_empty());
        assert!(l.settle(&node("a"), vec![job(1), job(2)], 6, 2).is_empty());
        assert_eq!(l.settle(&node("a"), vec![job(1)], 6, 3), vec![job(1)]);
        assert_eq!(l.settle(&node("a"), vec![], 6, 6), vec![job(2)]);
    }

    #[test]
    fn what_one_node_may_hold_is_bounded() {
        let l = AckLedger::default();
        let many: Vec<JobId> = (0..MAX_PER_NODE as u32 + 10).map(job).collect();
        assert!(l.settle(&node("a"), many, 2, 1).is_empty());
        let ready = l.settle(&node("a"), vec![], 2, 2);
        assert_eq!(ready.len(), MAX_PER_NODE);
        assert_eq!(ready[0], job(10), "the oldest were dropped");
    }
}
