//! The store's sweep: files no live operation named for a TTL, and files nobody owns
//! any more once no live operation names them, are deleted; uploads idle too long are
//! dropped.

use super::FileStore;
use std::collections::HashSet;
use ytsched_common::files::Sha256Digest;
use ytsched_common::protocol::{unix_now, UnixMillis};

/// What the sweep does with one file: `ttl` and times in ms.
fn fate(ttl: u64, in_use: bool, ownerless: bool, last_used: UnixMillis, now: UnixMillis) -> Fate {
    let age = now.saturating_sub(last_used);
    match (in_use, ownerless) {
        // Stored again only when an eighth of the TTL stale: a restarted leader counts
        // at most that much of the TTL twice.
        (true, _) if age > ttl / 8 => Fate::Touch,
        (true, _) => Fate::Keep,
        (false, true) => Fate::Delete("no owner left"),
        (false, false) if age > ttl => Fate::Delete("unused for its TTL"),
        (false, false) => Fate::Keep,
    }
}

/// What the sweep decided for one file.
#[derive(Debug, PartialEq)]
enum Fate {
    Keep,
    /// In use: its `last_used` is now, stored when the stored one is this stale.
    Touch,
    Delete(&'static str),
}

impl FileStore {
    /// One sweep, given the files live operations name now.
    pub async fn sweep(&self, in_use: &HashSet<Sha256Digest>) {
        let idle = self.uploads().idle(self.limits.upload_idle);
        for id in idle {
            tracing::info!(upload = %id, "idle upload dropped");
            self.drop_upload(&id).await;
        }
        let now = unix_now();
        let decided: Vec<(Sha256Digest, Fate)> = {
            let catalog = self.catalog();
            catalog
                .digests()
                .into_iter()
                .filter_map(|d| {
                    let r = catalog.get(&d)?;
                    let ttl = self.limits.ttl.as_millis() as u64;
                    let f = fate(
                        ttl,
                        in_use.contains(&d),
                        r.owners.is_empty(),
                        r.last_used,
                        now,
                    );
                    Some((d.clone(), f))
                })
                .collect()
        };
        for (digest, fate) in decided {
            match fate {
                Fate::Keep => {}
                Fate::Touch => self.touch(&digest, now).await,
                Fate::Delete(why) => self.delete(&digest, why).await,
            }
        }
    }

    async fn touch(&self, digest: &Sha256Digest, now: UnixMillis) {
        let record = {
            let mut catalog = self.catalog();
            let Some(r) = catalog.get_mut(digest) else {
                return;
            };
            r.last_used = now;
            r.clone()
        };
        if let Err(e) = self.store_record(digest, &record).await {
            tracing::warn!(file = %digest, error = %e, "cannot store when a file was last used");
        }
    }

    async fn delete(&self, digest: &Sha256Digest, why: &str) {
        // An upload that claims this digest now adds an owner; it waits for the next sweep.
        if !self.writing.claim(digest) {
            return;
        }
        if let Err(e) = self.objects.delete(digest.as_str()).await {
            tracing::warn!(file = %digest, error = %e, "cannot delete a file's object; kept for the next sweep");
            self.writing.release(digest);
            return;
        }
        let _ = self.records.purge(digest.as_str()).await;
        self.catalog().remove(digest);
        self.writing.release(digest);
        tracing::info!(file = %digest, why, "file removed from the store");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_goes_after_its_ttl_unused_and_at_once_without_owners_but_never_while_named() {
        let ttl = 8_000;
        assert_eq!(fate(ttl, false, false, 0, 8_000), Fate::Keep);
        assert_eq!(
            fate(ttl, false, false, 0, 8_001),
            Fate::Delete("unused for its TTL")
        );
        assert_eq!(fate(ttl, false, true, 0, 1), Fate::Delete("no owner left"));
        // A live operation names it: kept however old, and its use stored now and then.
        assert_eq!(fate(ttl, true, true, 0, 1_000), Fate::Keep);
        assert_eq!(fate(ttl, true, false, 0, 1_000_000), Fate::Touch);
    }
}
