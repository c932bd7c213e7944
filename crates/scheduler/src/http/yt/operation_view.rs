//! An operation as YTsaurus's `get_operation` and `list_operations` show it: its
//! attributes by YTsaurus's names (`authenticated_user`, `brief_spec`,
//! `runtime_parameters`, `progress` with job counts by state, `result` with its error),
//! times as ISO 8601 strings.

use super::error::{code, YtError};
use serde_json::{json, Map, Value};
use ytsched_common::api::{JobCounts, OperationInfo};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::states::OperationState;

/// Every attribute `get_operation` answers; a filter may name any of them.
pub const ATTRIBUTES: &[&str] = &[
    "id",
    "type",
    "operation_type",
    "state",
    "authenticated_user",
    "start_time",
    "finish_time",
    "spec",
    "brief_spec",
    "runtime_parameters",
    "progress",
    "brief_progress",
    "result",
    "events",
    "suspended",
    "pool",
    "weight",
    "title",
    "unschedulable_reason",
    "alerts",
];

/// What a list entry holds unless `attributes` says otherwise.
pub const BRIEF: &[&str] = &[
    "id",
    "type",
    "state",
    "authenticated_user",
    "start_time",
    "finish_time",
    "brief_spec",
    "brief_progress",
    "runtime_parameters",
    "suspended",
    "pool",
    "weight",
];

/// A time as YTsaurus writes it: `2026-11-27T12:00:00.123000Z`.
pub fn iso_time(ms: UnixMillis) -> String {
    let t = time::OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms as i64);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// A time parameter: an ISO 8601 string, or YTsaurus's integer microseconds.
pub fn parse_time(name: &str, v: &Value) -> Result<UnixMillis, YtError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(|us| us / 1000)
            .ok_or_else(|| YtError::bad_parameter(name, "must be a time")),
        Value::String(s) => {
            time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map(|t| (t.unix_timestamp_nanos() / 1_000_000).max(0) as u64)
                .map_err(|e| {
                    YtError::bad_parameter(name, format!("'{s}' is not an ISO 8601 time: {e}"))
                })
        }
        _ => Err(YtError::bad_parameter(name, "must be a time")),
    }
}

/// Job counts by YTsaurus's state names; every name its progress printer reads is there.
pub fn job_counts(j: &JobCounts) -> Value {
    json!({
        "running": j.running,
        "completed": j.completed,
        "pending": j.waiting,
        "failed": j.failed,
        "aborted": j.aborted,
        "lost": 0,
        "total": j.total,
    })
}

/// An operation's end as YTsaurus's `result`: error code 0 for success.
fn result(info: &OperationInfo) -> Value {
    let error = match info.state {
        OperationState::Completed => json!({"code": 0, "message": "", "attributes": {}}),
        OperationState::Failed | OperationState::Aborted => YtError::new(
            code::GENERIC,
            info.error
                .clone()
                .unwrap_or_else(|| format!("operation {}", info.state)),
        )
        .to_json(),
        _ => return json!({}),
    };
    json!({ "error": error })
}

fn attribute(info: &OperationInfo, name: &str, now: UnixMillis) -> Option<Value> {
    let progress = || json!({"jobs": job_counts(&info.jobs), "build_time": iso_time(now)});
    Some(match name {
        "id" => json!(info.id),
        "type" | "operation_type" => json!("vanilla"),
        "state" => json!(info.state.name()),
        "authenticated_user" => json!(info.user),
        "start_time" => json!(iso_time(info.start_time)),
        "finish_time" => json!(iso_time(info.finish_time?)),
        "spec" => serde_json::to_value(&info.spec).ok()?,
        "brief_spec" => json!({
            "title": info.spec.title,
            "pool": info.pool,
            "user": info.user,
            "task_names": info.spec.tasks.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        }),
        "runtime_parameters" => {
            let per_tree: Map<String, Value> = info
                .pool_trees
                .iter()
                .map(|(tree, pool)| (tree.clone(), json!({"pool": pool, "weight": info.weight})))
                .collect();
            json!({
                "owners": info.spec.owners,
                "weight": info.weight,
                "pool": info.pool,
                "scheduling_options_per_pool_tree": per_tree,
            })
        }
        "progress" | "brief_progress" => progress(),
        "result" => result(info),
        "events" => Value::Array(
            info.history
                .iter()
                .map(|h| json!({"time": iso_time(h.time), "state": event_state(&h.event), "message": h.event}))
                .collect(),
        ),
        "suspended" => json!(info.suspended),
        "pool" => json!(info.pool),
        "weight" => json!(info.weight),
        "title" => json!(info.spec.title.as_ref()?),
        "unschedulable_reason" => json!(info.unschedulable_reason.as_ref()?),
        // ytsched refuses a spec it cannot honour rather than run it with an alert.
        "alerts" => json!({}),
        _ => return None,
    })
}

/// The state an event of the history names, as YTsaurus's `events` list has it.
fn event_state(event: &str) -> &str {
    let word = event.split([' ', ':', ';']).next().unwrap_or(event);
    match word {
        "submitted" => "starting",
        w if [
            "pending",
            "running",
            "completed",
            "failed",
            "aborted",
            "suspended",
            "resumed",
        ]
        .contains(&w) =>
        {
            w
        }
        _ => "running",
    }
}

/// The attributes named (all of `default` when none are), in that order; names this
/// operation has no value for are left out, as YTsaurus leaves out a running
/// operation's `finish_time`.
pub fn view(
    info: &OperationInfo,
    names: Option<&[String]>,
    default: &[&str],
    now: UnixMillis,
) -> Value {
    let mut out = Map::new();
    let mut put = |name: &str| {
        if let Some(v) = attribute(info, name, now) {
            out.insert(name.to_string(), v);
        }
    };
    match names {
        Some(names) => names.iter().for_each(|n| put(n)),
        None => default.iter().for_each(|n| put(n)),
    }
    Value::Object(out)
}

/// The `attributes` parameter: a list of names, each one ytsched knows.
pub fn attribute_filter(v: Option<&Value>) -> Result<Option<Vec<String>>, YtError> {
    let Some(v) = v.map(super::yson_value::plain) else {
        return Ok(None);
    };
    if v.is_null() {
        return Ok(None);
    }
    let names: Vec<String> = serde_json::from_value(v.clone())
        .map_err(|_| YtError::bad_parameter("attributes", "must be a list of attribute names"))?;
    if names.len() > 64 {
        return Err(YtError::bad_parameter(
            "attributes",
            "names more than 64 attributes",
        ));
    }
    Ok(Some(names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_8601_and_read_back() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(iso_time(1_795_000_000_123), "2026-11-18T11:06:40.123000Z");
        let back = parse_time("t", &json!(iso_time(1_795_000_000_123))).unwrap();
        assert_eq!(back, 1_795_000_000_123);
        assert_eq!(parse_time("t", &json!(1_000_000u64)).unwrap(), 1000);
        assert!(parse_time("t", &json!("yesterday")).is_err());
    }
}
