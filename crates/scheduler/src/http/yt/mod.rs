//! YTsaurus's HTTP API on the scheduler's HTTP face, so that YTsaurus's own client (the
//! `yt` command line and `yt.wrapper`, from PyPI's `ytsaurus-client`) runs, watches and
//! manages vanilla operations and administers pools with `YT_PROXY` and `YT_TOKEN`
//! pointed at ytsched.
//!
//! Discovery (`/api`, `/api/v4`, `/hosts`) holds no data and needs no token. Every
//! command needs a web token (`Authorization: OAuth TOKEN` or `Bearer TOKEN`) and runs
//! as its user through the scheduler's own API (`ApiPort`): the same admission, rate
//! limits, budgets and access rules as a call on the bus, so YTsaurus's client can do
//! exactly what the user could do with `ytsched`. A command that changes state is never
//! taken from a GET.

mod commands;
mod counters;
mod cypress;
mod error;
mod file_paths;
mod files;
mod jobs;
mod mutations;
mod operation_view;
mod operations;
mod spec;
mod wire;
mod yson_value;

pub use error::YtError;

use crate::http::access::HttpAccess;
use crate::http::face::Face;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use bytes::Bytes;
use error::code;
use serde_json::json;
use wire::{Output, YtCall};
use ytsched_common::api::{ApiError, ApiMethod};
use ytsched_common::identity::Caller;

/// What one command runs with: the face, and the user its token names.
pub struct Ctx<'a> {
    pub face: &'a Face,
    pub caller: Caller,
    /// Writes of files in progress, and the transactions around them.
    pub files: &'a files::Staging,
}

impl Ctx<'_> {
    /// The scheduler's API method `M`, as this command's user.
    pub async fn call<M: ApiMethod>(&self, body: M) -> Result<M::Response, ApiError> {
        self.face.api.call(&self.caller, body).await
    }
}

#[derive(Clone)]
struct YtFace {
    face: Face,
    access: HttpAccess,
    mutations: mutations::Mutations,
    files: std::sync::Arc<files::Staging>,
}

/// The YTsaurus routes, ready to merge into the face's router.
pub fn router(face: Face, access: HttpAccess) -> Router {
    Router::new()
        .route("/api", get(|| async { axum::Json(json!(["v4"])) }))
        .route("/api/v4", get(|| async { axum::Json(commands::listing()) }))
        .route(
            "/api/v4/",
            get(|| async { axum::Json(commands::listing()) }),
        )
        .route("/hosts", get(hosts))
        .route("/hosts/all", get(hosts))
        .route("/auth/whoami", any(whoami))
        .route(
            "/api/v4/{command}",
            // A write's pieces are 2 MB as the client sends them, compressed or not.
            any(command).layer(axum::extract::DefaultBodyLimit::max(WRITE_PIECE_LIMIT)),
        )
        .with_state(YtFace {
            face,
            access,
            mutations: Default::default(),
            files: Default::default(),
        })
}

/// The largest body one command may carry: a `write_file` piece, with room to spare.
const WRITE_PIECE_LIMIT: usize = 8 << 20;

/// This face's own address, as the client reached it: the one proxy there is.
fn own_address(headers: &HeaderMap) -> Result<String, YtError> {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.len() <= 255
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .map(str::to_string)
        .ok_or_else(|| {
            YtError::new(
                code::GENERIC,
                "the request has no valid Host header to name this proxy by",
            )
        })
}

