//! Connecting to NATS and making typed API calls: the one place that turns URLs and
//! API types into bus traffic for every binary.

use crate::api::{ApiError, ApiMethod, ApiRequest, ApiResponse, ErrorKind};
use crate::codec::{decode, encode, CodecError};
use crate::identity::{Caller, Credentials, Role};
use crate::protocol::PROTOCOL_VERSION;
use crate::subjects::Subjects;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("bad NATS URL '{url}': {message}")]
    BadUrl { url: String, message: String },
    #[error("cannot connect to NATS at {urls}: {message}")]
    Connect { urls: String, message: String },
    #[error("no scheduler answered on {subject} ({message}); is ytsched-scheduler running?")]
    NoScheduler { subject: String, message: String },
    #[error("{0}")]
    Auth(String),
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

/// How a binary proves who it is to nats-server, and how it checks the server.
#[derive(Clone, Debug, Default)]
pub struct ConnectAuth {
    /// None: an anonymous connection, which only an `--insecure` bus accepts.
    pub creds: Option<Credentials>,
    pub tls: TlsFiles,
    /// Without credentials, whose inbox to take replies on: the scheduler answers a
    /// request only on its requester's own inbox, on an open bus too.
    pub anonymous_inbox: Option<String>,
}

/// TLS files, the same flags on every binary (global, so the CLI takes them before or
/// after its subcommand).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TlsFiles {
    /// CA certificate that signed nats-server's certificate (turns TLS on).
    #[arg(
        long = "tls-ca",
        env = "YTSCHED_TLS_CA",
        global = true,
        value_name = "FILE"
    )]
    pub ca: Option<PathBuf>,
    /// Client certificate for mutual TLS (with --tls-key).
    #[arg(
        long = "tls-cert",
        env = "YTSCHED_TLS_CERT",
        global = true,
        value_name = "FILE"
    )]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (with --tls-cert).
    #[arg(
        long = "tls-key",
        env = "YTSCHED_TLS_KEY",
        global = true,
        value_name = "FILE"
    )]
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// These files as the flags above, to start another binary with them.
    pub fn to_flags(&self) -> Vec<std::ffi::OsString> {
        [
            ("--tls-ca", &self.ca),
            ("--tls-cert", &self.cert),
            ("--tls-key", &self.key),
        ]
        .into_iter()
        .filter_map(|(flag, path)| Some([flag.into(), path.as_ref()?.clone().into_os_string()]))
        .flatten()
        .collect()
    }
}

impl ConnectAuth {
    /// Reads `--creds` (if given) and checks the TLS flags come in the pairs they need.
    pub fn from_flags(creds: Option<&Path>, tls: TlsFiles) -> Result<Self, TransportError> {
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(TransportError::Auth(
                "--tls-cert and --tls-key go together (mutual TLS needs both)".into(),
            ));
        }
        let creds = creds
            .map(Credentials::read)
            .transpose()
            .map_err(|e| TransportError::Auth(e.to_string()))?;
        Ok(ConnectAuth {
            creds,
            tls,
            anonymous_inbox: None,
        })
    }

    /// On an open bus (no credentials), takes replies on the inbox of `role` `name`, as
    /// its credentials would.
    pub fn anonymous_as(mut self, role: Role, name: &str) -> Self {
        if self.creds.is_none() {
            self.anonymous_inbox = Some(crate::identity::inbox_prefix(role, name));
        }
        self
    }

    /// Refuses credentials of another role: a node's key in the scheduler is a mistake
    /// nats-server would only report as a permissions violation much later.
    pub fn expect_role(&self, roles: &[Role], what: &str) -> Result<(), TransportError> {
        match &self.creds {
            Some(c) if !roles.contains(&c.role) => Err(TransportError::Auth(format!(
                "--creds holds the {} identity '{}'; {what} needs a {} identity",
                c.role,
                c.name,
                roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))),
            _ => Ok(()),
        }
    }
}

/// How the daemons (scheduler, node agent) authenticate to the bus.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct BusArgs {
    /// Credentials file made by `ytsched auth` for this daemon's identity.
    #[arg(long, env = "YTSCHED_CREDS")]
    pub creds: Option<PathBuf>,
    #[command(flatten)]
    pub tls: TlsFiles,
    /// Connect without credentials: anyone on the bus can then do anything. Refused
    /// unless every NATS URL is on loopback.
    #[arg(long)]
    pub insecure: bool,
}

impl BusArgs {
    /// Checks the flags for a daemon of one of `roles` connecting to `urls`.
    pub fn daemon_auth(
        &self,
        urls: &str,
        roles: &[Role],
        what: &str,
    ) -> Result<ConnectAuth, TransportError> {
        let tls = self.tls.clone();
        if self.insecure {
            if self.creds.is_some() {
                return Err(TransportError::Auth(
                    "--insecure and --creds contradict each other; drop one".into(),
                ));
            }
            if !all_loopback(urls)? {
                return Err(TransportError::Auth(format!(
                    "--insecure is refused: NATS at {urls} is not on loopback, and an unauthenticated bus there lets anyone run jobs as this cluster"
                )));
            }
            return ConnectAuth::from_flags(None, tls);
        }
        let Some(creds) = &self.creds else {
            return Err(TransportError::Auth(format!(
                "{what} needs credentials: pass --creds FILE (made by `ytsched auth`), or --insecure for a loopback-only lab without authentication"
            )));
        };
        let auth = ConnectAuth::from_flags(Some(creds), tls)?;
        auth.expect_role(roles, what)?;
        Ok(auth)
    }
}

