//! The archive of operations retired from the scheduler's memory (`core/retention.rs`):
//! a KV bucket whose entries expire after `--archive-ttl`, from which `get-operation`,
//! `list-jobs` and job output answer once the core no longer knows an operation.
//!
//! Keys: `op.<id>` (the operation's last view and its number of job attempts) and
//! `job.<id>.<seq>` (attempt `seq`, job id `<id>-<seq>`, with its output). Writing is
//! idempotent: an operation retired twice (a crash before its state keys were deleted)
//! is written again the same. Attempts are taken over from the state bucket a chunk at
//! a time, so an operation of a million attempts never sits in memory whole.
//!
//! Beside the bucket, a stream (`<prefix>_archive_list`, same age limit) gets each
//! archived operation's view once, in the order they were archived: `list-operations`
//! pages it newest first by stream sequence, a bounded number of messages per page,
//! without any index held in memory.

use crate::core::retention::{Archived, ArchivedJob};
use crate::store::{self, JOB_PREFIX, OPERATION_PREFIX, OUTPUT_PREFIX};
use crate::writer::Writer;
use async_nats::jetstream::{self, kv, stream};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};
use ytsched_common::api::{
    ApiError, ErrorKind, JobPage, ListJobs, OperationFilter, OperationInfo, OutputStream,
};
use ytsched_common::codec::{decode, encode};
use ytsched_common::{JobId, OperationId};

/// Archive reads and writes of one operation in flight at once (its jobs are
/// independent keys).
const ARCHIVE_WRITES_IN_FLIGHT: usize = 64;

/// Attempts taken over from the state bucket at a time.
const ARCHIVE_CHUNK: u64 = 1024;

/// Reads of the list stream in flight at once while a page is gathered.
const LIST_READS_IN_FLIGHT: usize = 32;

/// The most list-stream messages one `list-operations` page reads (a filter that matches
/// rarely answers with what it found and a cursor to go on from).
const LIST_SCAN_PER_PAGE: u64 = 5_000;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArchivedOperation {
    pub info: OperationInfo,
    pub job_count: u64,
}

#[derive(Clone)]
pub struct Archive {
    kv: kv::Store,
    /// The state bucket, where finished jobs' outputs wait to be taken over.
    state: kv::Store,
    js: jetstream::Context,
    /// The archived operations in the order they were archived.
    list: stream::Stream,
    list_subject: String,
    /// Deletes an archived operation's state keys, fenced and in order with every other
    /// state write.
    writer: Writer,
    /// Operations retired from the core whose archive record is not written yet: the
    /// archive answers for them from here meanwhile, so an operation is found at every
    /// moment (a burst retires thousands at once and the archive takes them one by
    /// one). Bounded by the operations the core held: entries move here, not add up.
    handing_over: Arc<Mutex<HashMap<OperationId, ArchivedOperation>>>,
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::of(
        ErrorKind::Unavailable,
        format!("the archive cannot be read: {e}"),
    )
}

/// A page of archived operations and, if more may follow, the stream sequence to go on
/// below.
pub struct ArchivedPage {
    pub operations: Vec<OperationInfo>,
    pub next_before: Option<u64>,
}

impl Archive {
    /// Opens (creating if missing) the bucket `<name>` and the list stream
    /// `<name>_list`, both keeping entries for `ttl`.
    pub async fn open(
        js: &jetstream::Context,
        name: &str,
        replicas: usize,
        ttl: Duration,
        state: kv::Store,
        writer: Writer,
    ) -> anyhow::Result<Self> {
        let kv = store::open_bucket(js, name, replicas, ttl).await?;
        let list_name = format!("{name}_list");
        let list_subject = format!("{name}.list");
        let list_config = stream::Config {
            name: list_name.clone(),
            subjects: vec![list_subject.clone()],
            max_age: ttl,
            num_replicas: replicas.max(1),
            // An operation archived again within it (a crash before its purge) is
            // listed once.
            duplicate_window: Duration::from_secs(120).min(ttl),
            ..Default::default()
        };
        let list = store::while_cluster_forms(&format!("stream {list_name}"), || async {
            js.get_or_create_stream(list_config.clone())
                .await
                .map_err(|e| e.to_string())
        })
        .await?;
        Ok(Archive {
            kv,
            state,
            js: js.clone(),
            list,
            list_subject,
            writer,
            handing_over: Default::default(),
        })
    }

