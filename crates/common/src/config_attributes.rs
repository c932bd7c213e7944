//! What pool and tree attribute maps share: the error that names the attribute, alias
//! resolution, and parsing a map into a typed configuration.

/// An attribute value that is wrong on its own (wrong type, out of range, unknown name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{subject}: attribute '{attribute}': {message}")]
pub struct AttributeError {
    /// What carries the attribute, e.g. `pool 'testing'` or `pool tree 'default'`.
    pub subject: String,
    pub attribute: String,
    pub message: String,
}

pub(crate) fn canonical<'a>(aliases: &[(&'a str, &'a str)], name: &'a str) -> &'a str {
    aliases
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, canonical)| *canonical)
        .unwrap_or(name)
}

/// Parses an attribute map, naming the attribute whose value is wrong.
pub(crate) fn from_attributes<T: serde::de::DeserializeOwned>(
    subject: &str,
    aliases: &[(&str, &str)],
    value: serde_json::Value,
) -> Result<T, AttributeError> {
    let value = match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .map(|(k, v)| (canonical(aliases, &k).to_string(), v))
                .collect(),
        ),
        serde_json::Value::Null => serde_json::Value::Object(Default::default()),
        other => {
            return Err(AttributeError {
                subject: subject.to_string(),
                attribute: "@".into(),
                message: format!("attributes must be a map, got {other}"),
            })
        }
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde names an unknown field in its message; the path is then the parent.
        let attribute = match inner.strip_prefix("unknown field `") {
            Some(rest) => rest.split('`').next().unwrap_or("?").to_string(),
            None if path == "." => "@".into(),
            None => path,
        };
        AttributeError {
            subject: subject.to_string(),
            attribute,
            message: inner,
        }
    })
}
