//! The node's file cache (SPEC 5.17): each stored file fetched once, checked against its
//! digest, and kept read-only under `<work>/cache/files/<sha256>`; unpacked layers under
//! `<work>/cache/layers/<key>`. Bounded by `--file-cache-size`: the least recently used
//! entries not in use go first, and a file that cannot fit fails its job naming the bound.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use ytsched_common::files::FileCacheCounters;

/// One entry: a fetched file or an unpacked layer set.
struct Entry {
    bytes: u64,
    /// Recency: a counter taken at each use.
    used: u64,
    /// Jobs placing from it now: not evicted meanwhile.
    pins: u32,
    path: PathBuf,
}

/// Entries by key, their bytes, and the counters the heartbeat reports.
#[derive(Default)]
struct Index {
    entries: HashMap<String, Entry>,
    bytes: u64,
    clock: u64,
    counters: FileCacheCounters,
}

pub struct CacheSpace {
    root: PathBuf,
    limit: u64,
    index: Mutex<Index>,
}

impl CacheSpace {
    /// A cache under `root`, emptied: entries of an earlier run are not trusted (a
    /// crash may have left them half written) and are fetched again.
    pub fn new(root: PathBuf, limit: u64) -> std::io::Result<Self> {
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        for sub in ["files", "layers", "partial"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        Ok(Self {
            root,
            limit,
            index: Mutex::new(Index::default()),
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().expect("file cache lock")
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn file_path(&self, key: &str) -> PathBuf {
        self.root.join("files").join(key)
    }

    pub fn layer_path(&self, key: &str) -> PathBuf {
        self.root.join("layers").join(key)
    }

    /// Where a fetch or unpack writes before it is complete.
    pub fn partial_path(&self, key: &str) -> PathBuf {
        self.root
            .join("partial")
            .join(format!("{key}.{}", uuid::Uuid::new_v4().simple()))
    }

    pub fn counters(&self) -> FileCacheCounters {
        self.index().counters
    }

    pub fn count(&self, f: impl FnOnce(&mut FileCacheCounters)) {
        f(&mut self.index().counters);
    }

    /// The entry `key`, pinned, if the cache has it.
    pub fn pin(&self, key: &str) -> Option<PathBuf> {
        let mut ix = self.index();
        ix.clock += 1;
        let clock = ix.clock;
        let e = ix.entries.get_mut(key)?;
        e.used = clock;
        e.pins += 1;
        Some(e.path.clone())
    }

    pub fn unpin(&self, key: &str) {
        if let Some(e) = self.index().entries.get_mut(key) {
            e.pins = e.pins.saturating_sub(1);
        }
    }

    /// Makes room for `bytes` more, evicting the least recently used entries no job
    /// uses; Err names the bound when that is not enough.
    pub fn reserve(&self, what: &str, bytes: u64) -> Result<(), String> {
        let mut ix = self.index();
        while ix.bytes + bytes > self.limit {
            let victim = ix
                .entries
                .iter()
                .filter(|(_, e)| e.pins == 0)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            let Some(key) = victim else {
                return Err(format!(
                    "the node's file cache is full: {what} needs {bytes} bytes, {} of the {} (--file-cache-size) are in use by running jobs",
                    ix.bytes, self.limit
                ));
            };
            if let Some(e) = ix.entries.remove(&key) {
                ix.bytes -= e.bytes;
                remove_path(&e.path);
            }
        }
        // Held for the entry being made; `add` or `release` settles it.
        ix.bytes += bytes;
        Ok(())
    }

    /// Gives back a reservation that made no entry.
    pub fn release(&self, bytes: u64) {
        let mut ix = self.index();
        ix.bytes = ix.bytes.saturating_sub(bytes);
    }

    /// Records a complete entry (its bytes reserved), pinned once.
    pub fn add(&self, key: &str, path: PathBuf, bytes: u64) {
        let mut ix = self.index();
        ix.clock += 1;
        let used = ix.clock;
        if let Some(old) = ix.entries.insert(
            key.to_string(),
            Entry {
                bytes,
                used,
                pins: 1,
                path,
            },
        ) {
            ix.bytes = ix.bytes.saturating_sub(old.bytes);
        }
    }

    /// Forgets an entry found corrupt, deleting it.
    pub fn forget(&self, key: &str) {
        let mut ix = self.index();
        if let Some(e) = ix.entries.remove(key) {
            ix.bytes = ix.bytes.saturating_sub(e.bytes);
            remove_path(&e.path);
        }
    }
}

fn remove_path(p: &Path) {
    let _ = if p.is_dir() {
        make_writable(p);
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
}

/// Unpacked layers are read-only: their directories are opened up to be removed.
fn make_writable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::symlink_metadata(p) {
        if meta.is_dir() {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    make_writable(&e.path());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_no_job_holds_goes_first() {
        let dir = tempfile::tempdir().unwrap();
        let space = CacheSpace::new(dir.path().join("cache"), 100).unwrap();
        for key in ["a", "b"] {
            space.reserve(key, 40).unwrap();
            let path = space.file_path(key);
            std::fs::write(&path, "x").unwrap();
            space.add(key, path, 40);
            space.unpin(key);
        }
        // "a" used again: "b" is now the least recently used.
        assert!(space.pin("a").is_some());
        space.unpin("a");
        space.reserve("c", 40).unwrap();
        assert!(space.pin("b").is_none(), "b was evicted");
        assert!(!space.file_path("b").exists());
        assert!(space.pin("a").is_some());
        // "a" is pinned and the reservation holds the rest: nothing more fits.
        let e = space.reserve("d", 40).unwrap_err();
        assert!(
            e.contains("file cache is full") && e.contains("--file-cache-size"),
            "{e}"
        );
        // Once no job holds it, a reservation that needs its room takes it.
        space.release(40);
        space.unpin("a");
        space.reserve("d", 70).unwrap();
        assert!(space.pin("a").is_none(), "a was evicted");
    }
}
