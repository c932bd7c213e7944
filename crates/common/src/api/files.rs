//! The file store's API (SPEC 5.17): an upload in chunks (begin, chunks in order,
//! finish), a user's list, removal, and an admin's share. The scheduler writes the
//! store; a caller never touches it, so every bound and ownership rule is its check.

use super::ApiMethod;
use crate::files::{FileEntry, Sha256Digest};
use crate::identity::UserName;
use serde::{Deserialize, Serialize};

/// Starts an upload of `size` bytes whose content hashes to `sha256`. Refused at once
/// past the size limit or the caller's quota, naming the bound.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileUploadBegin {
    pub size: u64,
    pub sha256: Sha256Digest,
    /// The name it had where it came from, kept for `file list`.
    #[serde(default)]
    pub name: Option<String>,
}
impl ApiMethod for FileUploadBegin {
    const METHOD: &'static str = "file_upload_begin";
    type Response = FileUploadTicket;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileUploadTicket {
    /// The caller may already name this file (their own, or shared with them): nothing
    /// needs sending, and `upload_id` is empty.
    pub already_stored: bool,
    pub upload_id: String,
    /// The most one chunk may carry.
    pub chunk_bytes: u32,
}

/// The bytes at `offset` of an upload: chunks come in order, each at most
/// `chunk_bytes`. Answered with the bytes received so far.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileUploadChunk {
    pub upload_id: String,
    pub offset: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}
impl ApiMethod for FileUploadChunk {
    const METHOD: &'static str = "file_upload_chunk";
    type Response = u64;
}

/// Ends an upload: its bytes must be the size and the digest it began with. The file
/// is then the caller's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileUploadFinish {
    pub upload_id: String,
}
impl ApiMethod for FileUploadFinish {
    const METHOD: &'static str = "file_upload_finish";
    type Response = FileEntry;
}

/// The caller's files and those shared with them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListFiles {}
impl ApiMethod for ListFiles {
    const METHOD: &'static str = "list_files";
    type Response = Vec<FileEntry>;
}

/// Gives up the caller's ownership of a file; the store drops it when no one owns it
/// and no live operation names it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoveFile {
    pub digest: Sha256Digest,
}
impl ApiMethod for RemoveFile {
    const METHOD: &'static str = "remove_file";
    type Response = ();
}

/// Admins only: lets `user` name a stored file in their operations.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShareFile {
    pub digest: Sha256Digest,
    pub user: UserName,
}
impl ApiMethod for ShareFile {
    const METHOD: &'static str = "share_file";
    type Response = ();
}

/// Names a file the caller may read by a path of their own (the YTsaurus face's
/// Cypress paths, e.g. `//tmp/run.py`): each user's names are theirs alone.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NameFile {
    pub path: FilePathName,
    pub digest: Sha256Digest,
}
impl ApiMethod for NameFile {
    const METHOD: &'static str = "name_file";
    type Response = ();
}

/// The file the caller's path names, if any.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResolveFileName {
    pub path: FilePathName,
}
impl ApiMethod for ResolveFileName {
    const METHOD: &'static str = "resolve_file_name";
    type Response = Option<FileEntry>;
}

/// Drops the caller's path; answers whether it named a file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UnnameFile {
    pub path: FilePathName,
}
impl ApiMethod for UnnameFile {
    const METHOD: &'static str = "unname_file";
    type Response = bool;
}

validated_string!(
    /// A user's name for a stored file: a path of at most 1,024 bytes without control
    /// characters.
    FilePathName(String),
    check_file_path,
    String
);

fn check_file_path(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 1024 || s.chars().any(char::is_control) {
        return Err(format!(
            "'{}' is not a file path (1 to 1,024 bytes, no control characters)",
            crate::quote::quote(s, 80)
        ));
    }
    Ok(())
}
