//! What nodes' file caches report in their heartbeats, summed for `/metrics`.

use std::collections::HashMap;
use std::sync::Mutex;
use ytsched_common::files::FileCacheCounters;
use ytsched_common::NodeId;

/// Nodes whose counters are kept; past it a new node's are not (the sums undercount
/// rather than grow without bound).
const MAX_NODES: usize = 100_000;

/// Each node's latest counters (they count since its agent started).
#[derive(Default)]
pub struct NodeCaches {
    by_node: Mutex<HashMap<NodeId, FileCacheCounters>>,
}

impl NodeCaches {
    pub fn note(&self, node: &NodeId, counters: FileCacheCounters) {
        let mut m = self.by_node.lock().expect("node caches lock");
        if let Some(c) = m.get_mut(node) {
            *c = counters;
        } else if m.len() < MAX_NODES {
            m.insert(node.clone(), counters);
        }
    }

    /// The counters of every node, summed.
    pub fn total(&self) -> FileCacheCounters {
        let m = self.by_node.lock().expect("node caches lock");
        m.values()
            .fold(FileCacheCounters::default(), |a, c| FileCacheCounters {
                hits: a.hits + c.hits,
                misses: a.misses + c.misses,
                bytes_fetched: a.bytes_fetched + c.bytes_fetched,
                corrupt: a.corrupt + c.corrupt,
            })
    }
}
