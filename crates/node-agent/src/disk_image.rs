//! A job's sandbox on a filesystem of its own with a hard size (issue 38 point 5): a
//! sparse ext4 image of the job's `disk_space`, loop-mounted on the sandbox directory.
//! The kernel counts every block, unlinked files' included, and a write past the size
//! fails at once with ENOSPC, where the walk of `disk_quota` saw only named files and
//! only once a second. The image lies beside the sandbox (`<job>.img`) and goes with it.
//! Where loop devices cannot be had (a container), the agent says so at start and the
//! walk alone bounds a sandbox.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The image behind sandbox `dir`.
pub fn image_of(dir: &Path) -> PathBuf {
    dir.with_extension("img")
}

/// Makes a `bytes`-sized filesystem and mounts it on `dir` (which must exist, empty).
pub fn mount(dir: &Path, bytes: u64) -> std::io::Result<()> {
    let image = image_of(dir);
    let file = std::fs::File::create(&image)?;
    file.set_len(bytes)?;
    drop(file);
    // No journal and lazy init: made in milliseconds, sparse until written.
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-m", "0", "-O", "^has_journal"])
        .args(["-E", "lazy_itable_init=1,root_owner=0:0"])
        .arg(&image))
    .and_then(|()| {
        run(Command::new("mount")
            .args(["-o", "loop,nosuid,nodev"])
            .arg(&image)
            .arg(dir))
    })
    .inspect_err(|_| {
        let _ = std::fs::remove_file(&image);
    })
}

/// Unmounts sandbox `dir` (lazily: a process still holding a file there lets go when it
/// dies) and removes its image; nothing to do for a sandbox without one.
pub fn release(dir: &Path) {
    let image = image_of(dir);
    if !image.exists() {
        return;
    }
    let _ = run(Command::new("umount").arg("-l").arg(dir));
    let _ = std::fs::remove_file(&image);
}

/// Whether sandbox `dir` is full: its filesystem has no block left for the job.
pub fn is_full(dir: &Path) -> bool {
    if !image_of(dir).exists() {
        return false;
    }
    nix::sys::statvfs::statvfs(dir).is_ok_and(|s| s.blocks_available() == 0)
}

/// Whether sandboxes can have images here: makes, mounts and removes a small one in
/// `sandboxes_dir`.
pub fn probe(sandboxes_dir: &Path) -> Result<(), String> {
    let dir = sandboxes_dir.join(".probe-disk-image");
    let _ = std::fs::create_dir_all(&dir);
    let result = mount(&dir, 8 << 20).map_err(|e| e.to_string());
    release(&dir);
    let _ = std::fs::remove_dir(&dir);
    result
}

fn run(cmd: &mut Command) -> std::io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "{:?} failed: {}",
        cmd.get_program(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_lies_beside_its_sandbox() {
        assert_eq!(
            image_of(Path::new("/var/lib/ytsched/sandboxes/op-1")),
            PathBuf::from("/var/lib/ytsched/sandboxes/op-1.img")
        );
        // A sandbox without an image is never full and has nothing to release.
        let d = tempfile::tempdir().unwrap();
        assert!(!is_full(d.path()));
        release(d.path());
    }
}
