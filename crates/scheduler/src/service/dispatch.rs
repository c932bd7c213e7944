//! One API request against the core: decoded, checked, run, encoded; and what an answer
//! still needs from the store or the archive once the core has decided it.

use super::*;
use crate::core::{authorize_operation_of, controls_operation_of, JobPagePlan, SchedulerCore};
use crate::service::job_pages::{fitting_job_page, read_job_page};
use crate::store;
use crate::store::archive::{Archive, ArchivedOperation};
use tracing::warn;
use ytsched_common::api::{self, ApiError, ApiMethod, ApiRequest, ApiResponse};
use ytsched_common::codec::{decode, encode};
use ytsched_common::identity::Caller;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{unix_now, PROTOCOL_VERSION};
use ytsched_common::OperationId;

/// The most a page of `list_operations` may take encoded: well inside NATS's default
/// 1 MiB payload.
pub(super) const MAX_PAGE_BYTES: usize = 512 * 1024;

/// Room an operation's record needs beyond its spec (pools, history, counters).
pub(super) const OPERATION_RECORD_OVERHEAD: usize = 64 * 1024;

/// Decodes one API call, checks the caller may make it, runs it against the core, and
/// encodes the response.
pub(super) fn dispatch(
    core: &mut SchedulerCore,
    driver: &Driver,
    caller: &Caller,
    method: &str,
    payload: &[u8],
    then: &mut Option<Continuation>,
) -> Vec<u8> {
    let now = unix_now();
    let max_record = driver.max_record_bytes;
    match method {
        // Only files its caller may read (SPEC 5.17): the store's catalog says which.
        api::StartOperation::METHOD => respond::<api::StartOperation>(payload, |req| {
            driver.files.check_spec(caller, &req.body.spec)?;
            start_operation(core, caller, req.body, payload.len(), max_record, now)
        }),
        // Metadata is everyone's; environment values and stdin only their owners'.
        api::GetOperation::METHOD => respond::<api::GetOperation>(payload, |req| {
            let info = core.reads().operation_info(&req.body.operation_id)?;
            Ok(visible_to(core, caller, info))
        }),
        // Like metadata, everyone's: it names pools and operations, not their contents.
        api::ExplainOperation::METHOD => respond::<api::ExplainOperation>(payload, |req| {
            core.reads().explain_operation(&req.body.operation_id)
        }),
        api::ExplainPool::METHOD => respond::<api::ExplainPool>(payload, |req| {
            core.reads().explain_pool(
                req.body.pool_tree.as_ref().map(TreeName::as_str),
                req.body.pool.as_str(),
            )
        }),
        api::ListOperations::METHOD => {
            respond::<api::ListOperations>(payload, |req| list_operations(core, req.body, then))
        }
        api::ListJobs::METHOD => respond::<api::ListJobs>(payload, |req| {
            match core.reads().list_jobs_page(&req.body)?.into_held() {
                Ok((held, next)) => Ok(fitting_job_page(held, next, MAX_PAGE_BYTES)),
                Err(plan) => {
                    // Settled attempts are read from the store outside the core lock.
                    *then = Some(Continuation::JobPage(plan));
                    Ok(api::JobPage::default())
                }
            }
        }),
        api::GetJobOutput::METHOD => respond::<api::GetJobOutput>(payload, |req| {
            core.reads().authorize_operation(
                caller,
                &req.body.operation_id,
                "read the job output of",
            )?;
            if let Some(held) = core
                .reads()
                .job_output_ready(&req.body.operation_id, &req.body.job_id)?
            {
                return Ok(held.stream(req.body.stream).to_string());
            }
            // The output itself is in the store: read outside the core lock.
            *then = Some(Continuation::JobOutput {
                job: req.body.job_id,
                stream: req.body.stream,
            });
            Ok(String::new())
        }),
        api::ListNodes::METHOD => {
            respond::<api::ListNodes>(payload, |_| Ok(core.reads().list_nodes()))
        }
        _ => dispatch_control(core, caller, method, payload, max_record, now),
    }
}

