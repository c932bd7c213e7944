//! The scheduler's event log (SPEC 5.16): what happened to which operation, job and
//! node, and when — kept in the `<prefix>_events` stream after the scheduler's state has
//! been archived and forgotten, so that "who used how much" and "why did my jobs wait"
//! can still be answered. The schema is `docs/events.md`; a change to it bumps
//! `EVENT_SCHEMA_VERSION`.
//!
//! An event is named once by `(epoch, seq)`: `epoch` is the leader's (the revision of the
//! state's epoch key it claimed), `seq` counts that leader's events from 1. Within an
//! epoch the log has no gap: events are numbered as they are queued and stored in order,
//! so a leader that dies leaves a prefix of its events.

use crate::ids::{JobId, NodeId, OperationId};
use crate::pool_tree::ClusterConfig;
use crate::protocol::UnixMillis;
use crate::resources::ResourceVector;
use crate::spec::VanillaSpec;
use crate::states::{AbortReason, JobState, OperationState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// 2: `configuration.configuration` is the configuration itself, not JSON text (version
/// 1 logs are still read).
pub const EVENT_SCHEMA_VERSION: u32 = 2;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub version: u32,
    pub epoch: u64,
    pub seq: u64,
    /// When the scheduler made the change (unix ms).
    pub at: UnixMillis,
    pub event: Event,
}

/// The operation an event concerns, with what filters and usage group by, so that each
/// event can be read without the operation (which may be long archived and expired).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperationRef {
    pub id: OperationId,
    pub user: String,
    /// Its pool in each pool tree it runs in.
    pub pools: BTreeMap<String, String>,
}

/// One attempt, as the scheduler last knew it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRef {
    pub id: JobId,
    pub node: NodeId,
    /// The pool tree of the node it ran on.
    pub tree: String,
    pub resources: ResourceVector,
    pub start_time: UnixMillis,
    /// Its task and job index in the operation: which job of the spec it is an attempt
    /// of, so a replay gives each job its own observed run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_index: Option<u32>,
}

/// What happened. Never carries a spec's environment or stdin (SPEC 5.11: everyone may
/// read operation metadata, not its secrets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Admitted: it runs, or waits for a running-operation slot (`pending`).
    OperationStarted {
        operation: OperationRef,
        title: Option<String>,
        jobs: u64,
        pending: bool,
        /// Its spec as a replay needs it: pools, weight, limits, tasks with job counts
        /// and resources. Environment and stdin are left out, and each command is cut
        /// to `SUMMARY_COMMAND_BYTES`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<Box<VanillaSpec>>,
    },
    /// A pending operation got its slot.
    OperationRunning {
        operation: OperationRef,
    },
    OperationParametersUpdated {
        operation: OperationRef,
        parameters: String,
    },
    OperationSuspended {
        operation: OperationRef,
        aborted_jobs: u64,
    },
    OperationResumed {
        operation: OperationRef,
    },
    OperationFinished {
        operation: OperationRef,
        state: OperationState,
        error: Option<String>,
    },
    JobStarted {
        operation: OperationRef,
        job: JobRef,
    },
    /// Its node fetches its files or unpacks its layers before it runs (SPEC 5.17).
    JobPreparing {
        operation: OperationRef,
        job: JobRef,
    },
    /// A revived scheduler took over an attempt a node reported running.
    JobAdopted {
        operation: OperationRef,
        job: JobRef,
    },
    /// Gracefully preempted: told to stop, it runs until it exits or its time is up.
    JobInterrupted {
        operation: OperationRef,
        job: JobRef,
        /// The starving operation it makes room for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preempted_by: Option<OperationId>,
    },
    JobFinished {
        operation: OperationRef,
        job: JobRef,
        state: JobState,
        finish_time: UnixMillis,
        error: Option<String>,
        /// Bytes its node fetched from the file store for it (SPEC 5.17).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes_fetched: Option<u64>,
    },
    /// Taken away (preempted, lost with its node, aborted...): it waits again.
    JobAborted {
        operation: OperationRef,
        job: JobRef,
        reason: AbortReason,
        finish_time: UnixMillis,
        /// For `preempted` at once: the starving operation it made room for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preempted_by: Option<OperationId>,
    },
    NodeRegistered {
        node: NodeId,
        registration: String,
        /// What the node offers, and its agent-set and detected tags: a replay rebuilds
        /// the cluster from them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resources: Option<ResourceVector>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tags: Vec<String>,
    },
    NodeMembership {
        node: NodeId,
        registration: String,
    },
    NodeRestarted {
        node: NodeId,
    },
    NodeOffline {
        node: NodeId,
        lost_jobs: u64,
    },
    NodeMaintenance {
        node: NodeId,
        maintenance: String,
    },
    PoolRemoved {
        tree: String,
        pool: String,
    },
    /// An admin or delegate changed the configuration: the value at `path` before and
    /// after, as JSON text (absent: none).
    AdminChanged {
        who: String,
        path: String,
        old: Option<String>,
        new: Option<String>,
    },
    /// Each pool's shares in a tree, about once a minute.
    PoolShares {
        tree: String,
        pools: Vec<PoolShares>,
    },
    /// The whole pool configuration (trees, pools, node tags and maintenance), as the
    /// store keeps it: told when a leader starts, after each admin change and once an
    /// hour, so that a window of the log can be replayed on its own.
    Configuration {
        #[serde(deserialize_with = "configuration_of_any_version")]
        configuration: Box<ClusterConfig>,
        /// The period the scheduler asks nodes to heartbeat at.
        heartbeat_period_ms: u64,
        /// How often `pool_shares` are told.
        pool_sample_period_ms: u64,
        /// The nodes online, grouped by what they offer: a window of the log that
        /// starts after they registered still knows the cluster.
        #[serde(default)]
        nodes: Vec<NodeGroup>,
    },
}

