//! A job whose task names layers runs with them as its root (SPEC 5.17), inside its own
//! mount namespace: the unpacked layers bound read-only, `/proc` (hidepid) and `/dev` as
//! without a layer, private tmpfs `/tmp`, `/var/tmp` and `/dev/shm`, and its sandbox
//! bound at the same path, so its spec and environment hold. Then `pivot_root`: the
//! host's filesystem is not reachable from the job at all.
//!
//! Every path is made before the fork; `apply` only makes system calls.

use nix::errno::Errno;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Directories the job gets its own tmpfs on, under its root.
const PRIVATE_DIRS: [&str; 3] = ["tmp", "var/tmp", "dev/shm"];

pub struct LayerMounts {
    root: CString,
    proc_dir: CString,
    dev_dir: CString,
    private_dirs: Vec<CString>,
    /// Each ancestor of the sandboxes' directory under the root, outermost first.
    ancestors: Vec<CString>,
    /// The sandboxes' directory under the root, where a small tmpfs holds the job's
    /// mount point.
    sandboxes: CString,
    /// The sandbox under the root, and on the host.
    sandbox_inside: CString,
    sandbox: CString,
    work: CString,
    small_tmpfs: CString,
}

fn c(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

impl LayerMounts {
    /// `sandbox`: the job's directory (its working directory is `work` in it).
    pub fn new(root: &Path, sandbox: &Path) -> Option<Self> {
        let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
        let sandboxes = sandbox.parent()?;
        let mut chain: Vec<&Path> = sandboxes.ancestors().skip(1).collect();
        chain.reverse();
        let ancestors = chain
            .into_iter()
            .filter(|a| a.parent().is_some())
            .map(|a| c(&under(a)))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            root: c(root)?,
            proc_dir: c(&root.join("proc"))?,
            dev_dir: c(&root.join("dev"))?,
            private_dirs: PRIVATE_DIRS
                .iter()
                .map(|d| c(&root.join(d)))
                .collect::<Option<Vec<_>>>()?,
            ancestors,
            sandboxes: c(&under(sandboxes))?,
            sandbox_inside: c(&under(sandbox))?,
            sandbox: c(sandbox)?,
            work: c(&sandbox.join("work"))?,
            small_tmpfs: CString::new("size=1m,mode=0711").ok()?,
        })
    }

    /// Builds the job's root and enters it. `tmpfs_options` size its private dirs.
    ///
    /// # Safety
    /// In the forked child, in its own mount namespace, before exec: system calls only.
    pub unsafe fn apply(&self, tmpfs_options: &CString) -> std::io::Result<()> {
        let none: *const libc::c_char = std::ptr::null();
        let no_data: *const libc::c_void = std::ptr::null();
        // The layers as a read-only mount of their own, so that pivot_root takes them.
        mount(
            self.root.as_ptr(),
            &self.root,
            none,
            libc::MS_BIND | libc::MS_REC,
            no_data,
        )?;
        let ro =
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        mount(none, &self.root, none, ro, no_data)?;
        mount(
            c"proc".as_ptr(),
            &self.proc_dir,
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"hidepid=2".as_ptr().cast(),
        )?;
        mount(
            c"/dev".as_ptr(),
            &self.dev_dir,
            none,
            libc::MS_BIND | libc::MS_REC,
            no_data,
        )?;
        let tmp = libc::MS_NOSUID | libc::MS_NODEV;
        for d in &self.private_dirs {
            mount(
                c"tmpfs".as_ptr(),
                d,
                c"tmpfs".as_ptr(),
                tmp,
                tmpfs_options.as_ptr().cast(),
            )?;
        }
        // The sandbox's mount point: its ancestors exist in the layers (made at unpack)
        // or are made in a private tmpfs that covers them.
        for a in &self.ancestors {
            mkdir(a, 0o755)?;
        }
        mkdir(&self.sandboxes, 0o711)?;
        mount(
            c"tmpfs".as_ptr(),
            &self.sandboxes,
            c"tmpfs".as_ptr(),
            tmp,
            self.small_tmpfs.as_ptr().cast(),
        )?;
        mkdir(&self.sandbox_inside, 0o700)?;
        mount(
            self.sandbox.as_ptr(),
            &self.sandbox_inside,
            none,
            libc::MS_BIND | libc::MS_REC,
            no_data,
        )?;
        // The host's root goes: what was `/` is stacked under the new one and detached.
        Errno::result(libc::chdir(self.root.as_ptr()))?;
        Errno::result(libc::syscall(
            libc::SYS_pivot_root,
            c".".as_ptr(),
            c".".as_ptr(),
        ))?;
        Errno::result(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
        Errno::result(libc::chdir(self.work.as_ptr()))?;
        Ok(())
    }
}

unsafe fn mount(
    source: *const libc::c_char,
    target: &CString,
    fstype: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_void,
) -> std::io::Result<()> {
    Errno::result(libc::mount(source, target.as_ptr(), fstype, flags, data))?;
    Ok(())
}

unsafe fn mkdir(path: &CString, mode: libc::mode_t) -> std::io::Result<()> {
    if libc::mkdir(path.as_ptr(), mode) != 0 && Errno::last() != Errno::EEXIST {
        return Err(Errno::last().into());
    }
    Ok(())
}