async fn hosts(headers: HeaderMap) -> Response {
    match own_address(&headers) {
        Ok(a) => axum::Json(json!([a])).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The user a request's token names; a face without tokens knows no one.
fn caller_of(access: &HttpAccess, headers: &HeaderMap) -> Result<Caller, YtError> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    match access.reader(authorization) {
        Ok(crate::http::access::Reader(Some(caller))) => Ok(caller),
        Ok(crate::http::access::Reader(None)) => Err(YtError::new(
            code::AUTHENTICATION,
            "this HTTP face authenticates no one (the scheduler runs without --creds or --http-tokens): YTsaurus commands need a user; see docs/yt-compat.md",
        )),
        Err(why) => Err(YtError::new(code::AUTHENTICATION, format!("authentication failed: {why}"))),
    }
}

async fn whoami(State(yt): State<YtFace>, headers: HeaderMap) -> Response {
    match caller_of(&yt.access, &headers) {
        Ok(c) => axum::Json(json!({"login": c.user.as_str(), "realm": "token"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn command(
    State(yt): State<YtFace>,
    method: Method,
    uri: Uri,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(descriptor) = commands::find(&name) else {
        yt.face.yt_counts.count("unknown", code::NO_SUCH_METHOD);
        return YtError::unsupported_command(&ytsched_common::quote::quote(
            &name,
            ytsched_common::quote::QUOTE_CHARS,
        ))
        .into_response();
    };
    let caller = match caller_of(&yt.access, &headers) {
        Ok(c) => c,
        Err(e) => {
            yt.face.yt_counts.count(descriptor.name, e.code);
            return e.into_response();
        }
    };
    let call = match wire::read_call(descriptor, &method, &uri, &headers, body) {
        Ok(call) => call,
        Err(e) => {
            yt.face.yt_counts.count(descriptor.name, e.code);
            return e.into_response();
        }
    };
    let ctx = Ctx {
        face: &yt.face,
        caller,
        files: &yt.files,
    };
    let output = run_once(&yt.mutations, &ctx, &call, &headers).await;
    let code = output.as_ref().map_or_else(|e| e.code, |_| 0);
    yt.face.yt_counts.count(descriptor.name, code);
    tracing::debug!(command = descriptor.name, user = %ctx.caller.user, code, "YTsaurus command answered");
    wire::answer(&call, &headers, output)
}

/// Runs a command; a retried mutation answers what its first try did.
async fn run_once(
    mutations: &mutations::Mutations,
    ctx: &Ctx<'_>,
    call: &YtCall,
    headers: &HeaderMap,
) -> Result<Output, YtError> {
    let user = ctx.caller.user.as_str();
    let name = call.command.name;
    // A start's mutation id is its operation's idempotency token, kept by the core.
    let mutation = wire::optional_string(call, "mutation_id")?
        .filter(|_| call.command.volatile && name != "start_operation");
    if let Some(id) = mutation {
        if wire::bool_param(call, "retry")? {
            if let Some(first) = mutations.answered(user, name, id) {
                return Ok(first);
            }
        }
    }
    let output = run(ctx, call, headers).await?;
    if let Some(id) = mutation {
        mutations.keep(user, name, id, &output);
    }
    Ok(output)
}

async fn run(ctx: &Ctx<'_>, call: &YtCall, headers: &HeaderMap) -> Result<Output, YtError> {
    if !call.command.served {
        return Err(YtError::unsupported_command(call.command.name));
    }
    match call.command.name {
        "get_current_user" => Ok(Output::Structured(
            json!({"user": ctx.caller.user.as_str(), "admin": ctx.caller.admin}),
        )),
        "discover_proxies" => Ok(Output::Structured(
            json!({"proxies": [own_address(headers)?]}),
        )),
        "start_operation" => operations::start_operation(ctx, call).await,
        "get_operation" => operations::get_operation(ctx, call).await,
        "list_operations" => operations::list_operations(ctx, call).await,
        "abort_operation"
        | "complete_operation"
        | "suspend_operation"
        | "resume_operation"
        | "update_operation_parameters" => operations::control(ctx, call).await,
        "list_jobs" => jobs::list_jobs(ctx, call).await,
        "get_job" => jobs::get_job(ctx, call).await,
        "get_job_stderr" => jobs::get_job_stderr(ctx, call).await,
        "abort_job" => jobs::abort_job(ctx, call).await,
        "get" => cypress::get(ctx, call).await,
        "list" => cypress::list(ctx, call).await,
        "set" => cypress::set(ctx, call).await,
        "exists" | "create" | "remove" => node_command(ctx, call).await,
        other => file_command(ctx, call, headers)
            .await
            .unwrap_or_else(|| Err(YtError::unsupported_command(other))),
    }
}

/// `exists`, `create` and `remove`: of a user's file path (`files`), or of ytsched's own
/// nodes (`cypress`).
async fn node_command(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = wire::optional_string(call, "path")?
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    let files = files::is_file_path(&path);
    match call.command.name {
        "exists" if files => file_paths::exists(ctx, &path).await,
        "create" if files => file_paths::create(ctx, call, &path).await,
        "remove" if files => file_paths::remove(ctx, call, &path).await,
        "exists" => cypress::exists(ctx, call).await,
        "create" => cypress::create(ctx, call).await,
        _ => cypress::remove(ctx, call).await,
    }
}

/// The file and transaction commands; None for any other.
async fn file_command(
    ctx: &Ctx<'_>,
    call: &YtCall,
    headers: &HeaderMap,
) -> Option<Result<Output, YtError>> {
    Some(match call.command.name {
        "write_file" => file_paths::write_file(ctx, call, headers).await,
        "get_file_from_cache" => file_paths::get_from_cache(ctx, call).await,
        "put_file_to_cache" => file_paths::put_to_cache(ctx, call).await,
        "start_transaction" => files::start_tx(ctx, call).await,
        "ping_transaction" => files::ping_tx(ctx, call).await,
        "commit_transaction" => files::end_tx(ctx, call, true).await,
        "abort_transaction" => files::end_tx(ctx, call, false).await,
        _ => return None,
    })
}
