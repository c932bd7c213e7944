//! The scheduler's HTTP face (SPEC 6.4, `--http ADDR`): a read-only web UI (pool trees,
//! operations, nodes; built into the binary, no CDN), the JSON it polls under `/api/`,
//! and Prometheus text at `/metrics`. Every `/api/` and `/metrics` request needs a web
//! token where the bus authenticates (`http_access`), and is answered with the rights
//! its user has on the bus. Answers come from a published snapshot or a bounded queue
//! to the core (`web_view`), never from the core lock; every list is paged; nothing
//! here changes state.

pub mod access;
pub mod face;
pub mod listener;
pub mod report_slots;
pub mod tls;
pub mod usage_report;
pub mod web_view;
pub mod yt;
pub mod yt_counts;

pub use face::Face;

use crate::gates::refusals::Refusal;
use crate::http::access::{HttpAccess, Reader};
use crate::http::web_view::{Query, ViewBusy};
use axum::extract::{Path, Query as UrlQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::Value;
use std::fmt::Write as _;
use ytsched_common::api::{ApiError, JobPage, ListJobs, OperationInfo};
use ytsched_common::OperationId;

/// Most bytes of one JSON page (jobs, operations, nodes).
const MAX_PAGE_BYTES: usize = 4 << 20;
/// Operations per page unless asked otherwise, and the most a page holds.
const DEFAULT_OPERATIONS: usize = 100;
const MAX_OPERATIONS: usize = 1000;
/// Nodes per page unless asked otherwise, and the most a page holds.
const DEFAULT_NODES: usize = 1000;
const MAX_NODES: usize = 5000;

pub fn router(face: Face, access: HttpAccess) -> Router {
    let data = Router::new()
        .route("/api/operations", get(api_operations))
        .route("/api/operations/{id}", get(api_operation))
        .route("/api/operations/{id}/jobs", get(api_jobs))
        .route("/api/operations/{id}/explain", get(api_explain))
        .route("/api/operations/{id}/history", get(api_history))
        .route("/api/nodes", get(api_nodes))
        .route("/api/orchid", get(api_orchid))
        .route("/api/usage", get(api_usage))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            access.clone(),
            crate::http::access::require_reader,
        ));
    let yt = crate::http::yt::router(face.clone(), access);
    // The page and its assets hold no data: they load without a token and ask for one.
    Router::new()
        .route("/", get(shell))
        .route("/pools", get(shell))
        .route("/operations", get(shell))
        .route("/nodes", get(shell))
        .route("/usage", get(shell))
        .route("/operations/{id}", get(shell))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .merge(data)
        .with_state(face)
        .merge(yt)
}

/// A core error as an HTTP answer: its kind decides the status.
fn error_response(e: ApiError) -> Response {
    use ytsched_common::api::ErrorKind;
    let status = match e.kind {
        ErrorKind::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::LimitReached => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, e.message).into_response()
}

