//! The host's filesystem read-only to a job, in the manner of systemd's
//! `ProtectSystem=strict`: inside the job's own mount namespace every mount is made
//! read-only, then write access is given back only to the job's sandbox, its private
//! `/tmp`, `/var/tmp` and `/dev/shm`, `/dev`, and the paths the node's settings name
//! (`--job-writable-path`). So nothing a job writes outside its sandbox outlives it or
//! reaches the next job of its slot, and what it writes inside is bounded by its disk
//! limit.
//!
//! `mount_setattr(2)` (Linux 5.12) changes a whole mount tree at once; without it the
//! job runs without this protection, which `supported` lets the agent say at start.

use nix::errno::Errno;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Paths made writable again, allocated before the fork.
#[derive(Clone, Debug, Default)]
pub struct WritablePaths {
    /// Bound onto themselves first, so each is a mount of its own.
    bound: Vec<CString>,
    /// Given back write access (each with the mounts below it).
    writable: Vec<CString>,
    /// The job's working directory (`work` in its sandbox).
    work: CString,
}

impl WritablePaths {
    /// `sandbox` (bound onto itself unless it already is a mount of its own, `own`),
    /// the job's private directories, `/dev`, and the site's `extra` paths.
    pub fn new(
        sandbox: &Path,
        sandbox_is_a_mount: bool,
        private: &[&std::ffi::CStr],
        extra: &[PathBuf],
    ) -> Option<Self> {
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).ok();
        let mut bound = Vec::new();
        if !sandbox_is_a_mount {
            bound.push(c(sandbox)?);
        }
        for p in extra {
            bound.push(c(p)?);
        }
        let mut writable: Vec<CString> = private.iter().map(|d| CString::from(*d)).collect();
        writable.push(CString::from(c"/dev"));
        writable.push(c(sandbox)?);
        for p in extra {
            writable.push(c(p)?);
        }
        let work = c(&sandbox.join("work"))?;
        Some(Self {
            bound,
            writable,
            work,
        })
    }

    pub fn work_dir(&self) -> &std::ffi::CStr {
        &self.work
    }

    /// Makes the namespace's mounts read-only but these paths. Runs in the forked child
    /// inside the job's mount namespace, after its private mounts are made.
    ///
    /// # Safety
    /// Only async-signal-safe system calls on memory allocated before the fork.
    pub unsafe fn apply(&self) -> std::io::Result<()> {
        for p in &self.bound {
            let r = libc::mount(
                p.as_ptr(),
                p.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            );
            // A site path this host lacks has nothing to give back.
            if r != 0 && Errno::last() != Errno::ENOENT {
                return Err(Errno::last().into());
            }
        }
        match set_read_only(c"/", true) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Ok(()),
            other => other?,
        }
        for p in &self.writable {
            match set_read_only(p, false) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                // Not a mount point (a path the host has as a plain directory that
                // was not bound): nothing to give back there.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                other => other?,
            }
        }
        Ok(())
    }
}

/// Sets (or clears) the read-only flag of the mount at `path` and every mount below it.
unsafe fn set_read_only(path: &std::ffi::CStr, read_only: bool) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if read_only { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    Errno::result(libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        path.as_ptr(),
        AT_RECURSIVE,
        &attr as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    ))?;
    Ok(())
}

/// Whether this kernel has `mount_setattr(2)`: asked with arguments it must refuse,
/// which it does with EBADF or EINVAL when it knows the call, ENOSYS when it does not.
pub fn supported() -> bool {
    // SAFETY: a bad descriptor and no attributes: the call changes nothing.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            c"".as_ptr(),
            0,
            std::ptr::null::<MountAttr>(),
            0usize,
        )
    };
    r == 0 || Errno::last() != Errno::ENOSYS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_the_private_dirs_dev_and_the_sites_paths_stay_writable() {
        let w = WritablePaths::new(
            Path::new("/var/lib/ytsched/sb/j1"),
            false,
            &[c"/tmp", c"/var/tmp"],
            &[PathBuf::from("/srv/scratch")],
        )
        .unwrap();
        let names = |v: &[CString]| {
            v.iter()
                .map(|c| c.to_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&w.bound), ["/var/lib/ytsched/sb/j1", "/srv/scratch"]);
        assert_eq!(
            names(&w.writable),
            [
                "/tmp",
                "/var/tmp",
                "/dev",
                "/var/lib/ytsched/sb/j1",
                "/srv/scratch"
            ]
        );
        // A sandbox under a private tmpfs is bound there already.
        let w = WritablePaths::new(Path::new("/tmp/sb/j1"), true, &[c"/tmp"], &[]).unwrap();
        assert!(w.bound.is_empty());
    }
}
