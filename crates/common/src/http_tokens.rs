//! Tokens for the scheduler's HTTP face (SPEC 6.4): `ytsched auth token USER` makes one,
//! a browser or `curl -H 'Authorization: Bearer TOKEN'` sends it, and the scheduler
//! maps it to the same `Caller` a bus request from USER would be.
//!
//! The file (`http-tokens.json` in the identities directory) holds only SHA-256 digests:
//! whoever reads it cannot log in with it, and the scheduler compares digests, so the
//! time a lookup takes says nothing about the token. A token is 32 random bytes, so a
//! digest lookup is as strong as a compare of the secret itself.

use crate::identity::{Caller, UserName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The file beside the identities (`ytsched auth`'s directory).
pub const HTTP_TOKENS_FILE: &str = "http-tokens.json";
/// Every token starts with this, so a leaked one is recognisable in logs and scans.
pub const TOKEN_PREFIX: &str = "ytst_";
/// Tokens one file may hold: a few per identity.
pub const MAX_TOKENS: usize = 50_000;
/// The most a tokens file may take.
pub const MAX_TOKENS_FILE_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenFileError {
    #[error("not a tokens file: {0}")]
    Malformed(String),
    #[error("{0} tokens is more than the limit of {MAX_TOKENS}")]
    TooMany(usize),
    #[error("token entry {index}: {reason}")]
    BadEntry { index: usize, reason: String },
}

/// One token as stored: whose it is, with which rights, and its digest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokenEntry {
    pub user: UserName,
    /// The token acts as an admin (the identity was an admin when it was made).
    pub admin: bool,
    /// Lower-case hex SHA-256 of the whole token text.
    pub sha256: String,
    /// When it was made (Unix seconds), for `ytsched auth list` and audits.
    #[serde(default)]
    pub created: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HttpTokens {
    pub tokens: Vec<TokenEntry>,
}

impl HttpTokens {
    /// Parses and checks a tokens file's text.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let file: HttpTokens =
            serde_json::from_str(text).map_err(|e| TokenFileError::Malformed(e.to_string()))?;
        if file.tokens.len() > MAX_TOKENS {
            return Err(TokenFileError::TooMany(file.tokens.len()));
        }
        for (index, t) in file.tokens.iter().enumerate() {
            if !is_digest(&t.sha256) {
                return Err(TokenFileError::BadEntry {
                    index,
                    reason: format!("'{}' is not a hex SHA-256 digest", short(&t.sha256)),
                });
            }
        }
        Ok(file)
    }

    /// Who a token presented on a request is, if it is one of these.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let digest = digest(token);
        self.tokens
            .iter()
            .find(|t| t.sha256 == digest)
            .map(|t| Caller {
                user: t.user.clone(),
                admin: t.admin,
            })
    }
}

/// A fresh token: the prefix and 32 bytes from the operating system's random source.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)?;
    Ok(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
}

/// The digest stored for `token`.
pub fn digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn short(s: &str) -> String {
    crate::quote::quote(s, crate::quote::QUOTE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_maps_to_its_user_and_nothing_else_does() {
        let alice = new_token().unwrap();
        let root = new_token().unwrap();
        assert!(alice.starts_with(TOKEN_PREFIX) && alice.len() == TOKEN_PREFIX.len() + 64);
        assert_ne!(alice, root, "random");
        let file = HttpTokens {
            tokens: vec![
                TokenEntry {
                    user: UserName::parse("alice").unwrap(),
                    admin: false,
                    sha256: digest(&alice),
                    created: 0,
                },
                TokenEntry {
                    user: UserName::parse("root").unwrap(),
                    admin: true,
                    sha256: digest(&root),
                    created: 0,
                },
            ],
        };
        let text = serde_json::to_string(&file).unwrap();
        assert!(
            !text.contains(&alice[TOKEN_PREFIX.len()..]),
            "no secret stored"
        );
        let file = HttpTokens::parse(&text).unwrap();
        assert_eq!(file.caller(&alice), Some(Caller::user("alice")));
        assert_eq!(file.caller(&root), Some(Caller::admin("root")));
        assert_eq!(file.caller(""), None);
        assert_eq!(file.caller(&alice[..alice.len() - 1]), None);
        // The digest itself is not a token.
        assert_eq!(file.caller(&digest(&alice)), None);
    }

    #[test]
    fn a_damaged_file_is_refused_naming_what_is_wrong() {
        assert!(matches!(
            HttpTokens::parse("[1,2]"),
            Err(TokenFileError::Malformed(_))
        ));
        let bad = r#"{"tokens":[{"user":"a","admin":false,"sha256":"xyz"}]}"#;
        let e = HttpTokens::parse(bad).unwrap_err();
        assert!(e.to_string().contains("entry 0") && e.to_string().contains("xyz"));
        let bad_user = format!(
            r#"{{"tokens":[{{"user":"a b","admin":false,"sha256":"{}"}}]}}"#,
            "0".repeat(64)
        );
        assert!(HttpTokens::parse(&bad_user).is_err(), "names are checked");
    }
}