/// The calls that change an operation after its start: each needs the caller to control
/// it (its owner, its spec's `owners`, an admin).
fn dispatch_control(
    core: &mut SchedulerCore,
    caller: &Caller,
    method: &str,
    payload: &[u8],
    max_record: usize,
    now: ytsched_common::protocol::UnixMillis,
) -> Vec<u8> {
    match method {
        api::AbortOperation::METHOD => respond::<api::AbortOperation>(payload, |req| {
            core.reads()
                .authorize_operation(caller, &req.body.operation_id, "abort")?;
            core.abort_operation(&req.body.operation_id, now)
        }),
        api::CompleteOperation::METHOD => respond::<api::CompleteOperation>(payload, |req| {
            let id = &req.body.operation_id;
            core.reads().authorize_operation(caller, id, "complete")?;
            core.complete_operation(id, now)
        }),
        api::AbortJob::METHOD => respond::<api::AbortJob>(payload, |req| {
            let id = &req.body.operation_id;
            core.reads()
                .authorize_operation(caller, id, "abort a job of")?;
            core.abort_job(id, &req.body.job_id, now)
        }),
        // The same people as abort; a move also needs `use` on the new pool.
        api::UpdateOperationParameters::METHOD => {
            respond::<api::UpdateOperationParameters>(payload, |req| {
                let id = &req.body.operation_id;
                core.reads()
                    .authorize_operation(caller, id, "update the parameters of")?;
                core.update_operation_parameters(id, Some(caller), &req.body.parameters, now)
            })
        }
        api::SuspendOperation::METHOD => respond::<api::SuspendOperation>(payload, |req| {
            let id = &req.body.operation_id;
            core.reads().authorize_operation(caller, id, "suspend")?;
            core.suspend_operation(id, req.body.abort_running_jobs, now)
        }),
        api::ResumeOperation::METHOD => respond::<api::ResumeOperation>(payload, |req| {
            let id = &req.body.operation_id;
            core.reads().authorize_operation(caller, id, "resume")?;
            core.resume_operation(id, now)
        }),
        _ => dispatch_admin(core, caller, method, payload, max_record, now),
    }
}

/// `start_operation`: the spec is bounded by what one stored record may hold.
fn start_operation(
    core: &mut SchedulerCore,
    caller: &Caller,
    body: api::StartOperation,
    payload_len: usize,
    max_record: usize,
    now: ytsched_common::protocol::UnixMillis,
) -> Result<OperationId, ApiError> {
    let spec_limit = max_record.saturating_sub(OPERATION_RECORD_OVERHEAD);
    if payload_len > spec_limit {
        return Err(ApiError::limit_reached(format!(
            "spec: {payload_len} bytes is more than the limit of {spec_limit} (the store's record limit less room for the operation's state)"
        )));
    }
    // The id is always the scheduler's: no request can name an existing, archived,
    // retired or damaged record.
    core.start_operation_as(
        OperationId::random(),
        caller,
        body.spec,
        body.idempotency_token,
        now,
    )
}

/// `list_operations`: a page from memory, then (past what memory holds) from the
/// archive, read outside the core lock.
fn list_operations(
    core: &SchedulerCore,
    body: api::ListOperations,
    then: &mut Option<Continuation>,
) -> Result<api::OperationPage, ApiError> {
    let limit = crate::core::page_limit(body.limit)?;
    let page = match archive_cursor(&body.cursor)? {
        // Past every operation in memory: only the archive has more.
        Some(before) => {
            *then = Some(Continuation::ListArchive {
                page: api::OperationPage::default(),
                filter: body.filter,
                before,
                room: limit,
            });
            return Ok(api::OperationPage::default());
        }
        // Brief entries, bounded in bytes by the core (no environment or stdin in them
        // to redact).
        None => core.reads().list_operations_page(&body)?,
    };
    let room = limit.saturating_sub(page.operations.len());
    match (&page.next_cursor, room) {
        (Some(_), _) => Ok(page),
        // Memory filled the page exactly: the next one starts in the archive.
        (None, 0) => Ok(api::OperationPage {
            next_cursor: Some("a".into()),
            ..page
        }),
        (None, room) => {
            *then = Some(Continuation::ListArchive {
                page,
                filter: body.filter,
                before: None,
                room,
            });
            Ok(api::OperationPage::default())
        }
    }
}

