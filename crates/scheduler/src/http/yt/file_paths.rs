//! The file commands on a user's file paths: `write_file` (staged, then stored), and
//! `create`, `exists`, `remove`, the client's file cache, and the specs' `file_paths`
//! and `layer_paths` made into stored files.

use super::error::{code, YtError};
use super::files::{Staged, Staging, STAGED, STAGED_BYTES, STAGED_PER_USER};
use super::wire::{bool_param, optional_string, string_param, Output, YtCall};
use super::Ctx;
use serde_json::{json, Map, Value};
use std::io::{Read, Write};
use ytsched_common::api::files::*;
use ytsched_common::files::{FileEntry, Sha256Digest};

fn name_of(path: &str) -> Result<FilePathName, YtError> {
    FilePathName::parse(path).map_err(|e| YtError::bad_parameter("path", e))
}

fn api(e: ytsched_common::api::ApiError) -> YtError {
    YtError::from_api(e, super::error::Missing::Node)
}

/// The `path` parameter and whether it asks to append (`<append=%true>//tmp/f`).
fn write_target(call: &YtCall) -> Result<(String, bool), YtError> {
    let raw = call.params.get("path").cloned().unwrap_or(Value::Null);
    let append = raw
        .get("$attributes")
        .and_then(|a| a.get("append"))
        .map(|v| matches!(super::yson_value::plain(v), Value::Bool(true)) || v == "true")
        .unwrap_or(false);
    let path = string_param(call, "path")?.to_string();
    if !super::files::is_file_path(&path) {
        return Err(YtError::unsupported_path(&path));
    }
    Ok((path, append))
}

/// The body as sent: identity or gzip (the client's default without brotli), never more
/// than `limit` bytes once decoded.
fn decoded(call: &YtCall, headers: &axum::http::HeaderMap, limit: u64) -> Result<Vec<u8>, YtError> {
    let encoding = headers
        .get(axum::http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    let too_big = || {
        YtError::new(
            code::GENERIC,
            format!(
                "the file is larger than the file size limit of {} (--file-size-limit)",
                ytsched_common::ByteSize(limit)
            ),
        )
    };
    let mut out = Vec::new();
    match encoding {
        "identity" => out.extend_from_slice(&call.input),
        // YTsaurus's client sends zlib streams under this name; a real gzip one is taken too.
        "gzip" | "deflate" => {
            let input = &call.input[..];
            let reader: Box<dyn Read + '_> = if input.starts_with(&[0x1f, 0x8b]) {
                Box::new(flate2::read::GzDecoder::new(input))
            } else {
                Box::new(flate2::read::ZlibDecoder::new(input))
            };
            reader
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(|e| YtError::bad_parameter("body", format!("not valid {encoding}: {e}")))?;
        }
        other => {
            return Err(YtError::new(
                code::GENERIC,
                format!("Content-Encoding '{other}' is not supported here: send identity or gzip (the client's proxy/content_encoding)"),
            ))
        }
    }
    if out.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(out)
}

/// `write_file`: the body appended to (or replacing) the path's staged bytes; stored at
/// once without a transaction, else when its top transaction commits.
pub async fn write_file(
    ctx: &Ctx<'_>,
    call: &YtCall,
    headers: &axum::http::HeaderMap,
) -> Result<Output, YtError> {
    let user = ctx.caller.user.clone();
    let (path, append) = write_target(call)?;
    name_of(&path)?;
    let top = ctx
        .files
        .top_of(&user, optional_string(call, "transaction_id")?)?;
    let limit = ctx.face.files.limits().max_file_size;
    let bytes = decoded(call, headers, limit)?;
    ctx.files
        .stage(&user, &path, top.clone(), append, &bytes, limit)?;
    if top.is_none() {
        super::files::finish(ctx, &path).await?;
    }
    Ok(Output::Nothing)
}

