//! What the file store holds and who may read each file, kept in memory by the leader
//! and stored in the `<prefix>_file_records` bucket (one record per digest).
//!
//! A file belongs to each user who uploaded its bytes; an admin may share it with
//! others. Every read of the catalog for a user answers the same for a file that does
//! not exist and one they may not read, so content addressing never tells another
//! user that a file exists.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use ytsched_common::files::{FileEntry, Sha256Digest, MAX_FILE_LABEL_BYTES};
use ytsched_common::identity::UserName;
use ytsched_common::protocol::UnixMillis;

/// Names one owner's uploads of a file are remembered under, the latest last.
const NAMES_KEPT: usize = 4;
/// Paths one owner may name one file by (`name_file`), the latest last.
const PATHS_KEPT: usize = 16;

/// One uploader of a file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ownership {
    pub uploaded_at: UnixMillis,
    pub names: Vec<String>,
    /// The owner's own paths for it (the YTsaurus face's Cypress paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// One stored file, as its record keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub size: u64,
    pub owners: BTreeMap<UserName, Ownership>,
    /// Users an admin shared it with.
    #[serde(default)]
    pub readers: BTreeSet<UserName>,
    /// When it was uploaded or a live operation last named it.
    pub last_used: UnixMillis,
}

impl FileRecord {
    pub fn new(size: u64, now: UnixMillis) -> Self {
        Self {
            size,
            owners: BTreeMap::new(),
            readers: BTreeSet::new(),
            last_used: now,
        }
    }

    pub fn may_read(&self, user: &UserName) -> bool {
        self.owners.contains_key(user) || self.readers.contains(user)
    }

    /// Makes `user` an owner (again), remembering the name it came under.
    pub fn own(&mut self, user: &UserName, name: Option<&str>, now: UnixMillis) {
        let entry = self.owners.entry(user.clone()).or_insert(Ownership {
            uploaded_at: now,
            names: Vec::new(),
            paths: Vec::new(),
        });
        if let Some(name) = name.map(label) {
            entry.names.retain(|n| *n != name);
            entry.names.push(name);
            let extra = entry.names.len().saturating_sub(NAMES_KEPT);
            entry.names.drain(..extra);
        }
        self.last_used = self.last_used.max(now);
    }

    fn entry_for(&self, digest: &Sha256Digest, user: &UserName) -> FileEntry {
        let own = self.owners.get(user);
        FileEntry {
            digest: digest.clone(),
            size: self.size,
            names: own.map(|o| o.names.clone()).unwrap_or_default(),
            uploaded_at: own.map_or(0, |o| o.uploaded_at),
            last_used: self.last_used,
            shared: own.is_none(),
        }
    }
}

/// A name as `file list` shows it: its last path component, bounded.
fn label(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    let mut s: String = base.chars().filter(|c| !c.is_control()).collect();
    s.truncate(s.floor_char_boundary(MAX_FILE_LABEL_BYTES));
    s
}

/// Every stored file's record, and each owner's paths for them.
#[derive(Default)]
pub struct Catalog {
    records: HashMap<Sha256Digest, FileRecord>,
    /// (owner, path) → the file: a hint, checked against the record on every read.
    paths: HashMap<(UserName, String), Sha256Digest>,
}

impl Catalog {
    pub fn new(records: HashMap<Sha256Digest, FileRecord>) -> Self {
        let mut paths = HashMap::new();
        for (digest, r) in &records {
            for (user, own) in &r.owners {
                for p in &own.paths {
                    paths.insert((user.clone(), p.clone()), digest.clone());
                }
            }
        }
        Self { records, paths }
    }

    /// The file `user` names `path`, if they still own it under that path.
    pub fn named(&self, user: &UserName, path: &str) -> Option<(&Sha256Digest, &FileRecord)> {
        let digest = self.paths.get(&(user.clone(), path.to_string()))?;
        let record = self.records.get(digest)?;
        let own = record.owners.get(user)?;
        own.paths
            .iter()
            .any(|p| p == path)
            .then_some((digest, record))
    }

    /// `user` names their file `digest` by `path`, instead of what it named before.
    /// Returns the records changed (to store), or None if they do not own `digest`.
    pub fn name(
        &mut self,
        user: &UserName,
        path: &str,
        digest: &Sha256Digest,
    ) -> Option<Vec<Sha256Digest>> {
        if !self.records.get(digest)?.owners.contains_key(user) {
            return None;
        }
        let mut changed = self.unname(user, path).into_iter().collect::<Vec<_>>();
        let own = self.records.get_mut(digest)?.owners.get_mut(user)?;
        own.paths.push(path.to_string());
        let extra = own.paths.len().saturating_sub(PATHS_KEPT);
        own.paths.drain(..extra);
        self.paths
            .insert((user.clone(), path.to_string()), digest.clone());
        changed.push(digest.clone());
        Some(changed)
    }

    /// Drops `user`'s `path`; returns the record it named, if any (to store).
    pub fn unname(&mut self, user: &UserName, path: &str) -> Option<Sha256Digest> {
        let digest = self.paths.remove(&(user.clone(), path.to_string()))?;
        let own = self.records.get_mut(&digest)?.owners.get_mut(user)?;
        let before = own.paths.len();
        own.paths.retain(|p| p != path);
        (own.paths.len() != before).then_some(digest)
    }

