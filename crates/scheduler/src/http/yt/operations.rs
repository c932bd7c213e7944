//! YTsaurus's operation commands, each made into the scheduler's own API call as the
//! authenticated user: `start_operation` (vanilla only), `get_operation`,
//! `list_operations` (filters, time cursor and counters), `abort_operation`,
//! `complete_operation`, `suspend_operation`, `resume_operation` and
//! `update_operation_parameters`.

use super::error::{code, Missing, YtError};
use super::operation_view::{attribute_filter, parse_time, view, ATTRIBUTES, BRIEF};
use super::wire::{bool_param, count_param, optional_string, string_param, Output, YtCall};
use super::yson_value::plain;
use super::Ctx;
use serde_json::{json, Value};
use ytsched_common::api::{self, OperationFilter, OperationInfo};
use ytsched_common::protocol::unix_now;
use ytsched_common::states::OperationState;
use ytsched_common::{IdempotencyToken, OperationId};

fn operation_id(call: &YtCall) -> Result<OperationId, YtError> {
    if call.params.contains_key("operation_alias") {
        return Err(YtError::bad_parameter(
            "operation_alias",
            "ytsched has no operation aliases; name the operation by operation_id",
        ));
    }
    let id = string_param(call, "operation_id")?;
    OperationId::parse(id).map_err(|e| YtError::bad_parameter("operation_id", e))
}

fn api_error(e: api::ApiError) -> YtError {
    YtError::from_api(e, Missing::Operation)
}

pub async fn start_operation(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let kind = string_param(call, "operation_type")?;
    if kind != "vanilla" {
        return Err(YtError::new(
            code::GENERIC,
            format!("ytsched does not support operations of type '{kind}': it runs vanilla operations only"),
        )
        .with("operation_type", kind));
    }
    let mut spec = call
        .params
        .get("spec")
        .cloned()
        .ok_or_else(|| YtError::bad_parameter("spec", "is required"))?;
    super::file_paths::resolve_spec_files(ctx, &mut spec).await?;
    let spec = super::spec::vanilla_spec(spec)?;
    // A retry of the same mutation answers the operation the first try started.
    let idempotency_token = optional_string(call, "mutation_id")?
        .map(|m| IdempotencyToken::parse(m).map_err(|e| YtError::bad_parameter("mutation_id", e)))
        .transpose()?;
    let id = ctx
        .call(api::StartOperation {
            spec,
            idempotency_token,
        })
        .await
        .map_err(api_error)?;
    Ok(Output::Structured(json!({ "operation_id": id })))
}

async fn operation_info(ctx: &Ctx<'_>, id: OperationId) -> Result<OperationInfo, YtError> {
    ctx.call(api::GetOperation { operation_id: id })
        .await
        .map_err(api_error)
}

pub async fn get_operation(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let id = operation_id(call)?;
    let names = attribute_filter(call.params.get("attributes"))?;
    let info = operation_info(ctx, id).await?;
    Ok(Output::Structured(view(
        &info,
        names.as_deref(),
        ATTRIBUTES,
        unix_now(),
    )))
}

/// A state change of an operation; a retried mutation that finds it done answers
/// success, as YTsaurus answers a retry with the first try's result.
pub async fn control(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let id = operation_id(call)?;
    let retry = bool_param(call, "retry")?;
    let done = |state: OperationState| {
        let id = id.clone();
        async move {
            retry
                && operation_info(ctx, id)
                    .await
                    .is_ok_and(|info| info.state == state)
        }
    };
    let result = match call.command.name {
        "abort_operation" => {
            if done(OperationState::Aborted).await {
                return Ok(Output::Nothing);
            }
            ctx.call(api::AbortOperation {
                operation_id: id.clone(),
            })
            .await
        }
        "complete_operation" => {
            if done(OperationState::Completed).await {
                return Ok(Output::Nothing);
            }
            ctx.call(api::CompleteOperation {
                operation_id: id.clone(),
            })
            .await
        }
        "suspend_operation" => {
            let abort_running_jobs = bool_param(call, "abort_running_jobs")?;
            ctx.call(api::SuspendOperation {
                operation_id: id.clone(),
                abort_running_jobs,
            })
            .await
        }
        "resume_operation" => {
            ctx.call(api::ResumeOperation {
                operation_id: id.clone(),
            })
            .await
        }
        "update_operation_parameters" => {
            let parameters = call
                .params
                .get("parameters")
                .map(|p| super::spec::plain_all(p.clone()))
                .ok_or_else(|| YtError::bad_parameter("parameters", "is required"))?;
            let parameters = serde_json::from_value(parameters)
                .map_err(|e| YtError::bad_parameter("parameters", e))?;
            ctx.call(api::UpdateOperationParameters {
                operation_id: id.clone(),
                parameters,
            })
            .await
        }
        other => return Err(YtError::unsupported_command(other)),
    };
    result.map(|()| Output::Nothing).map_err(api_error)
}

