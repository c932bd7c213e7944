//! An operation that ends with few attempts keeps their records, and small outputs, in
//! its own final record instead of one store key each (issue 26: the fewest writes per
//! operation). A one-job operation then costs its submission record, its final record,
//! one archive append and one purge, where a key per attempt and per output cost a
//! write each and a purge each again when the archive took them over.
//!
//! The rule that keeps this exact: a settled attempt held in `Operation::jobs` is one
//! whose record is inside the operation's record (others are released once stored, see
//! `release_settled`). Every later write of the operation's record carries them again,
//! so a finished operation whose record changes once more never drops them.

use crate::jobs::job_output::JobOutput;
use crate::operations::operation::{Job, Operation};
use std::collections::BTreeMap;
use ytsched_common::JobId;

/// The most attempts a finished operation keeps in its record.
pub const MAX_INLINE_ATTEMPTS: usize = 16;

/// The most output bytes (stdout and stderr tails of all its inline attempts) a
/// finished operation keeps in its record, and so in memory until it is retired; more
/// goes to the attempts' own output keys.
pub const MAX_INLINE_OUTPUT_BYTES: usize = 1024;

impl Operation {
    /// Decides, as the operation's record is taken for the store, whether the attempts
    /// among `changed` that just settled go inside it. They do when it has finished and
    /// all its held settled attempts fit `MAX_INLINE_ATTEMPTS`; their outputs move in
    /// from `outputs` when they fit `MAX_INLINE_OUTPUT_BYTES`. Returns the attempts
    /// taken in (kept in memory), in `changed`'s order.
    pub(crate) fn take_in_settled(
        &mut self,
        changed: &[JobId],
        outputs: &mut BTreeMap<JobId, JobOutput>,
    ) -> Vec<JobId> {
        if !self.state.is_finished() {
            return vec![];
        }
        let settled_held = self.jobs.values().filter(|j| j.settled()).count();
        if settled_held > MAX_INLINE_ATTEMPTS {
            return vec![];
        }
        let taken: Vec<JobId> = changed
            .iter()
            .filter(|j| self.jobs.get(j).is_some_and(|j| j.settled()))
            .cloned()
            .collect();
        let held_bytes: usize = self.inline_outputs.iter().map(output_bytes).sum();
        let new_bytes: usize = taken
            .iter()
            .filter_map(|j| outputs.get(j))
            .map(output_bytes)
            .sum();
        if held_bytes + new_bytes <= MAX_INLINE_OUTPUT_BYTES {
            for j in &taken {
                if let Some(out) = outputs.remove(j) {
                    self.inline_outputs.push(out);
                }
            }
        }
        taken
    }

    /// The attempts whose records are inside this operation's record (only a finished
    /// one has any: the walk over its jobs is skipped for every other).
    pub fn inline_jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.state
            .is_finished()
            .then(|| self.jobs.values().filter(|j| j.settled()))
            .into_iter()
            .flatten()
    }

    /// The output an inline attempt left, when its record holds it.
    pub fn inline_output(&self, job: &JobId) -> Option<&JobOutput> {
        self.inline_outputs.iter().find(|o| &o.job == job)
    }
}

fn output_bytes(o: &JobOutput) -> usize {
    o.stdout.len() + o.stderr.len()
}
