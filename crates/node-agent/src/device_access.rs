//! GPU device nodes a job may open (SPEC 5.11): only the ones it was given.
//!
//! `CUDA_VISIBLE_DEVICES` is advice a job can ignore, and GPU device nodes are usually
//! world-readable. So a job that must not see some GPUs gets a private mount namespace
//! in which each such `/dev/nvidiaN` is covered by a bind mount of a root-owned file with
//! mode 000: opening it fails with "Permission denied" for the job's slot user. This
//! works the same on cgroup v1 and v2 and needs no device controller or BPF program.

use nix::errno::Errno;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The node's GPU device nodes and the file that covers the ones a job may not use.
#[derive(Clone, Debug, Default)]
pub struct DeviceAccess {
    /// GPU index → its device node.
    devices: Vec<(u32, PathBuf)>,
    blocker: Option<PathBuf>,
}

impl DeviceAccess {
    /// Finds `nvidiaN` device nodes in `dev_dir` and makes the blocker in `work_dir`.
    /// Without root (no mount namespaces) it does nothing.
    pub fn discover(dev_dir: &Path, work_dir: &Path) -> std::io::Result<Self> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Self::default());
        }
        let mut devices = vec![];
        if let Ok(entries) = std::fs::read_dir(dev_dir) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(index) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("nvidia"))
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                devices.push((index, e.path()));
            }
        }
        devices.sort();
        if devices.is_empty() {
            return Ok(Self::default());
        }
        let blocker = work_dir.join("no-device");
        std::fs::write(&blocker, b"")?;
        std::fs::set_permissions(&blocker, std::fs::Permissions::from_mode(0o000))?;
        Ok(DeviceAccess {
            devices,
            blocker: Some(blocker),
        })
    }

    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// What a job given `gpus` must have covered, ready for the child (no allocation
    /// after fork).
    pub fn plan(&self, gpus: &[u32]) -> Option<HidePlan> {
        let blocker = self.blocker.as_ref()?;
        let hide: Vec<CString> = self
            .devices
            .iter()
            .filter(|(i, _)| !gpus.contains(i))
            .filter_map(|(_, p)| CString::new(p.as_os_str().as_bytes()).ok())
            .collect();
        if hide.is_empty() {
            return None;
        }
        Some(HidePlan {
            blocker: CString::new(blocker.as_os_str().as_bytes()).ok()?,
            hide,
        })
    }
}

/// Device nodes to cover in a job's own mount namespace.
pub struct HidePlan {
    blocker: CString,
    hide: Vec<CString>,
}

impl HidePlan {
    /// Runs in the forked child before exec, while still root.
    ///
    /// # Safety
    /// Only async-signal-safe system calls on memory allocated before the fork.
    pub unsafe fn apply(&self) -> std::io::Result<()> {
        Errno::result(libc::unshare(libc::CLONE_NEWNS))?;
        crate::job_namespaces::make_mounts_private()?;
        for path in &self.hide {
            Errno::result(libc::mount(
                self.blocker.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
        }
        Ok(())
    }
}