/// Whether every URL names a loopback host: an unauthenticated bus is allowed only there.
pub fn all_loopback(urls: &str) -> Result<bool, TransportError> {
    Ok(parse_urls(urls)?.iter().all(|addr| {
        addr.host() == "localhost"
            || addr
                .host()
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }))
}

/// Connects to NATS. With `retry` the client keeps trying in the background (daemons);
/// without it a wrong URL fails at once (the CLI).
pub async fn connect(
    urls: &str,
    name: &str,
    retry: bool,
    auth: &ConnectAuth,
) -> Result<async_nats::Client, TransportError> {
    let addrs = parse_urls(urls)?;
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        .request_timeout(Some(Duration::from_secs(10)));
    if let Some(creds) = &auth.creds {
        opts = opts
            .nkey(creds.seed().to_string())
            .custom_inbox_prefix(creds.inbox_prefix());
    } else if let Some(inbox) = &auth.anonymous_inbox {
        opts = opts.custom_inbox_prefix(inbox.clone());
    }
    if let Some(ca) = &auth.tls.ca {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&auth.tls.cert, &auth.tls.key) {
        opts = opts
            .add_client_certificate(cert.clone(), key.clone())
            .require_tls(true);
    }
    opts = opts.event_callback(|event| async move { log_event(event) });
    if retry {
        opts = opts
            .retry_on_initial_connect()
            .ping_interval(SERVICE_PING_INTERVAL);
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

/// How often a service (scheduler, agent) pings its NATS server. A server that goes
/// silent without closing the connection (cut off from the network, paused) is left
/// after two unanswered pings, for another server of the cluster: about 3 s. With the
/// client's default of 60 s, an agent on such a server went unheard for two minutes
/// and was lost, though the other servers of its cluster served (issue 42's campaign).
pub const SERVICE_PING_INTERVAL: Duration = Duration::from_secs(1);

/// Tries of one call answered "busy, retry" before the error is the caller's.
const BUSY_ATTEMPTS: u32 = 6;

/// Logs a connection event. A slow consumer is an event per dropped message under a
/// flood: it is counted and logged at most every 10 s, with how many came meanwhile.
fn log_event(event: async_nats::Event) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SLOW: AtomicU64 = AtomicU64::new(0);
    static LAST_LOGGED_SECOND: AtomicU64 = AtomicU64::new(0);
    match event {
        async_nats::Event::SlowConsumer(sid) => {
            let count = SLOW.fetch_add(1, Ordering::Relaxed) + 1;
            let second = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let last = LAST_LOGGED_SECOND.load(Ordering::Relaxed);
            if second >= last + 10
                && LAST_LOGGED_SECOND
                    .compare_exchange(last, second, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    subscription = sid,
                    dropped_so_far = count,
                    "slow consumer: messages dropped (logged at most every 10 s)"
                );
            }
        }
        other => tracing::info!("event: {other}"),
    }
}

/// One typed request to the scheduler's API. A "busy, retry" answer (the scheduler's
/// admission control) is retried with backoff; the request is sent again unchanged, so
/// a submission keeps its idempotency token.
pub async fn call<M: ApiMethod>(
    client: &async_nats::Client,
    subjects: &Subjects,
    caller: &Caller,
    body: M,
) -> Result<M::Response, TransportError> {
    let subject = subjects.call(caller, M::METHOD);
    let request = ApiRequest {
        protocol_version: PROTOCOL_VERSION,
        body,
    };
    let payload: bytes::Bytes = encode(&request)?.into();
    let mut backoff = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        let reply = client
            .request(subject.clone(), payload.clone())
            .await
            .map_err(|e| TransportError::NoScheduler {
                subject: subject.clone(),
                message: e.to_string(),
            })?;
        let response: ApiResponse<M::Response> = decode(&reply.payload)?;
        match response.result {
            Err(e) if e.kind == ErrorKind::Unavailable && attempt < BUSY_ATTEMPTS => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                attempt += 1;
            }
            result => return Ok(result?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls_are_told_apart() {
        let loopback = |u| all_loopback(u).unwrap();
        assert!(loopback("nats://127.0.0.1:4222"));
        assert!(loopback("nats://localhost:4222,127.0.0.2:1"));
        assert!(loopback("nats://[::1]:4222"));
        assert!(!loopback("nats://10.0.0.1:4222"));
        assert!(!loopback("nats://127.0.0.1:1,nats://nats:4222"));
        assert!(all_loopback("nats://[::1").is_err());
    }
}
