//! The archive of operations retired from the scheduler's memory (`core/retention.rs`):
//! a KV bucket whose entries expire after `--archive-ttl`, from which `get-operation`,
//! `list-jobs` and job output answer once the core no longer knows an operation.
//!
//! Keys: `op.<id>` (the operation's last view and its number of job attempts),
//! `job.<id>.<position>` (attempt `position` in `list-jobs` order, with its output), and
//! `pos.<id>.<job id>` (that position, to find one job's output). Writing is idempotent:
//! an operation retired twice (a crash before its state keys were deleted) is written
//! again the same.

use crate::core::retention::{Archived, ArchivedJob};
use crate::store::{self, JOB_PREFIX, OPERATION_PREFIX};
use crate::writer::Writer;
use async_nats::jetstream::kv;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tracing::{info, warn};
use ytsched_common::api::{ApiError, ErrorKind, JobPage, ListJobs, OperationInfo, OutputStream};
use ytsched_common::codec::{decode, encode};
use ytsched_common::{JobId, OperationId};

/// Archive writes of one operation in flight at once (its jobs are independent keys).
const ARCHIVE_WRITES_IN_FLIGHT: usize = 64;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArchivedOperation {
    pub info: OperationInfo,
    pub job_count: u64,
}

#[derive(Clone)]
pub struct Archive {
    kv: kv::Store,
    /// Deletes an archived operation's state keys, fenced and in order with every other
    /// state write.
    writer: Writer,
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::of(
        ErrorKind::Unavailable,
        format!("the archive cannot be read: {e}"),
    )
}

impl Archive {
    pub fn new(kv: kv::Store, writer: Writer) -> Self {
        Archive { kv, writer }
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
        self.get(&format!("op.{id}")).await
    }

    pub async fn job(
        &self,
        id: &OperationId,
        job: &JobId,
    ) -> Result<Option<ArchivedJob>, ApiError> {
        let Some(position) = self.get::<u64>(&format!("pos.{id}.{job}")).await? else {
            return Ok(None);
        };
        self.get(&format!("job.{id}.{position}")).await
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
                    info!(operation = %a.info.id, jobs = a.jobs.len(), "operation archived");
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
        let mut puts = Vec::with_capacity(2 * a.jobs.len() + 1);
        for (position, job) in a.jobs.iter().enumerate() {
            puts.push((format!("job.{id}.{position}"), encode(job)));
            puts.push((
                format!("pos.{id}.{}", job.info.id),
                encode(&(position as u64)),
            ));
        }
        // The operation last: once it answers, every job it counts is there.
        let op = ArchivedOperation {
            info: a.info.clone(),
            job_count: a.jobs.len() as u64,
        };
        let op_put = (format!("op.{id}"), encode(&op));
        futures::stream::iter(puts)
            .map(|(key, value)| async move {
                let value = value.map_err(|e| e.to_string())?;
                self.put(key, value).await
            })
            .buffer_unordered(ARCHIVE_WRITES_IN_FLIGHT)
            .try_collect::<()>()
            .await?;
        self.put(op_put.0, op_put.1.map_err(|e| e.to_string())?)
            .await?;
        let purges = a
            .job_ids()
            .map(|job| store::purge(format!("{JOB_PREFIX}{job}")))
            .chain([store::purge(format!("{OPERATION_PREFIX}{id}"))])
            .collect();
        self.writer.submit(purges).wait().await;
        Ok(())
    }
}