impl Staging {
    /// Adds `bytes` to what `path` stages (a new staging unless `append`).
    pub(super) fn stage(
        &self,
        user: &ytsched_common::identity::UserName,
        path: &str,
        top: Option<String>,
        append: bool,
        bytes: &[u8],
        limit: u64,
    ) -> Result<(), YtError> {
        let key = (user.clone(), path.to_string());
        let mut st = self.state();
        let in_all: u64 = st.staged.values().map(|s| s.size).sum();
        if in_all + bytes.len() as u64 > STAGED_BYTES {
            return Err(YtError::new(
                code::GENERIC,
                format!("busy: file writes in progress hold {in_all} bytes of the scheduler's {STAGED_BYTES}; retry when one ends"),
            ));
        }
        if !st.staged.contains_key(&key) {
            let mine = st.staged.keys().filter(|(u, _)| u == user).count();
            if mine >= STAGED_PER_USER || st.staged.len() >= STAGED {
                return Err(YtError::new(
                    code::GENERIC,
                    format!("busy: {STAGED_PER_USER} file writes per user and {STAGED} in all are in progress; retry when one ends"),
                ));
            }
            let file = self.dir.join(uuid::Uuid::new_v4().simple().to_string());
            st.staged.insert(
                key.clone(),
                Staged {
                    file,
                    size: 0,
                    top: top.clone(),
                },
            );
        }
        let staged = st.staged.get_mut(&key).expect("just made");
        if !append {
            staged.size = 0;
        }
        if staged.size + bytes.len() as u64 > limit {
            return Err(YtError::new(
                code::GENERIC,
                format!(
                    "{path}: the file is larger than the file size limit of {} (--file-size-limit)",
                    ytsched_common::ByteSize(limit)
                ),
            ));
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&staged.file)
            .map_err(|e| YtError::new(code::GENERIC, format!("cannot stage the write: {e}")))?;
        f.write_all(bytes)
            .map_err(|e| YtError::new(code::GENERIC, format!("cannot stage the write: {e}")))?;
        staged.size += bytes.len() as u64;
        if staged.top.is_none() {
            staged.top = top;
        }
        Ok(())
    }
}

/// Whether the user's `path` names a file (staged or stored).
async fn found(ctx: &Ctx<'_>, path: &str) -> Result<Option<FileEntry>, YtError> {
    ctx.call(ResolveFileName {
        path: name_of(path)?,
    })
    .await
    .map_err(api)
}

pub async fn exists(ctx: &Ctx<'_>, path: &str) -> Result<Output, YtError> {
    let staged = ctx.files.is_staged(&ctx.caller.user, path);
    let found = staged || found(ctx, path).await?.is_some();
    Ok(Output::Structured(json!({ "value": found })))
}

/// `create`: a `file` is staged empty (its write follows); a `map_node` is a directory,
/// which file paths need not have.
pub async fn create(ctx: &Ctx<'_>, call: &YtCall, path: &str) -> Result<Output, YtError> {
    let kind = string_param(call, "type")?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    match kind {
        "map_node" => Ok(Output::Structured(json!({ "node_id": id }))),
        "file" => {
            let exists = ctx.files.is_staged(&ctx.caller.user, path) || found(ctx, path).await?.is_some();
            if exists && !bool_param(call, "ignore_existing")? && !bool_param(call, "force")? {
                return Err(YtError::new(code::ALREADY_EXISTS, format!("{path} already exists")).with("path", path));
            }
            if !exists || bool_param(call, "force")? {
                let top = ctx.files.top_of(&ctx.caller.user, optional_string(call, "transaction_id")?)?;
                ctx.files.stage(&ctx.caller.user, path, top, false, &[], u64::MAX)?;
            }
            Ok(Output::Structured(json!({ "node_id": id })))
        }
        other => Err(YtError::new(
            code::GENERIC,
            format!("ytsched does not support creating objects of type '{other}' at {path}: it keeps files there"),
        )
        .with("type", other)),
    }
}

pub async fn remove(ctx: &Ctx<'_>, call: &YtCall, path: &str) -> Result<Output, YtError> {
    let staged = ctx.files.unstage(&ctx.caller.user, path);
    let named = ctx
        .call(UnnameFile {
            path: name_of(path)?,
        })
        .await
        .map_err(api)?;
    if !(staged || named || bool_param(call, "force")?) {
        return Err(
            YtError::new(code::RESOLVE, format!("node {path} has no file")).with("path", path),
        );
    }
    Ok(Output::Nothing)
}

