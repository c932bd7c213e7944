//! Read-only views for the client API.

use crate::jobs::job_info::job_info;
use crate::jobs::job_output::JobOutput;
use crate::queries::reads::CoreReads;
use crate::Operation;
use ytsched_common::api::{ApiError, JobCounts, JobInfo, ListJobs, NodeInfo, OperationInfo};
use ytsched_common::states::JobState;
use ytsched_common::{JobId, OperationId};

/// An operation as a list shows it: its spec's summary (no environment or stdin,
/// commands cut short) and no history, both of which `get-operation` gives whole.
fn describe_brief(op: &Operation) -> OperationInfo {
    describe_with(
        op,
        ytsched_common::event_record::spec_summary(&op.spec),
        vec![],
    )
}

pub(crate) fn describe(op: &Operation) -> OperationInfo {
    describe_with(op, op.spec.clone(), op.history.clone())
}

fn describe_with(
    op: &Operation,
    spec: ytsched_common::spec::VanillaSpec,
    history: Vec<ytsched_common::api::HistoryEntry>,
) -> OperationInfo {
    let mut jobs = JobCounts {
        total: op.total_job_count(),
        // A person counts a held index (a back-off, an abort its node has yet to
        // confirm) as waiting: it runs again without anyone's word.
        waiting: op.waiting_job_count() + op.held.len() as u64,
        ..Default::default()
    };
    let tally = op.tally();
    jobs.running = tally.running;
    jobs.completed = tally.completed;
    jobs.failed = tally.failed;
    jobs.aborted = tally.aborted;
    OperationInfo {
        id: op.id.clone(),
        user: op.user.clone(),
        state: op.state,
        pool: op.main_pool().to_string(),
        pool_trees: op
            .trees
            .iter()
            .map(|(t, s)| (t.to_string(), s.pool.to_string()))
            .collect(),
        title: op.spec.title.clone(),
        weight: op.trees[0].1.weight,
        error: op.error.clone(),
        start_time: op.start_time,
        finish_time: op.finish_time,
        jobs,
        resource_usage: op.usage(),
        resource_demand: op.demand_in(op.main_tree()),
        spec,
        history,
        history_dropped: op.history_dropped,
        suspended: op.suspended,
        unschedulable_reason: (!op.state.is_finished())
            .then(|| op.unschedulable_reason())
            .flatten()
            .map(str::to_string),
    }
}

/// A page size asked for, checked (default and maximum as for `list_operations`).
pub fn page_limit(limit: Option<u32>) -> Result<usize, ApiError> {
    use ytsched_common::api::ListOperations;
    let limit = limit.unwrap_or(ListOperations::DEFAULT_PAGE);
    if limit == 0 || limit > ListOperations::MAX_PAGE {
        return Err(ApiError::new(format!(
            "limit: must be between 1 and {}, got {limit}",
            ListOperations::MAX_PAGE
        )));
    }
    Ok(limit as usize)
}

/// A cursor this scheduler gave out, read back.
pub fn parse_cursor<T: std::str::FromStr>(cursor: &Option<String>) -> Result<Option<T>, ApiError> {
    cursor
        .as_ref()
        .map(|c| {
            c.parse::<T>().map_err(|_| {
                let shown = ytsched_common::quote::quote(c, ytsched_common::quote::QUOTE_CHARS);
                ApiError::new(format!("cursor: not one this scheduler gave: '{shown}'"))
            })
        })
        .transpose()
}

/// One attempt on a `list-jobs` page, as the core has it.
#[derive(Clone, Debug, PartialEq)]
pub enum JobEntry {
    Held(Box<JobInfo>),
    /// Settled and released: its record is in the store under `job.<id>`.
    Stored(JobId),
}

