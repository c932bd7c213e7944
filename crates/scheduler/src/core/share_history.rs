//! A short, bounded history of each operation's usage against its fair share, for the
//! web page's chart. Sampled from fair-share updates (which already hold both numbers),
//! at most every `SAMPLE_EVERY_MS` per tree, `SAMPLES` per operation, and for at most
//! `MAX_TRACKED` operations at once, so it costs at most a few hundred KiB however
//! many operations there are.

use super::fair_share::{ElementKind, TreeShares};
use super::orchid::max_component;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::OperationId;

const SAMPLE_EVERY_MS: u64 = 2_000;
/// Five minutes at one sample per two seconds.
const SAMPLES: usize = 150;
const MAX_TRACKED: usize = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ShareSample {
    /// Unix ms.
    pub at: UnixMillis,
    /// Fractions of the tree, at their largest resource (as the orchid's `*_ratio`).
    pub usage: f32,
    pub fair_share: f32,
    pub demand: f32,
}

#[derive(Clone, Debug, Default)]
pub(super) struct ShareHistory {
    operations: HashMap<OperationId, VecDeque<ShareSample>>,
    last_sample: HashMap<String, UnixMillis>,
}

impl ShareHistory {
    /// Takes a sample of every operation of a fresh update whose main tree this is.
    pub fn record(
        &mut self,
        tree: &str,
        shares: &TreeShares,
        now: UnixMillis,
        is_main_tree: impl Fn(&OperationId) -> bool,
    ) {
        let last = self.last_sample.entry(tree.to_string()).or_insert(0);
        if now < last.saturating_add(SAMPLE_EVERY_MS) {
            return;
        }
        *last = now;
        for e in &shares.elements {
            let ElementKind::Operation { id } = &e.kind else {
                continue;
            };
            if !is_main_tree(id) {
                continue;
            }
            let tracked = self.operations.len();
            let samples = match self.operations.get_mut(id) {
                Some(s) => s,
                None if tracked < MAX_TRACKED => self.operations.entry(id.clone()).or_default(),
                None => continue,
            };
            if samples.len() == SAMPLES {
                samples.pop_front();
            }
            samples.push_back(ShareSample {
                at: now,
                usage: max_component(&e.usage_share) as f32,
                fair_share: max_component(&e.fair_share.total) as f32,
                demand: max_component(&e.demand_share) as f32,
            });
        }
    }

    pub fn of(&self, id: &OperationId) -> Vec<ShareSample> {
        self.operations
            .get(id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// A retired operation's history goes with it.
    pub fn forget(&mut self, id: &OperationId) {
        self.operations.remove(id);
    }
}
