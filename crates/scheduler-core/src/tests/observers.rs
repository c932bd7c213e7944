//! What tests read of the core beyond its public calls: counters of the work it did
//! and views of its state that no driver needs.

use crate::queries::pages::describe;
use crate::*;
use ytsched_common::api::*;
use ytsched_common::resources::ResourceVector;

impl SchedulerCore {
    /// The records changed since the last call, as `run` hands them to the driver.
    pub(crate) fn take_changes(&mut self) -> Vec<crate::records::StateChange> {
        crate::records::take_changes(
            &mut self.operations,
            &mut self.jobs,
            &mut self.outbox,
            &mut self.trust,
        )
    }

    /// How many full passes `fail_unplaceable_if_offer_changed` made.
    pub fn placeability_passes(&self) -> u64 {
        self.placeability.passes
    }

    /// How many placement walks have run (see `placement_walks`).
    pub fn placement_walks(&self) -> u64 {
        self.placement_walks
    }

    /// The job attempts held in memory (running ones, and finished ones not yet
    /// settled), in start order. Settled attempts are in the store: `list_jobs_page`
    /// names them.
    pub fn held_jobs(&self, id: &OperationId) -> Result<Vec<JobInfo>, ApiError> {
        let op = self.reads().operation(id)?;
        let names = op.task_names();
        let mut jobs: Vec<&Job> = op.jobs.values().collect();
        jobs.sort_by_key(|j| j.seq);
        Ok(jobs
            .into_iter()
            .map(|j| job_info(&op.id, &names, j))
            .collect())
    }

    /// A pool's accumulated integral volume (share × seconds).
    pub fn integral_volume(&self, tree: &str, pool: &str) -> f64 {
        self.trees
            .get(tree)
            .and_then(|t| t.integral_volumes.get(pool))
            .copied()
            .unwrap_or(0.0)
    }

    /// Whether jobs restored at start are still waiting for their nodes to report.
    pub fn reviving(&self) -> bool {
        self.revival_deadline.is_some()
    }

    /// Operations in submission order.
    pub fn list_operations(&self) -> Vec<OperationInfo> {
        let mut ops: Vec<&Operation> = self.operations.values().collect();
        ops.sort_by_key(|o| o.seq);
        ops.into_iter().map(describe).collect()
    }

    /// Operations read to prepare fair-share updates so far: each update reads those
    /// changed since the last one, not all (`share_inputs.rs`), counted so tests can
    /// see it.
    pub fn share_input_reads(&self) -> u64 {
        self.operations.share_input_reads()
    }
    pub fn config_revision(&self) -> u64 {
        self.config_revision
    }

    /// Sum of the limits of a tree's schedulable nodes: what its shares are fractions of.
    pub fn tree_resources(&self, tree: &str) -> ResourceVector {
        self.trees
            .get(tree)
            .map_or(ResourceVector::ZERO, |t| t.resources)
    }
}
