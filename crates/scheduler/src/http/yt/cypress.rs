//! Cypress commands on the paths ytsched owns: `get`, `list`, `exists`, `set`, `create`
//! and `remove` under `//sys/pool_trees` (and `//sys/cluster_nodes`), made into the
//! scheduler's admin calls with the same rights; `get`, `list` and `exists` under
//! `//sys/scheduler/orchid`, read from the published orchid. Any other path is refused,
//! naming it.

use super::error::{code, Missing, YtError};
use super::wire::{bool_param, optional_string, string_param, Output, YtCall};
use super::yson_value::{parse_yson, plain};
use super::Ctx;
use serde_json::{json, Map, Value};
use ytsched_common::api::{self, ObjectType};
use ytsched_common::names::{PoolName, TreeName};

const ORCHID: &str = "//sys/scheduler/orchid";
const OWNED: &[&str] = &["//sys/pool_trees", "//sys/cluster_nodes"];

fn under(path: &str, root: &str) -> bool {
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The `path` parameter, which must be one ytsched serves.
fn path_of(call: &YtCall) -> Result<String, YtError> {
    let path = string_param(call, "path")?
        .trim_end_matches('/')
        .to_string();
    if under(&path, ORCHID) || OWNED.iter().any(|root| under(&path, root)) {
        Ok(path)
    } else {
        Err(YtError::unsupported_path(&path))
    }
}

/// The `path` of a command that changes it: never the orchid, which is read-only.
fn writable_path(call: &YtCall) -> Result<String, YtError> {
    let path = path_of(call)?;
    if under(&path, ORCHID) {
        return Err(YtError::new(
            code::GENERIC,
            format!("{path}: the orchid is read-only"),
        ));
    }
    Ok(path)
}

fn api_error(e: api::ApiError, path: &str) -> YtError {
    let e = YtError::from_api(e, Missing::Node);
    // The configuration's own words for a name taken (its error has no kind of its own).
    if e.code != code::AUTHORIZATION && e.message.contains("already exists") {
        return YtError {
            code: code::ALREADY_EXISTS,
            ..e
        }
        .with("path", path);
    }
    e.with("path", path)
}

/// The orchid's value at `path` (below `//sys/scheduler/orchid`).
async fn orchid_at(ctx: &Ctx<'_>, path: &str) -> Result<Value, YtError> {
    let orchid = ctx.face.view.orchid().await;
    let mut v: Value = serde_json::from_slice(&orchid.json)
        .map_err(|e| YtError::new(code::GENERIC, format!("the orchid cannot be read: {e}")))?;
    let rest = path.strip_prefix(ORCHID).unwrap_or("");
    for token in rest.split('/').filter(|t| !t.is_empty()) {
        v = match v {
            Value::Object(mut m) => m.remove(token),
            Value::Array(mut a) => token
                .parse::<usize>()
                .ok()
                .filter(|i| *i < a.len())
                .map(|i| a.swap_remove(i)),
            _ => None,
        }
        .ok_or_else(|| {
            YtError::new(
                code::RESOLVE,
                format!("node {path} has no child with key '{token}'"),
            )
            .with("path", path)
        })?;
    }
    Ok(v)
}

/// `get` and `list` answer `{"value": ..}`, or the bare value with `return_only_value`.
fn value_answer(call: &YtCall, v: Value) -> Result<Output, YtError> {
    Ok(Output::Structured(
        if bool_param(call, "return_only_value")? {
            v
        } else {
            json!({ "value": v })
        },
    ))
}

async fn admin_value(ctx: &Ctx<'_>, path: &str) -> Result<Value, YtError> {
    let text = ctx
        .call(api::AdminGet {
            path: path.to_string(),
        })
        .await
        .map_err(|e| api_error(e, path))?;
    serde_json::from_str(&text).map_err(|e| YtError::new(code::GENERIC, format!("{path}: {e}")))
}

pub async fn get(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = path_of(call)?;
    if under(&path, ORCHID) {
        return value_answer(call, orchid_at(ctx, &path).await?);
    }
    let value = admin_value(ctx, &path).await?;
    let names: Option<Vec<String>> = match call.params.get("attributes").map(plain) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value(v.clone())
                .map_err(|_| YtError::bad_parameter("attributes", "must be a list of names"))?,
        ),
    };
    let value = match names.filter(|n| !n.is_empty()) {
        None => value,
        Some(names) => {
            let all = admin_value(ctx, &format!("{path}/@")).await?;
            let attrs: Map<String, Value> = names
                .iter()
                .filter_map(|n| Some((n.clone(), all.get(n)?.clone())))
                .collect();
            json!({"$attributes": attrs, "$value": value})
        }
    };
    value_answer(call, value)
}

