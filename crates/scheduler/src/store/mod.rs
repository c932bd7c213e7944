//! The scheduler's state in NATS JetStream KV (SPEC 5.10): configuration, integral
//! volumes, operations and jobs, one key each, in one bucket per installation.
//!
//! Keys: `config`, `volumes`, `op.<operation id>`, `job.<job id>`. Values are MessagePack
//! with named fields, like the wire. The bucket keeps one revision per key; a revived
//! scheduler reads the latest value of every key with one ordered consumer.

pub mod ack_ledger;
pub mod archive;
pub mod stuck_server;
pub mod write_queue;
pub mod writer;

use crate::core::records::{JobRecord, OperationRecord, StateChange};
use crate::core::JobOutput;
use crate::core::{ClusterConfig, IntegralVolumes};
use anyhow::Context;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::StreamExt;
use ytsched_common::codec::{decode, encode, CodecError};

pub const CONFIG_KEY: &str = "config";
pub const VOLUMES_KEY: &str = "volumes";
/// Moved on by every write round of the leader, and claimed by a new one before it
/// reads the state: fences writes of a deposed leader (see `writer.rs`).
pub const EPOCH_KEY: &str = "epoch";
pub const OPERATION_PREFIX: &str = "op.";
pub const JOB_PREFIX: &str = "job.";
/// A finished job attempt's output tails (`JobOutput`): read on demand, never
/// loaded at revival.
pub const OUTPUT_PREFIX: &str = "out.";
/// `trust.<node>`: what a node without an approval was trusted with (`core::nodes::trust`).
pub const TRUST_PREFIX: &str = "trust.";
const DAMAGED_PREFIX: &str = "damaged.";

/// A bucket name for this installation: its subject prefix, made safe for bucket names.
pub fn bucket_name(prefix: &str, what: &str) -> String {
    ytsched_common::subjects::Subjects::new(prefix).bucket(what)
}

/// Opens (creating if missing) a KV bucket that keeps the latest value of each key.
pub async fn open_bucket(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    max_age: std::time::Duration,
) -> anyhow::Result<kv::Store> {
    while_cluster_forms(&format!("KV bucket {name}"), || async {
        if let Ok(store) = js.get_key_value(name).await {
            return Ok(store);
        }
        let created = js
            .create_key_value(kv::Config {
                bucket: name.to_string(),
                history: 1,
                num_replicas: replicas.max(1),
                max_age,
                ..Default::default()
            })
            .await;
        match created {
            Ok(store) => Ok(store),
            // Another scheduler may have created it at the same moment.
            Err(e) => js.get_key_value(name).await.map_err(|_| e.to_string()),
        }
    })
    .await
}

/// Opens (creating if missing) the event log stream: bounded by age and size, the
/// oldest events going first, with a duplicate window that makes a retried publish of
/// a batch (same message id) a no-op.
pub async fn open_event_log(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
    replicas: usize,
    max_age: std::time::Duration,
    max_bytes: u64,
) -> anyhow::Result<jetstream::stream::Stream> {
    let config = jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        num_replicas: replicas.max(1),
        max_age,
        max_bytes: i64::try_from(max_bytes).unwrap_or(i64::MAX),
        discard: jetstream::stream::DiscardPolicy::Old,
        duplicate_window: std::time::Duration::from_secs(120).min(max_age),
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    };
    while_cluster_forms(&format!("event log stream {name}"), || async {
        js.get_or_create_stream(config.clone())
            .await
            .map_err(|e| e.to_string())
    })
    .await
}

