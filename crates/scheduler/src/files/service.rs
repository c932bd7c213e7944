//! The file API's calls, answered by the leader outside the core: an upload's begin,
//! chunks and finish, a user's list, removal, and an admin's share.

use super::catalog::FileRecord;
use super::uploads::{ObjectWrite, Upload};
use super::{not_readable, FileStore};
use ytsched_common::api::files::*;
use ytsched_common::api::{ApiError, ApiMethod};
use ytsched_common::codec::encode;
use ytsched_common::files::{FileEntry, Sha256Digest, UPLOAD_CHUNK_BYTES};
use ytsched_common::identity::Caller;
use ytsched_common::protocol::unix_now;
use ytsched_common::ByteSize;

/// Who a written file belongs to once its bytes proved right.
struct Owner {
    user: ytsched_common::identity::UserName,
    name: Option<String>,
    size: u64,
}

/// Entries one `list_files` answer carries at most.
const LIST_LIMIT: usize = 1_000;

fn request<M: ApiMethod>(payload: &[u8]) -> Result<M, ApiError> {
    crate::service::decode_request::<M>(payload).map(|r| r.body)
}

use crate::service::encode_reply as reply;

/// Whether `method` is one of the file API's.
pub fn is_file_method(method: &str) -> bool {
    [
        FileUploadBegin::METHOD,
        FileUploadChunk::METHOD,
        FileUploadFinish::METHOD,
        ListFiles::METHOD,
        RemoveFile::METHOD,
        ShareFile::METHOD,
        NameFile::METHOD,
        ResolveFileName::METHOD,
        UnnameFile::METHOD,
    ]
    .contains(&method)
}

impl FileStore {
    /// Answers one file API call of `caller`.
    pub async fn answer(&self, caller: &Caller, method: &str, payload: &[u8]) -> Vec<u8> {
        match method {
            FileUploadBegin::METHOD => reply(async { self.begin(caller, request(payload)?) }.await),
            FileUploadChunk::METHOD => reply(self.chunk(caller, request(payload)).await),
            FileUploadFinish::METHOD => reply(self.finish(caller, request(payload)).await),
            ListFiles::METHOD => reply(
                request::<ListFiles>(payload)
                    .map(|_| self.catalog().list_for(&caller.user, LIST_LIMIT)),
            ),
            RemoveFile::METHOD => reply(self.remove(caller, request(payload)).await),
            ShareFile::METHOD => reply(self.share(caller, request(payload)).await),
            NameFile::METHOD => reply(self.name(caller, request(payload)).await),
            ResolveFileName::METHOD => reply(self.resolve(caller, request(payload))),
            UnnameFile::METHOD => reply(self.unname(caller, request(payload)).await),
            _ => reply::<()>(Err(ApiError::new(format!("unknown method '{method}'")))),
        }
    }

