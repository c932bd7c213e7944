//! The archive of operations retired from the scheduler's memory (`core/retention.rs`):
//! a KV bucket whose entries expire after `--archive-ttl`, from which `get-operation`,
//! `list-jobs` and job output answer once the core no longer knows an operation.
//!
//! Keys: `op.<id>` (the operation's last view, its number of job attempts and, when
//! they fit `ARCHIVE_INLINE_BYTES`, the attempts themselves with their output) and,
//! for an operation whose attempts do not fit, `job.<id>.<seq>` (attempt `seq`, job id
//! `<id>-<seq>`, with its output). Most operations are archived with one write: the
//! append of their `op.` key. Writing is idempotent: an operation retired twice (a crash
//! before its state keys were deleted) is written again the same, and the bucket keeps
//! one value per key. Attempts that do not fit are taken over from the state bucket a
//! chunk at a time, so an operation of a million attempts never sits in memory whole.
//!
//! The bucket's own stream is the list: `list-operations` pages it newest first by
//! stream sequence, reading `op.` entries and stepping over `job.` ones, a bounded
//! number of messages per page, without any index held in memory. (Versions before
//! this one also wrote each view to a stream `<name>_list`; it is no longer read or
//! written, and empties as its entries reach the archive's age.)

use crate::core::retention::{Archived, ArchivedJob};
use crate::store::writer::Writer;
use crate::store::{self, JOB_PREFIX, OPERATION_PREFIX, OUTPUT_PREFIX};
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

/// The largest `op.` entry that carries its attempts inline (and the most bytes of
/// attempts a page of the list may read per operation).
const ARCHIVE_INLINE_BYTES: usize = 64 * 1024;

/// Reads of the list stream in flight at once while a page is gathered.
const LIST_READS_IN_FLIGHT: usize = 32;

/// The most list-stream messages one `list-operations` page reads (a filter that matches
/// rarely answers with what it found and a cursor to go on from).
const LIST_SCAN_PER_PAGE: u64 = 5_000;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArchivedOperation {
    pub info: OperationInfo,
    pub job_count: u64,
    /// Whether this record carries its attempts (`jobs`); if not, each is under its
    /// own `job.` key.
    #[serde(default)]
    pub jobs_inline: bool,
    /// Its recorded attempts in order, when `jobs_inline` (an attempt number given out
    /// but never recorded has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<ArchivedJob>,
}

impl ArchivedOperation {
    /// Where this record answers for attempt `seq`: `Some(None)` if it carries its
    /// attempts and `seq` is not among them, `None` if they are under their own keys.
    fn inline_job(&self, seq: u64) -> Option<Option<&ArchivedJob>> {
        self.jobs_inline.then(|| {
            self.jobs
                .iter()
                .find(|j| j.info.id.attempt_seq(&self.info.id) == Some(seq))
        })
    }
}

