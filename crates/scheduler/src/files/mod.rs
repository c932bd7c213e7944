//! The file store (SPEC 5.17): job files and layers in a JetStream Object Store bucket
//! (`<prefix>_files`), named by their sha256, with a record per file in
//! `<prefix>_file_records` saying who owns it and when a live operation last named it.
//!
//! Only the leader writes it, through the file API (`api::files`): callers never touch
//! the store, so sizes, quotas and ownership are checked here, once. Nodes read it
//! directly (their permissions allow reads of that stream and nothing else) and check
//! every digest themselves.

pub mod catalog;
mod gc;
pub mod limits;
mod names;
pub mod node_caches;
mod open;
mod service;
pub mod uploads;

pub use limits::FileLimits;
pub use open::open;
pub use service::is_file_method;

use async_nats::jetstream::{kv, object_store::ObjectStore};
use catalog::Catalog;
use std::sync::{Arc, Mutex};
use uploads::{Uploads, Writing};
use ytsched_common::api::ApiError;
use ytsched_common::files::Sha256Digest;
use ytsched_common::identity::Caller;
use ytsched_common::spec::VanillaSpec;

/// The file store as the leader serves it.
pub struct FileStore {
    objects: ObjectStore,
    records: kv::Store,
    catalog: Mutex<Catalog>,
    uploads: Mutex<Uploads>,
    writing: Writing,
    limits: FileLimits,
    /// Bytes received by uploads, for `/metrics`.
    uploaded_bytes: std::sync::atomic::AtomicU64,
}

impl FileStore {
    fn catalog(&self) -> std::sync::MutexGuard<'_, Catalog> {
        self.catalog.lock().expect("file catalog lock")
    }

    fn uploads(&self) -> std::sync::MutexGuard<'_, Uploads> {
        self.uploads.lock().expect("uploads lock")
    }

    pub fn limits(&self) -> &FileLimits {
        &self.limits
    }

    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Files stored now.
    pub fn file_count(&self) -> usize {
        self.catalog().len()
    }

    /// Whether `caller` may name every stored file `spec` names: a file missing and one
    /// of another user are refused alike, naming the task's field and the digest.
    pub fn check_spec(&self, caller: &Caller, spec: &VanillaSpec) -> Result<(), ApiError> {
        let catalog = self.catalog();
        for (task, t) in &spec.tasks {
            for (field, digest) in t
                .file_paths
                .iter()
                .map(|f| ("file_paths", &f.digest))
                .chain(t.layer_paths.iter().map(|d| ("layer_paths", d)))
            {
                if catalog.readable(digest, &caller.user).is_none() {
                    return Err(
                        not_readable(digest, &caller.user).at(&format!("tasks.{task}.{field}"))
                    );
                }
            }
        }
        Ok(())
    }
}

/// The one answer for a file that is missing and for one the user may not read.
fn not_readable(digest: &Sha256Digest, user: &ytsched_common::identity::UserName) -> ApiError {
    ApiError::not_found(format!(
        "no stored file {digest} that user '{user}' may read (upload it with `ytsched file upload`, or ask an admin to share it)"
    ))
}

/// A handle the service and the HTTP face share.
pub type Files = Arc<FileStore>;
