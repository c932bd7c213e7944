//! About once a minute per tree, each pool's fair share, usage and demand go to the
//! event log (SPEC 5.16), taken from the fair-share update just applied: what usage
//! accounting measures a pool's attainment (usage ÷ fair share over time) against, and
//! what a replay compares with.

use ytsched_common::protocol::UnixMillis;

/// How often a tree's pools are sampled unless the driver says otherwise
/// (`CoreConfig::pool_sample_period_ms`).
pub const POOL_SAMPLE_EVERY_MS: UnixMillis = 60_000;

/// How often the whole configuration is told again without a change: a window of the
/// log that starts after the leader did still carries one to replay from.
pub const CONFIGURATION_EVERY_MS: UnixMillis = 3_600_000;
