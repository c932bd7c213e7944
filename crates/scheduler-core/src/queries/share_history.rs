//! A short, bounded history of each operation's usage against its fair share, for the
//! web page's chart. Sampled from fair-share updates (which already hold both numbers),
//! at most every `SAMPLE_EVERY_MS` per tree, `SAMPLES` per operation, and for at most
//! `MAX_TRACKED` operations at once, so it costs at most a few MiB however many
//! operations there are. An operation sampled last more than a window ago (it finished,
//! or left the tree) is dropped, so finished ones do not hold places new ones need.

use crate::trees::fair_share::{ElementKind, TreeShares};
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
pub(crate) struct ShareHistory {
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
        let window = SAMPLE_EVERY_MS * SAMPLES as u64;
        self.operations
            .retain(|_, s| s.back().is_some_and(|x| x.at + window >= now));
        for e in &shares.elements {
            let ElementKind::Operation { id } = &e.kind else {
                continue;
            };
            // The cheap checks first: this runs under the core lock.
            let tracked = self.operations.len();
            let samples = match self.operations.get_mut(id) {
                Some(s) => s,
                None if tracked < MAX_TRACKED && is_main_tree(id) => {
                    self.operations.entry(id.clone()).or_default()
                }
                None => continue,
            };
            if samples.len() == SAMPLES {
                samples.pop_front();
            }
            samples.push_back(ShareSample {
                at: now,
                usage: e.usage_share.max_component() as f32,
                fair_share: e.fair_share.max_component() as f32,
                demand: e.demand_share.max_component() as f32,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trees::fair_share::element;

    fn shares_of(ops: &[&str]) -> TreeShares {
        let elements = ops
            .iter()
            .map(|id| {
                let kind = ElementKind::Operation {
                    id: OperationId((*id).into()),
                };
                element(kind, 0.25, 0.5, 0.5)
            })
            .collect();
        TreeShares {
            elements,
            ..Default::default()
        }
    }

    #[test]
    fn samples_are_spaced_bounded_and_leave_with_their_operation() {
        let mut h = ShareHistory::default();
        let a = OperationId("a".into());
        let both = shares_of(&["a", "b"]);
        for i in 0..(SAMPLES as u64 + 10) {
            h.record("t", &both, i * SAMPLE_EVERY_MS, |_| true);
            // A second update within the interval takes no sample.
            h.record("t", &both, i * SAMPLE_EVERY_MS + 1, |_| true);
        }
        let samples = h.of(&a);
        assert_eq!(
            samples.len(),
            SAMPLES,
            "at most SAMPLES, the oldest dropped"
        );
        assert_eq!(samples[0].at, 10 * SAMPLE_EVERY_MS);
        assert_eq!((samples[0].usage, samples[0].fair_share), (0.25, 0.5));
        // Only "b" goes on: "a" (finished) is dropped once its last sample is a window old.
        let only_b = shares_of(&["b"]);
        let end = (SAMPLES as u64 + 10) * SAMPLE_EVERY_MS;
        h.record("t", &only_b, end, |_| true);
        assert_eq!(h.of(&a).len(), SAMPLES);
        h.record("t", &only_b, end + SAMPLE_EVERY_MS * SAMPLES as u64, |_| {
            true
        });
        assert!(h.of(&a).is_empty());
        // Operations of another main tree are not sampled here.
        h.record("t", &shares_of(&["c"]), end * 10, |id| id.as_str() != "c");
        assert!(h.of(&OperationId("c".into())).is_empty());
    }
}
