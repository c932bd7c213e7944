//! The scheduler's HTTP face (SPEC 6.4, `--http ADDR`): a read-only web UI (pool trees,
//! operations, nodes; built into the binary, no CDN), the JSON it polls under `/api/`,
//! and Prometheus text at `/metrics`. Every answer is read from the core under its lock (job attempts
//! the core let go of, from the state bucket after it); nothing here changes state.

use crate::core::SchedulerCore;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use ytsched_common::api::{ApiError, JobPage, ListJobs};
use ytsched_common::OperationId;

type Core = Arc<Mutex<SchedulerCore>>;

/// What the HTTP face reads: the core, and the state bucket for settled job attempts.
#[derive(Clone)]
pub struct Face {
    pub core: Core,
    pub state: async_nats::jetstream::kv::Store,
    /// Requests turned away on the bus, for `/metrics`.
    pub refusals: std::sync::Arc<crate::refusals::Refusals>,
}

/// Most bytes of one JSON page of jobs.
const MAX_JOB_PAGE_BYTES: usize = 4 << 20;

pub fn router(face: Face) -> Router {
    Router::new()
        .route("/", get(shell))
        .route("/pools", get(shell))
        .route("/operations", get(shell))
        .route("/nodes", get(shell))
        .route("/operations/{id}", get(shell))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/api/operations", get(api_operations))
        .route("/api/operations/{id}", get(api_operation))
        .route("/api/operations/{id}/jobs", get(api_jobs))
        .route("/api/operations/{id}/explain", get(api_explain))
        .route("/api/operations/{id}/history", get(api_history))
        .route("/api/nodes", get(api_nodes))
        .route("/api/orchid", get(api_orchid))
        .route("/metrics", get(metrics))
        .with_state(face)
}

/// Serves until the listener fails; logs where it listens.
pub async fn serve(listener: tokio::net::TcpListener, face: Face) -> anyhow::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "HTTP listening");
    axum::serve(listener, router(face)).await?;
    Ok(())
}

fn lock(core: &Core) -> std::sync::MutexGuard<'_, SchedulerCore> {
    core.lock().expect("core lock")
}

/// A core error as an HTTP answer: its kind decides the status.
fn error_response(e: ytsched_common::api::ApiError) -> Response {
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

// Nobody is authenticated here: operations show without their secrets (environment
// values, stdin), and job output is never served.

async fn api_operations(State(Face { core, .. }): State<Face>) -> Response {
    let ops: Vec<_> = lock(&core)
        .list_operations()
        .into_iter()
        .map(|o| o.redacted())
        .collect();
    Json(ops).into_response()
}

async fn api_operation(State(Face { core, .. }): State<Face>, Path(id): Path<String>) -> Response {
    match lock(&core).operation_info(&OperationId(id)) {
        Ok(info) => Json(info.redacted()).into_response(),
        Err(e) => error_response(e),
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
    Query(q): Query<JobsQuery>,
) -> Response {
    let req = ListJobs {
        operation_id: OperationId(id),
        limit: q.limit,
        cursor: q.cursor,
        state: q.state,
    };
    match job_page(&face, &req).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => error_response(e),
    }
}

async fn job_page(face: &Face, req: &ListJobs) -> Result<JobPage, ApiError> {
    let plan = lock(&face.core).list_jobs_page(req)?;
    crate::job_pages::read_job_page(&face.state, plan, MAX_JOB_PAGE_BYTES).await
}

async fn api_nodes(State(Face { core, .. }): State<Face>) -> Response {
    Json(lock(&core).list_nodes()).into_response()
}

async fn api_orchid(State(Face { core, .. }): State<Face>) -> Response {
    Json(lock(&core).orchid()).into_response()
}

/// Prometheus text exposition: node, operation and job counts, and per pool its shares.
async fn metrics(State(Face { core, refusals, .. }): State<Face>) -> Response {
    let (nodes, operations, orchid) = {
        let c = lock(&core);
        (c.list_nodes(), c.list_operations(), c.orchid())
    };
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
    if let Some(trees) = orchid["scheduler"]["pool_trees"].as_object() {
        for (tree, t) in trees {
            for (pool, p) in t["pools"].as_object().into_iter().flatten() {
                for kind in ["fair_share_ratio", "usage_ratio", "demand_ratio"] {
                    if let Some(v) = p[kind].as_f64() {
                        let _ = writeln!(
                            out,
                            "ytsched_pool_ratio{{tree=\"{}\",pool=\"{}\",kind=\"{kind}\"}} {v}",
                            label(tree),
                            label(pool)
                        );
                    }
                }
            }
        }
    }
    out.push_str("# HELP ytsched_refused_requests_total Requests on the bus dropped or turned away before the core, by reason.\n# TYPE ytsched_refused_requests_total counter\n");
    for (reason, n) in refusals.all() {
        let _ = writeln!(
            out,
            "ytsched_refused_requests_total{{reason=\"{reason}\"}} {n}"
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
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
async fn api_explain(State(Face { core, .. }): State<Face>, Path(id): Path<String>) -> Response {
    match lock(&core).explain_operation(&OperationId(id)) {
        Ok(why) => {
            let text = why.text();
            let mut v = serde_json::to_value(&why).unwrap_or(Value::Null);
            if let Some(m) = v.as_object_mut() {
                m.insert("text".into(), Value::String(text));
            }
            Json(v).into_response()
        }
        Err(e) => error_response(e),
    }
}

async fn api_history(State(Face { core, .. }): State<Face>, Path(id): Path<String>) -> Response {
    Json(lock(&core).share_history(&OperationId(id))).into_response()
}