/// The administrative calls (Cypress-like paths over the configuration), and the
/// answer to a method nobody knows.
fn dispatch_admin(
    core: &mut SchedulerCore,
    caller: &Caller,
    method: &str,
    payload: &[u8],
    max_record: usize,
    now: ytsched_common::protocol::UnixMillis,
) -> Vec<u8> {
    match method {
        api::AdminGet::METHOD => respond::<api::AdminGet>(payload, |req| {
            core.reads()
                .admin_get(&req.body.path)
                .map(|v| v.to_string())
        }),
        api::AdminList::METHOD => {
            respond::<api::AdminList>(payload, |req| core.reads().admin_list(&req.body.path))
        }
        api::AdminExists::METHOD => {
            respond::<api::AdminExists>(payload, |req| core.reads().admin_exists(&req.body.path))
        }
        api::AdminSet::METHOD => respond::<api::AdminSet>(payload, |req| {
            crate::service::admin_changes::apply(
                core,
                caller,
                api::AdminChange::Set(req.body),
                max_record,
            )
        }),
        api::AdminRemove::METHOD => respond::<api::AdminRemove>(payload, |req| {
            crate::service::admin_changes::apply(
                core,
                caller,
                api::AdminChange::Remove(req.body),
                max_record,
            )
        }),
        api::AdminCreate::METHOD => respond::<api::AdminCreate>(payload, |req| {
            crate::service::admin_changes::apply(
                core,
                caller,
                api::AdminChange::Create(req.body),
                max_record,
            )
        }),
        api::ApproveNode::METHOD => respond::<api::ApproveNode>(payload, |req| {
            if !caller.admin {
                return Err(ApiError::permission_denied(format!(
                    "access denied: user '{}' may not approve nodes: only admins may",
                    caller.user
                )));
            }
            core.approve_node(&req.body.node_id, req.body.max_resources)
        }),
        // The same checks and the same code as the change itself, on a copy.
        api::AdminWhatIf::METHOD => respond::<api::AdminWhatIf>(payload, |req| {
            core.what_if(now, |copy| {
                crate::service::admin_changes::apply(copy, caller, req.body.change, max_record)
            })
        }),
        other => {
            warn!(method = other, "unknown API method");
            encode(&ApiResponse::<()> {
                protocol_version: PROTOCOL_VERSION,
                result: Err(ApiError::not_found(format!("unknown API method '{other}'"))),
            })
            .unwrap_or_default()
        }
    }
}

/// Whether a `get_operation`, `list_jobs` or `get_job_output` request names an
/// operation the core no longer holds (it was retired to the archive).
pub(super) fn names_archived_operation(core: &SchedulerCore, method: &str, payload: &[u8]) -> bool {
    let id = || -> Option<OperationId> {
        Some(match method {
            api::GetOperation::METHOD => {
                decode::<ApiRequest<api::GetOperation>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            api::ExplainOperation::METHOD => {
                decode::<ApiRequest<api::ExplainOperation>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            api::ListJobs::METHOD => {
                decode::<ApiRequest<api::ListJobs>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            api::GetJobOutput::METHOD => {
                decode::<ApiRequest<api::GetJobOutput>>(payload)
                    .ok()?
                    .body
                    .operation_id
            }
            _ => return None,
        })
    };
    id().is_some_and(|id| {
        core.reads()
            .operation(&id)
            .is_err_and(|e| e.kind == api::ErrorKind::NotFound)
    })
}

/// A `list_operations` cursor into the archive: `a` (from its newest) or `a<sequence>`
/// (below that list-stream sequence); `None` for a cursor into the operations in memory.
pub(super) fn archive_cursor(cursor: &Option<String>) -> Result<Option<Option<u64>>, ApiError> {
    let Some(rest) = cursor.as_deref().and_then(|c| c.strip_prefix('a')) else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Ok(Some(None));
    }
    rest.parse::<u64>().map(|s| Some(Some(s))).map_err(|_| {
        let shown = ytsched_common::quote::quote(rest, ytsched_common::quote::QUOTE_CHARS);
        ApiError::new(format!("cursor 'a{shown}' is not one this scheduler gave"))
    })
}

/// What an API answer still needs from the store or the archive once the core has
/// decided it: read outside the core lock.
pub(super) enum Continuation {
    /// A finished job of a live operation the caller may read: its output is in the
    /// store, where its result put it.
    JobOutput {
        job: ytsched_common::JobId,
        stream: api::OutputStream,
    },
    /// A `list-jobs` page naming attempts the core let go of: their records are read
    /// from the store.
    JobPage(JobPagePlan),
    /// `list_operations` lists the operations in memory first, then goes on into the
    /// archive, most recently archived first: `room` more go on `page` from below
    /// list-stream sequence `before` (from the newest if `None`).
    ListArchive {
        page: api::OperationPage,
        filter: api::OperationFilter,
        before: Option<u64>,
        room: usize,
    },
}

impl Continuation {
    pub(super) async fn answer(self, driver: &Driver, caller: &Caller) -> Vec<u8> {
        match self {
            Continuation::JobOutput { job, stream } => {
                // Written with the job's result, perhaps still on its way to the store.
                driver.writer.barrier().wait().await;
                encode_reply(match store::job_output(&driver.state, &job).await {
                    Ok(output) => Ok(output
                        .map(|o| o.stream(stream).to_string())
                        .unwrap_or_default()),
                    Err(e) => Err(ApiError::of(
                        api::ErrorKind::Unavailable,
                        format!("the output of job {job} cannot be read: {e}"),
                    )),
                })
            }
            Continuation::JobPage(plan) => encode_reply(
                read_job_page(&driver.state, &driver.writer, plan, MAX_PAGE_BYTES).await,
            ),
            Continuation::ListArchive {
                mut page,
                filter,
                before,
                room,
            } => {
                let used = encode(&page).map_or(MAX_PAGE_BYTES, |b| b.len());
                let budget = MAX_PAGE_BYTES.saturating_sub(used).max(1);
                let archived = match driver
                    .archive
                    .list_page(&filter, before, room, budget)
                    .await
                {
                    Ok(a) => a,
                    Err(e) => return encode_reply::<()>(Err(e)),
                };
                page.operations
                    .extend(archived.operations.into_iter().map(|info| {
                        if controls_operation_of(caller, &info.user, &info.spec.owners) {
                            info
                        } else {
                            info.redacted()
                        }
                    }));
                page.next_cursor = archived.next_before.map(|s| format!("a{s}"));
                encode_reply(Ok(page))
            }
        }
    }
}

/// Answers a read of an operation the core no longer holds from the archive, with the
/// same access rules as for a live one.
pub(super) async fn answer_from_archive(
    archive: &Archive,
    caller: &Caller,
    method: &str,
    payload: &[u8],
) -> Vec<u8> {
    async fn find(archive: &Archive, id: &OperationId) -> Result<ArchivedOperation, ApiError> {
        archive
            .operation(id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no such operation: {id}")))
    }
    match method {
        api::GetOperation::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::GetOperation>>(payload) else {
                return encode_reply::<()>(Err(ApiError::new("malformed get_operation request")));
            };
            encode_reply(find(archive, &req.body.operation_id).await.map(|a| {
                if controls_operation_of(caller, &a.info.user, &a.info.spec.owners) {
                    a.info
                } else {
                    a.info.redacted()
                }
            }))
        }
        api::ExplainOperation::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::ExplainOperation>>(payload) else {
                return encode_reply::<()>(Err(ApiError::new(
                    "malformed explain_operation request",
                )));
            };
            encode_reply(find(archive, &req.body.operation_id).await.map(|a| {
                ytsched_common::explain::Explanation::ended(
                    a.info.id,
                    a.info.state,
                    a.info.error,
                    unix_now(),
                )
            }))
        }
        api::ListJobs::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::ListJobs>>(payload) else {
                return encode_reply::<()>(Err(ApiError::new("malformed list_jobs request")));
            };
            encode_reply(
                async {
                    let a = find(archive, &req.body.operation_id).await?;
                    archive.job_page(&a, &req.body).await
                }
                .await,
            )
        }
        api::GetJobOutput::METHOD => {
            let Ok(req) = decode::<ApiRequest<api::GetJobOutput>>(payload) else {
                return encode_reply::<()>(Err(ApiError::new("malformed get_job_output request")));
            };
            let b = req.body;
            encode_reply(
                async {
                    let a = find(archive, &b.operation_id).await?;
                    let owners = &a.info.spec.owners;
                    let action = "read the job output of";
                    authorize_operation_of(caller, &b.operation_id, &a.info.user, owners, action)?;
                    archive.job_output(&a, &b.job_id, b.stream).await
                }
                .await,
            )
        }
        other => encode_reply::<()>(Err(ApiError::not_found(format!(
            "unknown API method '{other}'"
        )))),
    }
}

