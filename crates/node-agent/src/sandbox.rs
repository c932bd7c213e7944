//! A job's sandbox: a fresh directory, a cgroup with the job's limits (or, in process
//! mode, only a process group), captured stdout/stderr, and the means to kill every
//! process of the job.

use crate::cgroup::{CgroupManager, CgroupStats, JobCgroup, JobLimits};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use ytsched_common::protocol::{JobStartSpec, OUTPUT_TAIL_BYTES};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot prepare sandbox directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("cannot start the job's shell: {0}")]
    Spawn(std::io::Error),
}

/// How jobs are isolated on this node.
pub enum Isolation {
    Cgroup(CgroupManager),
    /// Own process group only: no resource enforcement (development without root).
    Process,
}

pub struct SandboxConfig {
    pub isolation: Isolation,
    /// Parent of every job's sandbox directory.
    pub sandboxes_dir: PathBuf,
    pub kill_grace: Duration,
    pub pids_limit: u64,
    /// Kills the jobs should the agent die.
    pub guardian: crate::guardian::Guardian,
    /// Slot users (YTsaurus): slot N's job runs as uid and gid `base + N`, never as the
    /// agent's user. None when the agent cannot switch users (not root).
    pub slot_uid_base: Option<u32>,
    /// Which GPU device nodes a job may open.
    pub devices: crate::device_access::DeviceAccess,
    /// Each job (of a slot user) in its own PID and mount namespaces with private
    /// `/tmp`, `/var/tmp` and `/dev/shm` (`job_namespaces`).
    pub namespaces: bool,
    /// With `namespaces`: the host's filesystem read-only to jobs but their sandbox,
    /// private directories, `/dev` and `job_writable_paths` (`read_only_host`).
    pub read_only_host: bool,
    /// Paths a site needs writable by jobs (`--job-writable-path`).
    pub job_writable_paths: Vec<PathBuf>,
    /// Bytes a job's sandbox may hold when its task asks for no `disk_request`.
    pub default_disk_space: u64,
    /// Each sandbox of a slot user's job on its own filesystem image of that size
    /// (`disk_image`), when loop devices can be had here.
    pub disk_images: bool,
}

pub struct Sandbox {
    /// The slot user the job ran as, if any: every process of it dies at the end.
    uid: Option<u32>,
    dir: PathBuf,
    cgroup: Option<JobCgroup>,
    child: tokio::process::Child,
    pgid: Pid,
}

/// What remains of a job once every process is gone.
pub struct SandboxOutcome {
    pub stats: CgroupStats,
    pub stdout_tail: String,
    pub stderr_tail: String,
}

