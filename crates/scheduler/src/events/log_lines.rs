//! One log line per state change the core reports (`CoreEvent`), at the level it
//! deserves: the service's log, kept apart from the bus adapter.

use crate::core::CoreEvent;
use tracing::{debug, error, info, warn};
use ytsched_common::protocol::Registration;

pub fn log_events(events: &[CoreEvent]) {
    for e in events {
        // Every kind named here, so that a new one cannot go unlogged.
        match e {
            CoreEvent::NodeRegistered { .. }
            | CoreEvent::NodeMembership { .. }
            | CoreEvent::RevivalEnded { .. }
            | CoreEvent::StartsResumed { .. }
            | CoreEvent::NodeMaintenance { .. }
            | CoreEvent::NodeRestarted { .. }
            | CoreEvent::NodeOverApproval { .. }
            | CoreEvent::NodeOffline { .. } => log_node_event(e),
            // For the event log only: a line a minute per tree would say nothing new.
            CoreEvent::PoolShares { .. } | CoreEvent::Configuration => {}
            CoreEvent::AdminChanged { who, path, .. } => {
                info!(who = %who, path = %path, "configuration changed")
            }
            CoreEvent::OperationStarted { .. }
            | CoreEvent::OperationPending { .. }
            | CoreEvent::OperationRunning { .. }
            | CoreEvent::PoolRemoved { .. }
            | CoreEvent::OperationParametersUpdated { .. }
            | CoreEvent::OperationSuspended { .. }
            | CoreEvent::OperationResumed { .. }
            | CoreEvent::OperationFinished { .. } => log_operation_event(e),
            CoreEvent::JobStarted { .. }
            | CoreEvent::JobAdopted { .. }
            | CoreEvent::JobPreparing { .. }
            | CoreEvent::JobInterrupted { .. }
            | CoreEvent::JobFinished { .. }
            | CoreEvent::JobAborted { .. } => log_job_event(e),
        }
    }
}

fn log_node_event(e: &CoreEvent) {
    match e {
        CoreEvent::NodeRegistered { id, registration } => {
            info!(node = %id, %registration, "node registered")
        }
        CoreEvent::NodeMembership { id, registration } => match registration {
            Registration::Refused { .. } => {
                warn!(node = %id, %registration, "node membership changed")
            }
            _ => info!(node = %id, %registration, "node membership changed"),
        },
        CoreEvent::RevivalEnded {
            lost_jobs,
            silent_nodes,
        } => info!(
            lost_jobs,
            silent_nodes, "revival done: jobs no node reported will run again"
        ),
        CoreEvent::StartsResumed { adopted_jobs } => info!(
            adopted_jobs,
            "nodes have reported what they run; jobs start again"
        ),
        CoreEvent::NodeMaintenance { id, maintenance } => {
            info!(node = %id, maintenance = %maintenance.summary(), "node maintenance changed")
        }
        CoreEvent::NodeRestarted { id } => {
            info!(node = %id, "node restarted (new incarnation)")
        }
        CoreEvent::NodeOverApproval {
            id,
            alert: Some(alert),
        } => error!(node = %id, "ALERT: {alert}"),
        CoreEvent::NodeOverApproval { id, alert: None } => {
            info!(node = %id, "node reports within its approval again")
        }
        CoreEvent::NodeOffline { id, lost_jobs } => {
            warn!(node = %id, lost_jobs, "node is offline: heartbeats stopped")
        }
        _ => {}
    }
}

fn log_operation_event(e: &CoreEvent) {
    match e {
        CoreEvent::OperationStarted {
            id,
            user,
            pool,
            jobs,
        } => {
            info!(operation = %id, user, pool = %pool, jobs, "operation started")
        }
        CoreEvent::OperationPending { id } => {
            info!(operation = %id, "operation pending: its pool is at max_running_operation_count")
        }
        CoreEvent::OperationRunning { id } => {
            info!(operation = %id, "pending operation started")
        }
        CoreEvent::PoolRemoved { tree, pool } => {
            info!(tree = %tree, pool = %pool, "ephemeral pool removed: its last operation ended")
        }
        CoreEvent::OperationParametersUpdated { id, parameters } => {
            info!(operation = %id, parameters = %parameters, "operation parameters updated")
        }
        CoreEvent::OperationSuspended { id, aborted_jobs } => {
            info!(operation = %id, aborted_jobs, "operation suspended: no new jobs until it is resumed")
        }
        CoreEvent::OperationResumed { id } => {
            info!(operation = %id, "operation resumed")
        }
        CoreEvent::OperationFinished { id, state, error } => {
            info!(operation = %id, state = %state, error = error.as_deref().unwrap_or(""), "operation finished")
        }
        _ => {}
    }
}

fn log_job_event(e: &CoreEvent) {
    match e {
        CoreEvent::JobStarted {
            id,
            operation,
            node,
            ..
        } => {
            debug!(job = %id, operation = %operation, node = %node, "job started")
        }
        CoreEvent::JobInterrupted {
            id,
            operation,
            node,
            ..
        } => {
            info!(job = %id, operation = %operation, node = %node, "job preempted gracefully: sent its interruption signal, it runs until it exits")
        }
        CoreEvent::JobPreparing {
            id,
            operation,
            node,
            ..
        } => {
            info!(job = %id, operation = %operation, node = %node, "job preparing: its node fetches its files and layers")
        }
        CoreEvent::JobAdopted {
            id,
            operation,
            node,
            ..
        } => {
            info!(job = %id, operation = %operation, node = %node, "job adopted: its node runs it though its start was never stored")
        }
        CoreEvent::JobFinished {
            id,
            operation,
            node,
            state,
            error,
            ..
        } => {
            debug!(job = %id, operation = %operation, node = %node, state, error = error.as_deref().unwrap_or(""), "job finished")
        }
        CoreEvent::JobAborted {
            id,
            operation,
            node,
            reason,
            ..
        } => {
            info!(job = %id, operation = %operation, node = %node, reason = %reason, "job aborted")
        }
        _ => {}
    }
}
