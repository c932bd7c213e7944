//! A job's layers unpacked into one root, once per node and set of layers: each a tar
//! archive of a root filesystem, the first named on top. Bounded in what it unpacks to;
//! no device node, and no setuid bit, survives; the mount points a job's namespace needs
//! are made, never through a link of the layer's.

use super::NodeFiles;
use std::path::{Component, Path, PathBuf};
use ytsched_common::files::Sha256Digest;

/// Directories every root needs for the job's own mounts.
const MOUNT_POINTS: [&str; 4] = ["proc", "dev", "tmp", "var/tmp"];

impl NodeFiles {
    /// The unpacked root of `layers` (pinned), its cache key, and the bytes fetched.
    pub(super) async fn layers(
        &self,
        layers: &[Sha256Digest],
    ) -> Result<(String, PathBuf, u64), String> {
        let joined: String = layers.iter().map(|d| d.as_str()).collect();
        let key = format!("layers-{}", Sha256Digest::of(joined.as_bytes()).as_str());
        let lock = self.key_lock(&key);
        let _held = lock.lock().await;
        if let Some(root) = self.space.pin(&key) {
            self.space.count(|c| c.hits += 1);
            return Ok((key, root, 0));
        }
        let mut fetched = 0;
        let mut archives = Vec::new();
        for d in layers {
            let (path, n) = self.file(d).await?;
            fetched += n;
            archives.push((d.clone(), path));
        }
        let partial = self.space.partial_path(&key);
        let (limit, sandboxes) = (self.layer_limit, self.sandboxes_dir.clone());
        let unpack_into = partial.clone();
        let todo = archives.clone();
        let unpacked = tokio::task::spawn_blocking(move || {
            // The bottom layer first, so that upper ones overwrite it.
            let mut total = 0;
            for (digest, path) in todo.iter().rev() {
                total += unpack(digest, path, &unpack_into, limit.saturating_sub(total))?;
            }
            for m in MOUNT_POINTS {
                mount_point(&unpack_into, Path::new(m))?;
            }
            mount_point(&unpack_into, &sandboxes)?;
            Ok::<u64, String>(total)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        for (d, _) in &archives {
            self.space.unpin(d.as_str());
        }
        let root = self.space.layer_path(&key);
        let kept = unpacked.and_then(|bytes| {
            self.space.reserve("the job's layers", bytes)?;
            std::fs::rename(&partial, &root)
                .map(|()| bytes)
                .map_err(|e| format!("cannot keep the unpacked layers: {e}"))
        });
        match kept {
            Ok(bytes) => {
                self.space.add(&key, root.clone(), bytes);
                tracing::info!(
                    layers = layers.len(),
                    bytes,
                    "layers unpacked into the node's cache"
                );
                Ok((key, root, fetched))
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&partial);
                Err(e)
            }
        }
    }
}

/// Unpacks one archive into `dest`; returns the bytes its files hold.
fn unpack(digest: &Sha256Digest, archive: &Path, dest: &Path, limit: u64) -> Result<u64, String> {
    let invalid = |e: std::io::Error| format!("layer {digest} is not a valid tar archive: {e}");
    std::fs::create_dir_all(dest).map_err(|e| e.to_string())?;
    let file = std::fs::File::open(archive).map_err(|e| e.to_string())?;
    let mut ar = tar::Archive::new(file);
    ar.set_overwrite(true);
    ar.set_preserve_permissions(false);
    ar.set_unpack_xattrs(false);
    let mut total = 0u64;
    let mut entries = 0usize;
    for entry in ar.entries().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        entries += 1;
        let kind = entry.header().entry_type();
        if kind.is_block_special() || kind.is_character_special() || kind.is_fifo() {
            continue; // the job's /dev is the node's, as without a layer
        }
        total += entry.header().size().map_err(invalid)?;
        if total > limit {
            return Err(format!(
                "layer {digest} unpacks to more than the limit of {limit} bytes (--layer-size-limit)"
            ));
        }
        entry.unpack_in(dest).map_err(invalid)?;
    }
    if entries == 0 {
        return Err(format!(
            "layer {digest} is not a valid tar archive: it holds no entries"
        ));
    }
    Ok(total)
}

/// Makes directory `rel` (absolute or not) under `root` for a mount, refusing a path
/// through any link the layer holds: a link could point the mount outside the root.
fn mount_point(root: &Path, rel: &Path) -> Result<(), String> {
    let mut at = root.to_path_buf();
    for c in rel.components() {
        let Component::Normal(part) = c else {
            continue;
        };
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "the layers hold a link at /{} where the job's mounts go",
                    at.strip_prefix(root).unwrap_or(&at).display()
                ))
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "the layers hold a file at /{} where the job's mounts go",
                    at.strip_prefix(root).unwrap_or(&at).display()
                ))
            }
            Err(_) => std::fs::create_dir(&at).map_err(|e| e.to_string())?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(dir: &Path, build: impl FnOnce(&mut tar::Builder<std::fs::File>)) -> PathBuf {
        let path = dir.join("layer.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
        build(&mut b);
        b.finish().unwrap();
        path
    }

    fn file(b: &mut tar::Builder<std::fs::File>, name: &str, body: &[u8], mode: u32) {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(mode);
        h.set_cksum();
        b.append_data(&mut h, name, body).unwrap();
    }

    #[test]
    fn a_layer_unpacks_bounded_without_setuid_and_its_links_never_take_a_mount() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = Sha256Digest::of(b"layer");
        let tar = archive(dir.path(), |b| {
            file(b, "etc/os-release", b"ID=test\n", 0o644);
            file(b, "bin/tool", b"#!/bin/sh\n", 0o4755);
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            h.set_cksum();
            b.append_link(&mut h, "tmp", "/etc").unwrap();
        });
        let root = dir.path().join("root");
        assert_eq!(unpack(&d, &tar, &root, 1 << 20).unwrap(), 18);
        assert_eq!(
            std::fs::read_to_string(root.join("etc/os-release")).unwrap(),
            "ID=test\n"
        );
        let mode = std::fs::metadata(root.join("bin/tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7000, 0, "setuid kept: {mode:o}");
        let e = mount_point(&root, Path::new("tmp/sandboxes")).unwrap_err();
        assert!(e.contains("link at /tmp"), "{e}");
        mount_point(&root, Path::new("/srv/ytsched/sandboxes")).unwrap();
        assert!(root.join("srv/ytsched/sandboxes").is_dir());

        let e = unpack(&d, &tar, &dir.path().join("small"), 10).unwrap_err();
        assert!(
            e.contains("more than the limit of 10 bytes (--layer-size-limit)"),
            "{e}"
        );
        let junk = dir.path().join("junk.tar");
        std::fs::write(&junk, "not an archive at all").unwrap();
        let e = unpack(&d, &junk, &dir.path().join("junk"), 1 << 20).unwrap_err();
        assert!(e.contains("is not a valid tar archive"), "{e}");
    }
}