impl SandboxConfig {
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        self.sandboxes_dir.join(job_id)
    }

    /// Removes sandbox directories (and their images) a previous incarnation left.
    pub fn remove_stale_dirs(&self) -> usize {
        let Ok(entries) = fs::read_dir(&self.sandboxes_dir) else {
            return 0;
        };
        let entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        for dir in entries.iter().filter(|p| p.is_dir()) {
            crate::disk_image::release(dir);
        }
        entries
            .iter()
            .filter(|p| {
                if p.is_dir() {
                    fs::remove_dir_all(p).is_ok()
                } else {
                    p.extension().is_some_and(|e| e == "img") && fs::remove_file(p).is_ok()
                }
            })
            .count()
    }

    pub fn launch(
        &self,
        spec: &JobStartSpec,
        extra_env: &[(String, String)],
        slot: u32,
        gpus: &[u32],
        prepared: &crate::files::Prepared,
    ) -> Result<Sandbox, SandboxError> {
        let uid = self.slot_uid_base.map(|base| base + slot);
        let files = self.job_files(spec, uid)?;
        place_files(&files.work, &prepared.files)
            .map_err(|(path, source)| SandboxError::Dir { path, source })?;
        let dir = files.dir.clone();
        let cgroup = self.job_cgroup(spec)?;

        let mut cmd = job_command(spec, files, extra_env);
        // Open every cgroup.procs before forking; the child writes its own pid ("0")
        // into each before exec, so no process of the job ever runs outside its cgroup.
        let procs = open_procs_files(cgroup.as_ref())?;
        let fds: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
        let hide = self.devices.plan(gpus);
        let namespaces = if self.namespaces && uid.is_some() {
            crate::job_namespaces::NamespacePlan::new(
                &dir,
                spec.resources.memory.max(0.0) as u64,
                self.read_only_host
                    .then_some(self.job_writable_paths.as_slice()),
                prepared.root.as_deref(),
            )
        } else {
            None
        };
        if prepared.root.is_some() && namespaces.is_none() {
            // Without its own mount namespace a job cannot have a root of its own.
            return Err(SandboxError::Spawn(std::io::Error::other(
                "layers need job namespaces: an agent run as root with --job-namespaces on or auto",
            )));
        }
        // SAFETY: the closure only makes async-signal-safe system calls (write, unshare,
        // mount, setgroups, setgid, setuid, prctl) on fds that stay open until spawn
        // returns and on memory allocated before the fork; it does not allocate.
        let agent = std::process::id() as libc::pid_t;
        unsafe {
            cmd.pre_exec(move || {
                // Tied to the agent by the kernel: when the thread that forked this (a
                // runtime worker, which lives as long as the agent) dies, so does this
                // process, and with it the job's PID namespace (`job_namespaces`). The
                // guardian then only cleans up; no job outlives its agent without it.
                tie_to_parent(agent)?;
                // Join the cgroup while still privileged, then drop to the slot user.
                for fd in &fds {
                    Errno::result(libc::write(*fd, b"0".as_ptr().cast(), 1))?;
                }
                // Devices first: their blocker lives in the agent's work directory, which
                // the job's private /tmp may cover.
                if let Some(plan) = &hide {
                    plan.apply()?;
                }
                if let Some(plan) = &namespaces {
                    plan.enter()?;
                }
                if let Some(uid) = uid {
                    Errno::result(libc::setgroups(0, std::ptr::null()))?;
                    Errno::result(libc::setgid(uid))?;
                    Errno::result(libc::setuid(uid))?;
                    // A change of credentials clears the parent-death signal.
                    Errno::result(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
                }
                // Nothing the job execs (setuid binaries included) gains privileges.
                Errno::result(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some(cg) = &cgroup {
                    cg.kill_all();
                    let _ = cg.remove();
                }
                return Err(SandboxError::Spawn(e));
            }
        };
        drop(procs);
        let pgid = Pid::from_raw(child.id().map(|p| p as i32).unwrap_or(0));
        Ok(Sandbox {
            uid,
            dir,
            cgroup,
            child,
            pgid,
        })
    }
}

/// A job's directory, its working directory and its standard streams.
struct JobFiles {
    dir: PathBuf,
    work: PathBuf,
    stdin: Stdio,
    stdout: File,
    stderr: File,
}

impl SandboxConfig {
    /// The job's cgroup with its cpu, memory and pids limits (none with process
    /// isolation).
    fn job_cgroup(&self, spec: &JobStartSpec) -> Result<Option<JobCgroup>, SandboxError> {
        Ok(match &self.isolation {
            Isolation::Cgroup(manager) => Some(manager.create_job(
                spec.job_id.as_str(),
                &JobLimits {
                    cpu: spec.resources.cpu,
                    memory_bytes: spec.resources.memory.max(0.0) as u64,
                    pids: self.pids_limit,
                },
            )?),
            Isolation::Process => None,
        })
    }

    /// Makes the job's directory (private to its slot user `uid`, when there is one),
    /// its stdin file and its output files.
    fn job_files(&self, spec: &JobStartSpec, uid: Option<u32>) -> Result<JobFiles, SandboxError> {
        let dir = self.job_dir(spec.job_id.as_str());
        let work = dir.join("work");
        let dir_err = |source| SandboxError::Dir {
            path: dir.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(dir_err)?;
        if self.disk_images && uid.is_some() {
            // A filesystem of its own, of its disk space: the kernel bounds it.
            let bytes = spec.disk_space.unwrap_or(self.default_disk_space);
            crate::disk_image::mount(&dir, bytes).map_err(dir_err)?;
        }
        fs::create_dir_all(&work).map_err(dir_err)?;
        if let Some(uid) = uid {
            // The job's own, private directory: no other slot user can look in.
            for d in [&dir, &work] {
                std::os::unix::fs::chown(d, Some(uid), Some(uid)).map_err(dir_err)?;
                fs::set_permissions(d, fs::Permissions::from_mode(0o700)).map_err(dir_err)?;
            }
        }
        let stdin = match &spec.stdin {
            Some(text) => {
                let path = dir.join("stdin");
                fs::write(&path, text).map_err(dir_err)?;
                Stdio::from(File::open(&path).map_err(dir_err)?)
            }
            None => Stdio::null(),
        };
        let stdout = File::create(dir.join("stdout")).map_err(dir_err)?;
        let stderr = File::create(dir.join("stderr")).map_err(dir_err)?;
        Ok(JobFiles {
            dir,
            work,
            stdin,
            stdout,
            stderr,
        })
    }
}

/// Copies the job's files into its working directory, read-only (and executable where
/// asked) and owned by the agent: the job may read and run them, not change them.
fn place_files(
    work: &Path,
    files: &[crate::files::PlacedFile],
) -> Result<(), (PathBuf, std::io::Error)> {
    for f in files {
        let to = work.join(f.name.as_str());
        let mode = if f.executable { 0o555 } else { 0o444 };
        fs::copy(&f.source, &to)
            .and_then(|_| fs::set_permissions(&to, fs::Permissions::from_mode(mode)))
            .map_err(|e| (to.clone(), e))?;
    }
    Ok(())
}

/// Asks the kernel to kill the calling process (just forked) when its parent dies, and
/// ends it at once if that already happened between the fork and this call.
///
/// # Safety-relevant
/// Async-signal-safe: two system calls and `_exit`.
pub(crate) fn tie_to_parent(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl, getppid and _exit are async-signal-safe and touch no memory.
    unsafe {
        Errno::result(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        if libc::getppid() != parent {
            libc::_exit(137);
        }
    }
    Ok(())
}

/// Every `cgroup.procs` of the job's cgroup, opened for writing before the fork.
fn open_procs_files(cgroup: Option<&JobCgroup>) -> Result<Vec<File>, SandboxError> {
    match cgroup {
        Some(cg) => cg
            .procs_files()
            .iter()
            .map(|p| OpenOptions::new().write(true).open(p))
            .collect::<Result<_, _>>()
            .map_err(SandboxError::Spawn),
        None => Ok(vec![]),
    }
}

/// `sh -c COMMAND` in the job's working directory, with a clean environment (the
/// spec's, the `YT_*` variables, `extra_env`) and a process group of its own.
fn job_command(
    spec: &JobStartSpec,
    files: JobFiles,
    extra_env: &[(String, String)],
) -> tokio::process::Command {
    let JobFiles {
        work,
        stdin,
        stdout,
        stderr,
        ..
    } = files;
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&work)
        .env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        )
        .env("HOME", &work)
        .env("TMPDIR", &work)
        .envs(&spec.environment)
        .env("YT_OPERATION_ID", spec.operation_id.as_str())
        .env("YT_JOB_ID", spec.job_id.as_str())
        .env("YT_JOB_INDEX", spec.job_index.to_string())
        .env("YT_TASK_NAME", &spec.task_name)
        .env("YT_JOB_COUNT", spec.job_count.to_string())
        .envs(extra_env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    cmd
}

impl Sandbox {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The job's process group (its main process's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid.as_raw()
    }

    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// How the job's main process exited, if it already has (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn signal(&self, signal: Signal) {
        if self.pgid.as_raw() > 0 {
            let _ = killpg(self.pgid, signal);
        }
        if let Some(cg) = &self.cgroup {
            cg.signal_all(signal);
        }
    }

    fn all_gone(&mut self) -> bool {
        let main_done = !matches!(self.child.try_wait(), Ok(None));
        let cgroup_empty = self.cgroup.as_ref().map(|c| c.is_empty()).unwrap_or(true);
        main_done && cgroup_empty
    }

    /// SIGTERM to the whole job, SIGKILL to whatever is left after `grace`.
    /// Sends `first` (the job's interruption signal), gives it `grace` to exit, then
    /// kills what is left.
    pub async fn terminate(&mut self, first: Signal, grace: Duration) {
        self.signal(first);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.all_gone() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.signal(Signal::SIGKILL);
    }

    /// Kills leftovers (background children of a finished job), reads statistics,
    /// removes the cgroup, and reads the output tails. The directory stays until the
    /// scheduler has the result.
    pub async fn finish(self) -> SandboxOutcome {
        let Sandbox {
            uid,
            dir,
            cgroup,
            pgid,
            ..
        } = self;
        tokio::task::spawn_blocking(move || {
            if pgid.as_raw() > 0 {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            let stats = match &cgroup {
                Some(cg) => {
                    cg.kill_all();
                    let stats = cg.stats();
                    if let Err(e) = cg.remove() {
                        tracing::warn!(error = %e, "cannot remove job cgroup");
                    }
                    stats
                }
                None => CgroupStats::default(),
            };
            // The slot is released: nothing of its uid may live on into the next job.
            if let Some(uid) = uid {
                kill_processes_of(uid);
            }
            SandboxOutcome {
                stats,
                stdout_tail: read_tail(&dir.join("stdout")),
                stderr_tail: read_tail(&dir.join("stderr")),
            }
        })
        .await
        .unwrap_or_else(|_| SandboxOutcome {
            stats: CgroupStats::default(),
            stdout_tail: String::new(),
            stderr_tail: String::new(),
        })
    }
}

/// SIGKILLs every process whose real or effective uid is `uid` (a released slot's).
fn kill_processes_of(uid: u32) {
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(status) = fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let owned = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|ids| {
                ids.split_whitespace()
                    .take(2)
                    .any(|id| id.parse::<u32>() == Ok(uid))
            });
        if owned {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The last `OUTPUT_TAIL_BYTES` of a file, lossily decoded.
pub fn read_tail(path: &Path) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(OUTPUT_TAIL_BYTES as u64);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::with_capacity((len - start) as usize);
    let _ = f.take(OUTPUT_TAIL_BYTES as u64).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_64k() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        let mut data = vec![b'a'; 10];
        data.extend(vec![b'b'; OUTPUT_TAIL_BYTES]);
        fs::write(&p, &data).unwrap();
        let t = read_tail(&p);
        assert_eq!(t.len(), OUTPUT_TAIL_BYTES);
        assert!(!t.contains('a'));
        assert_eq!(read_tail(&dir.path().join("missing")), "");
    }
}
