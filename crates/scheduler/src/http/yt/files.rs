//! YTsaurus's file commands on ytsched's file store, so that the client's uploads work:
//! `write_file` (in 2 MB pieces, inside transactions), `create`/`exists`/`remove` of
//! file paths, `get_file_from_cache`/`put_file_to_cache` (the client's file cache), and
//! the transactions around them.
//!
//! A Cypress file path (anything outside `//sys`) is the user's own name for a stored
//! file (`name_file`): two users' `//tmp/run.py` are two names, and no user can see or
//! change another's. What a write sends is staged on the scheduler's disk until its
//! top transaction commits (or at once, without one); then it goes through the file API
//! as the user (`ApiPort`: the same size limit, quota and rights as `ytsched file
//! upload`) and the path names it.

use super::error::{code, YtError};
use super::wire::{optional_string, string_param, Output, YtCall};
use super::Ctx;
use serde_json::json;
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ytsched_common::api::files::*;
use ytsched_common::files::Sha256Digest;
use ytsched_common::identity::UserName;

/// Writes staged at once per user, and in all.
pub(super) const STAGED_PER_USER: usize = 4;
pub(super) const STAGED: usize = 64;
/// Bytes staged at once in all, on the scheduler's disk.
pub(super) const STAGED_BYTES: u64 = 4 << 30;
/// Transactions open at once per user, and in all; one idle this long is forgotten.
const TXS_PER_USER: usize = 256;
const TXS: usize = 4_096;
const TX_IDLE: Duration = Duration::from_secs(600);
/// The client's null transaction.
const NULL_TX: &str = "0-0-0-0";

/// A write in progress: its bytes on disk, and the top transaction it is part of.
pub(super) struct Staged {
    pub(super) file: PathBuf,
    pub(super) size: u64,
    pub(super) top: Option<String>,
}

struct Tx {
    user: UserName,
    /// Its outermost ancestor (itself at the top).
    top: String,
    touched: Instant,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) staged: HashMap<(UserName, String), Staged>,
    txs: HashMap<String, Tx>,
    /// md5 of what each path was last written with (the client's cache checks it).
    md5s: HashMap<(UserName, String), String>,
}

/// Writes staged on disk and the transactions around them.
pub struct Staging {
    pub(super) dir: PathBuf,
    state: Mutex<State>,
}

