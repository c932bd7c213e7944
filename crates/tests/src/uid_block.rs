//! Each lab's agents run jobs as slot users from a block of uids of its own. Agents on
//! one host refuse overlapping ranges, so two labs alive at once must never be handed
//! the same block, whichever test process (or pid namespace: two CI runs on one host
//! share `/run`) started them. A block is reserved by an exclusive `flock` on a file
//! named for it under [`BLOCK_DIR`], held by the lab for its life; the kernel releases
//! it when the lab's process ends, however it ends. Deriving the block from the pid
//! alone collided across pid namespaces.

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// Where test processes on this host reserve their labs' uid blocks.
const BLOCK_DIR: &str = "/run/ytsched-e2e/uid-blocks";
/// The first uid a block can start at: above every system and regular user.
const FIRST_UID: u32 = 100_000;
/// Uids per block: 256 per agent, for up to 32 agents in one lab.
pub const BLOCK_UIDS: u32 = 8_192;
/// How many blocks there are: the last one ends below `i32::MAX`, as uids must.
const BLOCKS: u32 = 131_072;

/// A block of uids this lab holds until it is dropped.
pub struct UidBlock {
    first: u32,
    _lock: Flock<File>,
}

impl UidBlock {
    pub fn first(&self) -> u32 {
        self.first
    }

    /// Reserves a free block, trying from one that depends on this process and `seq` so
    /// that concurrent test processes rarely try the same blocks first.
    pub fn reserve(seq: usize) -> anyhow::Result<UidBlock> {
        let dir = block_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
        let start = ((std::process::id() % 2_048) * 64 + seq as u32 % 64) % BLOCKS;
        for step in 0..BLOCKS {
            let block = (start + step) % BLOCKS;
            if let Some(lock) = try_lock(&dir, block)? {
                return Ok(UidBlock {
                    first: FIRST_UID + block * BLOCK_UIDS,
                    _lock: lock,
                });
            }
        }
        anyhow::bail!("every uid block under {} is held", dir.display())
    }
}

/// `/run` where this user may write there (root, as the labs' agents need for slot
/// users); otherwise a directory of the system's temporary one, which serves the same
/// purpose for this user's own test processes.
fn block_dir() -> PathBuf {
    let run = Path::new(BLOCK_DIR);
    if nix::unistd::geteuid().is_root() {
        run.to_path_buf()
    } else {
        std::env::temp_dir().join(format!(
            "ytsched-e2e-uid-blocks-{}",
            nix::unistd::geteuid().as_raw()
        ))
    }
}

fn try_lock(dir: &Path, block: u32) -> anyhow::Result<Option<Flock<File>>> {
    let path = dir.join(block.to_string());
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_block_is_never_handed_out_again_until_dropped() {
        let a = UidBlock::reserve(7).unwrap();
        // The same starting point: the second reservation must move past the first.
        let b = UidBlock::reserve(7).unwrap();
        assert_ne!(a.first(), b.first());
        let (first, end) = (a.first(), a.first() + BLOCK_UIDS);
        assert!(b.first() >= end || b.first() + BLOCK_UIDS <= first);
        assert!(u64::from(b.first()) + u64::from(BLOCK_UIDS) < i32::MAX as u64);
        let held = a.first();
        drop(a);
        let c = UidBlock::reserve(7).unwrap();
        assert_eq!(c.first(), held, "a dropped block is free again");
    }
}