/// Runs `attempt` until it succeeds, while its failure is one a NATS cluster gives as it
/// forms or re-elects its leaders (a server down at start, no meta leader yet): that
/// passes within seconds, so it is waited out (up to `CLUSTER_FORMING_WAIT`), not fatal.
pub async fn while_cluster_forms<T, F, Fut>(what: &str, mut attempt: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = std::time::Instant::now() + CLUSTER_FORMING_WAIT;
    let mut warned = false;
    loop {
        let text = match attempt().await {
            Ok(done) => return Ok(done),
            Err(text) => text,
        };
        let forming = PLACEMENT_NOT_YET.iter().any(|m| text.contains(m));
        if !forming || std::time::Instant::now() >= deadline {
            anyhow::bail!("cannot open {what}: {text}");
        }
        if !warned {
            tracing::warn!(what, error = %text, "the NATS cluster cannot serve this yet; retrying");
            warned = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// How long opening a bucket or stream waits for its cluster to be able to serve it.
const CLUSTER_FORMING_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// JetStream's answers while a cluster cannot place or serve a stream yet (no peers, no
/// meta leader, a leader being elected): async-nats gives them only as text.
const PLACEMENT_NOT_YET: [&str; 4] = [
    "no suitable peers for placement",
    "temporarily unavailable",
    "insufficient resources",
    "timed out",
];

/// Everything the store holds, as a revived scheduler needs it.
#[derive(Default)]
pub struct Snapshot {
    pub config: Option<ClusterConfig>,
    pub volumes: IntegralVolumes,
    pub operations: Vec<OperationRecord>,
    pub jobs: Vec<JobRecord>,
    /// What each node without an approval was trusted with.
    pub trust: Vec<(
        ytsched_common::NodeId,
        crate::core::nodes::trust::TrustRecord,
    )>,
    /// Values that could not be decoded: set aside by the service, never fatal.
    pub damaged: Vec<Damaged>,
    /// The revision of every key read: where this leader's compare-and-set writes start.
    pub revisions: std::collections::HashMap<String, u64>,
}

impl Snapshot {
    /// Decodes one stored value into its place (keys of no known kind are left alone);
    /// returns whether the key may be written again, other than purged (see
    /// `Write::last`): only then is its revision worth keeping.
    fn take(&mut self, key: &str, value: &[u8]) -> Result<bool, CodecError> {
        if key == CONFIG_KEY {
            self.config = Some(decode(value)?);
        } else if key == VOLUMES_KEY {
            self.volumes = decode(value)?;
        } else if key.starts_with(OPERATION_PREFIX) {
            self.operations.push(decode(value)?);
        } else if key.starts_with(JOB_PREFIX) {
            let record: JobRecord = decode(value)?;
            let settled = record.job.settled();
            self.jobs.push(record);
            return Ok(!settled);
        } else if key.starts_with(OUTPUT_PREFIX) {
            return Ok(false);
        } else if let Some(node) = key.strip_prefix(TRUST_PREFIX) {
            if let Ok(node) = ytsched_common::NodeId::parse(node) {
                self.trust.push((node, decode(value)?));
            }
        }
        Ok(true)
    }
}

/// Where the key of start tokens is kept (`core::StartKey`).
pub const START_KEY_KEY: &str = "start_key";

/// The cluster's key for start tokens: read from the state bucket, or made from the
/// operating system's random source and stored by the first leader. Every later leader
/// reads the same one, so a failover adopts what its predecessor started.
pub async fn start_key(store: &kv::Store) -> anyhow::Result<[u8; 32]> {
    for _ in 0..3 {
        if let Some(v) = store
            .get(START_KEY_KEY)
            .await
            .context("cannot read the start token key")?
        {
            return <[u8; 32]>::try_from(v.as_ref()).map_err(|_| {
                anyhow::anyhow!(
                    "the stored '{START_KEY_KEY}' is {} bytes, not 32: the store is damaged",
                    v.len()
                )
            });
        }
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key)
            .map_err(|e| anyhow::anyhow!("no random source for the start token key: {e}"))?;
        // Two leaders at once are fenced elsewhere; whichever stores first wins here.
        if store
            .create(START_KEY_KEY, key.to_vec().into())
            .await
            .is_ok()
        {
            return Ok(key);
        }
    }
    anyhow::bail!("cannot store or read the start token key '{START_KEY_KEY}'")
}

/// A stored value this version cannot read.
pub struct Damaged {
    pub key: String,
    pub value: Bytes,
    pub error: String,
}

/// Where a damaged value is kept for an admin to inspect.
pub fn damaged_key(key: &str) -> String {
    format!("{DAMAGED_PREFIX}{key}")
}

/// How long the state read may go without a message before it is started again.
const LOAD_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads the latest value of every key. A value that cannot be decoded is listed in
/// `damaged` with its key and error; one bad record must not keep the scheduler from
/// starting (its operation is failed, a job's index simply runs again).
pub async fn load(store: &kv::Store) -> anyhow::Result<Snapshot> {
    let mut snapshot = Snapshot::default();
    let messages = store
        .stream
        .clone()
        .info()
        .await
        .context("cannot read the state bucket's info")?
        .state
        .messages;
    if messages == 0 {
        return Ok(snapshot);
    }
    let mut entries = store
        .watch_with_history(">")
        .await
        .context("cannot read the state bucket")?;
    // A stream electing its leader (a NATS server just lost) can leave a fresh consumer
    // silent: a read that stalls fails, and the caller reads again from the start.
    while let Some(entry) = tokio::time::timeout(LOAD_STALL, entries.next())
        .await
        .map_err(|_| anyhow::anyhow!("reading the state bucket stalled for {LOAD_STALL:?}"))?
    {
        let entry = entry.context("cannot read the state bucket")?;
        if entry.operation == kv::Operation::Put {
            let rewritable = snapshot.take(&entry.key, &entry.value);
            if !matches!(rewritable, Ok(false)) {
                snapshot.revisions.insert(entry.key.clone(), entry.revision);
            }
            if let Err(e) = rewritable {
                snapshot.damaged.push(Damaged {
                    key: entry.key.clone(),
                    value: entry.value.clone(),
                    error: e.to_string(),
                });
            }
        }
        if entry.delta == 0 {
            break;
        }
    }
    Ok(snapshot)
}

/// One key to write and its encoded value (empty: purge the key).
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    pub key: String,
    pub value: Bytes,
    /// Nothing but its purge follows this write of the key (a settled job attempt, an
    /// output): the writer need not remember the key's revision, which would otherwise
    /// grow with every job ever run.
    pub last: bool,
}

impl Write {
    fn of(key: String, value: Vec<u8>) -> Self {
        Write {
            key,
            value: value.into(),
            last: false,
        }
    }
}

/// Encodes the core's changes as writes; operations come before jobs.
pub fn writes_of(changes: &[StateChange]) -> Result<Vec<Write>, CodecError> {
    changes
        .iter()
        .map(|c| {
            Ok(match c {
                StateChange::Operation(op) => {
                    Write::of(format!("{OPERATION_PREFIX}{}", op.id), encode(op.as_ref())?)
                }
                StateChange::Job(job) => Write {
                    last: job.job.settled(),
                    ..Write::of(format!("{JOB_PREFIX}{}", job.job.id), encode(job.as_ref())?)
                },
                StateChange::Output(out) => Write {
                    last: true,
                    ..Write::of(format!("{OUTPUT_PREFIX}{}", out.job), encode(out.as_ref())?)
                },
                StateChange::NodeTrust(node, record) => {
                    Write::of(format!("{TRUST_PREFIX}{node}"), encode(record)?)
                }
            })
        })
        .collect()
}

pub fn config_write(config: &ClusterConfig) -> Result<Write, CodecError> {
    Ok(Write::of(CONFIG_KEY.to_string(), encode(config)?))
}

pub fn volumes_write(volumes: &IntegralVolumes) -> Result<Write, CodecError> {
    Ok(Write::of(VOLUMES_KEY.to_string(), encode(volumes)?))
}

/// A job attempt's record, if the store has one.
pub async fn job_record(
    state: &kv::Store,
    job: &ytsched_common::JobId,
) -> Result<Option<crate::core::records::JobRecord>, String> {
    match state
        .get(format!("{JOB_PREFIX}{job}"))
        .await
        .map_err(|e| e.to_string())?
    {
        None => Ok(None),
        Some(bytes) => decode(&bytes).map(Some).map_err(|e| e.to_string()),
    }
}

/// The output a finished job attempt left, if it printed anything.
pub async fn job_output(
    state: &kv::Store,
    job: &ytsched_common::JobId,
) -> Result<Option<JobOutput>, String> {
    match state
        .get(format!("{OUTPUT_PREFIX}{job}"))
        .await
        .map_err(|e| e.to_string())?
    {
        None => Ok(None),
        Some(bytes) => decode(&bytes).map(Some).map_err(|e| e.to_string()),
    }
}

/// A write that removes `key` (a record is never empty).
pub fn purge(key: String) -> Write {
    Write {
        key,
        value: Bytes::new(),
        last: false,
    }
}

/// Order of phases within a batch of writes: configuration (pools an operation runs in),
/// then operations, then their jobs, so that a crash in the middle never leaves a job
/// whose operation or pool the store does not have.
pub fn phase(key: &str) -> u8 {
    if key == CONFIG_KEY || key == VOLUMES_KEY {
        0
    } else if key.starts_with(OPERATION_PREFIX) {
        1
    } else {
        2
    }
}
