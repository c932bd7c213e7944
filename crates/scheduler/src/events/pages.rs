//! `list_events`: pages of the event log, oldest first, read from its stream outside the
//! core lock. Each stream message is one batch of events (a write round), so a cursor
//! is a message and a place inside it: `<stream sequence>:<index>`. A page reads at most
//! `MAX_MESSAGES_PER_PAGE` messages and `MAX_PAGE_BYTES` of events, however much the
//! filter skips, so no answer grows with the log.

use async_nats::jetstream::stream::{self, Stream};
use ytsched_common::api::{ApiError, ApiRequest, ApiResponse, EventPage, ListEvents};
use ytsched_common::codec::{decode, encode};
use ytsched_common::event_record::{EventBatch, EventFilter};
use ytsched_common::protocol::PROTOCOL_VERSION;

/// Messages (write rounds) one page reads at most.
const MAX_MESSAGES_PER_PAGE: u64 = 256;
/// Messages read at once.
const READS_IN_FLIGHT: u64 = 16;
/// The most a page's events may take encoded: well inside NATS's 1 MiB payload.
const MAX_PAGE_BYTES: usize = 512 * 1024;

/// Where a page starts: a message and the first event in it to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    seq: u64,
    index: usize,
}

impl Cursor {
    fn parse(text: &str) -> Result<Cursor, ApiError> {
        let bad = || {
            let shown = ytsched_common::quote::quote(text, ytsched_common::quote::QUOTE_CHARS);
            ApiError::new(format!("cursor '{shown}' is not one this scheduler gave"))
        };
        let (seq, index) = text.split_once(':').ok_or_else(bad)?;
        Ok(Cursor {
            seq: seq.parse().map_err(|_| bad())?,
            index: index.parse().map_err(|_| bad())?,
        })
    }

    fn text(self) -> String {
        format!("{}:{}", self.seq, self.index)
    }
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("the event log cannot be read now: {e}"))
}

/// Answers `list_events`: everyone may read the log (operation metadata, SPEC 5.11).
pub async fn answer(log: &Stream, payload: &[u8]) -> Vec<u8> {
    let result = match decode::<ApiRequest<ListEvents>>(payload) {
        Ok(req) => match check_filter(&req.body.filter) {
            Ok(()) => list_events(log, req.body, Some(MAX_PAGE_BYTES)).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(ApiError::new(format!("malformed list_events request: {e}"))),
    };
    encode(&ApiResponse {
        protocol_version: PROTOCOL_VERSION,
        result,
    })
    .unwrap_or_default()
}

/// One page of events matching the request's filter, of at most `max_bytes` encoded
/// where it goes out as one message (`None`: read in the scheduler itself, where
/// measuring each event would only encode it again for nothing).
pub async fn list_events(
    log: &Stream,
    req: ListEvents,
    max_bytes: Option<usize>,
) -> Result<EventPage, ApiError> {
    let limit = req
        .limit
        .unwrap_or(ListEvents::DEFAULT_PAGE)
        .clamp(1, ListEvents::MAX_PAGE) as usize;
    let mut log = log.clone();
    let state = log.info().await.map_err(unavailable)?.state.clone();
    let first = state.first_sequence.max(1);
    let last = state.last_sequence;
    let mut at = match req.cursor.as_deref() {
        Some(text) => Cursor::parse(text)?,
        None => Cursor {
            seq: match req.filter.since {
                Some(since) => first_written_since(&log, first, last, since).await?,
                None => first,
            },
            index: 0,
        },
    };
    // Expired from under a follower: go on from the oldest still kept.
    if at.seq < first {
        at = Cursor {
            seq: first,
            index: 0,
        };
    }
    let mut events = Vec::new();
    let mut bytes = 0usize;
    let mut read = 0u64;
    while at.seq <= last && read < MAX_MESSAGES_PER_PAGE {
        let top = (at.seq + READS_IN_FLIGHT - 1).min(last);
        let batches = read_batches(&log, at.seq, top).await?;
        for (seq, batch) in batches {
            read += 1;
            let Some(batch) = batch else {
                at = Cursor {
                    seq: seq + 1,
                    index: 0,
                };
                continue;
            };
            let from = if seq == at.seq { at.index } else { 0 };
            for (index, e) in batch.events.into_iter().enumerate().skip(from) {
                if req.filter.until.is_some_and(|until| e.at >= until) {
                    // Written in order: nothing later is before `until`.
                    return Ok(EventPage {
                        events,
                        cursor: Cursor { seq, index }.text(),
                        more: false,
                    });
                }
                if !req.filter.admits(&e) {
                    continue;
                }
                let size = max_bytes.map_or(0, |_| encode(&e).map_or(usize::MAX, |b| b.len()));
                let full = max_bytes.is_some_and(|max| bytes.saturating_add(size) > max);
                if events.len() == limit || (!events.is_empty() && full) {
                    return Ok(EventPage {
                        events,
                        cursor: Cursor { seq, index }.text(),
                        more: true,
                    });
                }
                bytes = bytes.saturating_add(size);
                events.push(e);
            }
            at = Cursor {
                seq: seq + 1,
                index: 0,
            };
        }
    }
    Ok(EventPage {
        events,
        cursor: at.text(),
        more: at.seq <= last,
    })
}

/// Messages `low..=top`, in order; `None` where one is gone (expired) or unreadable as
/// a batch (a newer schema this scheduler does not know).
async fn read_batches(
    log: &Stream,
    low: u64,
    top: u64,
) -> Result<Vec<(u64, Option<EventBatch>)>, ApiError> {
    let reads = (low..=top).map(|seq| async move {
        match log.get_raw_message(seq).await {
            Ok(m) => Ok((seq, decode::<EventBatch>(&m.payload).ok())),
            Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => Ok((seq, None)),
            Err(e) => Err(unavailable(e)),
        }
    });
    futures::future::try_join_all(reads).await
}

/// The first message written at or after `since` (unix ms), by its stream timestamp:
/// every event in an earlier message happened before `since`, as events are written
/// after they happen. `last + 1` when there is none.
async fn first_written_since(
    log: &Stream,
    first: u64,
    last: u64,
    since: u64,
) -> Result<u64, ApiError> {
    let (mut low, mut high) = (first, last + 1);
    while low < high {
        let mid = low + (high - low) / 2;
        let written_before = match log.get_raw_message(mid).await {
            Ok(m) => {
                let ms = m.time.unix_timestamp_nanos() / 1_000_000;
                ms < i128::from(since)
            }
            // Gone (expired meanwhile): it was older than anything kept.
            Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => true,
            Err(e) => return Err(unavailable(e)),
        };
        if written_before {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    Ok(low)
}

/// Whether `filter` is one a page can be asked for: a window that ends before it starts
/// is a mistake worth naming.
pub fn check_filter(filter: &EventFilter) -> Result<(), ApiError> {
    ytsched_common::time_window::check_window(filter.since, filter.until).map_err(ApiError::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_foreign_ones_are_refused_by_text() {
        let c = Cursor { seq: 42, index: 7 };
        assert_eq!(Cursor::parse(&c.text()).unwrap(), c);
        for bad in ["", "42", "a:1", "1:b", "1:2:3"] {
            let e = Cursor::parse(bad).unwrap_err();
            assert!(e.message.contains(bad), "{}", e.message);
        }
    }

    #[test]
    fn a_window_that_ends_before_it_starts_is_refused() {
        let f = EventFilter {
            since: Some(10),
            until: Some(5),
            ..Default::default()
        };
        assert!(check_filter(&f).is_err());
        assert!(check_filter(&EventFilter::default()).is_ok());
    }
}