pub async fn list(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = path_of(call)?;
    let names = if under(&path, ORCHID) {
        match orchid_at(ctx, &path).await? {
            Value::Object(m) => m.keys().cloned().collect(),
            _ => {
                return Err(YtError::new(
                    code::GENERIC,
                    format!("{path} is not a map: it cannot be listed"),
                ))
            }
        }
    } else {
        ctx.call(api::AdminList { path: path.clone() })
            .await
            .map_err(|e| api_error(e, &path))?
    };
    value_answer(call, json!(names))
}

pub async fn exists(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = path_of(call)?;
    let found = if under(&path, ORCHID) {
        orchid_at(ctx, &path).await.is_ok()
    } else {
        ctx.call(api::AdminExists { path: path.clone() })
            .await
            .map_err(|e| api_error(e, &path))?
    };
    Ok(Output::Structured(json!({ "value": found })))
}

/// `set`'s value: its input, in its `input_format` (JSON or YSON).
fn input_value(call: &YtCall) -> Result<Value, YtError> {
    let format = call
        .params
        .get("input_format")
        .map(plain)
        .and_then(Value::as_str)
        .unwrap_or("yson");
    let value = match format {
        "json" => serde_json::from_slice(&call.input)
            .map_err(|e| YtError::bad_parameter("input", format!("not valid JSON: {e}")))?,
        "yson" => parse_yson(&call.input).map_err(|e| YtError::bad_parameter("input", e))?,
        other => {
            return Err(YtError::bad_parameter(
                "input_format",
                format!("ytsched reads json or yson, not '{other}'"),
            ))
        }
    };
    Ok(super::spec::plain_all(value))
}

pub async fn set(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = writable_path(call)?;
    let value = input_value(call)?.to_string();
    ctx.call(api::AdminSet {
        path: path.clone(),
        value,
    })
    .await
    .map_err(|e| api_error(e, &path))?;
    Ok(Output::Nothing)
}

pub async fn remove(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = writable_path(call)?;
    match ctx.call(api::AdminRemove { path: path.clone() }).await {
        Err(e) if e.kind == api::ErrorKind::NotFound && bool_param(call, "force")? => {
            Ok(Output::Nothing)
        }
        r => r.map(|()| Output::Nothing).map_err(|e| api_error(e, &path)),
    }
}

/// `create` of a `scheduler_pool` or `scheduler_pool_tree` object: its name, tree and
/// parent come from its attributes, as YTsaurus takes them.
pub async fn create(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let object_type = match string_param(call, "type")? {
        "scheduler_pool" => ObjectType::SchedulerPool,
        "scheduler_pool_tree" => ObjectType::SchedulerPoolTree,
        other => {
            return Err(YtError::new(
                code::GENERIC,
                format!("ytsched does not support creating objects of type '{other}': it creates scheduler_pool and scheduler_pool_tree"),
            )
            .with("type", other))
        }
    };
    let mut attributes = match call
        .params
        .get("attributes")
        .map(|a| super::spec::plain_all(a.clone()))
    {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(YtError::bad_parameter("attributes", "must be a map")),
    };
    let mut take = |key: &str| match attributes.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(YtError::bad_parameter(
            "attributes",
            format!("{key} must be a string"),
        )),
    };
    let name =
        take("name")?.ok_or_else(|| YtError::bad_parameter("attributes", "name is required"))?;
    let parent_name = take("parent_name")?
        .map(|p| PoolName::parse(&p).map_err(|e| YtError::bad_parameter("attributes", e)))
        .transpose()?;
    let pool_tree = take("pool_tree")?
        .map(|t| TreeName::parse(&t).map_err(|e| YtError::bad_parameter("attributes", e)))
        .transpose()?;
    let rest = (!attributes.is_empty()).then(|| Value::Object(attributes).to_string());
    let created = ctx
        .call(api::AdminCreate {
            object_type,
            name: name.clone(),
            parent_name,
            pool_tree: pool_tree.clone(),
            attributes: rest,
        })
        .await;
    let path = match &pool_tree {
        Some(tree) => format!("//sys/pool_trees/{tree}/{name}"),
        None => format!("//sys/pool_trees/{name}"),
    };
    match created {
        Err(e) if bool_param(call, "ignore_existing")? && e.message.contains("already exists") => {}
        r => r.map_err(|e| api_error(e, &path))?,
    }
    let _ = optional_string(call, "path")?;
    Ok(Output::Structured(
        json!({ "object_id": path, "node_id": path }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_paths_ytsched_owns_are_served_and_others_are_named() {
        assert!(under(
            "//sys/pool_trees/default/research/@weight",
            "//sys/pool_trees"
        ));
        assert!(under("//sys/pool_trees", "//sys/pool_trees"));
        assert!(!under("//sys/pool_trees_other", "//sys/pool_trees"));
        assert!(under("//sys/scheduler/orchid/scheduler", ORCHID));
        let e = YtError::unsupported_path("//home/alice");
        assert_eq!(e.code, code::RESOLVE);
        assert!(e.message.contains("'//home/alice'"));
    }
}
