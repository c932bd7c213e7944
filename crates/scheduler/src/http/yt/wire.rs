//! YTsaurus's HTTP conventions, as its client uses them: parameters in `X-YT-Parameters`
//! (in the `X-YT-Header-Format`), in the body of a volatile command, or in the query
//! string; answers in the `output_format` asked for (JSON, or YSON text, pretty or
//! binary) or the one `Accept` names.

use super::commands::{Descriptor, Io};
use super::error::YtError;
use super::yson_value::{attribute, parse_yson, plain, write_yson, YsonStyle};
use axum::http::{header, HeaderMap, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value};

/// One call of a command, its parameters gathered from wherever the client put them.
pub struct YtCall {
    pub command: &'static Descriptor,
    pub params: Map<String, Value>,
    /// The command's input (`set`'s value), when it has one.
    pub input: Bytes,
}

/// What a command answers.
#[derive(Clone, Debug)]
pub enum Output {
    Nothing,
    Structured(Value),
    Binary(Vec<u8>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Yson(YsonStyle),
}

/// `X-YT-Header-Format`: JSON unless it says YSON (`yson`, `<format=text>yson`).
fn header_format(headers: &HeaderMap) -> Result<Format, YtError> {
    let Some(v) = headers.get("x-yt-header-format") else {
        return Ok(Format::Json);
    };
    let text = v.to_str().unwrap_or("");
    let parsed =
        parse_yson(text.as_bytes()).map_err(|e| YtError::bad_parameter("X-YT-Header-Format", e))?;
    match plain(&parsed).as_str() {
        Some("json") => Ok(Format::Json),
        Some("yson") => Ok(Format::Yson(YsonStyle::Text)),
        _ => Err(YtError::bad_parameter(
            "X-YT-Header-Format",
            format!("'{text}' is neither json nor yson"),
        )),
    }
}

fn parse_in(format: Format, what: &str, bytes: &[u8]) -> Result<Value, YtError> {
    match format {
        Format::Json => serde_json::from_slice(bytes)
            .map_err(|e| YtError::bad_parameter(what, format!("not valid JSON: {e}"))),
        Format::Yson(_) => parse_yson(bytes).map_err(|e| YtError::bad_parameter(what, e)),
    }
}

fn as_map(v: Value, what: &str) -> Result<Map<String, Value>, YtError> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(YtError::bad_parameter(what, "must be a map")),
    }
}

/// Gathers a call's parameters: the query string, then `X-YT-Parameters`, then (for a
/// volatile command without input) the body; a later place overrides an earlier one.
/// A command that changes state is never taken from a GET.
pub fn read_call(
    command: &'static Descriptor,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<YtCall, YtError> {
    if command.volatile && method == Method::GET {
        return Err(YtError::new(
            super::error::code::GENERIC,
            format!(
                "command '{}' changes state: send it by POST (or PUT), never by GET",
                command.name
            ),
        ));
    }
    let format = header_format(headers)?;
    let mut params = Map::new();
    if let Some(query) = uri.query() {
        let pairs: Vec<(String, String)> = serde_urlencoded_pairs(query)?;
        for (k, v) in pairs {
            params.insert(k, Value::String(v));
        }
    }
    if let Some(h) = headers.get("x-yt-parameters") {
        params.extend(as_map(
            parse_in(format, "X-YT-Parameters", h.as_bytes())?,
            "X-YT-Parameters",
        )?);
    }
    let mut input = Bytes::new();
    if command.input == Io::Null {
        if !body.is_empty() {
            let body_format = match headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
            {
                Some(t) if t.starts_with("application/json") => Format::Json,
                Some(t) if t.starts_with("application/x-yt-yson") => Format::Yson(YsonStyle::Text),
                _ => format,
            };
            params.extend(as_map(
                parse_in(body_format, "the body", &body)?,
                "the body",
            )?);
        }
    } else {
        input = body;
    }
    Ok(YtCall {
        command,
        params,
        input,
    })
}

fn serde_urlencoded_pairs(query: &str) -> Result<Vec<(String, String)>, YtError> {
    let uri: Uri = format!("/?{query}")
        .parse()
        .map_err(|_| YtError::bad_parameter("query string", "not a valid query"))?;
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| YtError::bad_parameter("query string", e))
}

/// The format an answer goes out in: `output_format` if given, else what `Accept` asks.
fn output_format(call: &YtCall, headers: &HeaderMap) -> Result<Format, YtError> {
    if let Some(f) = call.params.get("output_format") {
        return match plain(f).as_str() {
            Some("json") => Ok(Format::Json),
            Some("yson") => Ok(Format::Yson(
                match attribute(f, "format").and_then(Value::as_str) {
                    Some("text") => YsonStyle::Text,
                    Some("pretty") => YsonStyle::Pretty,
                    None | Some("binary") => YsonStyle::Binary,
                    Some(other) => {
                        return Err(YtError::bad_parameter(
                            "output_format",
                            format!("yson format '{other}' is none of binary, text, pretty"),
                        ))
                    }
                },
            )),
            _ => Err(YtError::bad_parameter(
                "output_format",
                "ytsched answers structured data as json or yson only",
            )),
        };
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(if accept.contains("application/x-yt-yson-binary") {
        Format::Yson(YsonStyle::Binary)
    } else if accept.contains("application/x-yt-yson-pretty") {
        Format::Yson(YsonStyle::Pretty)
    } else if accept.contains("application/x-yt-yson-text") {
        Format::Yson(YsonStyle::Text)
    } else {
        Format::Json
    })
}

/// The HTTP answer to `call`: its output in the format asked, or its error.
pub fn answer(call: &YtCall, headers: &HeaderMap, output: Result<Output, YtError>) -> Response {
    let output = match output {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    let (content_type, body): (&'static str, Vec<u8>) = match output {
        Output::Nothing => ("text/plain", vec![]),
        Output::Binary(bytes) => ("application/octet-stream", bytes),
        Output::Structured(v) => match output_format(call, headers) {
            Err(e) => return e.into_response(),
            Ok(Format::Json) => ("application/json", v.to_string().into_bytes()),
            Ok(Format::Yson(style)) => (
                match style {
                    YsonStyle::Binary => "application/x-yt-yson-binary",
                    YsonStyle::Text => "application/x-yt-yson-text",
                    YsonStyle::Pretty => "application/x-yt-yson-pretty",
                },
                write_yson(&v, style),
            ),
        },
    };
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert("x-yt-response-code", HeaderValue::from(0));
    response
}

/// A parameter as a string, required.
pub fn string_param<'a>(call: &'a YtCall, name: &str) -> Result<&'a str, YtError> {
    optional_string(call, name)?.ok_or_else(|| YtError::bad_parameter(name, "is required"))
}

