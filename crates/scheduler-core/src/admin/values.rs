//! The values admin paths read and write: a JSON tree navigated by path segments, and
//! edits of an attribute map (set or remove at a path), checked before they apply.

use crate::ConfigError;
use serde_json::{Map, Value};

pub(crate) fn navigate<'a>(
    mut v: &'a Value,
    sub: &[String],
    path_for_errors: &str,
) -> Result<&'a Value, ConfigError> {
    for key in sub {
        v = match v {
            Value::Object(m) => m.get(key),
            Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        }
        .ok_or_else(|| ConfigError::invalid(format!("{path_for_errors}: no '{key}' here")))?;
    }
    Ok(v)
}

/// All of `attrs`, or one attribute and the path `sub` inside it.
pub(crate) fn select(
    attrs: Value,
    attribute: Option<String>,
    sub: &[String],
    owner: &str,
    path: &str,
) -> Result<Value, ConfigError> {
    let Some(a) = attribute else {
        return Ok(attrs);
    };
    let v = attrs.get(&a).ok_or_else(|| {
        ConfigError::not_found(format!("{path}: {owner} has no attribute '{a}' set"))
    })?;
    navigate(v, sub, path).cloned()
}

/// Sets `value` at `sub` inside `root`, creating maps on the way.
pub(crate) fn set_nested(
    root: &mut Value,
    sub: &[String],
    value: Value,
) -> Result<(), ConfigError> {
    let Some((last, init)) = sub.split_last() else {
        *root = value;
        return Ok(());
    };
    let mut cur = root;
    for key in init {
        if cur.is_null() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .ok_or_else(|| ConfigError::invalid(format!("'{key}' is not inside a map")))?
            .entry(key.clone())
            .or_insert(Value::Null);
    }
    if cur.is_null() {
        *cur = Value::Object(Map::new());
    }
    cur.as_object_mut()
        .ok_or_else(|| ConfigError::invalid(format!("'{last}' is not inside a map")))?
        .insert(last.clone(), value);
    Ok(())
}

pub(crate) fn remove_nested(root: &mut Value, sub: &[String]) -> Result<(), ConfigError> {
    let (last, init) = sub.split_last().expect("caller passes a non-empty path");
    let mut cur = root;
    for key in init {
        cur = cur
            .get_mut(key)
            .ok_or_else(|| ConfigError::invalid(format!("no '{key}' here")))?;
    }
    cur.as_object_mut()
        .and_then(|m| m.remove(last))
        .map(|_| ())
        .ok_or_else(|| ConfigError::invalid(format!("no '{last}' here")))
}

/// Pool attributes the scheduler reports but an admin does not set.
pub(crate) const READ_ONLY_POOL_ATTRIBUTES: [&str; 2] = ["is_ephemeral", "parent_name"];

/// A change to an attribute map: set a value at a path (the whole map when `None`), or
/// remove the value at a path.
pub(crate) enum AttributeEdit {
    Set(Option<Vec<String>>, Value),
    Remove(Vec<String>),
}

impl AttributeEdit {
    pub(crate) fn apply(self, mut attrs: Value) -> Result<Value, ConfigError> {
        match self {
            AttributeEdit::Set(None, value) => return Ok(value),
            AttributeEdit::Set(Some(path), value) => set_nested(&mut attrs, &path, value)?,
            AttributeEdit::Remove(path) => remove_nested(&mut attrs, &path).map_err(|_| {
                ConfigError::invalid(format!("attribute '{}' is not set", path.join("/")))
            })?,
        }
        Ok(attrs)
    }
}

pub(crate) fn attribute_path(attribute: &str, sub: Vec<String>) -> Vec<String> {
    std::iter::once(attribute.to_string()).chain(sub).collect()
}
