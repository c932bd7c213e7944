//! `ytsched list-operations`: newest first, filtered on the scheduler, fetched page by
//! page so that no answer has to hold every operation.

use clap::Args;
use ytsched_common::api::{ListOperations, OperationFilter, OperationInfo};
use ytsched_common::states::OperationState;

#[derive(Args, Debug)]
pub struct ListOperationsArgs {
    /// At most this many (default: all that match, fetched a page at a time).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Start after this cursor (as `--format json` of a previous page shows it in stderr).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Only in this state: pending, running, completed, failed, aborted.
    #[arg(long, value_parser = parse_state)]
    pub state: Option<OperationState>,
    /// Only of this user. (Not `--user`: that global flag names who is asking.)
    #[arg(long)]
    pub filter_user: Option<String>,
    /// Only in this pool (in any of their trees).
    #[arg(long)]
    pub pool: Option<String>,
    /// Only in this pool tree.
    #[arg(long)]
    pub pool_tree: Option<String>,
    /// Only submitted at or after this time (unix milliseconds).
    #[arg(long)]
    pub from_time: Option<u64>,
    /// Only submitted before this time (unix milliseconds).
    #[arg(long)]
    pub to_time: Option<u64>,
}

fn parse_state(s: &str) -> Result<OperationState, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        format!("'{s}' is not an operation state (pending, running, completed, failed, aborted)")
    })
}

impl ListOperationsArgs {
    /// The first page's request.
    pub fn first_request(&self) -> ListOperations {
        ListOperations {
            limit: self.limit.map(|l| l.clamp(1, ListOperations::MAX_PAGE)),
            cursor: self.cursor.clone(),
            filter: OperationFilter {
                state: self.state,
                user: self.filter_user.clone(),
                pool: self.pool.clone(),
                pool_tree: self.pool_tree.clone(),
                from_time: self.from_time,
                to_time: self.to_time,
            },
        }
    }

    /// Fetches pages with `fetch` until `--limit` operations or the last page.
    pub async fn collect<F, Fut>(&self, mut fetch: F) -> anyhow::Result<Vec<OperationInfo>>
    where
        F: FnMut(ListOperations) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<ytsched_common::api::OperationPage>>,
    {
        let mut request = self.first_request();
        let mut out = Vec::new();
        loop {
            let page = fetch(request.clone()).await?;
            out.extend(page.operations);
            if let Some(limit) = self.limit {
                if out.len() >= limit as usize {
                    out.truncate(limit as usize);
                    break;
                }
                request.limit = Some(
                    (limit as usize - out.len()).min(ListOperations::MAX_PAGE as usize) as u32,
                );
            }
            match page.next_cursor {
                Some(c) => request.cursor = Some(c),
                None => break,
            }
        }
        Ok(out)
    }
}
