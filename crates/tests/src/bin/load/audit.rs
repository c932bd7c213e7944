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

/// The last sequence of the state bucket's stream: every put, delete and purge moves it
/// on by one. `None` where this tool may not read the stream (an installation's admin).
pub(crate) async fn state_sequence(target: &Target) -> Option<u64> {
    let auth = creds(&target.auth_dir, "scheduler").ok()?;
    let client = connect(&target.nats, "ytsched-load store", false, &auth)
        .await
        .ok()?;
    let js = async_nats::jetstream::new(client);
    let name = format!("KV_{}_state", target.subjects.prefix().replace('.', "_"));
    let mut stream = js.get_stream(&name).await.ok()?;
    Some(stream.info().await.ok()?.state.last_sequence)
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