/// "Busy, retry" for a read the core could not take now.
fn busy(face: &Face, why: ViewBusy) -> Response {
    face.refusals.count(Refusal::HttpBusy, || {
        format!("HTTP read not answered: {why:?}")
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        "the scheduler is busy; retry",
    )
        .into_response()
}

/// An operation as `reader` may see it: whole for its owners and admins (as on the
/// bus), its secrets redacted for everyone else and for an unauthenticated face.
fn visible(reader: &Reader, info: OperationInfo) -> OperationInfo {
    match &reader.0 {
        Some(c) if crate::core::controls_operation_of(c, &info.user, &info.spec.owners) => info,
        _ => info.redacted(),
    }
}

/// `limit` and `cursor` of a paged list.
#[derive(serde::Deserialize)]
struct PageQuery {
    limit: Option<usize>,
    cursor: Option<String>,
}

fn page_size(asked: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    match asked {
        None => Ok(default),
        Some(0) => Err(ApiError::new("limit must be at least 1")),
        Some(n) if n > max => Err(ApiError::new(format!(
            "limit {n} is more than the most one page holds, {max}"
        ))),
        Some(n) => Ok(n),
    }
}

/// Items from `items` (already past the cursor) until `limit` or the byte budget;
/// with the cursor of the last one taken when more are left.
fn page_of<T: serde::Serialize>(
    items: impl Iterator<Item = T>,
    limit: usize,
    cursor_of: impl Fn(&T) -> String,
) -> (Vec<Value>, Option<String>) {
    let mut out = vec![];
    let mut bytes = 0;
    let mut last = None;
    let mut items = items.peekable();
    while let Some(item) = items.next() {
        let v = serde_json::to_value(&item).unwrap_or(Value::Null);
        bytes += v.to_string().len();
        if !out.is_empty() && bytes > MAX_PAGE_BYTES {
            return (out, last);
        }
        last = Some(cursor_of(&item));
        out.push(v);
        if out.len() == limit {
            return (out, items.peek().and(last));
        }
    }
    (out, None)
}

/// `/api/operations?limit=&cursor=`: newest first, `{operations, next_cursor}`.
async fn api_operations(
    State(face): State<Face>,
    Extension(reader): Extension<Reader>,
    UrlQuery(q): UrlQuery<PageQuery>,
) -> Response {
    let limit = match page_size(q.limit, DEFAULT_OPERATIONS, MAX_OPERATIONS) {
        Ok(l) => l,
        Err(e) => return error_response(e),
    };
    // The cursor is "<start time>.<id>" of the last one on the previous page, so a page
    // goes on where it stopped even if that operation is gone since.
    let after = match q.cursor.as_deref().map(parse_operation_cursor).transpose() {
        Ok(c) => c,
        Err(e) => return error_response(e),
    };
    let snapshot = face.view.snapshot().await;
    let from = after.map_or(0, |(t, id)| {
        snapshot
            .operations
            .partition_point(|o| (o.start_time, o.id.as_str()) >= (t, id.as_str()))
    });
    let ops = snapshot.operations[from..]
        .iter()
        .map(|o| visible(&reader, o.clone()));
    let (operations, next_cursor) = page_of(ops, limit, |o| format!("{}.{}", o.start_time, o.id));
    Json(serde_json::json!({"operations": operations, "next_cursor": next_cursor})).into_response()
}

/// An operation id from a URL; one that is not a valid id is answered 404 here, quoting a
/// short prefix of it (the core is not asked).
fn checked_id(id: String) -> Result<OperationId, ApiError> {
    OperationId::parse(&id).map_err(|_| {
        ApiError::not_found(format!(
            "no such operation: '{}'",
            ytsched_common::quote::quote(&id, ytsched_common::quote::QUOTE_CHARS)
        ))
    })
}

fn parse_operation_cursor(
    c: &str,
) -> Result<(ytsched_common::protocol::UnixMillis, String), ApiError> {
    c.split_once('.')
        .and_then(|(t, id)| Some((t.parse().ok()?, id.to_string())))
        .ok_or_else(|| {
            ApiError::new(format!(
                "cursor '{}' is not one this scheduler gave",
                ytsched_common::quote::quote(c, ytsched_common::quote::QUOTE_CHARS)
            ))
        })
}

async fn api_operation(
    State(face): State<Face>,
    Extension(reader): Extension<Reader>,
    Path(id): Path<String>,
) -> Response {
    let id = match checked_id(id) {
        Ok(id) => id,
        Err(e) => return error_response(e),
    };
    match face.view.ask(|tx| Query::Operation(id, tx)).await {
        Ok(Ok(info)) => Json(visible(&reader, info)).into_response(),
        Ok(Err(e)) => error_response(e),
        Err(why) => busy(&face, why),
    }
}

/// Query of `/api/operations/{id}/jobs`: as `list-jobs` (`limit`, `cursor`, `state`).
#[derive(serde::Deserialize)]
struct JobsQuery {
    limit: Option<u32>,
    cursor: Option<String>,
    state: Option<ytsched_common::states::JobState>,
}

async fn api_jobs(
    State(face): State<Face>,
    Path(id): Path<String>,
    UrlQuery(q): UrlQuery<JobsQuery>,
) -> Response {
    let id = match checked_id(id) {
        Ok(id) => id,
        Err(e) => return error_response(e),
    };
    let req = ListJobs {
        operation_id: id,
        limit: q.limit,
        cursor: q.cursor,
        state: q.state,
    };
    let plan = match face.view.ask(|tx| Query::JobPage(req, tx)).await {
        Ok(Ok(plan)) => plan,
        Ok(Err(e)) => return error_response(e),
        Err(why) => return busy(&face, why),
    };
    let page: Result<JobPage, ApiError> =
        crate::service::job_pages::read_job_page(&face.state, &face.writer, plan, MAX_PAGE_BYTES)
            .await;
    match page {
        Ok(page) => Json(page).into_response(),
        Err(e) => error_response(e),
    }
}

/// `/api/nodes?limit=&cursor=`: by id, `{nodes, next_cursor}` (the cursor is the last id).
async fn api_nodes(State(face): State<Face>, UrlQuery(q): UrlQuery<PageQuery>) -> Response {
    let limit = match page_size(q.limit, DEFAULT_NODES, MAX_NODES) {
        Ok(l) => l,
        Err(e) => return error_response(e),
    };
    let snapshot = face.view.snapshot().await;
    let from = q.cursor.as_deref().map_or(0, |c| {
        snapshot.nodes.partition_point(|n| n.id.as_str() <= c)
    });
    let (nodes, next_cursor) = page_of(snapshot.nodes[from..].iter(), limit, |n| n.id.to_string());
    Json(serde_json::json!({"nodes": nodes, "next_cursor": next_cursor})).into_response()
}

async fn api_orchid(State(face): State<Face>) -> Response {
    let orchid = face.view.orchid().await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        orchid.json.clone(),
    )
        .into_response()
}

