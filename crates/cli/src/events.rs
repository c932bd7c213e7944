//! `ytsched events`: the scheduler's event log (SPEC 5.16) as JSON lines, oldest first,
//! fetched a page at a time; with `--follow`, it keeps asking from where it stopped.

use clap::Args;
use std::time::Duration;
use ytsched_common::api::{EventPage, ListEvents};
use ytsched_common::event_record::{EventFilter, EventRecord};
use ytsched_common::protocol::{unix_now, UnixMillis};
use ytsched_common::OperationId;

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Only events at or after this time: unix milliseconds, an RFC 3339 time
    /// (2026-11-20T09:00:00Z), or how long ago (7d, 90m).
    #[arg(long, value_parser = parse_time)]
    pub since: Option<UnixMillis>,
    /// Only events before this time (as --since).
    #[arg(long, value_parser = parse_time)]
    pub until: Option<UnixMillis>,
    /// Only events about this operation.
    #[arg(long)]
    pub operation: Option<OperationId>,
    /// Only events about operations in this pool (in any tree).
    #[arg(long)]
    pub pool: Option<String>,
    /// Only events about this user's operations. (Not `--user`: that global flag names
    /// who is asking.)
    #[arg(long)]
    pub filter_user: Option<String>,
    /// Keep printing events as they are written (until interrupted).
    #[arg(long)]
    pub follow: bool,
}

/// How often `--follow` asks again once it has caught up.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// A time as `--since`/`--until` take it (`common::time_window`), read now.
pub fn parse_time(s: &str) -> Result<UnixMillis, String> {
    ytsched_common::time_window::parse_time(s, unix_now())
}

impl EventsArgs {
    fn first_request(&self) -> ListEvents {
        ListEvents {
            limit: None,
            cursor: None,
            filter: EventFilter {
                since: self.since,
                until: self.until,
                operation: self.operation.clone(),
                pool: self.pool.clone(),
                user: self.filter_user.clone(),
            },
        }
    }

    /// Fetches pages with `fetch` and hands each event to `print`, to the end of the log
    /// (or, following, for as long as it runs).
    pub async fn run<F, Fut>(
        &self,
        mut fetch: F,
        mut print: impl FnMut(&EventRecord) -> anyhow::Result<()>,
    ) -> anyhow::Result<()>
    where
        F: FnMut(ListEvents) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<EventPage>>,
    {
        ytsched_common::time_window::check_window(self.since, self.until)
            .map_err(anyhow::Error::msg)?;
        let mut request = self.first_request();
        loop {
            let page = fetch(request.clone()).await?;
            for e in &page.events {
                print(e)?;
            }
            request.cursor = Some(page.cursor);
            if !page.more {
                let window_over = self.until.is_some_and(|u| unix_now() >= u);
                if !self.follow || window_over {
                    return Ok(());
                }
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pages_are_fetched_from_each_cursor_until_caught_up() {
        let args = EventsArgs {
            since: None,
            until: None,
            operation: None,
            pool: None,
            filter_user: Some("alice".into()),
            follow: false,
        };
        let mut asked = Vec::new();
        let mut pages = vec![
            EventPage {
                events: vec![],
                cursor: "5:0".into(),
                more: true,
            },
            EventPage {
                events: vec![],
                cursor: "9:2".into(),
                more: false,
            },
        ]
        .into_iter();
        args.run(
            |req| {
                asked.push((req.cursor.clone(), req.filter.user.clone()));
                let page = pages.next().expect("asked once too often");
                async move { Ok(page) }
            },
            |_| Ok(()),
        )
        .await
        .unwrap();
        assert_eq!(
            asked,
            vec![
                (None, Some("alice".to_string())),
                (Some("5:0".to_string()), Some("alice".to_string()))
            ]
        );
    }
}
