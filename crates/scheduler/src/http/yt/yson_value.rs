//! YSON as the YTsaurus client speaks it, and JSON as the handlers read it. Parameters
//! come as YSON text or JSON; a value with attributes (`<format=text>yson`) becomes YT's
//! JSON form `{"$attributes": {..}, "$value": ..}`, so one tree type serves both. Answers
//! go out as JSON or YSON (text, pretty or binary); integers that fit stay `int64`, as
//! YTsaurus writes counts.

use serde_json::{Map, Number, Value};
use std::collections::BTreeMap;
use ytsaurus_yson::{YsonFormat, YsonNode, YsonValue};

/// Parses YSON text (parameters in a header or body).
pub fn parse_yson(bytes: &[u8]) -> Result<Value, String> {
    let v: YsonValue = ytsaurus_yson::from_slice(bytes, YsonFormat::Text)
        .map_err(|e| format!("not valid YSON text: {e}"))?;
    to_json(v)
}

fn to_json(v: YsonValue) -> Result<Value, String> {
    let node = match v.node {
        YsonNode::String(b) => Value::String(
            String::from_utf8(b).map_err(|_| "a string is not valid UTF-8".to_string())?,
        ),
        YsonNode::Int64(i) => Value::from(i),
        YsonNode::Uint64(u) => Value::from(u),
        YsonNode::Double(d) => Number::from_f64(d)
            .map(Value::Number)
            .ok_or_else(|| format!("{d} is not a finite number"))?,
        YsonNode::Boolean(b) => Value::Bool(b),
        YsonNode::Entity => Value::Null,
        YsonNode::List(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        YsonNode::Map(m) => Value::Object(map_to_json(m)?),
    };
    match v.attributes {
        None => Ok(node),
        Some(attrs) => {
            let mut m = Map::new();
            m.insert("$attributes".into(), Value::Object(map_to_json(attrs)?));
            m.insert("$value".into(), node);
            Ok(Value::Object(m))
        }
    }
}

fn map_to_json(m: BTreeMap<Vec<u8>, YsonValue>) -> Result<Map<String, Value>, String> {
    m.into_iter()
        .map(|(k, v)| {
            let k = String::from_utf8(k).map_err(|_| "a key is not valid UTF-8".to_string())?;
            Ok((k, to_json(v)?))
        })
        .collect()
}

/// The value without YT's attribute wrapper: `<a=1>x` as `x`.
pub fn plain(v: &Value) -> &Value {
    match v {
        Value::Object(m) if m.contains_key("$value") => &m["$value"],
        v => v,
    }
}

/// A value's attribute `name`, if it has attributes.
pub fn attribute<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.get("$attributes")?.get(name)
}

fn to_yson(v: &Value) -> YsonValue {
    let plain_node = |node| YsonValue {
        attributes: None,
        node,
    };
    match v {
        Value::Object(m) if m.contains_key("$value") => {
            let mut inner = to_yson(&m["$value"]);
            if let Some(Value::Object(attrs)) = m.get("$attributes") {
                inner.attributes = Some(yson_map(attrs));
            }
            inner
        }
        Value::Null => plain_node(YsonNode::Entity),
        Value::Bool(b) => plain_node(YsonNode::Boolean(*b)),
        Value::Number(n) => plain_node(match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => YsonNode::Int64(i),
            (None, Some(u)) => YsonNode::Uint64(u),
            _ => YsonNode::Double(n.as_f64().unwrap_or(0.0)),
        }),
        Value::String(s) => plain_node(YsonNode::String(s.as_bytes().to_vec())),
        Value::Array(items) => plain_node(YsonNode::List(items.iter().map(to_yson).collect())),
        Value::Object(m) => plain_node(YsonNode::Map(yson_map(m))),
    }
}

fn yson_map(m: &Map<String, Value>) -> BTreeMap<Vec<u8>, YsonValue> {
    m.iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), to_yson(v)))
        .collect()
}

/// How YSON is written: YTsaurus's `format` attribute of the `yson` format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YsonStyle {
    Binary,
    Text,
    Pretty,
}

/// `v` as YSON in `style`.
pub fn write_yson(v: &Value, style: YsonStyle) -> Vec<u8> {
    let format = match style {
        YsonStyle::Binary => YsonFormat::Binary,
        YsonStyle::Text | YsonStyle::Pretty => YsonFormat::Text,
    };
    let mut out = ytsaurus_yson::to_vec(&to_yson(v), format).unwrap_or_default();
    if style == YsonStyle::Pretty {
        out = pretty(&out);
    }
    out
}

/// Line breaks and indentation for YSON text outside strings: what `format=pretty` asks
/// for, for a person at a terminal.
fn pretty(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let indent = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', depth * 4));
    };
    for &c in text {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => escaped = false,
            }
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                out.push(c);
            }
            b'{' | b'[' | b'<' => {
                out.push(c);
                depth += 1;
                indent(&mut out, depth);
            }
            b'}' | b']' | b'>' => {
                depth = depth.saturating_sub(1);
                indent(&mut out, depth);
                out.push(c);
            }
            b';' => {
                out.push(c);
                indent(&mut out, depth);
            }
            b'=' => out.extend_from_slice(b" = "),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yson_text_parameters_become_json_with_attributes_kept() {
        let v = parse_yson(
            b"{operation_id=\"1-2-3-4\"; attributes=[id;state]; x=%true; n=1u; z=#; f=1.5; output_format=<format=text>yson}",
        )
        .unwrap();
        assert_eq!(v["operation_id"], "1-2-3-4");
        assert_eq!(v["attributes"], json!(["id", "state"]));
        assert_eq!(v["x"], true);
        assert_eq!(v["n"], 1);
        assert_eq!(v["z"], Value::Null);
        assert_eq!(plain(&v["output_format"]), "yson");
        assert_eq!(attribute(&v["output_format"], "format").unwrap(), "text");
        assert!(parse_yson(b"{a=").is_err());
        assert!(parse_yson(b"{a=1} trailing").is_err());
    }

    #[test]
    fn answers_are_written_as_yson_with_int64_counts() {
        let v = json!({"jobs": {"running": 2, "neg": -1}, "ok": true, "none": null, "s": "x y"});
        let text = String::from_utf8(write_yson(&v, YsonStyle::Text)).unwrap();
        assert!(
            text.contains("running=2;") || text.contains("running=2}"),
            "{text}"
        );
        assert!(!text.contains("2u"), "{text}");
        assert_eq!(parse_yson(text.as_bytes()).unwrap(), v);
        let pretty = String::from_utf8(write_yson(&v, YsonStyle::Pretty)).unwrap();
        assert!(pretty.contains('\n'), "{pretty}");
        assert_eq!(parse_yson(pretty.as_bytes()).unwrap(), v);
        let binary = write_yson(&v, YsonStyle::Binary);
        let back: YsonValue = ytsaurus_yson::from_slice(&binary, YsonFormat::Binary).unwrap();
        assert_eq!(to_json(back).unwrap(), v);
        let with_attrs = json!({"$attributes": {"a": 1}, "$value": "x"});
        let text = String::from_utf8(write_yson(&with_attrs, YsonStyle::Text)).unwrap();
        assert_eq!(text, "<a=1>x");
    }
}