    /// Takes over the answers for operations the core just retired, until `store` has
    /// archived each.
    pub fn hand_over(&self, retired: &[Archived]) {
        if retired.is_empty() {
            return;
        }
        let mut map = self.handing_over.lock().expect("handover lock");
        for a in retired {
            map.insert(
                a.info.id.clone(),
                ArchivedOperation {
                    info: a.info.clone(),
                    job_count: a.attempts,
                },
            );
        }
    }

    /// The head of the first page into the archive: the operations being handed over
    /// that fit it, their bytes, and whether the page is full.
    fn handover_head(
        &self,
        filter: &OperationFilter,
        limit: usize,
        max_bytes: usize,
    ) -> (Vec<OperationInfo>, usize, bool) {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for info in self.handed_over(filter, limit) {
            let size = encode(&info).map_or(usize::MAX, |b| b.len());
            if out.len() == limit || (!out.is_empty() && bytes + size > max_bytes) {
                return (out, bytes, true);
            }
            bytes += size;
            out.push(info);
        }
        let full = out.len() >= limit;
        (out, bytes, full)
    }

    /// The first `limit` operations being handed over that `filter` admits, most
    /// recently finished first.
    fn handed_over(&self, filter: &OperationFilter, limit: usize) -> Vec<OperationInfo> {
        let Ok(map) = self.handing_over.lock() else {
            return vec![];
        };
        // A burst hands thousands over at once: order by keys, copy only a page.
        let mut newest: Vec<&ArchivedOperation> = map
            .values()
            .filter(|a| filter.admits_info(&a.info))
            .collect();
        newest.sort_by(|a, b| {
            (b.info.finish_time, &b.info.id).cmp(&(a.info.finish_time, &a.info.id))
        });
        newest
            .into_iter()
            .take(limit)
            .map(|a| a.info.clone())
            .collect()
    }