#[derive(Clone)]
pub struct Archive {
    kv: kv::Store,
    /// The state bucket, where finished jobs' outputs wait to be taken over.
    state: kv::Store,
    /// The bucket's stream: the archived operations in the order they were archived.
    list: stream::Stream,
    /// The subject of an `op.` entry of the bucket, less the operation id.
    op_subject: String,
    /// The largest `op.` entry that carries its attempts (`ARCHIVE_INLINE_BYTES`, or
    /// less where the server's records are smaller).
    inline_limit: usize,
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
    /// Opens (creating if missing) the bucket `<name>`, keeping entries for `ttl`.
    pub async fn open(
        js: &jetstream::Context,
        name: &str,
        replicas: usize,
        ttl: Duration,
        max_record_bytes: usize,
        state: kv::Store,
        writer: Writer,
    ) -> anyhow::Result<Self> {
        let kv = store::open_bucket(js, name, replicas, ttl).await?;
        Ok(Archive {
            list: kv.stream.clone(),
            op_subject: format!("$KV.{name}.op."),
            inline_limit: ARCHIVE_INLINE_BYTES.min(max_record_bytes),
            kv,
            state,
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
                    jobs_inline: false,
                    jobs: vec![],
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
            let info = info.brief();
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
        // The first page into the archive starts with the operations being handed over
        // to it: they are newer than anything its list holds. Read before the list's
        // end: an operation that leaves the handover has been written to the list
        // first, so the end read after it covers it (read the other way round, one
        // archived in between was in neither, and missing from the page).
        let (mut out, mut bytes, full) = match before {
            None => self.handover_head(filter, limit, max_bytes),
            Some(_) => (vec![], 0, false),
        };
        let mut list = self.list.clone();
        let state = list.info().await.map_err(unavailable)?.state.clone();
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
                let info = info.brief();
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

    /// The list's messages `top` down to `low`, newest first (`None` where one expired,
    /// was replaced by a later write of its key, or is an attempt's entry).
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
                        Ok(m) if m.subject.starts_with(self.op_subject.as_str()) => Ok((
                            seq,
                            decode::<ArchivedOperation>(&m.payload).ok().map(|a| a.info),
                        )),
                        Ok(_) => Ok((seq, None)),
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

    /// Attempt `job` of archived operation `op` (as `operation` found it: its entry may
    /// carry the attempt).
    pub async fn job(
        &self,
        op: &ArchivedOperation,
        job: &JobId,
    ) -> Result<Option<ArchivedJob>, ApiError> {
        let id = &op.info.id;
        let Some(seq) = job.attempt_seq(id) else {
            return Ok(None);
        };
        match op.inline_job(seq) {
            Some(job) => Ok(job.cloned()),
            None => self.get(&format!("job.{id}.{seq}")).await,
        }
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
            let job = match op.inline_job(position) {
                Some(job) => job.cloned(),
                None => {
                    self.get::<ArchivedJob>(&format!("job.{}.{position}", op.info.id))
                        .await?
                }
            };
            if let Some(job) = job {
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
        op: &ArchivedOperation,
        job: &JobId,
        stream: OutputStream,
    ) -> Result<String, ApiError> {
        match self.job(op, job).await? {
            Some(j) => Ok(j.output(stream).to_string()),
            None => Err(ApiError::not_found(format!(
                "operation {} has no job {job}",
                op.info.id
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
        // The attempts while they fit the operation's own entry; once they do not
        // (`spilled`), each goes under its own key.
        let mut inline: Vec<(u64, ArchivedJob)> = Vec::new();
        let mut inline_bytes = 0usize;
        let mut spilled = false;
        let mut from = 0;
        while from < a.attempts {
            let to = (from + ARCHIVE_CHUNK).min(a.attempts);
            let taken: Vec<(u64, Option<ArchivedJob>, bool, bool)> =
                futures::stream::iter(from..to)
                    .map(|seq| async move {
                        let (job, record, output) = self.take_over(a, seq).await?;
                        Ok::<_, String>((seq, job, record, output))
                    })
                    .buffered(ARCHIVE_WRITES_IN_FLIGHT)
                    .try_collect()
                    .await?;
            let mut own_keys = Vec::new();
            for (seq, job, had_record, had_output) in taken {
                recorded.push(had_record);
                printed.push(had_output);
                let Some(job) = job else { continue };
                if spilled {
                    own_keys.push((seq, job));
                    continue;
                }
                inline_bytes =
                    inline_bytes.saturating_add(encode(&job).map_or(usize::MAX, |b| b.len()));
                inline.push((seq, job));
                if inline_bytes > self.inline_limit {
                    spilled = true;
                    own_keys.append(&mut inline);
                }
            }
            self.put_attempts(id, own_keys).await?;
            from = to;
        }
        let mut op = ArchivedOperation {
            info: a.info.clone(),
            job_count: a.attempts,
            jobs_inline: !spilled,
            jobs: inline.iter().map(|(_, j)| j.clone()).collect(),
        };
        let mut value = encode(&op).map_err(|e| e.to_string())?;
        if value.len() > self.inline_limit && op.jobs_inline && !op.jobs.is_empty() {
            op.jobs_inline = false;
            op.jobs.clear();
            value = encode(&op).map_err(|e| e.to_string())?;
            self.put_attempts(id, inline).await?;
        }
        // The operation last: once it answers, every job it counts is there.
        self.put(format!("op.{id}"), value).await?;
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

    /// Writes attempts of operation `id` under their own keys.
    async fn put_attempts(
        &self,
        id: &OperationId,
        jobs: Vec<(u64, ArchivedJob)>,
    ) -> Result<(), String> {
        futures::stream::iter(jobs)
            .map(|(seq, job)| async move {
                let value = encode(&job).map_err(|e| e.to_string())?;
                self.put(format!("job.{id}.{seq}"), value).await
            })
            .buffered(ARCHIVE_WRITES_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Reads attempt `seq` of `a` (from what the core handed over, else its record and
    /// output in the state bucket); returns it with whether there was a record and an
    /// output key (the state keys to delete afterwards). An attempt never recorded (an
    /// attempt number given out but not used, or one the store lost) has nothing to keep.
    async fn take_over(
        &self,
        a: &Archived,
        seq: u64,
    ) -> Result<(Option<ArchivedJob>, bool, bool), String> {
        let id = &a.info.id;
        let inline = a.inline.get(&seq);
        // Kept with its output in the operation's own record: no key to read or delete.
        if let Some((info, Some((stdout, stderr)))) = inline {
            let job = ArchivedJob {
                info: info.clone(),
                stdout: stdout.clone(),
                stderr: stderr.clone(),
            };
            return Ok((Some(job), false, false));
        }
        let job_id = JobId::attempt(id, seq);
        // An inline attempt has no record key; its output, if it printed much, has one.
        let record = async {
            match inline {
                Some(_) => Ok(None),
                None => store::job_record(&self.state, &job_id).await,
            }
        };
        let (record, output) = futures::try_join!(record, store::job_output(&self.state, &job_id))?;
        let info = match inline {
            Some((info, _)) => Some(info.clone()),
            None => record
                .as_ref()
                .map(|r| crate::core::job_info(id, &a.task_names, &r.job)),
        };
        let output_key = output.is_some();
        let (stdout, stderr) = output.map(|o| (o.stdout, o.stderr)).unwrap_or_default();
        let job = info.map(|info| ArchivedJob {
            info,
            stdout,
            stderr,
        });
        Ok((job, record.is_some(), output_key))
    }
}
