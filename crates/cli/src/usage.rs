//! `ytsched usage`: who used how much over a window, summed from the event log
//! (`common::usage`) that `ytsched events` reads.

use crate::events::parse_time;
use crate::output::Tabular;
use clap::Args;
use comfy_table::Table;
use serde::Serialize;
use ytsched_common::api::{EventPage, ListEvents};
use ytsched_common::event_record::EventFilter;
use ytsched_common::protocol::{unix_now, UnixMillis};
use ytsched_common::usage::{GroupBy, UsageRow, UsageSum};

#[derive(Args, Debug)]
pub struct UsageArgs {
    /// Rows per pool (`<tree>/<pool>`), user, tree or operation.
    #[arg(long, default_value = "pool", value_parser = |s: &str| s.parse::<GroupBy>())]
    pub by: GroupBy,
    /// The window's start: unix milliseconds, an RFC 3339 time, or how long ago.
    #[arg(long, default_value = "7d", value_parser = parse_time)]
    pub since: UnixMillis,
    /// The window's end (default: now).
    #[arg(long, value_parser = parse_time)]
    pub until: Option<UnixMillis>,
}

/// The report: its window and rows.
#[derive(Debug, Serialize)]
pub struct UsageReport {
    pub by: GroupBy,
    pub since: UnixMillis,
    pub until: UnixMillis,
    pub rows: Vec<UsageRow>,
}

impl UsageArgs {
    /// Reads the window's events page by page with `fetch` and sums them.
    pub async fn report<F, Fut>(&self, mut fetch: F) -> anyhow::Result<UsageReport>
    where
        F: FnMut(ListEvents) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<EventPage>>,
    {
        let until = self.until.unwrap_or_else(unix_now);
        ytsched_common::time_window::check_window(Some(self.since), Some(until))
            .map_err(anyhow::Error::msg)?;
        let mut request = ListEvents {
            limit: Some(ListEvents::MAX_PAGE),
            cursor: None,
            // The window's events only: an attempt still running at its end counts up
            // to it, as one whose end comes later would.
            filter: EventFilter {
                since: Some(self.since),
                until: Some(until),
                ..Default::default()
            },
        };
        // Summed page by page: what is held is per attempt, not per event.
        let mut sum = UsageSum::new(self.by, self.since, until);
        loop {
            let page = fetch(request.clone()).await?;
            for e in &page.events {
                sum.add(e);
            }
            if !page.more {
                break;
            }
            request.cursor = Some(page.cursor);
        }
        Ok(UsageReport {
            by: self.by,
            since: self.since,
            until,
            rows: sum.rows(),
        })
    }
}

const HEADER: [&str; 14] = [
    "group",
    "cpu_hours",
    "memory_gib_hours",
    "gpu_hours",
    "completed",
    "failed",
    "aborted",
    "preempted",
    "hours_lost_to_preemption",
    "operations",
    "wait_p50_s",
    "wait_p95_s",
    "fair_share_attainment",
    "bytes_fetched",
];

fn cells(r: &UsageRow) -> [String; 14] {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
    [
        r.group.clone(),
        format!("{:.3}", r.cpu_hours),
        format!("{:.3}", r.memory_gib_hours),
        format!("{:.3}", r.gpu_hours),
        r.jobs_completed.to_string(),
        r.jobs_failed.to_string(),
        r.jobs_aborted.to_string(),
        r.jobs_preempted.to_string(),
        format!("{:.3}", r.hours_lost_to_preemption),
        r.operations.to_string(),
        opt(r.wait_p50_s),
        opt(r.wait_p95_s),
        r.fair_share_attainment
            .map_or(String::new(), |v| format!("{v:.3}")),
        r.bytes_fetched.to_string(),
    ]
}

impl Tabular for UsageReport {
    fn table(&self) -> Table {
        let mut t = Table::new();
        t.set_header(HEADER.to_vec());
        for r in &self.rows {
            t.add_row(cells(r).to_vec());
        }
        t
    }

    fn csv(&self) -> Option<String> {
        let mut out = HEADER.join(",");
        out.push('\n');
        for r in &self.rows {
            let line: Vec<String> = cells(r).iter().map(|c| csv_field(c)).collect();
            out.push_str(&line.join(","));
            out.push('\n');
        }
        Some(out)
    }
}

/// A CSV field, quoted when it holds a comma, quote or line break (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_a_header_and_quotes_what_needs_it() {
        let report = UsageReport {
            by: GroupBy::Pool,
            since: 0,
            until: 1,
            rows: vec![UsageRow {
                group: "physical/a,b".into(),
                cpu_hours: 1.5,
                jobs_completed: 2,
                wait_p50_s: Some(3.0),
                bytes_fetched: 1024,
                ..Default::default()
            }],
        };
        let csv = report.csv().unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next().unwrap(), HEADER.join(","));
        assert_eq!(
            lines.next().unwrap(),
            "\"physical/a,b\",1.500,0.000,0.000,2,0,0,0,0.000,0,3.0,,,1024"
        );
    }
}
