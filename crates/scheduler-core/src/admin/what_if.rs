//! What-if for admin changes: the change is made on a copy of the whole core, and
//! both copies recompute every tree's fair shares at the same instant, so the answer
//! is what the real scheduler would compute, not an estimate. The live core is not
//! touched.

use crate::SchedulerCore;
use std::collections::BTreeMap;
use ytsched_common::api::{ApiError, ShareChange, WhatIf};
use ytsched_common::protocol::UnixMillis;

/// Below this, a fair share ratio did not move (update arithmetic noise).
const UNCHANGED: f64 = 1e-9;

type ShareKey = (String, &'static str, String);

impl SchedulerCore {
    /// Every fair share `change` would move, as of `now`.
    pub fn what_if(
        &self,
        now: UnixMillis,
        change: impl FnOnce(&mut SchedulerCore) -> Result<(), ApiError>,
    ) -> Result<WhatIf, ApiError> {
        let mut after = self.clone();
        change(&mut after)?;
        let mut before = self.clone();
        let before = before.fair_share_ratios(now);
        let after = after.fair_share_ratios(now);
        let mut keys: Vec<&ShareKey> = before.keys().chain(after.keys()).collect();
        keys.sort();
        keys.dedup();
        let changes = keys
            .into_iter()
            .filter_map(|key| {
                let (b, a) = (before.get(key).copied(), after.get(key).copied());
                let moved = match (b, a) {
                    (Some(b), Some(a)) => (a - b).abs() > UNCHANGED,
                    _ => true,
                };
                moved.then(|| ShareChange {
                    tree: key.0.clone(),
                    kind: key.1.to_string(),
                    name: key.2.clone(),
                    before: b,
                    after: a,
                })
            })
            .collect();
        Ok(WhatIf { changes })
    }

    /// Recomputes every tree now and reads the `fair_share_ratio` of each pool and
    /// operation as the orchid shows it (the numbers an admin compares with).
    pub fn fair_share_ratios(&mut self, now: UnixMillis) -> BTreeMap<ShareKey, f64> {
        self.latest_now.observe(now);
        for tree in self.trees.names() {
            self.update_tree_shares(tree.as_str(), now);
        }
        let mut out = BTreeMap::new();
        for tree in self.trees.names() {
            let Some(orchid) = self.reads().tree_orchid(tree.as_str()) else {
                continue;
            };
            for (section, kind) in [("pools", "pool"), ("operations", "operation")] {
                let Some(elements) = orchid[section].as_object() else {
                    continue;
                };
                for (name, e) in elements {
                    if let Some(r) = e["fair_share_ratio"].as_f64() {
                        out.insert((tree.to_string(), kind, name.clone()), r);
                    }
                }
            }
        }
        out
    }
}
