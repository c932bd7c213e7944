//! A vanilla spec as YTsaurus's client writes it, made into ytsched's. The client adds
//! keys of its own to every spec (`started_by`, formats, `job_io`, empty lists);
//! those that carry nothing for a vanilla job on ytsched are dropped here. Every other
//! key is ytsched's or is refused by name: a spec never runs without something it asked
//! for. `secure_vault` becomes `YT_SECURE_VAULT_<KEY>` in each task's environment, as
//! YTsaurus hands it to jobs.

use super::error::{code, YtError};
use serde_json::{Map, Value};
use ytsched_common::spec::{ValidSpec, VanillaSpec};

/// Operation keys the client sets that mean nothing to ytsched whatever their value.
const IGNORED: &[&str] = &["started_by", "annotations", "description"];

/// Task keys about tables and formats, which a vanilla job on ytsched has none of.
const IGNORED_IN_TASK: &[&str] = &[
    "job_io",
    "input_format",
    "output_format",
    "format",
    "use_yamr_descriptors",
    "check_input_fully_consumed",
    "enable_input_table_index",
    "copy_files",
    "title",
];

/// Keys dropped only while they hold nothing (an empty list, map or null): set, they
/// ask for a feature ytsched lacks, and the spec is refused naming them.
const EMPTY_ONLY: &[&str] = &["output_table_paths", "acl", "secure_vault"];

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

fn strip(m: &mut Map<String, Value>, always: &[&str]) {
    m.retain(|k, v| {
        let v = super::yson_value::plain(v);
        !(always.contains(&k.as_str()) || (EMPTY_ONLY.contains(&k.as_str()) && is_empty(v)))
    });
}

/// Values with YT attributes (`<format=text>yson`) become the plain value.
pub(super) fn plain_all(v: Value) -> Value {
    match v {
        Value::Object(mut m) if m.contains_key("$value") => {
            plain_all(m.remove("$value").unwrap_or_default())
        }
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, plain_all(v))).collect()),
        Value::Array(a) => Value::Array(a.into_iter().map(plain_all).collect()),
        v => v,
    }
}

/// `secure_vault` into every task's environment.
fn move_secure_vault(spec: &mut Map<String, Value>) -> Result<(), YtError> {
    let Some(vault) = spec.remove("secure_vault") else {
        return Ok(());
    };
    let Value::Object(vault) = vault else {
        return Err(bad("secure_vault", "must be a map"));
    };
    let Some(Value::Object(tasks)) = spec.get_mut("tasks") else {
        return Ok(());
    };
    for task in tasks.values_mut().filter_map(Value::as_object_mut) {
        let env = task
            .entry("environment")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(env) = env.as_object_mut() else {
            return Err(bad("environment", "must be a map"));
        };
        for (k, v) in &vault {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            env.insert(format!("YT_SECURE_VAULT_{k}"), Value::String(v));
        }
    }
    Ok(())
}

fn bad(field: &str, why: impl std::fmt::Display) -> YtError {
    YtError::new(code::GENERIC, format!("spec: {field}: {why}")).with("field", field)
}

/// The client's spec as ytsched's, checked as a submitted spec is.
pub fn vanilla_spec(spec: Value) -> Result<ValidSpec, YtError> {
    let Value::Object(mut spec) = plain_all(spec) else {
        return Err(YtError::bad_parameter("spec", "must be a map"));
    };
    strip(&mut spec, IGNORED);
    move_secure_vault(&mut spec)?;
    if let Some(Value::Object(tasks)) = spec.get_mut("tasks") {
        for task in tasks.values_mut().filter_map(Value::as_object_mut) {
            strip(task, IGNORED_IN_TASK);
        }
    }
    let spec: VanillaSpec = serde_json::from_value(Value::Object(spec))
        .map_err(|e| YtError::new(code::GENERIC, format!("spec: {e} (ytsched runs vanilla operations; see docs/yt-compat.md for the keys it takes)")))?;
    ValidSpec::try_from(spec).map_err(|e| bad(&e.field, &e.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_clients_own_keys_are_dropped_and_a_real_ask_is_refused_by_name() {
        let spec = json!({
            "started_by": {"user": "alice", "pid": 1},
            "pool": "research",
            "secure_vault": {"TOKEN": "s3cret"},
            "tasks": {"t": {
                "command": "echo hi", "job_count": 2, "file_paths": [], "job_io": {},
                "output_format": {"$value": "yson", "$attributes": {"format": "text"}},
                "environment": {"A": "1"},
            }},
        });
        let valid = vanilla_spec(spec).unwrap();
        let task = &valid.tasks.iter().next().unwrap().1;
        assert_eq!(task.job_count, 2);
        assert_eq!(task.environment["YT_SECURE_VAULT_TOKEN"], "s3cret");
        assert_eq!(task.environment["A"], "1");
        // Files as the face resolves them (`file_paths::resolve_spec_files`).
        let digest = "ab".repeat(32);
        let with_files = json!({"tasks": {"t": {"command": "x", "job_count": 1, "file_paths": [
            {"digest": digest, "file_name": "run.py", "executable": true}], "layer_paths": [digest]}}});
        let valid = vanilla_spec(with_files).unwrap();
        let task = &valid.tasks.iter().next().unwrap().1;
        assert_eq!(task.file_paths[0].file_name.as_str(), "run.py");
        assert_eq!(task.layer_paths.len(), 1);
        let outputs = json!({"tasks": {"t": {"command": "x", "job_count": 1, "output_table_paths": ["//home/t"]}}});
        let e = vanilla_spec(outputs).unwrap_err();
        assert!(e.message.contains("output_table_paths"), "{}", e.message);
        let unknown = json!({"tasks": {"t": {"command": "x", "job_count": 1}}, "mapper": {}});
        assert!(vanilla_spec(unknown)
            .unwrap_err()
            .message
            .contains("mapper"));
    }
}
