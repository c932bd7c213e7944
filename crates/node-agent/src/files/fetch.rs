//! One stored file into the cache: found and checked, or fetched and checked.

use super::NodeFiles;
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ytsched_common::files::Sha256Digest;

impl NodeFiles {
    async fn store(&self) -> Result<&async_nats::jetstream::object_store::ObjectStore, String> {
        self.store
            .get_or_try_init(|| async {
                self.js
                    .get_object_store(&self.bucket)
                    .await
                    .map_err(|e| format!("cannot open the file store '{}': {e}", self.bucket))
            })
            .await
    }

    /// The cache's copy of `digest`, pinned, and the bytes fetched for it (0 on a hit).
    /// A cached copy whose digest no longer matches is fetched again.
    pub(super) async fn file(&self, digest: &Sha256Digest) -> Result<(PathBuf, u64), String> {
        let key = digest.as_str();
        let lock = self.key_lock(key);
        let _held = lock.lock().await;
        if let Some(path) = self.space.pin(key) {
            if hash_of(&path).await.as_ref() == Ok(digest) {
                self.space.count(|c| c.hits += 1);
                return Ok((path, 0));
            }
            tracing::warn!(file = %digest, "cached file does not match its digest; fetching it again");
            self.space.count(|c| c.corrupt += 1);
            self.space.unpin(key);
            self.space.forget(key);
        }
        self.space.count(|c| c.misses += 1);
        let size = self.fetch(digest).await?;
        self.space.count(|c| c.bytes_fetched += size);
        Ok((self.space.file_path(key), size))
    }

    /// Fetches `digest` into the cache, checking it on the way.
    async fn fetch(&self, digest: &Sha256Digest) -> Result<u64, String> {
        let store = self.store().await?;
        let mut object = store.get(digest.as_str()).await.map_err(|e| {
            use async_nats::jetstream::object_store::GetErrorKind;
            match e.kind() {
                GetErrorKind::NotFound => format!("file {digest} is not in the file store"),
                _ => format!("cannot fetch file {digest}: {e}"),
            }
        })?;
        let size = object.info().size as u64;
        self.space.reserve(&format!("file {digest}"), size)?;
        let partial = self.space.partial_path(digest.as_str());
        let got = copy_hashing(&mut object, &partial).await;
        let fail = |e: String| {
            let _ = std::fs::remove_file(&partial);
            self.space.release(size);
            Err(e)
        };
        let got = match got {
            Ok(g) => g,
            Err(e) => return fail(format!("cannot fetch file {digest}: {e}")),
        };
        if got.1 != size || &got.0 != digest {
            return fail(format!(
                "file {digest} fetched as {} bytes with digest {}: not the file named",
                got.1, got.0
            ));
        }
        let path = self.space.file_path(digest.as_str());
        if let Err(e) = read_only(&partial).and_then(|()| std::fs::rename(&partial, &path)) {
            return fail(format!(
                "cannot keep file {digest} in the node's cache: {e}"
            ));
        }
        self.space.add(digest.as_str(), path, size);
        tracing::info!(file = %digest, bytes = size, "file fetched into the node's cache");
        Ok(size)
    }
}

/// Writes what `from` reads to `to`, returning its digest and length.
async fn copy_hashing(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &Path,
) -> Result<(Sha256Digest, u64), String> {
    let mut out = tokio::fs::File::create(to)
        .await
        .map_err(|e| e.to_string())?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).await.map_err(|e| e.to_string())?;
        total += n as u64;
    }
    out.flush().await.map_err(|e| e.to_string())?;
    Ok((Sha256Digest::from_hasher(hasher), total))
}

/// The digest of a cached file, read off the runtime's threads.
pub(super) async fn hash_of(path: &Path) -> Result<Sha256Digest, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(&path).map_err(|e| e.to_string())?;
        let mut hasher = sha2::Sha256::new();
        std::io::copy(&mut f, &mut hasher).map_err(|e| e.to_string())?;
        Ok(Sha256Digest::from_hasher(hasher))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn read_only(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))
}
