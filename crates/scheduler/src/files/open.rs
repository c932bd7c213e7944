//! The store opened by a new leader: the object bucket (made with a bound on its size
//! and on how many consumers readers may make), the records bucket, and the catalog read
//! from it.

use super::catalog::{Catalog, FileRecord};
use super::{FileLimits, FileStore};
use crate::store::{open_bucket, while_cluster_forms};
use async_nats::jetstream::{self, object_store::ObjectStore, stream};
use futures::StreamExt;
use std::collections::HashMap;
use ytsched_common::files::Sha256Digest;
use ytsched_common::subjects::Subjects;

/// Consumers the files stream may have: nodes read through short-lived ordered ones.
const MAX_READERS: i32 = 4_096;

/// Opens (creating where missing) the file store of this installation.
pub async fn open(
    js: &jetstream::Context,
    subjects: &Subjects,
    replicas: usize,
    limits: FileLimits,
) -> anyhow::Result<FileStore> {
    let objects = open_objects(js, &subjects.files_bucket(), replicas, limits.store_bytes).await?;
    // Records live as long as their files; the sweep removes them.
    let records = open_bucket(
        js,
        &subjects.bucket("file_records"),
        replicas,
        std::time::Duration::ZERO,
    )
    .await?;
    let catalog = read_catalog(&records).await?;
    tracing::info!(files = catalog.len(), "file store opened");
    Ok(FileStore {
        objects,
        records,
        catalog: std::sync::Mutex::new(catalog),
        uploads: Default::default(),
        writing: Default::default(),
        limits,
        uploaded_bytes: Default::default(),
    })
}

/// The object store's stream as `create_object_store` makes it, but bounded: its size,
/// and the consumers nodes may create on it.
async fn open_objects(
    js: &jetstream::Context,
    bucket: &str,
    replicas: usize,
    max_bytes: u64,
) -> anyhow::Result<ObjectStore> {
    let config = stream::Config {
        name: format!("OBJ_{bucket}"),
        subjects: vec![format!("$O.{bucket}.C.>"), format!("$O.{bucket}.M.>")],
        max_bytes: i64::try_from(max_bytes).unwrap_or(i64::MAX),
        max_consumers: MAX_READERS,
        storage: stream::StorageType::File,
        num_replicas: replicas.max(1),
        discard: stream::DiscardPolicy::New,
        allow_rollup: true,
        allow_direct: true,
        ..Default::default()
    };
    while_cluster_forms(&format!("file store {bucket}"), || async {
        let stream = js
            .get_or_create_stream(config.clone())
            .await
            .map_err(|e| e.to_string())?;
        // A store made under another --file-store-size takes the one given now.
        if stream.cached_info().config.max_bytes != config.max_bytes {
            let mut changed = stream.cached_info().config.clone();
            changed.max_bytes = config.max_bytes;
            js.update_stream(changed).await.map_err(|e| e.to_string())?;
        }
        js.get_object_store(bucket).await.map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| {
        e.context(format!(
            "the file store reserves --file-store-size ({}) of JetStream's storage: lower it, or give nats-server more",
            ytsched_common::ByteSize(max_bytes)
        ))
    })
}

/// Every record in the bucket; one that does not decode is skipped and said.
async fn read_catalog(records: &jetstream::kv::Store) -> anyhow::Result<Catalog> {
    let mut out = HashMap::new();
    let mut keys = records
        .keys()
        .await
        .map_err(|e| anyhow::anyhow!("cannot list the file records: {e}"))?;
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| anyhow::anyhow!("cannot list the file records: {e}"))?;
        let Ok(digest) = Sha256Digest::parse(&key) else {
            tracing::warn!(key, "file record under a key that is not a digest; ignored");
            continue;
        };
        let Some(bytes) = records.get(&key).await.ok().flatten() else {
            continue;
        };
        match ytsched_common::codec::decode::<FileRecord>(&bytes) {
            Ok(r) => {
                out.insert(digest, r);
            }
            Err(e) => tracing::warn!(key, error = %e, "file record does not decode; ignored"),
        }
    }
    Ok(Catalog::new(out))
}
