//! A job's own PID, mount and IPC namespaces (SPEC 5.11, isolation between jobs of different
//! users on one host): its `/proc` shows only its own processes (no agent command line,
//! no other job), and `/tmp`, `/var/tmp` and `/dev/shm` are private tmpfs mounts sized
//! to its memory limit (their pages count against its memory cgroup) that vanish with
//! it, so nothing it leaves there reaches the host or the next job of its slot.
//!
//! `unshare(CLONE_NEWPID)` only places the caller's future children in the new
//! namespace, so the forked child splits twice. The process the agent spawned stays
//! outside as a waiter that ends the way the job ended (exit code or signal). Its child
//! is PID 1 of the namespace: a minimal init that forwards termination signals to the
//! job and reaps orphans, because the kernel delivers to a namespace's init only the
//! signals it handles (a shell as PID 1 would ignore SIGTERM and run the rest of its
//! script). Its child in turn becomes the job's shell. When PID 1 ends, the kernel
//! kills every process left in the namespace: nothing of the job outlives it.

use nix::errno::Errno;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

/// Directories a job gets its own empty tmpfs on.
const PRIVATE_DIRS: [&std::ffi::CStr; 3] = [c"/tmp", c"/var/tmp", c"/dev/shm"];

/// Everything `enter` needs, allocated before the fork.
pub struct NamespacePlan {
    /// `size=<bytes>,mode=1777`.
    tmpfs_options: CString,
    /// The job's sandbox, and each of its ancestors below a private directory (to make
    /// again inside the tmpfs so the sandbox stays at its path).
    sandbox: CString,
    sandbox_ancestors: Vec<CString>,
    /// Which private directory the sandbox lies under, if any.
    sandbox_under: Option<usize>,
    /// The host read-only but these (`read_only_host`); None: left as it is.
    writable: Option<crate::read_only_host::WritablePaths>,
    /// The job's own root from its layers, in place of the host's (`layer_root`).
    layer: Option<crate::layer_root::LayerMounts>,
}

impl NamespacePlan {
    /// `writable`: with the host made read-only, the site's paths left writable; None
    /// leaves the host's mounts as they are.
    pub fn new(
        sandbox: &Path,
        memory_bytes: u64,
        writable: Option<&[PathBuf]>,
        layer_root: Option<&Path>,
    ) -> Option<Self> {
        let tmpfs_options =
            CString::new(format!("size={},mode=1777", memory_bytes.max(1 << 20))).ok()?;
        let under = PRIVATE_DIRS.iter().position(|d| {
            sandbox.starts_with(Path::new(std::ffi::OsStr::from_bytes(d.to_bytes())))
        });
        let mut ancestors = Vec::new();
        if let Some(i) = under {
            let root = Path::new(std::ffi::OsStr::from_bytes(PRIVATE_DIRS[i].to_bytes()));
            let mut chain: Vec<&Path> = sandbox
                .ancestors()
                .skip(1)
                .take_while(|a| *a != root)
                .collect();
            chain.reverse();
            for a in chain {
                ancestors.push(CString::new(a.as_os_str().as_bytes()).ok()?);
            }
        }
        let layer = match layer_root {
            Some(root) => Some(crate::layer_root::LayerMounts::new(root, sandbox)?),
            None => None,
        };
        let writable = match writable {
            Some(extra) if layer.is_none() => Some(crate::read_only_host::WritablePaths::new(
                sandbox,
                under.is_some(),
                &PRIVATE_DIRS,
                extra,
            )?),
            _ => None,
        };
        Some(Self {
            tmpfs_options,
            sandbox: CString::new(sandbox.as_os_str().as_bytes()).ok()?,
            sandbox_ancestors: ancestors,
            sandbox_under: under,
            writable,
            layer,
        })
    }

