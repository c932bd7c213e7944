//! What a run cost the store and whether every operation it submitted can still be found:
//! the state bucket's writes per operation (from its stream's sequence numbers), and an
//! audit that asks `get_operation` of each submitted operation at the end.

use crate::{admin_client, creds, Target};
use futures::StreamExt;
use ytsched_common::api::GetOperation;
use ytsched_common::transport::{call, connect};
use ytsched_common::OperationId;

/// Concurrent `get_operation` calls of the audit.
const AUDIT_CONCURRENCY: usize = 64;

/// The last sequence of each of the store's streams this run writes: the state bucket
/// and the archive bucket (every put, delete and purge moves a stream's sequence on by
/// one). `None` where this tool may not read them (an
/// installation's admin).
pub(crate) async fn store_sequences(target: &Target) -> Option<StoreSequences> {
    let auth = creds(&target.auth_dir, "scheduler").ok()?;
    let client = connect(&target.nats, "ytsched-load store", false, &auth)
        .await
        .ok()?;
    let js = async_nats::jetstream::new(client);
    let prefix = target.subjects.prefix().replace('.', "_");
    let last = |name: String| {
        let js = js.clone();
        async move {
            match js.get_stream(&name).await {
                Ok(mut stream) => stream.info().await.ok().map(|i| i.state.last_sequence),
                // Not made yet (the archive's, before anything was archived).
                Err(_) => Some(0),
            }
        }
    };
    Some(StoreSequences {
        state: last(format!("KV_{prefix}_state")).await?,
        archive: last(format!("KV_{prefix}_archive")).await?,
    })
}

#[derive(Clone, Copy, Default)]
pub(crate) struct StoreSequences {
    state: u64,
    archive: u64,
}

impl StoreSequences {
    /// Writes between `self` and `later`: (state bucket, both buckets).
    pub(crate) fn writes_until(&self, later: &StoreSequences) -> (u64, u64) {
        let state = later.state.saturating_sub(self.state);
        let archive = later.archive.saturating_sub(self.archive);
        (state, state + archive)
    }
}

/// How the submitted operations answered at the end of the run.
#[derive(Default, serde::Serialize)]
pub(crate) struct Audit {
    pub(crate) audited: u64,
    /// Answered with a final state (completed, failed, aborted).
    pub(crate) finished: u64,
    /// Answered, but not finished yet.
    pub(crate) unfinished: u64,
    /// Not found, or no answer: what point 7 of issue 26 says must never happen.
    pub(crate) missing: u64,
    pub(crate) first_missing: Option<String>,
}

/// Asks `get_operation` of every operation in `ids`.
pub(crate) async fn audit(target: &Target, ids: &[OperationId]) -> anyhow::Result<Audit> {
    let (client, caller) = admin_client(target, "ytsched-load auditor").await?;
    let answers: Vec<(OperationId, Result<bool, String>)> = futures::stream::iter(ids)
        .map(|id| {
            let (client, caller) = (&client, &caller);
            async move {
                let got = call(
                    client,
                    &target.subjects,
                    caller,
                    GetOperation {
                        operation_id: id.clone(),
                    },
                )
                .await;
                (
                    id.clone(),
                    got.map(|info| info.state.is_finished())
                        .map_err(|e| e.to_string()),
                )
            }
        })
        .buffer_unordered(AUDIT_CONCURRENCY)
        .collect()
        .await;
    let mut audit = Audit {
        audited: ids.len() as u64,
        ..Default::default()
    };
    for (id, answer) in answers {
        match answer {
            Ok(true) => audit.finished += 1,
            Ok(false) => audit.unfinished += 1,
            Err(e) => {
                audit.missing += 1;
                audit.first_missing.get_or_insert(format!("{id}: {e}"));
            }
        }
    }
    Ok(audit)
}
