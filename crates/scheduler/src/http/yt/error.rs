//! YTsaurus's error objects (code, message, attributes, inner errors) and where its
//! client looks for them: the `X-YT-Error` and `X-YT-Response-Code` headers, and the body.
//! Codes are YTsaurus's own, so the client's `is_resolve_error()`, `is_access_denied()`,
//! `is_no_such_operation()` and retries work as against YTsaurus.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use ytsched_common::api::{ApiError, ErrorKind};

/// YTsaurus error codes the answers use.
pub mod code {
    pub const GENERIC: i64 = 1;
    /// `NRpc::EErrorCode::NoSuchMethod`: a command ytsched does not serve.
    pub const NO_SUCH_METHOD: i64 = 103;
    /// `NRpc::EErrorCode::Unavailable`: busy, retry.
    pub const UNAVAILABLE: i64 = 105;
    pub const NO_SUCH_JOB: i64 = 203;
    pub const RESOLVE: i64 = 500;
    pub const ALREADY_EXISTS: i64 = 501;
    pub const AUTHENTICATION: i64 = 900;
    pub const AUTHORIZATION: i64 = 901;
    pub const REQUEST_RATE_LIMIT: i64 = 904;
    pub const NO_SUCH_OPERATION: i64 = 1915;
    pub const INVALID_OPERATION_STATE: i64 = 1921;
}

/// What a not-found error names, which decides its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Operation,
    Job,
    Node,
}

/// One YTsaurus error.
#[derive(Clone, Debug, PartialEq)]
pub struct YtError {
    pub code: i64,
    pub message: String,
    pub attributes: Map<String, Value>,
    pub inner: Vec<YtError>,
}

impl YtError {
    pub fn new(code: i64, message: impl Into<String>) -> YtError {
        YtError {
            code,
            message: message.into(),
            attributes: Map::new(),
            inner: vec![],
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> YtError {
        self.attributes.insert(key.into(), value.into());
        self
    }

    /// A parameter that is missing or of the wrong shape.
    pub fn bad_parameter(name: &str, why: impl std::fmt::Display) -> YtError {
        YtError::new(code::GENERIC, format!("parameter '{name}': {why}")).with("parameter", name)
    }

    /// A command of YTsaurus's API that ytsched does not serve, by name.
    pub fn unsupported_command(command: &str) -> YtError {
        YtError::new(
            code::NO_SUCH_METHOD,
            format!("ytsched does not support the command '{command}': it serves YTsaurus's scheduler commands (operations, jobs, pools); see docs/yt-compat.md"),
        )
        .with("command", command)
    }

    /// A path outside what ytsched owns, by name.
    pub fn unsupported_path(path: &str) -> YtError {
        YtError::new(
            code::RESOLVE,
            format!("ytsched does not support the path '{path}': it serves //sys/pool_trees, //sys/cluster_nodes and //sys/scheduler/orchid only"),
        )
        .with("path", path)
    }

    /// The scheduler's own error, with the code YTsaurus gives that kind; `missing` says
    /// what a not-found names.
    pub fn from_api(e: ApiError, missing: Missing) -> YtError {
        let code = match e.kind {
            ErrorKind::InvalidArgument => code::GENERIC,
            ErrorKind::NotFound => match missing {
                Missing::Operation => code::NO_SUCH_OPERATION,
                Missing::Job => code::NO_SUCH_JOB,
                Missing::Node => code::RESOLVE,
            },
            ErrorKind::PermissionDenied => code::AUTHORIZATION,
            ErrorKind::LimitReached => code::REQUEST_RATE_LIMIT,
            ErrorKind::Conflict => code::INVALID_OPERATION_STATE,
            ErrorKind::Unavailable => code::UNAVAILABLE,
            ErrorKind::Internal => code::GENERIC,
        };
        YtError::new(code, e.message).with("kind", format!("{:?}", e.kind))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "code": self.code,
            "message": self.message,
            "attributes": self.attributes,
            "inner_errors": self.inner.iter().map(YtError::to_json).collect::<Vec<_>>(),
        })
    }

    fn status(&self) -> StatusCode {
        match self.code {
            code::AUTHENTICATION => StatusCode::UNAUTHORIZED,
            code::AUTHORIZATION => StatusCode::FORBIDDEN,
            code::RESOLVE | code::NO_SUCH_OPERATION | code::NO_SUCH_JOB => StatusCode::NOT_FOUND,
            code::REQUEST_RATE_LIMIT => StatusCode::TOO_MANY_REQUESTS,
            // The client retries a 503 with backoff (and a start with its mutation id).
            code::UNAVAILABLE => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// JSON with every non-ASCII character escaped, as a header value must be.
pub fn ascii_json(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() && !c.is_ascii_control() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// Most bytes of an error in a header; the body holds it whole.
const MAX_ERROR_HEADER: usize = 16 * 1024;

impl IntoResponse for YtError {
    fn into_response(self) -> Response {
        let body = ascii_json(&self.to_json());
        let header = if body.len() <= MAX_ERROR_HEADER {
            body.clone()
        } else {
            ascii_json(
                &YtError::new(
                    self.code,
                    self.message.chars().take(4096).collect::<String>(),
                )
                .to_json(),
            )
        };
        let mut response = (self.status(), body).into_response();
        let headers = response.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        if let Ok(v) = HeaderValue::from_str(&header) {
            headers.insert("x-yt-error", v);
        }
        headers.insert("x-yt-response-code", HeaderValue::from(self.code));
        let message = ascii_json(&Value::String(self.message.chars().take(1024).collect()));
        if let Ok(v) = HeaderValue::from_str(message.trim_matches('"')) {
            headers.insert("x-yt-response-message", v);
        }
        if self.code == code::UNAVAILABLE {
            headers.insert("retry-after", HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_in_the_headers_and_the_body_with_its_code() {
        let e = YtError::from_api(
            ApiError::permission_denied("access denied: user 'mallory' may not abort operation x"),
            Missing::Operation,
        );
        assert_eq!(e.code, code::AUTHORIZATION);
        let r = e.into_response();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(r.headers()["x-yt-response-code"], "901");
        let header: Value =
            serde_json::from_str(r.headers()["x-yt-error"].to_str().unwrap()).unwrap();
        assert_eq!(header["code"], 901);
        assert!(header["message"].as_str().unwrap().contains("mallory"));
        let missing = YtError::from_api(
            ApiError::not_found("no such operation: x"),
            Missing::Operation,
        );
        assert_eq!(missing.code, code::NO_SUCH_OPERATION);
        assert_eq!(
            ascii_json(&Value::String("é😀".into())),
            "\"\\u00e9\\ud83d\\ude00\""
        );
    }
}