    /// Runs in the forked child before exec, while still root. Returns in PID 1 of the
    /// job's new namespaces; the process that called it stays behind as the waiter and
    /// never returns.
    ///
    /// # Safety
    /// Only async-signal-safe system calls on memory allocated before the fork.
    pub unsafe fn enter(&self) -> std::io::Result<()> {
        // Its own IPC namespace too: SysV shared memory, semaphores and message queues
        // it leaves die with it instead of waiting for the slot's next job.
        Errno::result(libc::unshare(
            libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC,
        ))?;
        make_mounts_private()?;
        let sandbox_fd = match self.sandbox_under {
            Some(_) => Errno::result(libc::open(
                self.sandbox.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            ))?,
            None => -1,
        };
        // How the job ended, from the init inside to the waiter outside.
        let mut status_pipe = [0i32; 2];
        Errno::result(libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC))?;
        let pid = Errno::result(libc::fork())?;
        if pid > 0 {
            libc::close(status_pipe[1]);
            wait_and_mirror(pid, status_pipe[0]);
        }
        libc::close(status_pipe[0]);
        // PID 1 dies with the waiter (which dies with the agent), and the kernel then
        // kills everything in the namespace. Its parent is outside its namespace, so
        // `getppid` says 0 and cannot tell whether the waiter died before this call;
        // that window of microseconds is the guardian's to cover.
        Errno::result(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        match &self.layer {
            Some(layer) => {
                if sandbox_fd >= 0 {
                    libc::close(sandbox_fd);
                }
                layer.apply(&self.tmpfs_options)?;
            }
            None => self.host_mounts(sandbox_fd)?,
        }
        let job = Errno::result(libc::fork())?;
        if job > 0 {
            init(job, status_pipe[1]);
        }
        libc::close(status_pipe[1]);
        Ok(())
    }
    /// Without layers: the job's `/proc` and private directories over the host's, and
    /// the host read-only where asked.
    ///
    /// # Safety
    /// As `enter`: system calls only, in the child's own namespaces.
    unsafe fn host_mounts(&self, sandbox_fd: i32) -> std::io::Result<()> {
        // hidepid=2: the job (a slot user) does not see PID 1, which runs as root and,
        // being a fork of the agent, carries the agent's command line.
        Errno::result(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"hidepid=2".as_ptr().cast(),
        ))?;
        for (i, dir) in PRIVATE_DIRS.iter().enumerate() {
            let mounted = libc::mount(
                c"tmpfs".as_ptr(),
                dir.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                self.tmpfs_options.as_ptr().cast(),
            );
            if mounted != 0 {
                // A machine (or container) without this directory has nothing to share.
                if Errno::last() == Errno::ENOENT {
                    continue;
                }
                return Err(Errno::last().into());
            }
            if self.sandbox_under == Some(i) {
                // The sandbox stays where the job's spec and environment say it is.
                for a in &self.sandbox_ancestors {
                    if libc::mkdir(a.as_ptr(), 0o711) != 0 && Errno::last() != Errno::EEXIST {
                        return Err(Errno::last().into());
                    }
                }
                if libc::mkdir(self.sandbox.as_ptr(), 0o700) != 0 && Errno::last() != Errno::EEXIST
                {
                    return Err(Errno::last().into());
                }
                let mut source = [0u8; 32];
                fd_path(sandbox_fd, &mut source);
                Errno::result(libc::mount(
                    source.as_ptr().cast(),
                    self.sandbox.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
            }
        }
        if sandbox_fd >= 0 {
            libc::close(sandbox_fd);
        }
        if let Some(w) = &self.writable {
            w.apply()?;
            // The working directory was entered before these mounts, on the host's
            // (now read-only) mount: enter it again, through the sandbox's own.
            Errno::result(libc::chdir(w.work_dir().as_ptr()))?;
        }
        Ok(())
    }
}

/// Makes every mount of the caller's (new) mount namespace private, so that mounts made
/// in it never propagate back to the host.
///
/// # Safety
/// Async-signal-safe: one system call, no allocation.
pub unsafe fn make_mounts_private() -> std::io::Result<()> {
    Errno::result(libc::mount(
        std::ptr::null(),
        c"/".as_ptr(),
        std::ptr::null(),
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ))?;
    Ok(())
}

/// The job PID 1's forwards termination signals to.
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let job = FORWARD_TO.load(Ordering::Relaxed);
    if job > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(job, sig);
        }
    }
}