/// Most operations one `list_operations` reads to fill its page and find its end.
const MAX_SCANNED: usize = 20_000;
/// A page of `list_operations` unless `limit` says otherwise, and the most one holds.
const DEFAULT_LIMIT: u64 = 100;
const MAX_LIMIT: u64 = 1000;

/// The filters of `list_operations`, as the scheduler's filter and the rest.
struct ListQuery {
    filter: OperationFilter,
    substring: Option<String>,
    type_ok: bool,
    future: bool,
    limit: usize,
}

fn list_query(call: &YtCall) -> Result<ListQuery, YtError> {
    let time = |name: &str| {
        call.params
            .get(name)
            .map(plain)
            .filter(|v| !v.is_null())
            .map(|v| parse_time(name, v))
            .transpose()
    };
    let state = optional_string(call, "state")?
        .map(|s| {
            serde_json::from_value::<OperationState>(json!(s)).map_err(|_| {
                YtError::bad_parameter("state", format!("'{s}' is not an operation state"))
            })
        })
        .transpose()?;
    let future = match optional_string(call, "cursor_direction")? {
        None | Some("past") => false,
        Some("future") => true,
        Some(other) => {
            return Err(YtError::bad_parameter(
                "cursor_direction",
                format!("'{other}' is neither past nor future"),
            ))
        }
    };
    let (mut from_time, mut to_time) = (time("from_time")?, time("to_time")?);
    if let Some(cursor) = time("cursor_time")? {
        if future {
            from_time = Some(from_time.map_or(cursor + 1, |f| f.max(cursor + 1)));
        } else {
            to_time = Some(to_time.map_or(cursor, |t| t.min(cursor)));
        }
    }
    Ok(ListQuery {
        filter: OperationFilter {
            state,
            user: optional_string(call, "user")?.map(str::to_string),
            pool: optional_string(call, "pool")?.map(str::to_string),
            pool_tree: optional_string(call, "pool_tree")?.map(str::to_string),
            from_time,
            to_time,
        },
        substring: optional_string(call, "filter")?.map(str::to_lowercase),
        type_ok: optional_string(call, "type")?.is_none_or(|t| t == "vanilla"),
        future,
        limit: count_param(call, "limit", MAX_LIMIT)?
            .unwrap_or(DEFAULT_LIMIT)
            .max(1) as usize,
    })
}

/// The operations `q` admits, newest first, enough to fill its page (for the future
/// direction, every one after its cursor, up to `MAX_SCANNED`); and whether more are left.
async fn gather(ctx: &Ctx<'_>, q: &ListQuery) -> Result<(Vec<OperationInfo>, bool), YtError> {
    let mut found: Vec<OperationInfo> = vec![];
    if !q.type_ok {
        return Ok((found, false));
    }
    let (mut cursor, mut scanned) = (None, 0usize);
    loop {
        let page = ctx
            .call(api::ListOperations {
                limit: Some(api::ListOperations::MAX_PAGE),
                cursor: cursor.take(),
                filter: q.filter.clone(),
            })
            .await
            .map_err(api_error)?;
        scanned += page.operations.len();
        found.extend(
            page.operations
                .into_iter()
                .filter(|o| super::counters::text_admits(o, &q.substring)),
        );
        // Newest first: the past direction stops once its page is full.
        if !q.future && found.len() > q.limit {
            return Ok((found, true));
        }
        match page.next_cursor {
            Some(next) if scanned < MAX_SCANNED => cursor = Some(next),
            Some(_) => return Ok((found, true)),
            None => return Ok((found, false)),
        }
    }
}

pub async fn list_operations(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let q = list_query(call)?;
    let names = attribute_filter(call.params.get("attributes"))?;
    let (mut found, mut more) = gather(ctx, &q).await?;
    if found.len() > q.limit {
        more = true;
        // The future direction takes the oldest after its cursor.
        let drop = found.len() - q.limit;
        if q.future {
            found.drain(..drop);
        } else {
            found.truncate(q.limit);
        }
    }
    let now = unix_now();
    let operations: Vec<Value> = found
        .iter()
        .map(|o| view(o, names.as_deref(), BRIEF, now))
        .collect();
    let mut out = json!({"operations": operations, "incomplete": more});
    if call.params.get("include_counters").map(plain) != Some(&Value::Bool(false)) {
        super::counters::insert(ctx, &q.filter, &q.substring, &mut out).await;
    }
    Ok(Output::Structured(out))
}