pub fn optional_string<'a>(call: &'a YtCall, name: &str) -> Result<Option<&'a str>, YtError> {
    match call.params.get(name).map(plain) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(YtError::bad_parameter(name, "must be a string")),
    }
}

/// A boolean parameter (`%true`, `true`, or the query string's `true`/`false`).
pub fn bool_param(call: &YtCall, name: &str) -> Result<bool, YtError> {
    match call.params.get(name).map(plain) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" => Ok(true),
        Some(Value::String(s)) if s == "false" => Ok(false),
        Some(_) => Err(YtError::bad_parameter(name, "must be a boolean")),
    }
}

/// An integer parameter within `0..=max`.
pub fn count_param(call: &YtCall, name: &str, max: u64) -> Result<Option<u64>, YtError> {
    let n = match call.params.get(name).map(plain) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        Some(_) => None,
    };
    match n {
        Some(n) if n <= max => Ok(Some(n)),
        Some(n) => Err(YtError::bad_parameter(
            name,
            format!("{n} is more than the limit of {max}"),
        )),
        None => Err(YtError::bad_parameter(
            name,
            "must be a non-negative integer",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call_of(
        name: &str,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<YtCall, YtError> {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            let name = axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap();
            h.insert(name, HeaderValue::from_str(v).unwrap());
        }
        let descriptor = super::super::commands::find(name).unwrap();
        read_call(
            descriptor,
            &method,
            &uri.parse().unwrap(),
            &h,
            Bytes::from(body.to_string()),
        )
    }

    #[test]
    fn parameters_come_from_the_query_the_header_and_the_body_in_that_order() {
        let call = call_of(
            "abort_operation",
            Method::POST,
            "/api/v4/abort_operation?operation_id=from-query&retry=true",
            &[
                ("x-yt-header-format", "<format=text>yson"),
                ("x-yt-parameters", "{operation_id=from-header}"),
                ("content-type", "application/json"),
            ],
            "{\"operation_id\": \"from-body\"}",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        // The body is read as its Content-Type says (else in the header format).
        assert_eq!(call.params["operation_id"], "from-body");
        assert_eq!(call.params["retry"], "true");
        assert!(bool_param(&call, "retry").unwrap());
        let e = call_of(
            "get_operation",
            Method::GET,
            "/x",
            &[("x-yt-parameters", "{not json")],
            "",
        )
        .err()
        .unwrap();
        assert!(e.message.contains("X-YT-Parameters"), "{}", e.message);
    }

    #[test]
    fn a_state_change_is_never_taken_from_a_get_and_set_keeps_its_body_as_input() {
        let e = call_of("abort_operation", Method::GET, "/x?operation_id=a", &[], "")
            .err()
            .unwrap();
        assert!(e.message.contains("never by GET"), "{}", e.message);
        let set = call_of(
            "set",
            Method::PUT,
            "/x?path=//sys/pool_trees/a/@weight",
            &[],
            "3",
        )
        .unwrap();
        assert_eq!(
            &call_of("set", Method::PUT, "/x", &[], "3").unwrap().input[..],
            b"3"
        );
        assert_eq!(set.params["path"], "//sys/pool_trees/a/@weight");
    }

    #[test]
    fn answers_take_the_format_asked_for() {
        let call = call_of(
            "get_current_user",
            Method::GET,
            "/x",
            &[
                ("x-yt-header-format", "json"),
                (
                    "x-yt-parameters",
                    r#"{"output_format": {"$value": "yson", "$attributes": {"format": "text"}}}"#,
                ),
            ],
            "",
        )
        .unwrap();
        let r = answer(
            &call,
            &HeaderMap::new(),
            Ok(Output::Structured(json!({"user": "alice"}))),
        );
        assert_eq!(r.headers()["content-type"], "application/x-yt-yson-text");
        let plain = call_of("get_current_user", Method::GET, "/x", &[], "").unwrap();
        let r = answer(
            &plain,
            &HeaderMap::new(),
            Ok(Output::Structured(json!({"user": "alice"}))),
        );
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(count_param(&plain, "limit", 10).unwrap(), None);
        let big = call_of("list_jobs", Method::GET, "/x?limit=5000", &[], "").unwrap();
        assert!(count_param(&big, "limit", 1000)
            .unwrap_err()
            .message
            .contains("limit of 1000"));
    }
}
