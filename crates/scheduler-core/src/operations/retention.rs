//! Finished operations leave memory (SPEC 5.10, as YTsaurus's operations cleaner): per
//! tree, by the first tree of each operation's spec, once more than
//! `soft_retained_operation_count` are finished those finished over `clean_delay` ago go,
//! past `hard_retained_operation_count` the oldest go at once (up to
//! `MAX_RETIRED_PER_CALL` a tick), and any finished longer
//! than `max_operation_age` ago goes. A retired operation becomes an `Archived` value the
//! driver writes to the archive (which answers for it from then on) before it deletes the
//! operation's state keys.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use ytsched_common::api::{JobInfo, OperationInfo, OutputStream};
use ytsched_common::names::TreeName;
use ytsched_common::pool_config::TreeConfig;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::{JobId, OperationId};

/// Finished operations by tree, oldest finish first.
pub(crate) type FinishedOrder = BTreeMap<TreeName, BTreeSet<(UnixMillis, u64, OperationId)>>;

/// A retired operation for the archive: its last view and how many job attempts it
/// made. The attempts its own record kept (`inline_attempts.rs`) come with it; the
/// others, and the output their jobs left, are in the store (`job.<id>`, `out.<id>`),
/// where the archive reads them as it takes the operation over.
#[derive(Clone, Debug)]
pub struct Archived {
    pub info: OperationInfo,
    /// Its attempts are `<id>-0` .. `<id>-<attempts - 1>`.
    pub attempts: u64,
    /// Its task names by task number, to describe the attempts.
    pub task_names: Vec<String>,
    /// The attempts its record kept, by sequence number, with their output where the
    /// record kept that too (`None`: the output, if any, is under the attempt's key).
    pub inline: BTreeMap<u64, (JobInfo, Option<(String, String)>)>,
}

impl Archived {
    /// Its attempts' ids, in start order.
    pub fn job_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        (0..self.attempts).map(|seq| JobId::attempt(&self.info.id, seq))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArchivedJob {
    pub info: JobInfo,
    pub stdout: String,
    pub stderr: String,
}

impl ArchivedJob {
    pub fn output(&self, stream: OutputStream) -> &str {
        match stream {
            OutputStream::Stdout => &self.stdout,
            OutputStream::Stderr => &self.stderr,
        }
    }
}

/// The most operations one call retires. After a burst tens of thousands may be due at
/// once; each costs its view and the removal from every index, so all of them in one
/// call held the core for seconds (issue 26). The rest go at the next tick; the archive
/// takes them over one by one anyway.
pub const MAX_RETIRED_PER_CALL: usize = 1_000;

/// Whether the oldest of `count` finished operations, finished at `finished`, goes now.
pub(crate) fn retire_oldest(
    config: &TreeConfig,
    count: usize,
    finished: UnixMillis,
    now: UnixMillis,
) -> bool {
    let age = now.saturating_sub(finished);
    count > config.hard_retained_operation_count as usize
        || age > config.max_operation_age.0
        || (count > config.soft_retained_operation_count as usize && age > config.clean_delay.0)
}
