//! About once a minute per tree, each pool's fair share, usage and demand go to the
//! event log (SPEC 5.16), taken from the fair-share update just applied: what usage
//! accounting measures a pool's attainment (usage ÷ fair share over time) against, and
//! what a replay compares with.

use crate::events::{CoreEvent, PoolShareSample};
use crate::trees::fair_share::ElementKind;
use ytsched_common::protocol::UnixMillis;

/// How often a tree's pools are sampled unless the driver says otherwise
/// (`CoreConfig::pool_sample_period_ms`).
pub const POOL_SAMPLE_EVERY_MS: UnixMillis = 60_000;

/// How often the whole configuration is told again without a change: a window of the
/// log that starts after the leader did still carries one to replay from.
pub const CONFIGURATION_EVERY_MS: UnixMillis = 3_600_000;

impl crate::SchedulerCore {
    /// Tells the pools' shares of `tree` if a sample is due.
    pub(crate) fn sample_pools(&mut self, tree: &str, now: UnixMillis) {
        if self
            .configuration_told_at
            .is_some_and(|at| now >= at.saturating_add(CONFIGURATION_EVERY_MS))
        {
            self.note_configuration(now);
        }
        let every = self.config.pool_sample_period_ms.max(1);
        let Some(state) = self.trees.get_mut(tree) else {
            return;
        };
        if state
            .pool_sample_at
            .is_some_and(|at| now < at.saturating_add(every))
        {
            return;
        }
        let Some(shares) = state.shares() else {
            return;
        };
        let pools: Vec<PoolShareSample> = shares
            .elements
            .iter()
            .filter_map(|e| match &e.kind {
                ElementKind::Pool { name, .. } => Some(PoolShareSample {
                    pool: name.clone(),
                    fair_share_ratio: e.fair_share.total.max_component(),
                    usage_ratio: e.usage_share.max_component(),
                    demand_ratio: e.demand_share.max_component(),
                }),
                _ => None,
            })
            .collect();
        state.pool_sample_at = Some(now);
        let Some(tree) = self
            .cluster
            .trees
            .get_key_value(tree)
            .map(|(t, _)| t.clone())
        else {
            return;
        };
        self.outbox.event(CoreEvent::PoolShares { tree, pools });
    }
}
