//! Each job's share of the node's disk (issue 24 point 3). A job's sandbox (its work
//! directory, stdin, stdout and stderr) lives on the node's disk, where one job could fill
//! it for every other job and for the agent itself. The agent measures each sandbox
//! periodically, as YTsaurus's job proxy does without filesystem quotas, and fails a job
//! past its `disk_request.disk_space` (or the node's default) as "disk limit exceeded".
//! The measure is what the files take on disk (their blocks), so sparse files count for
//! what they use; files are counted too, so a million empty files cannot exhaust inodes.
//! `/tmp`, `/var/tmp` and `/dev/shm` are private tmpfs mounts counted against memory.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Files (and directories) one sandbox may hold.
pub const MAX_SANDBOX_FILES: u64 = 1_000_000;
/// The shortest time between two measures of one sandbox.
const MIN_PERIOD: Duration = Duration::from_secs(1);
/// A measure takes at most this share of the time: a sandbox of many files is measured
/// less often, so the watch never costs more than a tenth of a core per job.
const DUTY_DIVISOR: u32 = 10;

/// What a sandbox takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub files: u64,
}

/// Measures `dir` without following symbolic links or leaving its filesystem; stops
/// counting once past `MAX_SANDBOX_FILES`. What vanishes while it walks is skipped.
pub fn measure(dir: &Path) -> DiskUsage {
    let mut usage = DiskUsage::default();
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return usage;
    };
    let device = top.dev();
    let mut pending: Vec<PathBuf> = vec![dir.to_path_buf()];
    usage.bytes += top.blocks() * 512;
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            usage.files += 1;
            if usage.files > MAX_SANDBOX_FILES {
                return usage;
            }
            if meta.dev() != device {
                continue; // a mount inside the sandbox is not the node's disk
            }
            usage.bytes += meta.blocks() * 512;
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    usage
}

/// Why `usage` is past `limit`, if it is.
pub fn exceeded(usage: DiskUsage, limit: u64) -> Option<String> {
    if usage.files > MAX_SANDBOX_FILES {
        return Some(format!(
            "disk limit exceeded: the sandbox holds more than {MAX_SANDBOX_FILES} files"
        ));
    }
    (usage.bytes > limit).then(|| {
        format!(
            "disk limit exceeded: the sandbox takes {} bytes, more than its disk space of {limit} bytes (disk_request.disk_space)",
            usage.bytes
        )
    })
}

/// Resolves, with the reason, once the sandbox `dir` is past `limit`; never otherwise.
pub async fn watch(dir: PathBuf, limit: u64) -> String {
    let mut period = MIN_PERIOD;
    loop {
        tokio::time::sleep(period).await;
        let d = dir.clone();
        let started = Instant::now();
        let Ok(usage) = tokio::task::spawn_blocking(move || measure(&d)).await else {
            continue;
        };
        if let Some(why) = exceeded(usage, limit) {
            return why;
        }
        // On its own filesystem (`disk_image`), a full sandbox is one at its limit,
        // counting what no walk sees (files unlinked and held open).
        if crate::disk_image::is_full(&dir) {
            return format!(
                "disk limit exceeded: the sandbox's disk space of {limit} bytes (disk_request.disk_space) is full"
            );
        }
        period = MIN_PERIOD.max(started.elapsed() * DUTY_DIVISOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_blocks_and_files_and_not_what_links_point_at() {
        let dir = tempfile::tempdir().unwrap();
        let empty = measure(dir.path());
        assert_eq!(empty.files, 0);
        std::fs::create_dir(dir.path().join("work")).unwrap();
        std::fs::write(dir.path().join("work/data"), vec![7u8; 3 << 20]).unwrap();
        // A sparse file takes what it wrote, not its length.
        let sparse = std::fs::File::create(dir.path().join("work/sparse")).unwrap();
        sparse.set_len(100 << 30).unwrap();
        std::os::unix::fs::symlink("/usr", dir.path().join("work/usr")).unwrap();
        let u = measure(dir.path());
        assert_eq!(u.files, 4, "work, data, sparse, the link");
        assert!(u.bytes >= 3 << 20 && u.bytes < 4 << 20, "{u:?}");
        assert_eq!(exceeded(u, 8 << 20), None);
        let why = exceeded(u, 1 << 20).unwrap();
        assert!(
            why.starts_with("disk limit exceeded") && why.contains("1048576"),
            "{why}"
        );
        let many = DiskUsage {
            bytes: 0,
            files: MAX_SANDBOX_FILES + 1,
        };
        assert!(exceeded(many, u64::MAX).unwrap().contains("files"));
    }
}
