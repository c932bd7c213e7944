//! YTsaurus's job commands: `list_jobs` (state and address filters, sort, offset and
//! limit, stderr sizes), `get_job`, `get_job_stderr` and `abort_job`. A job id is
//! `<operation id>-<attempt>`, so a command that names only the job finds its operation.

use super::error::{code, Missing, YtError};
use super::operation_view::iso_time;
use super::wire::{bool_param, count_param, optional_string, string_param, Output, YtCall};
use super::Ctx;
use serde_json::{json, Map, Value};
use ytsched_common::api::{self, JobInfo, OutputStream};
use ytsched_common::states::JobState;
use ytsched_common::{JobId, OperationId};

fn api_error(e: api::ApiError) -> YtError {
    YtError::from_api(e, Missing::Job)
}

/// The job named, and its operation (given, or read from the job id).
fn job_and_operation(call: &YtCall) -> Result<(JobId, OperationId), YtError> {
    let job = string_param(call, "job_id")?;
    let job = JobId::parse(job).map_err(|e| YtError::bad_parameter("job_id", e))?;
    let op = match optional_string(call, "operation_id")? {
        Some(op) => op,
        None => job
            .as_str()
            .rsplit_once('-')
            .map(|(op, _)| op)
            .ok_or_else(|| YtError::new(code::NO_SUCH_JOB, format!("no such job: {job}")))?,
    };
    let op = OperationId::parse(op).map_err(|e| YtError::bad_parameter("operation_id", e))?;
    if job.attempt_seq(&op).is_none() {
        return Err(YtError::new(
            code::NO_SUCH_JOB,
            format!("no such job: {job} of operation {op}"),
        ));
    }
    Ok((job, op))
}

/// A job as YTsaurus lists it.
fn job_view(j: &JobInfo, stderr_size: Option<usize>) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(j.id));
    m.insert("job_id".into(), json!(j.id));
    m.insert("operation_id".into(), json!(j.operation_id));
    m.insert("type".into(), json!("vanilla"));
    m.insert("job_type".into(), json!("vanilla"));
    m.insert("state".into(), json!(yt_state(j.state)));
    m.insert("task_name".into(), json!(j.task_name));
    m.insert("job_cookie".into(), json!(j.job_index));
    m.insert(
        "address".into(),
        json!(j.node_id.as_ref().map_or("", |n| n.as_str())),
    );
    if let Some(t) = j.start_time {
        m.insert("start_time".into(), json!(iso_time(t)));
    }
    if let Some(t) = j.finish_time {
        m.insert("finish_time".into(), json!(iso_time(t)));
    }
    if let (Some(e), JobState::Failed | JobState::Aborted) = (&j.error, j.state) {
        let mut error = YtError::new(code::GENERIC, e.clone());
        if let Some(reason) = j.abort_reason {
            error = error.with("abort_reason", reason.name());
        }
        m.insert("error".into(), error.to_json());
    }
    if let Some(reason) = j.abort_reason {
        m.insert("abort_reason".into(), json!(reason.name()));
    }
    if let Some(s) = &j.statistics {
        m.insert("statistics".into(), json!(s));
    }
    if let Some(size) = stderr_size {
        m.insert("stderr_size".into(), json!(size));
    }
    Value::Object(m)
}

/// YTsaurus's name of a job state (a waiting job is `pending` there).
fn yt_state(s: JobState) -> &'static str {
    match s {
        JobState::Waiting => "pending",
        other => other.name(),
    }
}

fn parse_state(s: &str) -> Result<JobState, YtError> {
    match s {
        "pending" | "waiting" => Ok(JobState::Waiting),
        "running" => Ok(JobState::Running),
        "completed" => Ok(JobState::Completed),
        "failed" => Ok(JobState::Failed),
        "aborted" => Ok(JobState::Aborted),
        other => Err(YtError::bad_parameter(
            "job_state",
            format!("'{other}' is not a job state ytsched has"),
        )),
    }
}

/// Most attempts one `list_jobs` reads (it sorts and counts within them).
const MAX_SCANNED: usize = 20_000;
/// Most stderrs one `list_jobs` with `with_stderr` reads.
const MAX_STDERR_READS: usize = 100;

/// Every attempt of `op` in `state` (all states if none), up to `MAX_SCANNED`; and
/// whether that bound cut the list short.
async fn attempts(
    ctx: &Ctx<'_>,
    op: &OperationId,
    state: Option<JobState>,
) -> Result<(Vec<JobInfo>, bool), YtError> {
    let (mut jobs, mut cursor) = (vec![], None);
    loop {
        let page = ctx
            .call(api::ListJobs {
                operation_id: op.clone(),
                limit: Some(api::ListOperations::MAX_PAGE),
                cursor: cursor.take(),
                state,
            })
            .await
            .map_err(|e| YtError::from_api(e, Missing::Operation))?;
        jobs.extend(page.jobs);
        match page.next_cursor {
            Some(_) if jobs.len() >= MAX_SCANNED => return Ok((jobs, true)),
            Some(next) => cursor = Some(next),
            None => return Ok((jobs, false)),
        }
    }
}