/// Nodes that offer the same resources and carry the same tags.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeGroup {
    pub resources: ResourceVector,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub ids: Vec<NodeId>,
}

/// Bytes of each task's command an `operation_started` keeps.
pub const SUMMARY_COMMAND_BYTES: usize = 256;

/// A spec as the event log and list pages keep it (`operation_started.spec`, a
/// `list_operations` entry): no environment, no stdin (SPEC 5.11), commands cut short.
/// Made without copying what it leaves out, so a brief of a large spec costs little.
pub fn spec_summary(spec: &VanillaSpec) -> VanillaSpec {
    let mut s = spec.clone_without_tasks();
    for (name, t) in spec.tasks.iter() {
        let mut end = t.command.len().min(SUMMARY_COMMAND_BYTES);
        while !t.command.is_char_boundary(end) {
            end -= 1;
        }
        let task = crate::spec::TaskSpec {
            command: t.command[..end].to_string(),
            environment: Default::default(),
            stdin: None,
            job_count: t.job_count,
            cpu_limit: t.cpu_limit,
            memory_limit: t.memory_limit,
            gpu_limit: t.gpu_limit,
            job_speculation_timeout: t.job_speculation_timeout,
            disk_request: t.disk_request,
            interruption_signal: t.interruption_signal,
            restart_exit_code: t.restart_exit_code,
            // Which files a job gets is its owner's to know (SPEC 5.17).
            file_paths: Vec::new(),
            layer_paths: Vec::new(),
        };
        s.tasks.insert(name.clone(), task);
    }
    s
}

/// One pool's fair share, usage and demand as fractions of its tree, at their largest
/// resource (as the orchid's `*_ratio`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolShares {
    pub pool: String,
    pub fair_share_ratio: f64,
    pub usage_ratio: f64,
    pub demand_ratio: f64,
}