    /// Archived operations matching `filter`, most recently archived first, starting
    /// below stream sequence `before` (the newest if `None`): at most `limit`, and at
    /// most `max_bytes` of views encoded.
    pub async fn list_page(
        &self,
        filter: &OperationFilter,
        before: Option<u64>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<ArchivedPage, ApiError> {
        if limit == 0 {
            return Ok(ArchivedPage {
                operations: vec![],
                next_before: None,
            });
        }
        let mut list = self.list.clone();
        let state = list.info().await.map_err(unavailable)?.state.clone();
        // The first page into the archive starts with the operations being handed over
        // to it: they are newer than anything its list holds.
        let (mut out, mut bytes, full) = match before {
            None => self.handover_head(filter, limit, max_bytes),
            Some(_) => (vec![], 0, false),
        };
        if full || state.messages == 0 {
            let more = full && state.messages > 0;
            return Ok(ArchivedPage {
                operations: out,
                next_before: more.then_some(state.last_sequence + 1),
            });
        }
        let mut seen: std::collections::HashSet<OperationId> =
            out.iter().map(|i| i.id.clone()).collect();
        let first = state.first_sequence.max(1);
        let mut top = before.map_or(state.last_sequence, |b| b.saturating_sub(1));
        top = top.min(state.last_sequence);
        let mut scanned = 0u64;
        while top >= first && scanned < LIST_SCAN_PER_PAGE {
            let low = top
                .saturating_sub(LIST_READS_IN_FLIGHT as u64 - 1)
                .max(first);
            let batch = self.read_list(low, top).await?;
            for (seq, info) in batch {
                scanned += 1;
                let Some(info) = info else { continue };
                if !filter.admits_info(&info) || !seen.insert(info.id.clone()) {
                    continue;
                }
                let size = encode(&info).map_or(usize::MAX, |b| b.len());
                if !out.is_empty() && bytes + size > max_bytes {
                    return Ok(ArchivedPage {
                        operations: out,
                        next_before: Some(seq + 1),
                    });
                }
                bytes += size;
                out.push(info);
                if out.len() == limit {
                    return Ok(ArchivedPage {
                        operations: out,
                        next_before: (seq > first).then_some(seq),
                    });
                }
            }
            if low == first {
                break;
            }
            top = low - 1;
        }
        Ok(ArchivedPage {
            operations: out,
            next_before: (scanned >= LIST_SCAN_PER_PAGE && top >= first).then_some(top + 1),
        })
    }

    /// The list's messages `top` down to `low`, newest first (`None` where one expired or
    /// was never written, a duplicate).
    async fn read_list(
        &self,
        low: u64,
        top: u64,
    ) -> Result<Vec<(u64, Option<OperationInfo>)>, ApiError> {
        futures::stream::iter((low..=top).rev())
            .map(|seq| {
                let list = &self.list;
                async move {
                    match list.get_raw_message(seq).await {
                        Ok(m) => Ok((seq, decode::<OperationInfo>(&m.payload).ok())),
                        Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => {
                            Ok((seq, None))
                        }
                        Err(e) => Err(unavailable(e)),
                    }
                }
            })
            .buffered(LIST_READS_IN_FLIGHT)
            .try_collect()
            .await
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ApiError> {
        match self.kv.get(key).await.map_err(unavailable)? {
            None => Ok(None),
            Some(bytes) => decode(&bytes)
                .map(Some)
                .map_err(|e| ApiError::of(ErrorKind::Internal, format!("archived {key}: {e}"))),
        }
    }

    pub async fn operation(&self, id: &OperationId) -> Result<Option<ArchivedOperation>, ApiError> {
        let handing_over = self
            .handing_over
            .lock()
            .ok()
            .and_then(|m| m.get(id).cloned());
        match handing_over {
            Some(op) => Ok(Some(op)),
            None => self.get(&format!("op.{id}")).await,
        }
    }

    pub async fn job(
        &self,
        id: &OperationId,
        job: &JobId,
    ) -> Result<Option<ArchivedJob>, ApiError> {
        let Some(seq) = job.attempt_seq(id) else {
            return Ok(None);
        };
        self.get(&format!("job.{id}.{seq}")).await
    }

    /// A page of an archived operation's job attempts, as `list-jobs` pages live ones.
    pub async fn job_page(
        &self,
        op: &ArchivedOperation,
        req: &ListJobs,
    ) -> Result<JobPage, ApiError> {
        let limit = crate::core::page_limit(req.limit)?;
        let from = crate::core::parse_cursor::<u64>(&req.cursor)?.unwrap_or(0);
        let mut jobs = vec![];
        let mut position = from;
        // A state filter may skip most attempts: a page reads a bounded number of them.
        let mut budget = (limit as u64).saturating_mul(10);
        while position < op.job_count && jobs.len() < limit && budget > 0 {
            budget -= 1;
            if let Some(job) = self
                .get::<ArchivedJob>(&format!("job.{}.{position}", op.info.id))
                .await?
            {
                if req.state.is_none_or(|s| job.info.state == s) {
                    jobs.push(job.info);
                }
            }
            position += 1;
        }
        Ok(JobPage {
            jobs,
            next_cursor: (position < op.job_count).then(|| position.to_string()),
        })
    }

    pub async fn job_output(
        &self,
        id: &OperationId,
        job: &JobId,
        stream: OutputStream,
    ) -> Result<String, ApiError> {
        match self.job(id, job).await? {
            Some(j) => Ok(j.output(stream).to_string()),
            None => Err(ApiError::not_found(format!(
                "operation {id} has no job {job}"
            ))),
        }
    }

    async fn put(&self, key: String, value: Vec<u8>) -> Result<(), String> {
        self.kv
            .put(key, value.into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Writes one retired operation, retried until done (it answers from nowhere until
    /// the archive has it), then has its state keys deleted.
    pub async fn store(&self, a: Archived) {
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.try_store(&a).await {
                Ok(()) => {
                    info!(operation = %a.info.id, jobs = a.attempts, "operation archived");
                    return;
                }
                Err(e) => {
                    warn!(operation = %a.info.id, error = %e, "cannot archive operation; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    async fn try_store(&self, a: &Archived) -> Result<(), String> {
        let id = &a.info.id;
        // Which attempts had a record and an output, to delete exactly those after.
        let mut recorded = Vec::with_capacity(a.attempts as usize);
        let mut printed = Vec::with_capacity(a.attempts as usize);
        let mut from = 0;
        while from < a.attempts {
            let to = (from + ARCHIVE_CHUNK).min(a.attempts);
            let taken: Vec<(bool, bool)> = futures::stream::iter(from..to)
                .map(|seq| self.take_over(a, seq))
                .buffered(ARCHIVE_WRITES_IN_FLIGHT)
                .try_collect()
                .await?;
            for (had_record, had_output) in taken {
                recorded.push(had_record);
                printed.push(had_output);
            }
            from = to;
        }
        // The operation last: once it answers, every job it counts is there.
        let op = ArchivedOperation {
            info: a.info.clone(),
            job_count: a.attempts,
        };
        self.put(format!("op.{id}"), encode(&op).map_err(|e| e.to_string())?)
            .await?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        let listed = encode(&a.info).map_err(|e| e.to_string())?;
        self.js
            .publish_with_headers(self.list_subject.clone(), headers, listed.into())
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        // Found by `get` and listed from here on: the handover may let it go.
        if let Ok(mut map) = self.handing_over.lock() {
            map.remove(id);
        }
        let mut purges: Vec<store::Write> = a
            .job_ids()
            .zip(recorded.iter().zip(&printed))
            .flat_map(|(job, (&record, &output))| {
                let record = record.then(|| store::purge(format!("{JOB_PREFIX}{job}")));
                let output = output.then(|| store::purge(format!("{OUTPUT_PREFIX}{job}")));
                record.into_iter().chain(output)
            })
            .collect();
        purges.push(store::purge(format!("{OPERATION_PREFIX}{id}")));
        self.writer.submit(purges).wait().await;
        Ok(())
    }

    /// Copies attempt `seq` of `a` (its record and output from the state bucket) into
    /// the archive; returns whether there was a record and whether there was an output
    /// (the state keys to delete afterwards).
    async fn take_over(&self, a: &Archived, seq: u64) -> Result<(bool, bool), String> {
        let id = &a.info.id;
        let job_id = JobId::attempt(id, seq);
        let (info, had_record, output) = match a.inline.get(&seq) {
            // Kept in the operation's own record: no key of its own to read or delete.
            Some((info, Some((stdout, stderr)))) => {
                (info.clone(), false, Some((stdout.clone(), stderr.clone())))
            }
            Some((info, None)) => {
                let output = store::job_output(&self.state, &job_id).await?;
                (info.clone(), false, output.map(|o| (o.stdout, o.stderr)))
            }
            None => {
                let (record, output) = futures::try_join!(
                    store::job_record(&self.state, &job_id),
                    store::job_output(&self.state, &job_id)
                )?;
                let Some(record) = record else {
                    // Never recorded (none is missing unless the store lost it): nothing
                    // to keep.
                    return Ok((false, output.is_some()));
                };
                let info = crate::core::job_info(id, &a.task_names, &record.job);
                (info, true, output.map(|o| (o.stdout, o.stderr)))
            }
        };
        let had_output = output.is_some() && !matches!(a.inline.get(&seq), Some((_, Some(_))));
        let (stdout, stderr) = output.unwrap_or_default();
        let job = ArchivedJob {
            info,
            stdout,
            stderr,
        };
        self.put(
            format!("job.{id}.{seq}"),
            encode(&job).map_err(|e| e.to_string())?,
        )
        .await?;
        Ok((had_record, had_output))
    }
}