fn sort_jobs(jobs: &mut [JobInfo], call: &YtCall) -> Result<(), YtError> {
    match optional_string(call, "sort_field")?.unwrap_or("none") {
        "none" => {}
        "id" => jobs.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str())),
        "state" => jobs.sort_by_key(|j| yt_state(j.state)),
        "start_time" => jobs.sort_by_key(|j| j.start_time),
        "finish_time" => jobs.sort_by_key(|j| j.finish_time),
        "address" => jobs.sort_by(|a, b| {
            a.node_id
                .as_ref()
                .map(|n| n.as_str())
                .cmp(&b.node_id.as_ref().map(|n| n.as_str()))
        }),
        "duration" => jobs.sort_by_key(|j| {
            j.finish_time
                .zip(j.start_time)
                .map(|(f, s)| f.saturating_sub(s))
        }),
        "task_name" => jobs.sort_by(|a, b| a.task_name.cmp(&b.task_name)),
        "type" => {}
        other => {
            return Err(YtError::bad_parameter(
                "sort_field",
                format!("ytsched does not sort jobs by '{other}'"),
            ))
        }
    }
    match optional_string(call, "sort_order")?.unwrap_or("ascending") {
        "ascending" => Ok(()),
        "descending" => {
            jobs.reverse();
            Ok(())
        }
        other => Err(YtError::bad_parameter(
            "sort_order",
            format!("'{other}' is neither ascending nor descending"),
        )),
    }
}

async fn stderr_of(ctx: &Ctx<'_>, j: &JobInfo) -> Result<String, YtError> {
    ctx.call(api::GetJobOutput {
        operation_id: j.operation_id.clone(),
        job_id: j.id.clone(),
        stream: OutputStream::Stderr,
    })
    .await
    .map_err(api_error)
}

pub async fn list_jobs(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let op = OperationId::parse(string_param(call, "operation_id")?)
        .map_err(|e| YtError::bad_parameter("operation_id", e))?;
    let state = optional_string(call, "job_state")?
        .map(parse_state)
        .transpose()?;
    let (mut jobs, cut) = attempts(ctx, &op, None).await?;
    let mut state_counts = Map::new();
    for j in &jobs {
        let n = state_counts
            .get(yt_state(j.state))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        state_counts.insert(yt_state(j.state).into(), json!(n + 1));
    }
    jobs.retain(|j| state.is_none_or(|s| j.state == s));
    if let Some(address) = optional_string(call, "address")? {
        jobs.retain(|j| j.node_id.as_ref().is_some_and(|n| n.as_str() == address));
    }
    if optional_string(call, "job_type")?.is_some_and(|t| t != "vanilla") {
        jobs.clear();
    }
    sort_jobs(&mut jobs, call)?;
    let offset = count_param(call, "offset", MAX_SCANNED as u64)?.unwrap_or(0) as usize;
    let limit = count_param(call, "limit", 1000)?.unwrap_or(1000) as usize;
    let with_stderr = call
        .params
        .contains_key("with_stderr")
        .then(|| bool_param(call, "with_stderr"))
        .transpose()?;
    let mut out = vec![];
    let mut reads = 0;
    for j in jobs.iter().skip(offset) {
        if out.len() == limit {
            break;
        }
        let stderr_size = match with_stderr {
            None => None,
            Some(wanted) => {
                reads += 1;
                if reads > MAX_STDERR_READS {
                    return Err(YtError::bad_parameter("with_stderr", format!("reads each job's stderr: ask for at most {MAX_STDERR_READS} jobs (limit, or a job_state filter)")));
                }
                let size = if j.state == JobState::Waiting {
                    0
                } else {
                    stderr_of(ctx, j).await?.len()
                };
                if (size > 0) != wanted {
                    continue;
                }
                Some(size)
            }
        };
        out.push(job_view(j, stderr_size));
    }
    Ok(Output::Structured(json!({
        "jobs": out,
        "state_counts": state_counts,
        "type_counts": {"vanilla": state_counts.values().filter_map(Value::as_u64).sum::<u64>()},
        "cypress_job_count": Value::Null,
        "scheduler_job_count": jobs.len(),
        "archive_job_count": Value::Null,
        "controller_agent_job_count": jobs.len(),
        "incomplete": cut,
        "errors": [],
    })))
}

async fn find_job(ctx: &Ctx<'_>, call: &YtCall) -> Result<JobInfo, YtError> {
    let (job, op) = job_and_operation(call)?;
    let (jobs, _) = attempts(ctx, &op, None).await?;
    jobs.into_iter().find(|j| j.id == job).ok_or_else(|| {
        YtError::new(code::NO_SUCH_JOB, format!("no such job: {job}")).with("job_id", job.as_str())
    })
}

pub async fn get_job(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let job = find_job(ctx, call).await?;
    Ok(Output::Structured(job_view(&job, None)))
}

pub async fn get_job_stderr(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let (job, op) = job_and_operation(call)?;
    let stderr = ctx
        .call(api::GetJobOutput {
            operation_id: op,
            job_id: job,
            stream: OutputStream::Stderr,
        })
        .await
        .map_err(api_error)?;
    Ok(Output::Binary(stderr.into_bytes()))
}

pub async fn abort_job(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let (job, op) = job_and_operation(call)?;
    ctx.call(api::AbortJob {
        operation_id: op,
        job_id: job,
    })
    .await
    .map_err(api_error)?;
    Ok(Output::Nothing)
}
