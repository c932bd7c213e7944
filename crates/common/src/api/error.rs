//! The API's one error type: a kind clients act on and a bounded message people read.

use serde::{Deserialize, Serialize};

/// What kind of failure an API error is: clients act on it (the CLI's exit code, the
/// HTTP status) without reading the message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request itself is wrong (a field, a value, a spec).
    #[default]
    InvalidArgument,
    NotFound,
    PermissionDenied,
    /// A configured limit is reached (operation counts, ephemeral pools, sizes).
    LimitReached,
    /// The request contradicts the current state (already finished, id taken).
    Conflict,
    /// The scheduler cannot serve it now (store down, overloaded).
    Unavailable,
    Internal,
}

impl ErrorKind {
    /// The CLI's exit status for an error of this kind (1 stays "anything else").
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::InvalidArgument => 2,
            ErrorKind::NotFound => 3,
            ErrorKind::PermissionDenied => 4,
            ErrorKind::LimitReached => 5,
            ErrorKind::Conflict => 6,
            ErrorKind::Unavailable => 7,
            ErrorKind::Internal => 8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// Absent from older schedulers' answers: read as `invalid_argument`.
    #[serde(default)]
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    /// An invalid argument: the request itself is wrong.
    pub fn new(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::InvalidArgument, message)
    }

    pub fn of(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A tree, pool, node, operation or attribute that is not there (cut to
    /// `MAX_ERROR_CHARS`: it often quotes what the caller sent).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::NotFound, bounded(message.into()))
    }

    /// A value, path or change that cannot be taken (cut to `MAX_ERROR_CHARS`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::InvalidArgument, bounded(message.into()))
    }

    /// The same error, said of `path`.
    pub fn at(self, path: &str) -> Self {
        Self {
            kind: self.kind,
            message: format!(
                "{}: {}",
                crate::quote::quote(path, crate::quote::QUOTE_CHARS),
                self.message
            ),
        }
    }

    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::PermissionDenied, message)
    }

    pub fn limit_reached(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::LimitReached, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Conflict, message)
    }

    /// "Busy, retry": nothing was done, and the same request may succeed later.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Unavailable, message)
    }
}

/// Characters an error that quotes what a caller sent (a name, a path) may take: it
/// would otherwise be as long as what was sent.
pub const MAX_ERROR_CHARS: usize = 512;

/// `message`, cut to `MAX_ERROR_CHARS` characters (with a mark where it was cut).
fn bounded(message: String) -> String {
    if message.len() <= MAX_ERROR_CHARS {
        return message;
    }
    crate::quote::quote(&message, MAX_ERROR_CHARS)
}

impl From<crate::pool_config::AttributeError> for ApiError {
    fn from(e: crate::pool_config::AttributeError) -> Self {
        ApiError::invalid(e.to_string())
    }
}
