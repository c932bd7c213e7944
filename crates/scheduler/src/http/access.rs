//! Who may read the HTTP face (SPEC 6.4, 5.11). With a bus that authenticates, every
//! `/api/` and `/metrics` request must carry `Authorization: Bearer TOKEN` from
//! `ytsched auth token`, and is answered as that user would be answered on the bus. An
//! open face (no tokens) is for a loopback-only lab, or for whoever says
//! `--http-insecure` out loud: it sees every operation redacted.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;
use ytsched_common::http_tokens::{HttpTokens, MAX_TOKENS_FILE_BYTES};
use ytsched_common::identity::Caller;

/// Longest `Authorization` header looked at; a token is 69 characters.
const MAX_AUTHORIZATION_LEN: usize = 256;

/// How the HTTP face decides who asks.
#[derive(Clone)]
pub enum HttpAccess {
    /// No one is authenticated; every operation is shown redacted.
    Open,
    /// Tokens from the file, as last read.
    Tokens(Arc<RwLock<Arc<HttpTokens>>>),
}

/// The reader of a request, as the handlers see it: `None` on an open face.
#[derive(Clone, Debug)]
pub struct Reader(pub Option<Caller>);

/// What `--http`, `--http-insecure`, `--http-tokens` and the bus's mode make of access.
#[derive(Debug, PartialEq, Eq)]
pub enum AccessChoice {
    Open,
    Tokens(PathBuf),
}

/// Decides the face's access at start. Tokens whenever the bus authenticates or a tokens
/// file is named, and then, off loopback, only over HTTPS (`tls`) unless
/// `--http-insecure` says otherwise: tokens in clear text are anyone's on the path. An
/// open face only on loopback or with `--http-insecure`.
pub fn choose(
    addr: SocketAddr,
    insecure: bool,
    tls: bool,
    tokens_file: Option<PathBuf>,
    bus_creds: Option<&Path>,
) -> Result<AccessChoice, String> {
    let tokens = tokens_file.or_else(|| {
        bus_creds.map(|c| c.with_file_name(ytsched_common::http_tokens::HTTP_TOKENS_FILE))
    });
    let local = addr.ip().is_loopback();
    match tokens {
        Some(_) if !local && !tls && !insecure => Err(format!(
            "--http {addr} is off loopback without HTTPS: web tokens (an admin's among them) would cross the network in clear text; give --http-tls-cert and --http-tls-key (`ytsched auth init --tls` makes tls/http.pem and tls/http-key.pem), or say --http-insecure (e.g. behind a TLS-terminating proxy)"
        )),
        Some(path) => Ok(AccessChoice::Tokens(path)),
        None if local || insecure => Ok(AccessChoice::Open),
        None => Err(format!(
            "--http {addr} is off loopback and no one would be authenticated there: run with --creds (web tokens come from `ytsched auth token`), name --http-tokens FILE, or say --http-insecure"
        )),
    }
}

/// Reads and checks a tokens file; the error names it and what is wrong. A file that
/// is not there yet holds no tokens (the first `ytsched auth token` makes it).
pub fn read_tokens(path: &Path) -> anyhow::Result<(HttpTokens, Option<SystemTime>)> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((HttpTokens::default(), None))
        }
        Err(e) => anyhow::bail!("--http-tokens {shown}: {e}"),
    };
    if meta.len() > MAX_TOKENS_FILE_BYTES {
        anyhow::bail!(
            "--http-tokens {shown}: {} bytes is more than the limit of {MAX_TOKENS_FILE_BYTES}",
            meta.len()
        );
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("--http-tokens {shown}: {e}"))?;
    let tokens =
        HttpTokens::parse(&text).map_err(|e| anyhow::anyhow!("--http-tokens {shown}: {e}"))?;
    Ok((tokens, meta.modified().ok()))
}

impl HttpAccess {
    /// The access `choice` asks for: tokens read now (a damaged file stops the start)
    /// and followed as they change.
    pub fn start(choice: AccessChoice) -> anyhow::Result<HttpAccess> {
        let path = match choice {
            AccessChoice::Open => return Ok(HttpAccess::Open),
            AccessChoice::Tokens(path) => path,
        };
        let (tokens, seen) = read_tokens(&path)?;
        if tokens.tokens.is_empty() {
            tracing::warn!(file = %path.display(), "no web tokens yet: every /api/ request is refused until `ytsched auth token USER` makes one");
        }
        let shared = Arc::new(RwLock::new(Arc::new(tokens)));
        let book = shared.clone();
        tokio::spawn(crate::watched_files::followed_file::follow(
            path,
            seen,
            read_tokens,
            "web tokens",
            move |t: HttpTokens| {
                tracing::info!(tokens = t.tokens.len(), "web tokens reloaded");
                *book.write().expect("tokens lock") = Arc::new(t);
            },
        ));
        Ok(HttpAccess::Tokens(shared))
    }

