//! Slot uid ranges are unique per host (SPEC 5.11): two agents on one machine with the
//! same range would run different users' jobs as the same uid, and one job could read,
//! plant files in or signal the other's. Each agent claims its range as a file
//! `<first>-<end>` under a directory in `/run`, held under an exclusive `flock` for the
//! agent's life; the kernel drops the lock when the agent dies, however it dies, so a
//! range whose file is not locked is free again. Claims are made one at a time under a
//! directory-wide lock, so two agents starting together cannot both win.

use nix::fcntl::{Flock, FlockArg};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SlotRangeError {
    #[error("slot uids {first}..{end} overlap uids {their_first}..{their_end} held by another agent on this host ({holder}); give each agent its own --slot-uid-base")]
    Taken {
        first: u32,
        end: u32,
        their_first: u32,
        their_end: u32,
        holder: String,
    },
    #[error("cannot claim slot uids under {dir}: {source}")]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// A range this agent holds until it is dropped (or the process ends).
pub struct SlotRangeClaim {
    _lock: Flock<File>,
    path: PathBuf,
}

impl SlotRangeClaim {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SlotRangeClaim {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn parse_range(name: &str) -> Option<(u32, u32)> {
    let (a, b) = name.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Claims uids `first..first + count` in `dir` for `holder` (said in a refusal).
pub fn claim(
    dir: &Path,
    first: u32,
    count: u32,
    holder: &str,
) -> Result<SlotRangeClaim, SlotRangeError> {
    let io = |source| SlotRangeError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let end = first.saturating_add(count.max(1));
    fs::create_dir_all(dir).map_err(io)?;
    let guard = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))
        .map_err(io)?;
    let _guard = Flock::lock(guard, FlockArg::LockExclusive).map_err(|(_, e)| io(e.into()))?;
    for entry in fs::read_dir(dir).map_err(io)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((their_first, their_end)) = parse_range(&name) else {
            continue;
        };
        if their_end <= first || end <= their_first {
            continue;
        }
        let Ok(file) = File::open(entry.path()) else {
            continue;
        };
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // Nobody holds it: its agent is gone.
            Ok(_stale) => {
                let _ = fs::remove_file(entry.path());
            }
            Err(_) => {
                let holder = fs::read_to_string(entry.path())
                    .unwrap_or_default()
                    .chars()
                    .take(200)
                    .collect::<String>()
                    .trim()
                    .to_string();
                return Err(SlotRangeError::Taken {
                    first,
                    end,
                    their_first,
                    their_end,
                    holder,
                });
            }
        }
    }
    let path = dir.join(format!("{first}-{end}"));
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(io)?;
    writeln!(file, "{holder}").map_err(io)?;
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| io(e.into()))?;
    Ok(SlotRangeClaim { _lock: lock, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_ranges_are_refused_naming_the_holder_and_freed_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = claim(dir.path(), 20_000, 8, "node a (pid 1)").unwrap();
        // Disjoint: fine.
        let b = claim(dir.path(), 20_008, 8, "node b").unwrap();
        // Overlapping either: refused, naming who holds it.
        let e = claim(dir.path(), 20_004, 8, "node c")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("node a (pid 1)"), "{e}");
        assert!(e.contains("20004..20012"), "{e}");
        drop(a);
        drop(b);
        // Released: the range is free again.
        let _c = claim(dir.path(), 20_004, 8, "node c").unwrap();
    }

    #[test]
    fn a_file_left_by_a_dead_agent_does_not_hold_its_range() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("20000-20008"), "node gone\n").unwrap();
        let claim = claim(dir.path(), 20_000, 8, "node new").unwrap();
        assert!(claim.path().exists());
    }
}