    /// The entry of a file as `user` sees it.
    pub fn entry(&self, digest: &Sha256Digest, user: &UserName) -> Option<FileEntry> {
        self.readable(digest, user)
            .map(|r| r.entry_for(digest, user))
    }

    pub fn get(&self, digest: &Sha256Digest) -> Option<&FileRecord> {
        self.records.get(digest)
    }

    pub fn get_mut(&mut self, digest: &Sha256Digest) -> Option<&mut FileRecord> {
        self.records.get_mut(digest)
    }

    pub fn insert(&mut self, digest: Sha256Digest, record: FileRecord) {
        self.records.insert(digest, record);
    }

    pub fn remove(&mut self, digest: &Sha256Digest) -> Option<FileRecord> {
        self.records.remove(digest)
    }

    /// The record of a file `user` may read; None alike for a missing file and another
    /// user's.
    pub fn readable(&self, digest: &Sha256Digest, user: &UserName) -> Option<&FileRecord> {
        self.records.get(digest).filter(|r| r.may_read(user))
    }

    /// Bytes and files `user` owns.
    pub fn owned_by(&self, user: &UserName) -> (u64, usize) {
        self.records
            .values()
            .filter(|r| r.owners.contains_key(user))
            .fold((0, 0), |(bytes, n), r| (bytes + r.size, n + 1))
    }

    /// What `user` may read, oldest upload first, at most `limit`.
    pub fn list_for(&self, user: &UserName, limit: usize) -> Vec<FileEntry> {
        let mut out: Vec<FileEntry> = self
            .records
            .iter()
            .filter(|(_, r)| r.may_read(user))
            .map(|(d, r)| r.entry_for(d, user))
            .collect();
        out.sort_by(|a, b| (a.uploaded_at, &a.digest).cmp(&(b.uploaded_at, &b.digest)));
        out.truncate(limit);
        out
    }

    pub fn digests(&self) -> Vec<Sha256Digest> {
        self.records.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(s: &str) -> UserName {
        UserName::parse(s).unwrap()
    }

    #[test]
    fn a_file_is_read_only_by_its_owners_and_those_it_is_shared_with() {
        let d = Sha256Digest::of(b"x");
        let mut r = FileRecord::new(10, 1);
        r.own(&user("alice"), Some("/home/alice/run.py"), 5);
        let mut c = Catalog::default();
        c.insert(d.clone(), r);
        assert!(c.readable(&d, &user("alice")).is_some());
        assert!(c.readable(&d, &user("mallory")).is_none());
        assert!(c
            .readable(&Sha256Digest::of(b"y"), &user("alice"))
            .is_none());
        assert_eq!(c.owned_by(&user("alice")), (10, 1));
        assert_eq!(c.owned_by(&user("mallory")), (0, 0));
        c.get_mut(&d).unwrap().readers.insert(user("bob"));
        let bobs = c.list_for(&user("bob"), 10);
        assert_eq!(bobs.len(), 1);
        assert!(bobs[0].shared);
        let alices = c.list_for(&user("alice"), 10);
        assert_eq!(alices[0].names, vec!["run.py".to_string()]);
        assert!(!alices[0].shared);
        assert!(c.list_for(&user("mallory"), 10).is_empty());
    }

    #[test]
    fn a_path_names_an_owners_file_for_that_owner_only() {
        let (a, b) = (Sha256Digest::of(b"a"), Sha256Digest::of(b"b"));
        let mut c = Catalog::default();
        for d in [&a, &b] {
            let mut r = FileRecord::new(1, 1);
            r.own(&user("alice"), None, 1);
            c.insert(d.clone(), r);
        }
        assert_eq!(c.name(&user("alice"), "//tmp/f", &a), Some(vec![a.clone()]));
        assert_eq!(c.named(&user("alice"), "//tmp/f").map(|(d, _)| d), Some(&a));
        assert!(c.named(&user("bob"), "//tmp/f").is_none());
        assert!(
            c.name(&user("bob"), "//tmp/f", &a).is_none(),
            "bob owns nothing"
        );
        // Named again: the path leaves the first file.
        assert_eq!(
            c.name(&user("alice"), "//tmp/f", &b),
            Some(vec![a.clone(), b.clone()])
        );
        assert_eq!(c.named(&user("alice"), "//tmp/f").map(|(d, _)| d), Some(&b));
        assert!(c.get(&a).unwrap().owners[&user("alice")].paths.is_empty());
        // Stored and read back, the index is made again.
        let again = Catalog::new(c.records.clone());
        assert_eq!(
            again.named(&user("alice"), "//tmp/f").map(|(d, _)| d),
            Some(&b)
        );
        // An owner who gives the file up loses its names with it.
        c.get_mut(&b).unwrap().owners.remove(&user("alice"));
        assert!(c.named(&user("alice"), "//tmp/f").is_none());
        assert_eq!(c.unname(&user("alice"), "//tmp/f"), None);
    }
}
