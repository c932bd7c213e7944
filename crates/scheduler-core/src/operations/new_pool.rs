//! An ephemeral pool an operation's admission would create: what the access check of
//! the pool's parent and the creation after it both look at.

use ytsched_common::names::TreePoolName;
use ytsched_common::pool_config::PoolConfig;

/// An ephemeral pool admission would create.
/// Its name is the pool admission resolved to.
pub(crate) struct NewPool {
    pub(crate) parent: TreePoolName,
    pub(crate) config: PoolConfig,
}
