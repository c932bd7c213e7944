//! The NATS adapter around the core: heartbeats and API calls in, replies and nudges
//! out, a clock tick for housekeeping. Malformed messages are logged and answered with
//! an error; they never reach the core.

use crate::core::{CoreConfig, CoreEvent, SchedulerCore};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};
use ytsched_common::api::{self, ApiError, ApiMethod, ApiRequest, ApiResponse};
use ytsched_common::codec::{decode, encode};
use ytsched_common::protocol::{HeartbeatReply, HeartbeatRequest, UnixMillis, PROTOCOL_VERSION};
use ytsched_common::subjects::Subjects;
use ytsched_common::OperationId;

pub struct ServiceConfig {
    /// Comma-separated NATS server URLs (a NATS cluster is several).
    pub nats_urls: String,
    pub subject_prefix: String,
    pub core: CoreConfig,
    /// How often housekeeping (silent nodes, unplaceable operations) runs.
    pub tick_period: Duration,
}

type SharedCore = Arc<Mutex<SchedulerCore>>;

pub fn unix_now() -> UnixMillis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub async fn run(config: ServiceConfig) -> anyhow::Result<()> {
    let client =
        ytsched_common::transport::connect(&config.nats_urls, "ytsched-scheduler", true).await?;
    let subjects = Subjects::new(&config.subject_prefix);
    let core: SharedCore = Arc::new(Mutex::new(SchedulerCore::new(config.core.clone())));

    let heartbeats = client.subscribe(subjects.heartbeat_wildcard()).await?;
    let api_calls = client.subscribe(subjects.api_wildcard()).await?;
    client.flush().await?;
    info!(nats = %config.nats_urls, prefix = %config.subject_prefix, "scheduler is serving");

    let hb = tokio::spawn(serve_heartbeats(
        client.clone(),
        subjects.clone(),
        core.clone(),
        heartbeats,
    ));
    let apis = tokio::spawn(serve_api(
        client.clone(),
        subjects.clone(),
        core.clone(),
        api_calls,
    ));
    let ticks = tokio::spawn(tick(
        client.clone(),
        subjects.clone(),
        core.clone(),
        config.tick_period,
    ));
    tokio::select! {
        r = hb => r?,
        r = apis => r?,
        r = ticks => r?,
    }
    Ok(())
}

async fn serve_heartbeats(
    client: async_nats::Client,
    subjects: Subjects,
    core: SharedCore,
    mut sub: async_nats::Subscriber,
) {
    while let Some(msg) = sub.next().await {
        let Some(reply_to) = msg.reply.clone() else {
            warn!(subject = %msg.subject, "heartbeat without a reply subject ignored");
            continue;
        };
        let period = core.lock().expect("core lock").config().heartbeat_period_ms;
        let reply = match decode::<HeartbeatRequest>(&msg.payload) {
            Ok(req) if !msg.subject.as_str().ends_with(&format!(".{}", req.node_id)) => {
                warn!(subject = %msg.subject, node = %req.node_id, "heartbeat node id does not match its subject");
                HeartbeatReply::rejected(
                    format!(
                        "node id '{}' does not match subject '{}'",
                        req.node_id, msg.subject
                    ),
                    period,
                )
            }
            Ok(req) => {
                let (reply, nudges, events) = {
                    let mut core = core.lock().expect("core lock");
                    let reply = core.process_heartbeat(req, unix_now());
                    (reply, core.take_nudges(), core.take_events())
                };
                log_events(&events);
                send_nudges(&client, &subjects, nudges).await;
                reply
            }
            Err(e) => {
                warn!(subject = %msg.subject, error = %e, "malformed heartbeat");
                HeartbeatReply::rejected(format!("malformed heartbeat: {e}"), period)
            }
        };
        match encode(&reply) {
            Ok(bytes) => {
                if let Err(e) = client.publish(reply_to, bytes.into()).await {
                    warn!(error = %e, "cannot send heartbeat reply");
                }
            }
            Err(e) => warn!(error = %e, "cannot encode heartbeat reply"),
        }
    }
}

async fn serve_api(
    client: async_nats::Client,
    subjects: Subjects,
    core: SharedCore,
    mut sub: async_nats::Subscriber,
) {
    while let Some(msg) = sub.next().await {
        let Some(reply_to) = msg.reply.clone() else {
            continue;
        };
        let method = subjects
            .api_method(msg.subject.as_str())
            .unwrap_or("")
            .to_string();
        let (bytes, nudges, events) = {
            let mut core = core.lock().expect("core lock");
            let bytes = dispatch(&mut core, &method, &msg.payload);
            (bytes, core.take_nudges(), core.take_events())
        };
        log_events(&events);
        send_nudges(&client, &subjects, nudges).await;
        if let Err(e) = client.publish(reply_to, bytes.into()).await {
            warn!(error = %e, "cannot send API reply");
        }
    }
}