    /// An upload begun, or refused naming the bound it would pass.
    fn begin(&self, caller: &Caller, req: FileUploadBegin) -> Result<FileUploadTicket, ApiError> {
        let user = &caller.user;
        if self.catalog().readable(&req.sha256, user).is_some() {
            return Ok(FileUploadTicket {
                already_stored: true,
                upload_id: String::new(),
                chunk_bytes: UPLOAD_CHUNK_BYTES as u32,
            });
        }
        let l = &self.limits;
        if req.size > l.max_file_size {
            return Err(ApiError::limit_reached(format!(
                "the file is {} ({} bytes), more than the file size limit of {} (--file-size-limit)",
                ByteSize(req.size),
                req.size,
                ByteSize(l.max_file_size)
            )));
        }
        let (owned, count) = self.catalog().owned_by(user);
        let mut uploads = self.uploads();
        let pending = uploads.pending_bytes(user);
        if owned + pending + req.size > l.user_quota {
            return Err(ApiError::limit_reached(format!(
                "user '{user}' owns {} of files and uploads {} more; {} would pass the quota of {} (--file-quota-per-user); remove files with `ytsched file remove`",
                ByteSize(owned), ByteSize(pending), ByteSize(req.size), ByteSize(l.user_quota)
            )));
        }
        if count + uploads.count_of(user) >= l.max_files_per_user {
            return Err(ApiError::limit_reached(format!(
                "user '{user}' owns {count} files, the limit of {} (--max-files-per-user)",
                l.max_files_per_user
            )));
        }
        if uploads.count_of(user) >= l.uploads_per_user || uploads.len() >= l.uploads {
            return Err(ApiError::unavailable(format!(
                "busy: {} uploads at once per user and {} in all are taken; retry when one ends",
                l.uploads_per_user, l.uploads
            )));
        }
        let mut upload = Upload::new(user.clone(), req.sha256.clone(), req.size, req.name);
        // Written only by the first upload of a digest that is not stored.
        if self.catalog().get(&req.sha256).is_none() && self.writing.claim(&req.sha256) {
            upload.write = Some(ObjectWrite::start(self.objects.clone(), &req.sha256));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        uploads.add(id.clone(), upload);
        Ok(FileUploadTicket {
            already_stored: false,
            upload_id: id,
            chunk_bytes: UPLOAD_CHUNK_BYTES as u32,
        })
    }

    async fn chunk(
        &self,
        caller: &Caller,
        req: Result<FileUploadChunk, ApiError>,
    ) -> Result<u64, ApiError> {
        let req = req?;
        if req.data.len() > UPLOAD_CHUNK_BYTES {
            return Err(ApiError::limit_reached(format!(
                "a chunk of {} bytes is more than the limit of {UPLOAD_CHUNK_BYTES}",
                req.data.len()
            )));
        }
        let upload = self.open_upload(&req.upload_id, caller)?;
        let mut upload = upload.lock().await;
        let len = req.data.len() as u64;
        let received = upload.take(req.offset, req.data).await;
        match received {
            Ok(n) => {
                self.uploaded_bytes
                    .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                drop(upload);
                self.drop_upload(&req.upload_id).await;
                Err(ApiError::invalid(format!("upload dropped: {e}")))
            }
        }
    }

    fn open_upload(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<std::sync::Arc<tokio::sync::Mutex<Upload>>, ApiError> {
        self.uploads().get(id, &caller.user).ok_or_else(|| {
            ApiError::not_found(format!(
                "no upload '{}' of user '{}' (it ended, or was dropped after {} s without a chunk)",
                ytsched_common::quote::quote(id, 64),
                caller.user,
                self.limits.upload_idle.as_secs()
            ))
        })
    }

    /// Ends an upload: its bytes must be what it began with. The file is then the
    /// caller's; a writer's object is deleted if they were not.
    async fn finish(
        &self,
        caller: &Caller,
        req: Result<FileUploadFinish, ApiError>,
    ) -> Result<FileEntry, ApiError> {
        let req = req?;
        let upload = self.open_upload(&req.upload_id, caller)?;
        self.uploads().remove(&req.upload_id);
        let mut upload = upload.lock().await;
        let write = upload.write.take();
        let hasher = std::mem::take(&mut upload.hasher);
        let got = Sha256Digest::from_hasher(hasher);
        let complete = upload.received == upload.size;
        let matches = complete && got == upload.digest;
        if let Some(w) = write {
            let owner = matches.then(|| Owner {
                user: upload.user.clone(),
                name: upload.name.clone(),
                size: upload.size,
            });
            self.end_write(&upload.digest, w, owner).await?;
        }
        if !complete {
            return Err(ApiError::invalid(format!(
                "the upload ended after {} of the {} bytes it began with",
                upload.received, upload.size
            )));
        }
        if !matches {
            return Err(ApiError::invalid(format!(
                "the bytes sent hash to {got}, not the {} the upload began with",
                upload.digest
            )));
        }
        self.take_ownership(&upload).await
    }

    /// Closes a writer's object: kept and recorded, owned, when its bytes matched (an
    /// `owner`), else deleted.
    async fn end_write(
        &self,
        digest: &Sha256Digest,
        w: ObjectWrite,
        owner: Option<Owner>,
    ) -> Result<(), ApiError> {
        drop(w.chunks);
        let written = w.done.await.map_err(|e| e.to_string()).and_then(|r| r);
        let result = match (written, owner) {
            (Ok(()), Some(owner)) => {
                let now = unix_now();
                let mut record = FileRecord::new(owner.size, now);
                record.own(&owner.user, owner.name.as_deref(), now);
                self.catalog().insert(digest.clone(), record);
                Ok(())
            }
            (Ok(()), None) => {
                let _ = self.objects.delete(digest.as_str()).await;
                Ok(())
            }
            (Err(e), _) => {
                let _ = self.objects.delete(digest.as_str()).await;
                Err(ApiError::unavailable(format!(
                    "the file store did not take the file: {e}; retry the upload"
                )))
            }
        };
        self.writing.release(digest);
        result
    }

    /// The caller proved they have the file's bytes: they own it now.
    async fn take_ownership(&self, upload: &Upload) -> Result<FileEntry, ApiError> {
        let digest = &upload.digest;
        if self.catalog().get(digest).is_none() {
            // Another upload writes it: its result decides whether there is a file.
            self.writing.wait_for(digest, self.limits.upload_idle).await;
        }
        let now = unix_now();
        let record = {
            let mut catalog = self.catalog();
            let Some(r) = catalog.get_mut(digest) else {
                return Err(ApiError::unavailable(
                    "busy: the file could not be stored just now; retry the upload",
                ));
            };
            r.size = upload.size;
            r.own(&upload.user, upload.name.as_deref(), now);
            r.clone()
        };
        self.store_record(digest, &record).await?;
        tracing::info!(user = %upload.user, file = %digest, size = upload.size, "file uploaded");
        let entry = self.catalog().list_for(&upload.user, usize::MAX);
        entry
            .into_iter()
            .find(|e| &e.digest == digest)
            .ok_or_else(|| not_readable(digest, &upload.user))
    }

    /// Drops an upload, deleting what its writer wrote.
    pub(super) async fn drop_upload(&self, id: &str) {
        let Some(upload) = self.uploads().remove(id) else {
            return;
        };
        let mut upload = upload.lock().await;
        if let Some(w) = upload.write.take() {
            let digest = upload.digest.clone();
            let _ = self.end_write(&digest, w, None).await;
        }
    }

    async fn remove(
        &self,
        caller: &Caller,
        req: Result<RemoveFile, ApiError>,
    ) -> Result<(), ApiError> {
        let digest = req?.digest;
        let record = {
            let mut catalog = self.catalog();
            let Some(r) = catalog
                .get_mut(&digest)
                .filter(|r| r.owners.contains_key(&caller.user))
            else {
                return Err(not_readable(&digest, &caller.user));
            };
            r.owners.remove(&caller.user);
            r.clone()
        };
        // With no owner left, the sweep drops it once no live operation names it.
        self.store_record(&digest, &record).await?;
        tracing::info!(user = %caller.user, file = %digest, "file ownership given up");
        Ok(())
    }

    async fn share(
        &self,
        caller: &Caller,
        req: Result<ShareFile, ApiError>,
    ) -> Result<(), ApiError> {
        let req = req?;
        if !caller.admin {
            return Err(ApiError::permission_denied(format!(
                "user '{}' may not share files: only admins may",
                caller.user
            )));
        }
        let record = {
            let mut catalog = self.catalog();
            let Some(r) = catalog.get_mut(&req.digest) else {
                return Err(ApiError::not_found(format!(
                    "no stored file {}",
                    req.digest
                )));
            };
            r.readers.insert(req.user.clone());
            r.clone()
        };
        self.store_record(&req.digest, &record).await?;
        tracing::info!(admin = %caller.user, file = %req.digest, with = %req.user, "file shared");
        Ok(())
    }

    pub(super) async fn store_record(
        &self,
        digest: &Sha256Digest,
        record: &FileRecord,
    ) -> Result<(), ApiError> {
        let bytes = encode(record)
            .map_err(|e| ApiError::new(format!("cannot encode a file record: {e}")))?;
        self.records
            .put(digest.as_str(), bytes.into())
            .await
            .map(|_| ())
            .map_err(|e| {
                ApiError::unavailable(format!(
                    "busy: the file records did not take the change ({e}); retry"
                ))
            })
    }
}
