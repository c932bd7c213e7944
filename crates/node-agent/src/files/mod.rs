//! A job's files and layers on its node (SPEC 5.17): fetched once into the node's cache
//! from the file store, checked against their digest, then placed in the sandbox
//! read-only (files) or used as the job's root (layers).
//!
//! The node reads the store with its own identity, whose permissions allow reads of
//! the store's stream and nothing else; the scheduler decided which files a job may
//! name, so a node fetches only what a start names.

pub mod cache;
mod fetch;
mod layers;

use cache::CacheSpace;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use ytsched_common::files::{FileCacheCounters, SandboxFileName};
use ytsched_common::protocol::JobStartSpec;

/// A file to copy into the job's working directory.
#[derive(Clone, Debug)]
pub struct PlacedFile {
    pub source: PathBuf,
    pub name: SandboxFileName,
    pub executable: bool,
}

/// What preparation left for the launch: files to place, a root, what was fetched.
#[derive(Default)]
pub struct Prepared {
    pub files: Vec<PlacedFile>,
    /// The unpacked layers: the job's root.
    pub root: Option<PathBuf>,
    pub bytes_fetched: u64,
    /// Cache keys pinned until the job has its files.
    pinned: Vec<String>,
}

/// The node's file store reader and cache.
pub struct NodeFiles {
    space: CacheSpace,
    js: async_nats::jetstream::Context,
    bucket: String,
    store: tokio::sync::OnceCell<async_nats::jetstream::object_store::ObjectStore>,
    /// One fetch or unpack per key at a time; the others wait and then hit.
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The most a job's layers may unpack to (`--layer-size-limit`).
    layer_limit: u64,
    /// Where sandboxes are: made as mount points in every unpacked root.
    sandboxes_dir: PathBuf,
}

impl NodeFiles {
    pub fn new(
        cache_dir: PathBuf,
        cache_limit: u64,
        layer_limit: u64,
        sandboxes_dir: PathBuf,
        client: async_nats::Client,
        bucket: String,
    ) -> std::io::Result<Self> {
        Ok(Self {
            space: CacheSpace::new(cache_dir, cache_limit)?,
            js: async_nats::jetstream::new(client),
            bucket,
            store: Default::default(),
            busy: Default::default(),
            layer_limit,
            sandboxes_dir,
        })
    }

    pub fn counters(&self) -> FileCacheCounters {
        self.space.counters()
    }

    fn key_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut busy = self.busy.lock().expect("file cache lock");
        // Locks no one holds any more are dropped as new ones are made.
        busy.retain(|_, l| Arc::strong_count(l) > 1);
        busy.entry(key.to_string()).or_default().clone()
    }

    /// Fetches (or finds) every file and layer of `spec`. An error names the file and
    /// what went wrong; the job then fails without running.
    pub async fn prepare(&self, spec: &JobStartSpec) -> Result<Prepared, String> {
        let mut prepared = Prepared::default();
        let result = self.prepare_into(spec, &mut prepared).await;
        if result.is_err() {
            self.done(&mut prepared);
        }
        result.map(|()| prepared)
    }

    async fn prepare_into(&self, spec: &JobStartSpec, p: &mut Prepared) -> Result<(), String> {
        for f in &spec.files {
            let (path, fetched) = self.file(&f.digest).await?;
            p.pinned.push(f.digest.as_str().to_string());
            p.bytes_fetched += fetched;
            p.files.push(PlacedFile {
                source: path,
                name: f.file_name.clone(),
                executable: f.executable,
            });
        }
        if !spec.layers.is_empty() {
            let (key, root, fetched) = self.layers(&spec.layers).await?;
            p.pinned.push(key);
            p.bytes_fetched += fetched;
            p.root = Some(root);
        }
        Ok(())
    }

    /// Lets the cache evict what `prepared` held (its files are in the sandbox by now;
    /// an unpacked root stays pinned while its job runs: call when it ends).
    pub fn done(&self, prepared: &mut Prepared) {
        for key in prepared.pinned.drain(..) {
            self.space.unpin(&key);
        }
    }
}
