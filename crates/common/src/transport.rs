//! Connecting to NATS and making typed API calls: the one place that turns URLs and
//! API types into bus traffic for every binary.

use crate::api::{ApiError, ApiMethod, ApiRequest, ApiResponse};
use crate::codec::{decode, encode, CodecError};
use crate::protocol::PROTOCOL_VERSION;
use crate::subjects::Subjects;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("bad NATS URL '{url}': {message}")]
    BadUrl { url: String, message: String },
    #[error("cannot connect to NATS at {urls}: {message}")]
    Connect { urls: String, message: String },
    #[error("no scheduler answered on {subject} ({message}); is ytsched-scheduler running?")]
    NoScheduler { subject: String, message: String },
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The scheduler's own message, printed once (not again as a cause).
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Parses a comma-separated list of server URLs (a NATS cluster is several).
pub fn parse_urls(urls: &str) -> Result<Vec<async_nats::ServerAddr>, TransportError> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse()
                .map_err(|e: std::io::Error| TransportError::BadUrl {
                    url: u.to_string(),
                    message: e.to_string(),
                })
        })
        .collect()
}

/// Connects to NATS. With `retry` the client keeps trying in the background (daemons);
/// without it a wrong URL fails at once (the CLI).
pub async fn connect(
    urls: &str,
    name: &str,
    retry: bool,
) -> Result<async_nats::Client, TransportError> {
    let addrs = parse_urls(urls)?;
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        .request_timeout(Some(Duration::from_secs(10)));
    if retry {
        opts = opts.retry_on_initial_connect();
    } else {
        opts = opts.connection_timeout(Duration::from_secs(3));
    }
    opts.connect(addrs)
        .await
        .map_err(|e| TransportError::Connect {
            urls: urls.to_string(),
            message: e.to_string(),
        })
}

/// One typed request to the scheduler's API.
pub async fn call<M: ApiMethod>(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &str,
    body: M,
) -> Result<M::Response, TransportError> {
    let subject = subjects.api(M::METHOD);
    let request = ApiRequest {
        protocol_version: PROTOCOL_VERSION,
        user: user.to_string(),
        body,
    };
    let reply = client
        .request(subject.clone(), encode(&request)?.into())
        .await
        .map_err(|e| TransportError::NoScheduler {
            subject: subject.clone(),
            message: e.to_string(),
        })?;
    let response: ApiResponse<M::Response> = decode(&reply.payload)?;
    Ok(response.result?)
}
