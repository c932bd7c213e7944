//! Files that hold secrets (keys, seeds, token digests): created with their final mode
//! from the start, so no one else can read them even for a moment, and replaced whole.

use anyhow::Context;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Creates `path` with mode 0600 from the start, so the secret is never readable by others.
pub(crate) fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// Writes `path` through a temporary file created with `mode` from the start, so no
/// one else can read a secret even for a moment, and readers never see half a file.
pub(crate) fn write_atomically(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