/// Prometheus text exposition: node, operation and job counts, and per pool its shares.
async fn metrics(State(face): State<Face>) -> Response {
    let snapshot = face.view.snapshot().await;
    let (nodes, operations) = (&snapshot.nodes, &snapshot.operations);
    let mut out = String::new();
    out.push_str("# HELP ytsched_nodes Nodes by state.\n# TYPE ytsched_nodes gauge\n");
    for state in ["online", "idle", "refused", "offline"] {
        let n = nodes.iter().filter(|x| x.state == state).count();
        let _ = writeln!(out, "ytsched_nodes{{state=\"{state}\"}} {n}");
    }
    out.push_str(
        "# HELP ytsched_operations Operations by state.\n# TYPE ytsched_operations gauge\n",
    );
    for state in ["pending", "running", "completed", "failed", "aborted"] {
        let n = operations
            .iter()
            .filter(|o| o.state.name() == state)
            .count();
        let _ = writeln!(out, "ytsched_operations{{state=\"{state}\"}} {n}");
    }
    let running: u64 = operations.iter().map(|o| o.jobs.running).sum();
    out.push_str(
        "# HELP ytsched_running_jobs Jobs running now.\n# TYPE ytsched_running_jobs gauge\n",
    );
    let _ = writeln!(out, "ytsched_running_jobs {running}");
    out.push_str("# HELP ytsched_pool_ratio A pool's fair share, usage and demand as a fraction of its tree.\n# TYPE ytsched_pool_ratio gauge\n");
    for (tree, pool, ratios) in &snapshot.pool_ratios {
        for (kind, v) in ["fair_share_ratio", "usage_ratio", "demand_ratio"]
            .iter()
            .zip(ratios)
        {
            let _ = writeln!(
                out,
                "ytsched_pool_ratio{{tree=\"{}\",pool=\"{}\",kind=\"{kind}\"}} {v}",
                label(tree),
                label(pool)
            );
        }
    }
    out.push_str("# HELP ytsched_refused_requests_total Requests dropped or turned away before the core, by reason.\n# TYPE ytsched_refused_requests_total counter\n");
    for (reason, n) in face.refusals.all() {
        let _ = writeln!(
            out,
            "ytsched_refused_requests_total{{reason=\"{reason}\"}} {n}"
        );
    }
    out.push_str("# HELP ytsched_yt_commands_total YTsaurus API commands answered, by command and YTsaurus error code (0: success).\n# TYPE ytsched_yt_commands_total counter\n");
    for (command, code, n) in face.yt_counts.all() {
        let _ = writeln!(
            out,
            "ytsched_yt_commands_total{{command=\"{command}\",code=\"{code}\"}} {n}"
        );
    }
    let events = face.writer.event_counts();
    out.push_str("# HELP ytsched_events_written_total Events stored in the event log.\n# TYPE ytsched_events_written_total counter\n");
    let _ = writeln!(out, "ytsched_events_written_total {}", events.written);
    out.push_str("# HELP ytsched_events_dropped_total Events dropped because too many waited for the store.\n# TYPE ytsched_events_dropped_total counter\n");
    let _ = writeln!(out, "ytsched_events_dropped_total {}", events.dropped);
    out.push_str("# HELP ytsched_event_log_lag Events made and not yet stored in the event log.\n# TYPE ytsched_event_log_lag gauge\n");
    let _ = writeln!(out, "ytsched_event_log_lag {}", events.lag);
    file_metrics(&face, &mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The file store and the nodes' file caches (SPEC 5.17).
fn file_metrics(face: &Face, out: &mut String) {
    let c = face.file_caches.total();
    for (name, help, n) in [
        (
            "hits",
            "Job files and layers nodes found in their cache.",
            c.hits,
        ),
        (
            "misses",
            "Job files nodes fetched from the file store.",
            c.misses,
        ),
        (
            "fetched_bytes",
            "Bytes nodes fetched from the file store.",
            c.bytes_fetched,
        ),
        (
            "corrupt",
            "Cached files found not to match their digest, fetched again.",
            c.corrupt,
        ),
    ] {
        let metric = format!("ytsched_file_cache_{name}_total");
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} counter\n{metric} {n}"
        );
    }
    out.push_str("# HELP ytsched_file_store_files Files in the file store.\n# TYPE ytsched_file_store_files gauge\n");
    let _ = writeln!(out, "ytsched_file_store_files {}", face.files.file_count());
    out.push_str("# HELP ytsched_file_uploaded_bytes_total Bytes received by uploads.\n# TYPE ytsched_file_uploaded_bytes_total counter\n");
    let _ = writeln!(
        out,
        "ytsched_file_uploaded_bytes_total {}",
        face.files.uploaded_bytes()
    );
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

// The UI: one HTML shell for every page (the script picks the view from the path) and
// its two assets, compiled in.
const INDEX_HTML: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const APP_CSS: &str = include_str!("web/app.css");

async fn shell() -> Html<&'static str> {
    Html(INDEX_HTML)
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn app_css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS).into_response()
}

