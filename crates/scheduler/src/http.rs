//! The scheduler's HTTP face (SPEC 6.4, `--http ADDR`): a read-only web page of
//! operations, pool trees and nodes, the same data as JSON under `/api/`, and Prometheus
//! text at `/metrics`. Every answer is read from the core under its lock (job attempts
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
}

/// Most bytes of one JSON page of jobs.
const MAX_JOB_PAGE_BYTES: usize = 4 << 20;

/// Job attempts shown on an operation's page (JSON pages on past them).
const JOBS_ON_PAGE: u32 = 100;

pub fn router(face: Face) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/operations/{id}", get(operation_page))
        .route("/api/operations", get(api_operations))
        .route("/api/operations/{id}", get(api_operation))
        .route("/api/operations/{id}/jobs", get(api_jobs))
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
async fn metrics(State(Face { core, .. }): State<Face>) -> Response {
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
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ratio(v: &Value) -> String {
    v.as_f64().map(|x| format!("{x:.3}")).unwrap_or_default()
}

const STYLE: &str = "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#eee}</style>";

async fn index(State(Face { core, .. }): State<Face>) -> Html<String> {
    let (nodes, operations, orchid) = {
        let c = lock(&core);
        (c.list_nodes(), c.list_operations(), c.orchid())
    };
    let mut h = format!("<!doctype html><title>ytsched</title>{STYLE}<h1>ytsched</h1>");
    h.push_str("<h2>Operations</h2><table><tr><th>id</th><th>user</th><th>pool</th><th>state</th><th>weight</th><th>jobs (running/completed/total)</th><th>usage</th><th>fair share</th><th>demand</th><th>dominant</th><th>starvation</th></tr>");
    let ops = &orchid["scheduler"]["operations"];
    for o in operations.iter().rev() {
        let id = o.id.to_string();
        let orch = &ops[id.as_str()];
        let _ = write!(
            h,
            "<tr><td><a href=\"/operations/{id}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&o.user),
            escape(&o.pool),
            o.state,
            o.weight,
            o.jobs.running,
            o.jobs.completed,
            o.jobs.total,
            ratio(&orch["usage_ratio"]),
            ratio(&orch["fair_share_ratio"]),
            ratio(&orch["demand_ratio"]),
            escape(orch["dominant_resource"].as_str().unwrap_or("")),
            escape(orch["starvation_status"].as_str().unwrap_or("")),
        );
    }
    h.push_str("</table><h2>Pool trees</h2>");
    if let Some(trees) = orchid["scheduler"]["pool_trees"].as_object() {
        for (tree, t) in trees {
            let _ = write!(
                h,
                "<h3>{}</h3><table><tr><th>pool</th><th>parent</th><th>mode</th><th>weight</th><th>fair share</th><th>usage</th><th>demand</th><th>operations</th></tr>",
                escape(tree)
            );
            for (pool, p) in t["pools"].as_object().into_iter().flatten() {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    escape(pool),
                    escape(p["parent"].as_str().unwrap_or("")),
                    escape(p["mode"].as_str().unwrap_or("")),
                    p["weight"],
                    ratio(&p["fair_share_ratio"]),
                    ratio(&p["usage_ratio"]),
                    ratio(&p["demand_ratio"]),
                    p["operation_count"],
                );
            }
            h.push_str("</table>");
        }
    }
    h.push_str("<h2>Nodes</h2><table><tr><th>node</th><th>state</th><th>tree</th><th>tags</th><th>resources</th><th>usage</th><th>jobs</th></tr>");
    for n in &nodes {
        let tags: Vec<&String> = n
            .system_tags
            .iter()
            .chain(&n.tags)
            .chain(&n.user_tags)
            .collect();
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(n.id.as_str()),
            n.state,
            n.error.as_deref().map(|e| format!(" ({})", escape(e))).unwrap_or_default(),
            escape(n.tree.as_deref().unwrap_or("")),
            escape(&tags.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(" ")),
            n.resource_limits,
            n.resource_usage,
            n.running_job_count,
        );
    }
    h.push_str("</table><p>JSON: <a href=\"/api/operations\">/api/operations</a> · <a href=\"/api/nodes\">/api/nodes</a> · <a href=\"/api/orchid\">/api/orchid</a> · <a href=\"/metrics\">/metrics</a></p>");
    Html(h)
}

async fn operation_page(State(face): State<Face>, Path(id): Path<String>) -> Response {
    let op = OperationId(id.clone());
    let info = match lock(&face.core).operation_info(&op) {
        Ok(i) => i,
        Err(e) => return error_response(e),
    };
    let req = ListJobs {
        operation_id: op,
        limit: Some(JOBS_ON_PAGE),
        cursor: None,
        state: None,
    };
    let (jobs, more) = match job_page(&face, &req).await {
        Ok(p) => (p.jobs, p.next_cursor.is_some()),
        Err(e) => return error_response(e),
    };
    let id = escape(&id);
    let mut h = format!(
        "<!doctype html><title>{id}</title>{STYLE}<p><a href=\"/\">ytsched</a></p><h1>Operation {id}</h1><table>"
    );
    for (k, v) in [
        ("user", escape(&info.user)),
        ("pool", escape(&info.pool)),
        ("state", info.state.to_string()),
        ("error", escape(info.error.as_deref().unwrap_or(""))),
        ("usage", info.resource_usage.to_string()),
        ("demand", info.resource_demand.to_string()),
    ] {
        let _ = write!(h, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    h.push_str("</table><h2>History</h2><ul>");
    for e in &info.history {
        let _ = write!(h, "<li>{} {}</li>", e.time, escape(&e.event));
    }
    h.push_str("</ul><h2>Jobs</h2><table><tr><th>job</th><th>task</th><th>index</th><th>state</th><th>node</th><th>wall time</th><th>user cpu</th><th>peak memory</th><th>error</th></tr>");
    for j in &jobs {
        let s = j.statistics.as_ref();
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(j.id.as_str()),
            escape(&j.task_name),
            j.job_index,
            j.state,
            j.abort_reason.map(|r| format!(" ({r})")).unwrap_or_default(),
            escape(j.node_id.as_ref().map(|n| n.as_str()).unwrap_or("")),
            s.map(|s| format!("{:.3}s", s.wall_time_ms as f64 / 1000.0)).unwrap_or_default(),
            s.and_then(|s| s.user_cpu_seconds).map(|v| format!("{v:.2}s")).unwrap_or_default(),
            s.and_then(|s| s.peak_memory_bytes).map(|v| v.to_string()).unwrap_or_default(),
            escape(j.error.as_deref().unwrap_or("")),
        );
    }
    h.push_str("</table>");
    if more {
        let _ = write!(
            h,
            "<p>The first {JOBS_ON_PAGE} attempts; all of them: <a href=\"/api/operations/{id}/jobs\">/api/operations/{id}/jobs</a> (paged by <code>cursor</code>).</p>"
        );
    }
    Html(h).into_response()
}