pub(super) fn visible_to(
    core: &SchedulerCore,
    caller: &Caller,
    info: api::OperationInfo,
) -> api::OperationInfo {
    if core.reads().may_see_secrets_of(caller, &info.id) {
        info
    } else {
        info.redacted()
    }
}

/// An API request as a call decodes it: its protocol checked, a malformed one refused
/// naming the method.
pub(crate) fn decode_request<M: ApiMethod>(payload: &[u8]) -> Result<ApiRequest<M>, ApiError> {
    match decode::<ApiRequest<M>>(payload) {
        Ok(req) if req.protocol_version != PROTOCOL_VERSION => Err(ApiError::new(format!(
            "protocol version {} is not supported (scheduler speaks {PROTOCOL_VERSION})",
            req.protocol_version
        ))),
        Ok(req) => Ok(req),
        Err(e) => {
            warn!(method = M::METHOD, error = %e, "malformed API request");
            Err(ApiError::new(format!(
                "malformed {} request: {e}",
                M::METHOD
            )))
        }
    }
}

/// An API call's answer, encoded for the wire.
pub(crate) fn encode_reply<T: serde::Serialize>(result: Result<T, ApiError>) -> Vec<u8> {
    encode(&ApiResponse {
        protocol_version: PROTOCOL_VERSION,
        result,
    })
    .unwrap_or_default()
}

pub(super) fn respond<M: ApiMethod>(
    payload: &[u8],
    handle: impl FnOnce(ApiRequest<M>) -> Result<M::Response, ApiError>,
) -> Vec<u8> {
    encode_reply(decode_request::<M>(payload).and_then(handle))
}