/// `explain` as JSON, with its words (what the CLI prints) as `text`.
async fn api_explain(State(face): State<Face>, Path(id): Path<String>) -> Response {
    let id = match checked_id(id) {
        Ok(id) => id,
        Err(e) => return error_response(e),
    };
    match face.view.ask(|tx| Query::Explain(id, tx)).await {
        Ok(Ok(why)) => {
            let text = why.text();
            let mut v = serde_json::to_value(&why).unwrap_or(Value::Null);
            if let Some(m) = v.as_object_mut() {
                m.insert("text".into(), Value::String(text));
            }
            Json(v).into_response()
        }
        Ok(Err(e)) => error_response(e),
        Err(why) => busy(&face, why),
    }
}

async fn api_history(State(face): State<Face>, Path(id): Path<String>) -> Response {
    let id = match checked_id(id) {
        Ok(id) => id,
        Err(e) => return error_response(e),
    };
    match face.view.ask(|tx| Query::History(id, tx)).await {
        Ok(samples) => Json(samples).into_response(),
        Err(why) => busy(&face, why),
    }
}

#[derive(serde::Deserialize)]
struct UsageParams {
    by: Option<String>,
    /// Unix ms, an RFC 3339 time, or how long ago (`7d`).
    since: Option<String>,
    until: Option<String>,
}

/// A time as the usage page gives it (`common::time_window`).
fn page_time(s: &str, now: u64) -> Result<u64, ApiError> {
    ytsched_common::time_window::parse_time(s, now).map_err(ApiError::new)
}

/// `ytsched usage`'s report for the web UI's usage page (everyone's: it is metadata).
async fn api_usage(
    State(face): State<Face>,
    Extension(reader): Extension<Reader>,
    UrlQuery(q): UrlQuery<UsageParams>,
) -> Response {
    let now = ytsched_common::protocol::unix_now();
    let parsed = (|| {
        let by =
            q.by.as_deref()
                .unwrap_or("pool")
                .parse::<ytsched_common::usage::GroupBy>()
                .map_err(ApiError::new)?;
        let since = page_time(q.since.as_deref().unwrap_or("7d"), now)?;
        let until = q.until.as_deref().map_or(Ok(now), |u| page_time(u, now))?;
        Ok::<_, ApiError>((by, since, until))
    })();
    let (by, since, until) = match parsed {
        Ok(p) => p,
        Err(e) => return error_response(e),
    };
    let who = reader.0.as_ref().map_or("", |c| c.user.as_str());
    let Some(_turn) = face.usage_reports.take(who).await else {
        face.refusals.count(Refusal::HttpBusy, || {
            format!("usage report: user '{who}' has one being made already")
        });
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "2")],
            "your usage report is still being made; one at a time per user, retry when it is done",
        )
            .into_response();
    };
    match crate::http::usage_report::report(&face.event_log, by, since, until).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => error_response(e),
    }
}
