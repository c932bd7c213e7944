//! Each user's own paths for their stored files (`name_file`, `resolve_file_name`,
//! `unname_file`): what the YTsaurus face's Cypress paths (`//tmp/run.py`) stand on.
//! A user sees and changes only their own names.

use super::{not_readable, FileStore};
use ytsched_common::api::files::{NameFile, ResolveFileName, UnnameFile};
use ytsched_common::api::ApiError;
use ytsched_common::files::FileEntry;
use ytsched_common::identity::Caller;

impl FileStore {
    pub(super) async fn name(
        &self,
        caller: &Caller,
        req: Result<NameFile, ApiError>,
    ) -> Result<(), ApiError> {
        let req = req?;
        let changed = self
            .catalog()
            .name(&caller.user, req.path.as_str(), &req.digest)
            .ok_or_else(|| not_readable(&req.digest, &caller.user))?;
        self.store_records(&changed).await
    }

    pub(super) fn resolve(
        &self,
        caller: &Caller,
        req: Result<ResolveFileName, ApiError>,
    ) -> Result<Option<FileEntry>, ApiError> {
        let req = req?;
        let catalog = self.catalog();
        Ok(catalog
            .named(&caller.user, req.path.as_str())
            .and_then(|(digest, _)| catalog.entry(digest, &caller.user)))
    }

    pub(super) async fn unname(
        &self,
        caller: &Caller,
        req: Result<UnnameFile, ApiError>,
    ) -> Result<bool, ApiError> {
        let req = req?;
        let changed = self.catalog().unname(&caller.user, req.path.as_str());
        match changed {
            Some(digest) => self.store_records(&[digest]).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Stores the records of `digests` as the catalog has them now.
    async fn store_records(
        &self,
        digests: &[ytsched_common::files::Sha256Digest],
    ) -> Result<(), ApiError> {
        for d in digests {
            let record = self.catalog().get(d).cloned();
            if let Some(r) = record {
                self.store_record(d, &r).await?;
            }
        }
        Ok(())
    }
}