/// A `list-jobs` page as the core can give it: entries by attempt sequence number; the
/// driver reads the stored ones.
#[derive(Clone, Debug, PartialEq)]
pub struct JobPagePlan {
    pub operation: OperationId,
    pub entries: Vec<(u64, JobEntry)>,
    /// The sequence number the next page starts at.
    pub next_cursor: Option<u64>,
    /// The operation's task names by task number, to describe stored attempts.
    pub task_names: Vec<String>,
}

/// A page's attempts with their sequence numbers, and where the next page starts.
pub type HeldPage = (Vec<(u64, JobInfo)>, Option<u64>);

impl JobPagePlan {
    /// The page's attempts, if the core holds every one of them (nothing to read from
    /// the store); else the plan back.
    pub fn into_held(self) -> Result<HeldPage, Self> {
        if !self
            .entries
            .iter()
            .all(|(_, e)| matches!(e, JobEntry::Held(_)))
        {
            return Err(self);
        }
        let held = self
            .entries
            .into_iter()
            .filter_map(|(seq, e)| match e {
                JobEntry::Held(info) => Some((seq, *info)),
                JobEntry::Stored(_) => None,
            })
            .collect();
        Ok((held, self.next_cursor))
    }
}

impl<'a> CoreReads<'a> {
    pub fn operation(&self, id: &OperationId) -> Result<&'a Operation, ApiError> {
        let operations: &'a crate::operations::table::OperationTable = self.operations;
        operations.get(id).ok_or_else(|| match self.damaged.get(id) {
            Some(reason) => ApiError::of(ytsched_common::api::ErrorKind::Internal, format!(
                "operation {id} failed at revival: its stored record could not be read ({reason}); it is kept aside in the store"
            )),
            None => ApiError::not_found(format!("no such operation: {id}")),
        })
    }

    /// A pending or running operation, for a change only those take (`what`: "be
    /// suspended", "have its parameters changed"...); a finished one is a conflict.
    pub(crate) fn unfinished_operation(
        &self,
        id: &OperationId,
        what: &str,
    ) -> Result<&'a Operation, ApiError> {
        let op = self.operation(id)?;
        if op.state.is_finished() {
            return Err(ApiError::conflict(format!(
                "operation {id} is already {}; only a pending or running operation can {what}",
                op.state
            )));
        }
        Ok(op)
    }

    pub fn operation_info(&self, id: &OperationId) -> Result<OperationInfo, ApiError> {
        Ok(describe(self.operation(id)?))
    }

    /// One page of operations matching `req.filter`, newest first (by submission). The
    /// cursor is the submission number of the last one returned.
    pub fn list_operations_page(
        &self,
        req: &ytsched_common::api::ListOperations,
    ) -> Result<ytsched_common::api::OperationPage, ApiError> {
        let limit = page_limit(req.limit)?;
        let before = parse_cursor::<u64>(&req.cursor)?.unwrap_or(u64::MAX);
        let f = &req.filter;
        let mut matching: Vec<&Operation> = self
            .operations
            .values()
            .filter(|o| o.seq < before)
            .filter(|o| {
                let pools = o.trees.iter().map(|(t, s)| (t.as_str(), s.pool.as_str()));
                f.admits(&o.user, o.state, o.start_time, pools)
            })
            .collect();
        let more = matching.len() > limit;
        if more {
            matching.select_nth_unstable_by_key(limit, |o| std::cmp::Reverse(o.seq));
            matching.truncate(limit);
        }
        matching.sort_by_key(|o| std::cmp::Reverse(o.seq));
        // Brief entries, as many as fit the page's bytes: whatever its operations' specs
        // and histories, a page costs the core about the same to make and the bus the
        // same to carry (one `get-operation` has the whole of one).
        let max_bytes = ytsched_common::api::ListOperations::MAX_PAGE_BYTES;
        let mut operations = Vec::with_capacity(matching.len());
        let mut bytes = 0;
        for o in &matching {
            let info = describe_brief(o);
            bytes += ytsched_common::codec::encode(&info).map_or(max_bytes, |b| b.len());
            if bytes > max_bytes && !operations.is_empty() {
                break;
            }
            operations.push(info);
        }
        let cut = operations.len() < matching.len();
        Ok(ytsched_common::api::OperationPage {
            next_cursor: (more || cut)
                .then(|| {
                    matching
                        .get(operations.len() - 1)
                        .map(|o| o.seq.to_string())
                })
                .flatten(),
            operations,
        })
    }

    /// One page of an operation's job attempts in start order, each either as held in
    /// memory or named for the caller to read from the store. The cursor is the
    /// sequence number of the next attempt: attempts only ever get added after the ones
    /// already started, so a reader's place never moves.
    pub fn list_jobs_page(&self, req: &ListJobs) -> Result<JobPagePlan, ApiError> {
        let limit = page_limit(req.limit)?;
        let from = parse_cursor::<u64>(&req.cursor)?.unwrap_or(0);
        let op = self.operation(&req.operation_id)?;
        let names = op.task_names();
        let mut entries = Vec::new();
        let mut next = None;
        for seq in from..op.attempt_count() {
            let state = op.attempt_state(seq);
            if state == JobState::Waiting || req.state.is_some_and(|s| s != shown(op, seq, state)) {
                continue;
            }
            if entries.len() == limit {
                next = Some(seq);
                break;
            }
            let id = op.attempt_id(seq);
            let entry = match op.jobs.get(&id) {
                Some(job) => JobEntry::Held(Box::new(job_info(&op.id, &names, job))),
                None => JobEntry::Stored(id),
            };
            entries.push((seq, entry));
        }
        Ok(JobPagePlan {
            operation: op.id.clone(),
            entries,
            next_cursor: next,
            task_names: names,
        })
    }

    /// Whether a job's output can be read (it exists and has finished), and the output
    /// itself where the operation's record keeps it (`inline_attempts.rs`); otherwise it
    /// is in the store (`records::JobOutput`), not in the core.
    pub fn job_output_ready(
        &self,
        op: &OperationId,
        job: &JobId,
    ) -> Result<Option<&'a JobOutput>, ApiError> {
        let o = self.operation(op)?;
        let missing = || ApiError::not_found(format!("operation {op} has no job {job}"));
        match o.jobs.get(job) {
            Some(j) if j.statistics.is_none() => Err(ApiError::conflict(format!(
                "job {job} is {}; its output is available once it has finished",
                j.state
            ))),
            Some(_) => Ok(o.inline_output(job)),
            // Released attempts are settled: finished, with whatever output they left.
            None => o.attempt_seq(job).map(|_| None).ok_or_else(missing),
        }
    }

    pub fn list_nodes(&self) -> Vec<NodeInfo> {
        self.nodes
            .values()
            .map(|n| NodeInfo {
                id: n.id.clone(),
                hostname: n.hostname.clone(),
                state: n.state_name().to_string(),
                tree: n.registered_tree().map(String::from),
                error: n.registration_error().map(String::from),
                alert: n.approval_alert.clone(),
                system_tags: n.system_tags.clone(),
                tags: n.tags.clone(),
                user_tags: self.cluster.user_tags(&n.id).to_vec(),
                resource_limits: n.resource_limits,
                resource_usage: n.reported_usage,
                running_job_count: self.jobs.count_on(&n.id) as u64,
                last_heartbeat: n.last_heartbeat,
                maintenance: n.maintenance,
            })
            .collect()
    }
}

/// An attempt's state as it is shown: a running one whose node still fetches its files
/// is `preparing` (SPEC 5.17).
fn shown(op: &crate::Operation, seq: u64, state: JobState) -> JobState {
    let preparing = state == JobState::Running
        && op
            .jobs
            .get(&op.attempt_id(seq))
            .is_some_and(|j| j.preparing);
    if preparing {
        JobState::Preparing
    } else {
        state
    }
}
