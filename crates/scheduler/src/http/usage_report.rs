//! The web UI's usage page (`/api/usage`, SPEC 5.16): `ytsched usage`'s figures per
//! group over a window, summed here from the event log page by page, with each pool's
//! usage and fair share over the window for its chart. One report is made at a time and
//! each reads a bounded number of events, so the page cannot be made to hold the
//! scheduler busy with a year of log.

use crate::events::pages::list_events;
use async_nats::jetstream::stream::Stream;
use serde::Serialize;
use std::collections::BTreeMap;
use ytsched_common::api::{ApiError, ListEvents};
use ytsched_common::event_record::{Event, EventFilter};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::usage::{GroupBy, UsageRow, UsageSum};

/// Events one report reads at most.
pub const MAX_REPORT_EVENTS: usize = 1_000_000;
/// Points per pool's chart at most: samples are averaged into this many spans.
const CHART_POINTS: u64 = 120;

#[derive(Debug, Serialize)]
pub struct UsagePage {
    pub by: GroupBy,
    pub since: UnixMillis,
    pub until: UnixMillis,
    pub rows: Vec<UsageRow>,
    /// Per pool (`<tree>/<pool>`) among the rows, its usage and fair share ratios over
    /// the window (grouped by pool only).
    pub series: BTreeMap<String, Vec<SharePoint>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SharePoint {
    pub at: UnixMillis,
    pub usage: f64,
    pub fair_share: f64,
}

/// The report for `[since, until)` by `by`.
pub async fn report(
    log: &Stream,
    by: GroupBy,
    since: UnixMillis,
    until: UnixMillis,
) -> Result<UsagePage, ApiError> {
    ytsched_common::time_window::check_window(Some(since), Some(until)).map_err(ApiError::new)?;
    let mut sum = UsageSum::new(by, since, until);
    let mut spans = Spans::new(since, until);
    let mut request = ListEvents {
        limit: Some(ListEvents::MAX_PAGE),
        cursor: None,
        // The window's events only: an attempt still running at its end counts up to
        // it, as one whose end comes later would.
        filter: EventFilter {
            since: Some(since),
            until: Some(until),
            ..Default::default()
        },
    };
    let mut read = 0usize;
    loop {
        let page = list_events(log, request.clone(), None).await?;
        read += page.events.len();
        for e in &page.events {
            sum.add(e);
            if let Event::PoolShares { tree, pools } = &e.event {
                for p in pools {
                    spans.add(&format!("{tree}/{}", p.pool), e.at, p);
                }
            }
        }
        if !page.more {
            break;
        }
        if read >= MAX_REPORT_EVENTS {
            return Err(ApiError::limit_reached(format!(
                "the window holds more than {MAX_REPORT_EVENTS} events; narrow it, or use `ytsched usage`"
            )));
        }
        request.cursor = Some(page.cursor);
    }
    let rows = sum.rows();
    let series = match by {
        GroupBy::Pool => rows
            .iter()
            .filter_map(|r| Some((r.group.clone(), spans.points(&r.group)?)))
            .collect(),
        _ => BTreeMap::new(),
    };
    Ok(UsagePage {
        by,
        since,
        until,
        rows,
        series,
    })
}

/// Pools' samples averaged into `CHART_POINTS` spans of the window.
struct Spans {
    since: UnixMillis,
    width: UnixMillis,
    /// Per pool, per span: summed usage, summed fair share, samples.
    sums: BTreeMap<String, BTreeMap<u64, (f64, f64, u32)>>,
}

impl Spans {
    fn new(since: UnixMillis, until: UnixMillis) -> Self {
        Spans {
            since,
            width: ((until - since) / CHART_POINTS).max(1),
            sums: BTreeMap::new(),
        }
    }

    fn add(&mut self, pool: &str, at: UnixMillis, p: &ytsched_common::event_record::PoolShares) {
        if at < self.since {
            return;
        }
        let span = (at - self.since) / self.width;
        if span >= CHART_POINTS {
            return;
        }
        let s = self
            .sums
            .entry(pool.to_string())
            .or_default()
            .entry(span)
            .or_default();
        s.0 += p.usage_ratio;
        s.1 += p.fair_share_ratio;
        s.2 += 1;
    }

    fn points(&self, pool: &str) -> Option<Vec<SharePoint>> {
        let spans = self.sums.get(pool)?;
        Some(
            spans
                .iter()
                .map(|(span, (usage, fair, n))| SharePoint {
                    at: self.since + span * self.width,
                    usage: usage / f64::from(*n),
                    fair_share: fair / f64::from(*n),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ytsched_common::event_record::PoolShares;

    fn shares(usage: f64, fair: f64) -> PoolShares {
        PoolShares {
            pool: "p".into(),
            fair_share_ratio: fair,
            usage_ratio: usage,
            demand_ratio: fair,
        }
    }

    #[test]
    fn samples_are_averaged_into_at_most_the_charts_points() {
        let mut s = Spans::new(0, 120_000);
        for (at, u) in [
            (0, 0.2),
            (500, 0.4),
            (1_000, 0.6),
            (119_999, 1.0),
            (120_000, 9.0),
        ] {
            s.add("t/p", at, &shares(u, 0.5));
        }
        let points = s.points("t/p").unwrap();
        assert_eq!(points.len(), 3, "{points:?}");
        assert!((points[0].usage - 0.3).abs() < 1e-9, "{points:?}");
        assert_eq!(points[1].at, 1_000);
        assert_eq!(points[2].usage, 1.0, "the window's end is out");
        assert!(s.points("t/q").is_none());
    }
}
