//! Files and root-filesystem layers a job gets with its operation (SPEC 5.17): what a
//! spec names (`file_paths`, `layer_paths`) and what the file store's API says.
//!
//! A file is named by its content (sha256), so a file already in the store is never sent
//! again and a node can check what it fetched. Names are parsed here, at the boundary:
//! nothing past it handles a digest or a sandbox name that was not checked.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Files one task may name; each is fetched and placed before its jobs start.
pub const MAX_FILES_PER_TASK: usize = 64;
/// Layers one task may stack under its jobs' root.
pub const MAX_LAYERS_PER_TASK: usize = 4;
/// Bytes of one upload chunk on the bus, well inside NATS's default 1 MiB payload.
pub const UPLOAD_CHUNK_BYTES: usize = 512 * 1024;
/// Longest original name the store keeps for a file (shown by `file list`).
pub const MAX_FILE_LABEL_BYTES: usize = 255;

/// A file's content address: its sha256 as 64 lowercase hex digits. Read with or
/// without a `sha256:` prefix; always written without.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sha256Digest(String);

impl Sha256Digest {
    pub fn parse(s: &str) -> Result<Self, String> {
        let hex = s.strip_prefix("sha256:").unwrap_or(s);
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "'{}' is not a sha256 digest (64 hex digits, optionally after 'sha256:')",
                crate::quote::quote(s, 80)
            ));
        }
        Ok(Self(hex.to_ascii_lowercase()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest;
        Self::from_hasher(sha2::Sha256::new_with_prefix(bytes))
    }

    /// What a hasher fed with a file's bytes says.
    pub fn from_hasher(hasher: sha2::Sha256) -> Self {
        use sha2::Digest;
        let out = hasher.finalize();
        let mut hex = String::with_capacity(64);
        for b in out {
            hex.push_str(&format!("{b:02x}"));
        }
        Self(hex)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Sha256Digest {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s)
    }
}

impl From<Sha256Digest> for String {
    fn from(d: Sha256Digest) -> String {
        d.0
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

validated_string!(
    /// The name a file gets in the job's sandbox: one path component, so no file can be
    /// placed outside the sandbox or over its standard streams' files.
    SandboxFileName(String),
    check_sandbox_name,
    String
);

fn check_sandbox_name(s: &str) -> Result<(), String> {
    let bad = s.is_empty()
        || s.len() > 255
        || s == "."
        || s == ".."
        || s.contains(['/', '\0'])
        || s.chars().any(char::is_control);
    if bad {
        return Err(format!(
            "'{}' is not a file name for the sandbox (one path component of 1 to 255 bytes, not '.' or '..', no '/' or control characters)",
            crate::quote::quote(s, 80)
        ));
    }
    Ok(())
}

/// One entry of a task's `file_paths`: a stored file, the name it gets in the sandbox,
/// and whether it may be run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRef {
    pub digest: Sha256Digest,
    pub file_name: SandboxFileName,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
}

/// A file of the store as its owner (or a user it is shared with) sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    pub digest: Sha256Digest,
    pub size: u64,
    /// The names it was uploaded under, the latest last.
    pub names: Vec<String>,
    pub uploaded_at: u64,
    /// When a live operation last named it; the TTL counts from here.
    pub last_used: u64,
    /// Shared with the caller by an admin rather than uploaded by them.
    #[serde(default)]
    pub shared: bool,
}

/// A node's file cache as its heartbeats tell it (counters since the agent started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub bytes_fetched: u64,
    /// Entries found corrupt (their digest did not match) and fetched again.
    #[serde(default)]
    pub corrupt: u64,
}

/// Reads until `buf` is full or the reader ends: an upload's chunks are full but the last.
pub fn read_full(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_sandbox_names_are_parsed_at_the_boundary() {
        let d = Sha256Digest::of(b"hello");
        assert_eq!(
            d.as_str(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(
            Sha256Digest::parse(&format!("sha256:{}", d.as_str().to_uppercase())),
            Ok(d.clone())
        );
        assert!(Sha256Digest::parse("abc")
            .unwrap_err()
            .contains("not a sha256 digest"));
        assert_eq!(d.to_string(), format!("sha256:{}", d.as_str()));
        for bad in ["", ".", "..", "a/b", "x\0", &"n".repeat(256)] {
            assert!(SandboxFileName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(SandboxFileName::parse("run.py").is_ok());
        let r: Result<FileRef, _> = serde_json::from_str(
            r#"{"digest":"0000000000000000000000000000000000000000000000000000000000000000","file_name":"../x"}"#,
        );
        assert!(r.unwrap_err().to_string().contains("not a file name"));
    }
}
