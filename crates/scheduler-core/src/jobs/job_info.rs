//! An attempt as the API shows it (`list-jobs`, the archive's records).

use crate::operations::operation::Job;
use ytsched_common::api::JobInfo;
use ytsched_common::OperationId;

/// How `list-jobs` shows an attempt of operation `op` whose tasks are `task_names`.
pub fn job_info(op: &OperationId, task_names: &[String], j: &Job) -> JobInfo {
    JobInfo {
        id: j.id.clone(),
        operation_id: op.clone(),
        task_name: task_names.get(j.task).cloned().unwrap_or_default(),
        job_index: j.index,
        // Counted as running; shown as its node says while it fetches its files.
        state: if j.preparing && j.state == ytsched_common::states::JobState::Running {
            ytsched_common::states::JobState::Preparing
        } else {
            j.state
        },
        node_id: Some(j.node.clone()),
        start_time: Some(j.start_time),
        finish_time: j.finish_time,
        error: j.error.clone(),
        abort_reason: j.abort_reason,
        statistics: j.statistics.clone(),
    }
}
