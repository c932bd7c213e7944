//! The time window of an event-log read (`ytsched events`, `ytsched usage`, the web UI's
//! usage page): how a time is written, and the one rule a window must keep. One place,
//! so the CLI, the API and the page read and refuse alike.

use crate::protocol::UnixMillis;
use crate::units::DurationMs;

/// A time as `--since`/`--until` (and the usage page) take it: unix milliseconds, an RFC
/// 3339 time, or how long before `now` (`7d`, `90m`).
pub fn parse_time(s: &str, now: UnixMillis) -> Result<UnixMillis, String> {
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(ms);
    }
    if let Ok(t) = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        let ms = t.unix_timestamp_nanos() / 1_000_000;
        return u64::try_from(ms).map_err(|_| format!("'{s}' is before 1970"));
    }
    match s.parse::<DurationMs>() {
        Ok(ago) => Ok(now.saturating_sub(ago.0)),
        Err(_) => Err(format!(
            "'{s}' is not a time: give unix milliseconds, an RFC 3339 time (2026-11-20T09:00:00Z) or how long ago (7d, 90m)"
        )),
    }
}

/// A window that ends before it starts is a mistake worth naming.
pub fn check_window(since: Option<UnixMillis>, until: Option<UnixMillis>) -> Result<(), String> {
    match (since, until) {
        (Some(since), Some(until)) if until <= since => {
            Err(format!("--until ({until}) must be after --since ({since})"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_milliseconds_rfc3339_or_how_long_ago() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time("1700000000000", now).unwrap(), 1_700_000_000_000);
        assert_eq!(
            parse_time("2026-11-20T09:00:00Z", now).unwrap(),
            1_795_165_200_000
        );
        assert_eq!(parse_time("1h", now).unwrap(), now - 3_600_000);
        let e = parse_time("yesterday", now).unwrap_err();
        assert!(e.contains("'yesterday'"), "{e}");
    }

    #[test]
    fn a_window_that_ends_before_it_starts_is_refused_naming_both() {
        let e = check_window(Some(10), Some(5)).unwrap_err();
        assert!(e.contains("(5)") && e.contains("(10)"), "{e}");
        assert!(check_window(Some(10), Some(10)).is_err());
        assert!(check_window(Some(5), Some(10)).is_ok());
        assert!(check_window(None, Some(5)).is_ok() && check_window(Some(5), None).is_ok());
    }
}