/// Decodes one API call, runs it against the core, and encodes the response.
fn dispatch(core: &mut SchedulerCore, method: &str, payload: &[u8]) -> Vec<u8> {
    let now = unix_now();
    match method {
        api::StartOperation::METHOD => respond::<api::StartOperation>(payload, |req| {
            core.start_operation(OperationId::random(), &req.user, req.body.spec, now)
        }),
        api::GetOperation::METHOD => {
            respond::<api::GetOperation>(payload, |req| core.operation_info(&req.body.operation_id))
        }
        api::ListOperations::METHOD => {
            respond::<api::ListOperations>(payload, |_| Ok(core.list_operations()))
        }
        api::AbortOperation::METHOD => respond::<api::AbortOperation>(payload, |req| {
            core.abort_operation(&req.body.operation_id, now)
        }),
        api::ListJobs::METHOD => {
            respond::<api::ListJobs>(payload, |req| core.list_jobs(&req.body.operation_id))
        }
        api::GetJobOutput::METHOD => respond::<api::GetJobOutput>(payload, |req| {
            core.job_output(&req.body.operation_id, &req.body.job_id, req.body.stream)
        }),
        api::ListNodes::METHOD => respond::<api::ListNodes>(payload, |_| Ok(core.list_nodes())),
        other => {
            warn!(method = other, "unknown API method");
            encode(&ApiResponse::<()> {
                protocol_version: PROTOCOL_VERSION,
                result: Err(ApiError::new(format!("unknown API method '{other}'"))),
            })
            .unwrap_or_default()
        }
    }
}

fn respond<M: ApiMethod>(
    payload: &[u8],
    handle: impl FnOnce(ApiRequest<M>) -> Result<M::Response, ApiError>,
) -> Vec<u8> {
    let result = match decode::<ApiRequest<M>>(payload) {
        Ok(req) if req.protocol_version != PROTOCOL_VERSION => Err(ApiError::new(format!(
            "protocol version {} is not supported (scheduler speaks {PROTOCOL_VERSION})",
            req.protocol_version
        ))),
        Ok(req) => handle(req),
        Err(e) => {
            warn!(method = M::METHOD, error = %e, "malformed API request");
            Err(ApiError::new(format!(
                "malformed {} request: {e}",
                M::METHOD
            )))
        }
    };
    encode(&ApiResponse {
        protocol_version: PROTOCOL_VERSION,
        result,
    })
    .unwrap_or_default()
}

async fn tick(client: async_nats::Client, subjects: Subjects, core: SharedCore, period: Duration) {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let (nudges, events) = {
            let mut core = core.lock().expect("core lock");
            core.tick(unix_now());
            (core.take_nudges(), core.take_events())
        };
        log_events(&events);
        send_nudges(&client, &subjects, nudges).await;
    }
}

async fn send_nudges(
    client: &async_nats::Client,
    subjects: &Subjects,
    nodes: Vec<ytsched_common::NodeId>,
) {
    for node in nodes {
        if let Err(e) = client
            .publish(subjects.nudge(&node), bytes::Bytes::new())
            .await
        {
            debug!(node = %node, error = %e, "cannot nudge node");
        }
    }
}

fn log_events(events: &[CoreEvent]) {
    for e in events {
        match e {
            CoreEvent::NodeRegistered { id, tree } => info!(node = %id, tree, "node registered"),
            CoreEvent::NodeRestarted { id } => {
                info!(node = %id, "node restarted (new incarnation)")
            }
            CoreEvent::NodeOffline { id, lost_jobs } => {
                warn!(node = %id, lost_jobs, "node is offline: heartbeats stopped")
            }
            CoreEvent::OperationStarted {
                id,
                user,
                pool,
                jobs,
            } => {
                info!(operation = %id, user, pool, jobs, "operation started")
            }
            CoreEvent::OperationFinished { id, state, error } => {
                info!(operation = %id, state = %state, error = error.as_deref().unwrap_or(""), "operation finished")
            }
            CoreEvent::JobStarted {
                id,
                operation,
                node,
            } => {
                debug!(job = %id, operation = %operation, node = %node, "job started")
            }
            CoreEvent::JobFinished {
                id,
                operation,
                node,
                state,
                error,
            } => {
                debug!(job = %id, operation = %operation, node = %node, state, error = error.as_deref().unwrap_or(""), "job finished")
            }
            CoreEvent::JobAborted {
                id,
                operation,
                node,
                reason,
            } => {
                info!(job = %id, operation = %operation, node = %node, reason = %reason, "job aborted")
            }
        }
    }
}