/// `get_file_from_cache`: the cached path of the file with this md5, or "" if none.
pub async fn get_from_cache(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let path = cache_path(call)?;
    let hit = found(ctx, &path).await?.is_some();
    Ok(Output::Structured(json!(if hit {
        path
    } else {
        String::new()
    })))
}

/// `put_file_to_cache`: the written file, also named by its md5 in the cache.
pub async fn put_to_cache(ctx: &Ctx<'_>, call: &YtCall) -> Result<Output, YtError> {
    let source = string_param(call, "path")?.to_string();
    let md5 = string_param(call, "md5")?;
    if ctx.files.is_staged(&ctx.caller.user, &source) {
        super::files::finish(ctx, &source).await?;
    }
    let entry = found(ctx, &source).await?.ok_or_else(|| {
        YtError::new(code::RESOLVE, format!("node {source} has no file"))
            .with("path", source.as_str())
    })?;
    if let Some(actual) = ctx.files.md5_of(&ctx.caller.user, &source) {
        if actual != md5 {
            return Err(YtError::new(
                code::GENERIC,
                format!("{source}: its md5 is {actual}, not {md5}"),
            ));
        }
    }
    let cached = cache_path(call)?;
    ctx.call(NameFile {
        path: name_of(&cached)?,
        digest: entry.digest,
    })
    .await
    .map_err(api)?;
    Ok(Output::Structured(json!(cached)))
}

fn cache_path(call: &YtCall) -> Result<String, YtError> {
    let md5 = string_param(call, "md5")?;
    if md5.len() != 32 || !md5.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(YtError::bad_parameter("md5", "must be 32 hex digits"));
    }
    let dir =
        optional_string(call, "cache_path")?.unwrap_or("//tmp/yt_wrapper/file_storage/new_cache");
    Ok(format!("{}/{md5}", dir.trim_end_matches('/')))
}

/// A spec's `file_paths` and `layer_paths` as ytsched's: each Cypress path (with its
/// `file_name` and `executable` attributes) made into the stored file it names.
pub async fn resolve_spec_files(ctx: &Ctx<'_>, spec: &mut Value) -> Result<(), YtError> {
    let Some(Value::Object(tasks)) = spec.get_mut("tasks") else {
        return Ok(());
    };
    for (name, task) in tasks.iter_mut() {
        for key in ["file_paths", "layer_paths"] {
            let Some(Value::Array(entries)) = task.get_mut(key) else {
                continue;
            };
            for entry in entries.iter_mut() {
                *entry = stored(ctx, entry, key == "layer_paths")
                    .await
                    .map_err(|e| e.with("field", format!("tasks.{name}.{key}").as_str()))?;
            }
        }
    }
    Ok(())
}

/// One entry: a path (or `sha256:` digest), plain or with attributes.
async fn stored(ctx: &Ctx<'_>, entry: &Value, layer: bool) -> Result<Value, YtError> {
    let (target, attrs) = match entry {
        Value::String(s) => (s.clone(), Map::new()),
        Value::Object(m) if m.contains_key("$value") => (
            super::yson_value::plain(entry)
                .as_str()
                .unwrap_or_default()
                .to_string(),
            m.get("$attributes")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        ),
        // ytsched's own form ({digest, file_name, executable}) passes as it is.
        other => return Ok(other.clone()),
    };
    let digest = match Sha256Digest::parse(&target) {
        Ok(d) if target.starts_with("sha256:") => d,
        _ => {
            if ctx.files.is_staged(&ctx.caller.user, &target) {
                super::files::finish(ctx, &target).await?;
            }
            found(ctx, &target)
                .await?
                .ok_or_else(|| YtError::new(code::RESOLVE, format!("node {target} has no file (write it with `yt write-file` or upload it with `ytsched file upload`)")).with("path", target.as_str()))?
                .digest
        }
    };
    if layer {
        return Ok(json!(digest));
    }
    let file_name = attrs
        .get("file_name")
        .and_then(|v| super::yson_value::plain(v).as_str().map(str::to_string))
        .unwrap_or_else(|| target.rsplit('/').next().unwrap_or_default().to_string());
    let executable =
        attrs.get("executable").map(super::yson_value::plain) == Some(&Value::Bool(true));
    Ok(json!({ "digest": digest, "file_name": file_name, "executable": executable }))
}