impl Event {
    pub fn operation(&self) -> Option<&OperationRef> {
        match self {
            Event::OperationStarted { operation, .. }
            | Event::OperationRunning { operation }
            | Event::OperationParametersUpdated { operation, .. }
            | Event::OperationSuspended { operation, .. }
            | Event::OperationResumed { operation }
            | Event::OperationFinished { operation, .. }
            | Event::JobStarted { operation, .. }
            | Event::JobAdopted { operation, .. }
            | Event::JobPreparing { operation, .. }
            | Event::JobInterrupted { operation, .. }
            | Event::JobFinished { operation, .. }
            | Event::JobAborted { operation, .. } => Some(operation),
            Event::NodeRegistered { .. }
            | Event::NodeMembership { .. }
            | Event::NodeRestarted { .. }
            | Event::NodeOffline { .. }
            | Event::NodeMaintenance { .. }
            | Event::PoolRemoved { .. }
            | Event::AdminChanged { .. }
            | Event::PoolShares { .. }
            | Event::Configuration { .. } => None,
        }
    }

    /// The pool trees and pools it concerns.
    fn pools(&self) -> Vec<(&str, &str)> {
        match (self.operation(), self) {
            (Some(op), _) => op
                .pools
                .iter()
                .map(|(t, p)| (t.as_str(), p.as_str()))
                .collect(),
            (None, Event::PoolRemoved { tree, pool }) => vec![(tree.as_str(), pool.as_str())],
            (None, Event::PoolShares { tree, pools }) => pools
                .iter()
                .map(|p| (tree.as_str(), p.pool.as_str()))
                .collect(),
            (None, _) => vec![],
        }
    }
}

/// Which events to read; every condition given must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventFilter {
    /// At or after (unix ms).
    #[serde(default)]
    pub since: Option<UnixMillis>,
    /// Before (unix ms).
    #[serde(default)]
    pub until: Option<UnixMillis>,
    #[serde(default)]
    pub operation: Option<OperationId>,
    /// The pool, in any tree (an event about no operation or pool has none).
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

impl EventFilter {
    pub fn admits(&self, r: &EventRecord) -> bool {
        let op = r.event.operation();
        self.since.is_none_or(|t| r.at >= t)
            && self.until.is_none_or(|t| r.at < t)
            && self
                .operation
                .as_ref()
                .is_none_or(|id| op.is_some_and(|o| &o.id == id))
            && self.user.as_deref().is_none_or(|u| {
                op.is_some_and(|o| o.user == u)
                    || matches!(&r.event, Event::AdminChanged { who, .. } if who == u)
            })
            && self
                .pool
                .as_deref()
                .is_none_or(|p| r.event.pools().iter().any(|(_, pool)| *pool == p))
    }
}

/// What the stream holds per message: the events of one write round of the scheduler's
/// store (or a part of one that fits a message), stored whole or not at all, so the log
/// never has a hole inside a round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventBatch {
    pub events: Vec<EventRecord>,
}

/// An `EventBatch` message made of records already encoded one by one (`encode` of an
/// `EventRecord`): the scheduler encodes each event once, when it is queued, and cuts
/// messages by their sizes without encoding anything again.
pub fn batch_message(records: &[&[u8]]) -> Vec<u8> {
    let body: usize = records.iter().map(|r| r.len()).sum();
    let mut out = Vec::with_capacity(body + 16);
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_map_len(&mut out, 1);
    let _ = rmp::encode::write_str(&mut out, "events");
    let _ = rmp::encode::write_array_len(&mut out, records.len() as u32);
    for r in records {
        out.extend_from_slice(r);
    }
    out
}

/// Bytes a message adds around its records (`batch_message`), at most.
pub const BATCH_ENVELOPE_BYTES: usize = 16;

