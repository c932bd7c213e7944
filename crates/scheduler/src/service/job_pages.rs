//! `list-jobs` pages as answered outside the core's lock: the core plans a page
//! (`JobPagePlan`), naming the attempts it let go of; their records are read here from
//! the state bucket, and the page is cut to fit one message. The API and the HTTP face
//! both answer through it.

use crate::core::{job_info, JobEntry, JobPagePlan};
use crate::store;
use async_nats::jetstream::kv;
use futures::{StreamExt, TryStreamExt};
use tracing::warn;
use ytsched_common::api::{ApiError, ErrorKind, JobInfo, JobPage};
use ytsched_common::codec::encode;

/// A `list-jobs` page of `entries` (with their attempt numbers) that fits one NATS
/// message: what does not fit starts the next page.
pub fn fitting_job_page(
    mut entries: Vec<(u64, JobInfo)>,
    next: Option<u64>,
    max_bytes: usize,
) -> JobPage {
    let mut next = next;
    loop {
        let page = JobPage {
            jobs: entries.iter().map(|(_, j)| j.clone()).collect(),
            next_cursor: next.map(|s| s.to_string()),
        };
        let size = encode(&page).map(|b| b.len()).unwrap_or(usize::MAX);
        if size <= max_bytes || entries.len() <= 1 {
            return page;
        }
        let keep = entries.len() / 2;
        next = Some(entries[keep].0);
        entries.truncate(keep);
    }
}

/// Completes a `list-jobs` page with the records of the attempts the core let go of.
/// The core lets an attempt go once its last record is queued for the store, not
/// stored: the page first waits until everything queued before it is stored (`writer`),
/// so a record still on its way is read, never reported missing.
pub async fn read_job_page(
    state: &kv::Store,
    writer: &crate::store::writer::Writer,
    plan: JobPagePlan,
    max_bytes: usize,
) -> Result<JobPage, ApiError> {
    const READS_IN_FLIGHT: usize = 32;
    if plan
        .entries
        .iter()
        .any(|(_, e)| matches!(e, JobEntry::Stored(_)))
    {
        writer.barrier().wait().await;
    }
    let JobPagePlan {
        operation,
        entries,
        next_cursor,
        task_names,
    } = plan;
    let (operation, task_names) = (&operation, &task_names);
    let read: Vec<Option<(u64, JobInfo)>> = futures::stream::iter(entries)
        .map(|(seq, entry)| async move {
            match entry {
                JobEntry::Held(info) => Ok(Some((seq, *info))),
                JobEntry::Stored(job) => match store::job_record(state, &job).await {
                    Ok(Some(r)) => Ok(Some((seq, job_info(operation, task_names, &r.job)))),
                    Ok(None) => {
                        warn!(job = %job, "a settled job attempt has no record in the store");
                        Ok(None)
                    }
                    Err(e) => Err(ApiError::of(
                        ErrorKind::Unavailable,
                        format!("job {job} cannot be read from the store: {e}"),
                    )),
                },
            }
        })
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(fitting_job_page(
        read.into_iter().flatten().collect(),
        next_cursor,
        max_bytes,
    ))
}