/// PID 1 of the job's namespace: forwards termination signals to the job, reaps
/// orphans, and when the job ends writes its wait status to the waiter and exits (which
/// kills whatever is left in the namespace).
unsafe fn init(job: libc::pid_t, status_out: i32) -> ! {
    // Nothing the agent's spawn watches (its exec-error pipe) stays open here: spawn
    // returns once the job itself execs.
    close_all_but(status_out);
    FORWARD_TO.store(job, Ordering::Relaxed);
    for s in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        libc::signal(
            s,
            forward as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    let mut status = 0;
    loop {
        let r = libc::waitpid(-1, &mut status, 0);
        if r == job {
            break;
        }
        if r < 0 && Errno::last() != Errno::EINTR {
            libc::_exit(127);
        }
    }
    let bytes = status.to_ne_bytes();
    libc::write(status_out, bytes.as_ptr().cast(), bytes.len());
    libc::_exit(0)
}

/// `/proc/self/fd/<fd>` NUL-terminated into `out`, without allocating.
fn fd_path(fd: i32, out: &mut [u8; 32]) {
    let prefix = b"/proc/self/fd/";
    out[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[prefix.len() + i] = digits[len - 1 - i];
    }
    out[prefix.len() + len] = 0;
}

/// Closes every descriptor above stderr but `keep`.
unsafe fn close_all_but(keep: i32) {
    if keep > 3 {
        libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32);
    }
    libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
}

/// The waiter: closes what the spawning agent watches (its exec-error pipe, so spawn
/// returns once the job execs), reads how the job ended from PID 1, and ends the same way.
unsafe fn wait_and_mirror(init: libc::pid_t, status_in: i32) -> ! {
    for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        libc::signal(s, libc::SIG_IGN);
    }
    close_all_but(status_in);
    let mut bytes = [0u8; 4];
    let mut got = 0usize;
    while got < bytes.len() {
        let n = libc::read(
            status_in,
            bytes[got..].as_mut_ptr().cast(),
            bytes.len() - got,
        );
        if n > 0 {
            got += n as usize;
        } else if n < 0 && Errno::last() == Errno::EINTR {
            continue;
        } else {
            break;
        }
    }
    let mut init_status = 0;
    while libc::waitpid(init, &mut init_status, 0) < 0 && Errno::last() == Errno::EINTR {}
    // The job's own status; if PID 1 died before telling it (SIGKILL), PID 1's.
    let status = if got == bytes.len() {
        i32::from_ne_bytes(bytes)
    } else {
        init_status
    };
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

/// Whether jobs can be given their own namespaces here: tries it once with `true`. A
/// container without the rights to mount a fresh `/proc` cannot.
pub fn probe() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let plan = NamespacePlan::new(Path::new("/nonexistent/probe"), 16 << 20, None, None)
        .ok_or("cannot prepare the probe")?;
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "[ $$ -eq 2 ] && test -d /proc/1"]);
    // SAFETY: `enter` makes only async-signal-safe calls on memory allocated before.
    unsafe {
        cmd.pre_exec(move || plan.enter());
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("a probe job in its own namespaces ended with {s}")),
        Err(e) => Err(format!("cannot start a job in its own namespaces: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_written_without_allocating() {
        let mut out = [0u8; 32];
        fd_path(7, &mut out);
        assert_eq!(&out[..17], b"/proc/self/fd/7\0\0");
        fd_path(1234, &mut out);
        assert_eq!(&out[..19], b"/proc/self/fd/1234\0");
    }

    #[test]
    fn a_sandbox_under_tmp_is_made_again_inside_the_private_tmp() {
        let plan = NamespacePlan::new(
            Path::new("/tmp/lab/node0/sandboxes/j1"),
            1 << 30,
            None,
            None,
        )
        .unwrap();
        assert_eq!(plan.sandbox_under, Some(0));
        let names: Vec<_> = plan
            .sandbox_ancestors
            .iter()
            .map(|c| c.to_str().unwrap().to_string())
            .collect();
        assert_eq!(
            names,
            ["/tmp/lab", "/tmp/lab/node0", "/tmp/lab/node0/sandboxes"]
        );
        assert_eq!(
            plan.tmpfs_options.to_str().unwrap(),
            "size=1073741824,mode=1777"
        );
        let plan = NamespacePlan::new(Path::new("/var/lib/ytsched/j1"), 0, None, None).unwrap();
        assert_eq!(plan.sandbox_under, None);
    }
}
