//! `ytsched file upload | list | remove | share`, and the files and layers
//! `run-vanilla --file/--layer` ships with an operation (SPEC 5.17).
//!
//! A file is hashed here first: the scheduler is asked to begin an upload of that digest
//! and size, and a file the caller already has in the store is not sent again.

use crate::output::{self, Format, Tabular};
use anyhow::{bail, Context};
use clap::Subcommand;
use comfy_table::Table;
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use ytsched_common::api::files::*;
use ytsched_common::files::{FileEntry, FileRef, SandboxFileName, Sha256Digest};
use ytsched_common::identity::{Caller, UserName};
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::call;

#[derive(Subcommand, Debug)]
pub enum FileCommand {
    /// Store a file (prints its digest, which a spec's file_paths names).
    Upload {
        /// The local file.
        path: PathBuf,
    },
    /// Your stored files and those shared with you.
    List,
    /// Give up your ownership of a stored file.
    Remove {
        /// sha256 digest, with or without `sha256:`.
        #[arg(value_parser = |s: &str| Sha256Digest::parse(s))]
        digest: Sha256Digest,
    },
    /// Admins: let a user name a stored file in their operations.
    Share {
        /// sha256 digest, with or without `sha256:`.
        #[arg(value_parser = |s: &str| Sha256Digest::parse(s))]
        digest: Sha256Digest,
        /// The user it is shared with.
        #[arg(value_name = "USER")]
        with: UserName,
    },
}

/// A local file to upload: where it is, its digest and size.
#[derive(Clone, Debug)]
pub struct LocalFile {
    pub path: PathBuf,
    pub digest: Sha256Digest,
    pub size: u64,
    /// Its owner may run it here.
    pub executable: bool,
}

impl LocalFile {
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let mut f =
            std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        let mut hasher = sha2::Sha256::new();
        let size = std::io::copy(&mut f, &mut hasher)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            digest: Sha256Digest::from_hasher(hasher),
            size,
            executable: meta.permissions().mode() & 0o100 != 0,
        })
    }
}

/// `--file PATH[:NAME]`: the file, and the name it gets in the sandbox (its own by
/// default). `executable`: every file may be run (else those the owner may run here).
pub fn file_ref(arg: &str, executable: bool) -> anyhow::Result<(LocalFile, FileRef)> {
    let (path, name) = match arg.rsplit_once(':') {
        Some((p, n)) if !p.is_empty() => (p, Some(n)),
        _ => (arg, None),
    };
    let local = LocalFile::read(Path::new(path))?;
    let name = match name {
        Some(n) => n.to_string(),
        None => local
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let file_name =
        SandboxFileName::parse(&name).map_err(|e| anyhow::anyhow!("--file {arg}: {e}"))?;
    let file = FileRef {
        digest: local.digest.clone(),
        file_name,
        executable: executable || local.executable,
    };
    Ok((local, file))
}

/// Uploads `file` unless the caller already has it stored; returns what the store says.
pub async fn upload(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    file: &LocalFile,
) -> anyhow::Result<Option<FileEntry>> {
    let name = file
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let begin = FileUploadBegin {
        size: file.size,
        sha256: file.digest.clone(),
        name,
    };
    let ticket = call(client, subjects, user, begin)
        .await
        .with_context(|| format!("cannot upload {}", file.path.display()))?;
    if ticket.already_stored {
        return Ok(None);
    }
    let mut f = std::fs::File::open(&file.path)?;
    let mut buf = vec![0u8; ticket.chunk_bytes.max(1) as usize];
    let mut offset = 0u64;
    loop {
        let n = ytsched_common::files::read_full(&mut f, &mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = FileUploadChunk {
            upload_id: ticket.upload_id.clone(),
            offset,
            data: buf[..n].to_vec(),
        };
        offset = call(client, subjects, user, chunk)
            .await
            .with_context(|| format!("uploading {}", file.path.display()))?;
    }
    let done = FileUploadFinish {
        upload_id: ticket.upload_id,
    };
    let entry = call(client, subjects, user, done)
        .await
        .with_context(|| format!("cannot upload {}", file.path.display()))?;
    Ok(Some(entry))
}

/// The files a listing shows.
#[derive(serde::Serialize)]
struct Listing(Vec<FileEntry>);

impl Tabular for Listing {
    fn table(&self) -> Table {
        let mut t = Table::new();
        t.set_header(vec!["digest", "size", "names", "last used", "shared"]);
        for e in &self.0 {
            t.add_row(vec![
                e.digest.to_string(),
                ytsched_common::ByteSize(e.size).to_string(),
                e.names.join(", "),
                crate::output::time(Some(e.last_used)),
                if e.shared { "yes" } else { "" }.to_string(),
            ]);
        }
        t
    }
}

pub async fn run(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    command: FileCommand,
    format: Format,
) -> anyhow::Result<()> {
    match command {
        FileCommand::Upload { path } => {
            let local = LocalFile::read(&path)?;
            let fresh = upload(client, subjects, user, &local).await?;
            let how = if fresh.is_some() {
                "uploaded"
            } else {
                "already stored"
            };
            eprintln!(
                "{} ({}): {how}",
                path.display(),
                ytsched_common::ByteSize(local.size)
            );
            println!("{}", local.digest);
        }
        FileCommand::List => {
            let files = call(client, subjects, user, ListFiles {}).await?;
            output::print(&Listing(files), format)?;
        }
        FileCommand::Remove { digest } => {
            call(
                client,
                subjects,
                user,
                RemoveFile {
                    digest: digest.clone(),
                },
            )
            .await?;
            eprintln!("{digest}: removed");
        }
        FileCommand::Share { digest, with } => {
            call(
                client,
                subjects,
                user,
                ShareFile {
                    digest: digest.clone(),
                    user: with.clone(),
                },
            )
            .await?;
            eprintln!("{digest}: shared with {with}");
        }
    }
    Ok(())
}