/// A configuration as version 2 writes it (the value), or as version 1 did (its JSON
/// text): a log kept across an upgrade replays whole.
fn configuration_of_any_version<'de, D>(d: D) -> Result<Box<ClusterConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Value(Box<ClusterConfig>),
        Text(String),
    }
    match Either::deserialize(d)? {
        Either::Value(c) => Ok(c),
        Either::Text(t) => serde_json::from_str(&t).map_err(|e| {
            serde::de::Error::custom(format!("configuration: not a pool configuration ({e})"))
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    /// An operation of `user` in `pool` of tree `physical`.
    pub(crate) fn op(id: &str, user: &str, pool: &str) -> OperationRef {
        OperationRef {
            id: OperationId(id.into()),
            user: user.into(),
            pools: [("physical".to_string(), pool.to_string())].into(),
        }
    }

    fn record(seq: u64, at: UnixMillis, event: Event) -> EventRecord {
        EventRecord {
            version: EVENT_SCHEMA_VERSION,
            epoch: 7,
            seq,
            at,
            event,
        }
    }

    fn finished(seq: u64, at: UnixMillis, o: OperationRef) -> EventRecord {
        let job = JobRef {
            id: JobId(format!("{}-0-0", o.id).into()),
            node: NodeId("n1".into()),
            tree: "physical".into(),
            resources: ResourceVector::new(1.0, 1024.0, 0.0, 1.0),
            start_time: at - 10,
            task: Some("main".into()),
            job_index: Some(0),
        };
        record(
            seq,
            at,
            Event::JobFinished {
                operation: o,
                job,
                state: JobState::Completed,
                finish_time: at,
                error: None,
                bytes_fetched: None,
            },
        )
    }

    #[test]
    fn a_batch_reads_back_as_written_in_msgpack_and_json() {
        let batch = EventBatch {
            events: vec![
                record(
                    1,
                    100,
                    Event::OperationStarted {
                        operation: op("a", "alice", "research"),
                        title: Some("t".into()),
                        jobs: 3,
                        pending: false,
                        spec: None,
                    },
                ),
                finished(2, 200, op("a", "alice", "research")),
                record(
                    3,
                    300,
                    Event::NodeOffline {
                        node: NodeId("n1".into()),
                        lost_jobs: 2,
                    },
                ),
            ],
        };
        let back: EventBatch = decode(&encode(&batch).unwrap()).unwrap();
        assert_eq!(back, batch);
        let json = serde_json::to_string(&batch.events[1]).unwrap();
        assert!(json.contains(r#""type":"job_finished""#), "{json}");
        let again: EventRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(again, batch.events[1]);
    }

    #[test]
    fn a_message_of_records_encoded_one_by_one_reads_as_a_batch() {
        for n in [0usize, 1, 15, 16, 70_000] {
            let records: Vec<EventRecord> = (0..n as u64)
                .map(|i| finished(i + 1, 1_000 + i, op("a", "alice", "research")))
                .collect();
            let encoded: Vec<Vec<u8>> = records.iter().map(|r| encode(r).unwrap()).collect();
            let parts: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
            let back: EventBatch = decode(&batch_message(&parts)).unwrap();
            assert_eq!(back.events, records, "{n} records");
        }
    }

    #[test]
    fn the_filter_takes_every_condition_given() {
        let a = finished(1, 1_000, op("a", "alice", "research"));
        let b = finished(2, 2_000, op("b", "bob", "prod"));
        let node = record(
            3,
            3_000,
            Event::NodeRestarted {
                node: NodeId("n".into()),
            },
        );
        let all = EventFilter::default();
        assert!(all.admits(&a) && all.admits(&b) && all.admits(&node));
        let by_user = EventFilter {
            user: Some("bob".into()),
            ..Default::default()
        };
        assert!(!by_user.admits(&a) && by_user.admits(&b) && !by_user.admits(&node));
        let by_pool = EventFilter {
            pool: Some("research".into()),
            ..Default::default()
        };
        assert!(by_pool.admits(&a) && !by_pool.admits(&b));
        let by_op = EventFilter {
            operation: Some(OperationId("b".into())),
            ..Default::default()
        };
        assert!(!by_op.admits(&a) && by_op.admits(&b));
        let window = EventFilter {
            since: Some(1_500),
            until: Some(3_000),
            ..Default::default()
        };
        assert!(!window.admits(&a) && window.admits(&b) && !window.admits(&node));
    }
}