    /// Who presents `authorization`; `Err` when the face wants a token and this is none
    /// of its own.
    pub fn reader(&self, authorization: Option<&str>) -> Result<Reader, &'static str> {
        let HttpAccess::Tokens(book) = self else {
            return Ok(Reader(None));
        };
        let Some(value) = authorization else {
            return Err("this needs a web token: send `Authorization: Bearer TOKEN` (`ytsched auth token USER` makes one)");
        };
        if value.len() > MAX_AUTHORIZATION_LEN {
            return Err("the Authorization header is longer than any web token");
        }
        // `OAuth` is how YTsaurus's client sends its token.
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("OAuth "))
            .map(str::trim)
            .ok_or("the Authorization header is neither `Bearer TOKEN` nor `OAuth TOKEN`")?;
        let tokens = book.read().expect("tokens lock").clone();
        tokens
            .caller(token)
            .map(|c| Reader(Some(c)))
            .ok_or("the web token is not (or no longer) valid")
    }
}

/// The middleware in front of `/api/` and `/metrics`: 401 without a valid token.
pub async fn require_reader(
    State(access): State<HttpAccess>,
    mut request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    match access.reader(authorization) {
        Ok(reader) => {
            request.extensions_mut().insert(reader);
            next.run(request).await
        }
        Err(why) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"ytsched\"")],
            why,
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ytsched_common::http_tokens::{digest, new_token, TokenEntry};
    use ytsched_common::identity::UserName;

    #[test]
    fn an_open_face_needs_loopback_or_saying_so() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(choose(lo, false, false, None, None), Ok(AccessChoice::Open));
        let err = choose(any, false, false, None, None).unwrap_err();
        assert!(
            err.contains("--http-insecure") && err.contains("0.0.0.0:8080"),
            "{err}"
        );
        assert_eq!(choose(any, true, false, None, None), Ok(AccessChoice::Open));
        // A bus with identities means tokens, beside its credentials, even on loopback.
        let creds = Path::new("/etc/ytsched/auth/scheduler.creds");
        assert_eq!(
            choose(lo, false, false, None, Some(creds)),
            Ok(AccessChoice::Tokens(
                "/etc/ytsched/auth/http-tokens.json".into()
            ))
        );
        assert_eq!(
            choose(any, false, true, Some("/t.json".into()), None),
            Ok(AccessChoice::Tokens("/t.json".into()))
        );
    }

    /// Issue 38 point 14: tokens off loopback go over HTTPS, or the scheduler refuses
    /// to start, naming the flags, unless told `--http-insecure`.
    #[test]
    fn tokens_off_loopback_need_https_or_saying_so() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let creds = Path::new("/etc/ytsched/auth/scheduler.creds");
        let err = choose(any, false, false, None, Some(creds)).unwrap_err();
        assert!(
            err.contains("clear text")
                && err.contains("--http-tls-cert")
                && err.contains("--http-insecure"),
            "{err}"
        );
        let tokens = Ok(AccessChoice::Tokens(
            "/etc/ytsched/auth/http-tokens.json".into(),
        ));
        assert_eq!(choose(any, false, true, None, Some(creds)), tokens);
        assert_eq!(choose(any, true, false, None, Some(creds)), tokens);
    }

    #[test]
    fn only_a_known_bearer_token_reads() {
        let token = new_token().unwrap();
        let book = HttpTokens {
            tokens: vec![TokenEntry {
                user: UserName::parse("alice").unwrap(),
                admin: false,
                sha256: digest(&token),
                created: 0,
            }],
        };
        let access = HttpAccess::Tokens(Arc::new(RwLock::new(Arc::new(book))));
        let reader = access.reader(Some(&format!("Bearer {token}"))).unwrap();
        assert_eq!(reader.0, Some(Caller::user("alice")));
        assert!(access.reader(None).is_err());
        assert!(access.reader(Some(&token)).is_err(), "no scheme");
        assert!(access.reader(Some(&format!("Basic {token}"))).is_err());
        let yt_client = access.reader(Some(&format!("OAuth {token}"))).unwrap();
        assert_eq!(
            yt_client.0,
            Some(Caller::user("alice")),
            "YTsaurus's client's scheme"
        );
        assert!(access.reader(Some("Bearer ytst_00")).is_err());
        let long = format!("Bearer {token}{}", "x".repeat(1000));
        assert!(access.reader(Some(&long)).is_err());
        assert!(HttpAccess::Open.reader(None).unwrap().0.is_none());
    }

    #[test]
    fn a_missing_tokens_file_holds_none_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("http-tokens.json");
        assert!(read_tokens(&path).unwrap().0.tokens.is_empty());
        std::fs::write(&path, "{not json").unwrap();
        let err = read_tokens(&path).unwrap_err().to_string();
        assert!(err.contains("http-tokens.json"), "{err}");
    }
}