impl Default for Staging {
    fn default() -> Self {
        let dir = std::env::temp_dir().join(format!("ytsched-yt-writes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        Self {
            dir,
            state: Default::default(),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `path` is a file path of the user's (not one of ytsched's own).
pub fn is_file_path(path: &str) -> bool {
    path.starts_with("//") && path != "//sys" && !path.starts_with("//sys/")
}

fn api(e: ytsched_common::api::ApiError) -> YtError {
    YtError::from_api(e, super::error::Missing::Node)
}

/// md5s remembered for the client's cache checks; past it the oldest are forgotten.
const MD5S: usize = 4_096;

impl Staging {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("staging lock")
    }

    pub(super) fn is_staged(&self, user: &UserName, path: &str) -> bool {
        self.state()
            .staged
            .contains_key(&(user.clone(), path.to_string()))
    }

    /// Drops what `path` stages; whether there was any.
    pub(super) fn unstage(&self, user: &UserName, path: &str) -> bool {
        let staged = self
            .state()
            .staged
            .remove(&(user.clone(), path.to_string()));
        staged.map(|s| std::fs::remove_file(s.file)).is_some()
    }

    pub(super) fn md5_of(&self, user: &UserName, path: &str) -> Option<String> {
        self.state()
            .md5s
            .get(&(user.clone(), path.to_string()))
            .cloned()
    }

    /// The top transaction of `tx` (None: no transaction), if `user` holds it.
    pub(super) fn top_of(
        &self,
        user: &UserName,
        tx: Option<&str>,
    ) -> Result<Option<String>, YtError> {
        let Some(tx) = tx.filter(|t| *t != NULL_TX) else {
            return Ok(None);
        };
        let mut st = self.state();
        match st.txs.get_mut(tx).filter(|t| &t.user == user) {
            Some(t) => {
                t.touched = Instant::now();
                Ok(Some(t.top.clone()))
            }
            None => Err(no_such_tx(tx)),
        }
    }
}

fn no_such_tx(tx: &str) -> YtError {
    YtError::new(code::RESOLVE, format!("no such transaction {tx}")).with("transaction_id", tx)
}

/// `start_transaction`: a transaction of this user, nested in its `transaction_id`.
pub async fn start_tx(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let user = &ctx.caller.user;
    let parent = ctx
        .files
        .top_of(user, optional_string(call, "transaction_id")?)?;
    let id = {
        let u = uuid::Uuid::new_v4().as_u128();
        format!(
            "{:x}-{:x}-{:x}-{:x}",
            u >> 96,
            (u >> 64) as u32,
            (u >> 32) as u32,
            u as u32
        )
    };
    let mut st = ctx.files.state();
    st.txs.retain(|_, t| t.touched.elapsed() < TX_IDLE);
    // Writes of transactions forgotten that way go with them.
    let State { staged, txs, .. } = &mut *st;
    staged.retain(|_, s| {
        let live = s.top.as_ref().is_none_or(|t| txs.contains_key(t));
        if !live {
            let _ = std::fs::remove_file(&s.file);
        }
        live
    });
    let mine = st.txs.values().filter(|t| &t.user == user).count();
    if mine >= TXS_PER_USER || st.txs.len() >= TXS {
        return Err(YtError::new(
            code::GENERIC,
            format!("too many open transactions ({TXS_PER_USER} per user, {TXS} in all); commit or abort some"),
        ));
    }
    let top = parent.unwrap_or_else(|| id.clone());
    st.txs.insert(
        id.clone(),
        Tx {
            user: user.clone(),
            top,
            touched: Instant::now(),
        },
    );
    Ok(Output::Structured(json!({ "transaction_id": id })))
}

pub async fn ping_tx(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let tx = string_param(call, "transaction_id")?;
    ctx.files.top_of(&ctx.caller.user, Some(tx))?;
    Ok(Output::Nothing)
}

/// `commit_transaction`/`abort_transaction`: a top transaction's writes are stored,
/// or dropped.
pub async fn end_tx(ctx: &Ctx<'_>, call: &YtCall, commit: bool) -> Result<Output, YtError> {
    let user = &ctx.caller.user;
    let tx = string_param(call, "transaction_id")?;
    let top = ctx.files.top_of(user, Some(tx))?;
    let ended: Vec<String> = {
        let mut st = ctx.files.state();
        st.txs.remove(tx);
        if top.as_deref() != Some(tx) {
            return Ok(Output::Nothing); // a nested one: its writes belong to its top
        }
        st.txs.retain(|_, t| t.top != tx);
        st.staged
            .iter()
            .filter(|((u, _), s)| u == user && s.top.as_deref() == Some(tx))
            .map(|((_, p), _)| p.clone())
            .collect()
    };
    for path in ended {
        if commit {
            finish(ctx, &path).await?;
        } else if let Some(s) = ctx.files.state().staged.remove(&(user.clone(), path)) {
            let _ = std::fs::remove_file(s.file);
        }
    }
    Ok(Output::Nothing)
}

/// Stores what `path` stages, as the user, and names it by `path`.
pub(super) async fn finish(ctx: &Ctx<'_>, path: &str) -> Result<(), YtError> {
    let key = (ctx.caller.user.clone(), path.to_string());
    let Some(staged) = ctx.files.state().staged.remove(&key) else {
        return Ok(());
    };
    // Its bytes go with it, also when the client hangs up and this is dropped halfway.
    let staged = RemovedOnDrop(staged);
    let md5 = store(ctx, path, &staged.0).await?;
    let mut st = ctx.files.state();
    if st.md5s.len() >= MD5S {
        st.md5s.clear();
    }
    st.md5s.insert(key, md5);
    Ok(())
}

/// A staged write taken out of the staging area: its file is deleted with it.
struct RemovedOnDrop(Staged);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0.file);
    }
}

/// Uploads a staged file through the file API; returns its md5.
async fn store(ctx: &Ctx<'_>, path: &str, staged: &Staged) -> Result<String, YtError> {
    let file = staged.file.clone();
    let (digest, md5) = tokio::task::spawn_blocking(move || hashes(&file))
        .await
        .map_err(|e| YtError::new(code::GENERIC, e.to_string()))?
        .map_err(|e| YtError::new(code::GENERIC, format!("cannot read the staged write: {e}")))?;
    let begin = FileUploadBegin {
        size: staged.size,
        sha256: digest.clone(),
        name: path.rsplit('/').next().map(str::to_string),
    };
    let ticket = ctx.call(begin).await.map_err(api)?;
    if !ticket.already_stored {
        let mut f = std::fs::File::open(&staged.file).map_err(|e| {
            YtError::new(code::GENERIC, format!("cannot read the staged write: {e}"))
        })?;
        let mut offset = 0;
        loop {
            let mut data = vec![0u8; ticket.chunk_bytes.max(1) as usize];
            let n = ytsched_common::files::read_full(&mut f, &mut data).map_err(|e| {
                YtError::new(code::GENERIC, format!("cannot read the staged write: {e}"))
            })?;
            if n == 0 {
                break;
            }
            data.truncate(n);
            let upload_id = ticket.upload_id.clone();
            offset = ctx
                .call(FileUploadChunk {
                    upload_id,
                    offset,
                    data,
                })
                .await
                .map_err(api)?;
        }
        let upload_id = ticket.upload_id;
        ctx.call(FileUploadFinish { upload_id })
            .await
            .map_err(api)?;
    }
    let path = FilePathName::parse(path).map_err(|e| YtError::bad_parameter("path", e))?;
    ctx.call(NameFile { path, digest }).await.map_err(api)?;
    Ok(md5)
}

fn hashes(file: &std::path::Path) -> std::io::Result<(Sha256Digest, String)> {
    use md5::Digest as _;
    let mut f = std::fs::File::open(file)?;
    let (mut sha, mut md5) = (sha2::Sha256::new(), md5::Md5::new());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        md5.update(&buf[..n]);
    }
    let md5: String = md5.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((Sha256Digest::from_hasher(sha), md5))
}
