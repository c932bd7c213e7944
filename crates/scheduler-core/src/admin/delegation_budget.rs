//! How much of the pool configuration a delegate may fill (issue 24 point 6). The whole
//! configuration is one stored record with a size limit; a user given `administer` on
//! one pool could otherwise create sub-pools until the record is full, after which no
//! one, the cluster's admins included, could change any tree. So each delegated subtree
//! has a budget of pools and of bytes, and delegates together may fill only part of the
//! record: the rest is kept for admins.

use crate::admin::path::AdminPath;
use crate::operations::access::pool_allows;
use crate::queries::reads::CoreReads;
use ytsched_common::acl::Permission;
use ytsched_common::api::ApiError;
use ytsched_common::identity::Caller;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::pool_tree::PoolTree;

/// Pools one delegated subtree may hold (its top pool included).
pub const MAX_DELEGATED_POOLS: usize = 200;
/// Pools of a tree's limit that delegates may not fill: room for users' ephemeral
/// pools (without which they could not submit) and for admins.
pub const POOLS_KEPT_FROM_DELEGATES: usize = 1_000;
/// One delegated subtree may take at most 1/`SUBTREE_PARTS` of the record.
pub const SUBTREE_PARTS: usize = 16;
/// Delegates' changes may leave the record at most this many quarters full.
pub const DELEGATES_QUARTERS: usize = 3;

/// A delegate's change that leaves a tree with `pools` pools, more than delegates may
/// fill of its limit.
pub fn tree_room_refusal(tree_name: &TreeName, pools: usize) -> Option<ApiError> {
    let room = ytsched_common::pool_tree::MAX_POOLS_PER_TREE - POOLS_KEPT_FROM_DELEGATES;
    (pools > room).then(|| {
        ApiError::limit_reached(format!(
            "refused: pool tree '{tree_name}' would hold {pools} pools; delegates may fill it up to {room}, the last {POOLS_KEPT_FROM_DELEGATES} are kept for users' ephemeral pools and admins"
        ))
    })
}

/// Where the delegation `pool` lies in begins: the topmost pool at or above it whose own
/// ACL grants `administer` to anyone, else the topmost `caller` administers. Every
/// grant below that one, sub-delegates' included, shares its one budget: granting
/// `administer` on sub-pools to another identity brings no fresh budget.
fn delegation_top<'a>(
    tree: &'a PoolTree,
    pool: &'a TreePoolName,
    caller: &Caller,
) -> Option<&'a TreePoolName> {
    let lineage = tree.lineage(pool);
    let grants_administer = |p: &TreePoolName| {
        tree.pools
            .get(p)
            .and_then(|pool| pool.config.acl.as_deref())
            .is_some_and(|acl| {
                acl.iter().any(|ace| {
                    ace.action == ytsched_common::acl::AceAction::Allow
                        && ace.permissions.contains(&Permission::Administer)
                })
            })
    };
    lineage
        .iter()
        .rev()
        .find(|p| !p.is_root() && grants_administer(p))
        .or_else(|| {
            lineage
                .iter()
                .rev()
                .find(|p| pool_allows(tree, p, caller, Permission::Administer))
        })
        .copied()
}

/// Pools in the subtree under `top` (itself included unless it is the root), and the
/// bytes their records take in the stored configuration.
fn subtree_size(tree: &PoolTree, top: &TreePoolName) -> (usize, usize) {
    let mut pools = 0;
    let mut bytes = 0;
    for (name, pool) in &tree.pools {
        if top.is_root() || tree.ancestry(name).contains(&top) {
            pools += 1;
            bytes += name.len()
                + ytsched_common::codec::encode(pool).map_or(usize::MAX / 2, |b| b.len());
        }
    }
    (pools, bytes)
}

impl<'a> CoreReads<'a> {
    /// The (tree, pool) an admin path changes, where that is a pool: the scope whose
    /// budget a delegate's `set` spends.
    pub fn pool_scope_of(&self, path: &str) -> Option<(TreeName, TreePoolName)> {
        let (tree_name, pool_path) = match AdminPath::parse(path).ok()? {
            AdminPath::Pool { tree, pool_path }
            | AdminPath::PoolAttribute {
                tree, pool_path, ..
            } => (tree, pool_path),
            _ => return None,
        };
        let tree = self.cluster.tree(&tree_name).ok()?;
        let segs: Vec<&str> = pool_path.iter().map(String::as_str).collect();
        let pool = tree.resolve_path(&segs).ok()?;
        Some((tree_name, pool))
    }

    /// Whether the configuration as it is now keeps to the budgets of a change `caller`
    /// made at `pool` of `tree_name`, with `record_bytes` the size of the whole record and
    /// `max_record` the store's limit. Admins have no budget but the record's own limit.
    pub fn delegate_budget_refusal(
        &self,
        caller: &Caller,
        scope: Option<(&TreeName, &TreePoolName)>,
        record_bytes: usize,
        max_record: usize,
    ) -> Option<ApiError> {
        if caller.admin {
            return None;
        }
        let shared = max_record / 4 * DELEGATES_QUARTERS;
        if record_bytes > shared {
            return Some(ApiError::limit_reached(format!(
                "refused: the pool configuration would take {record_bytes} bytes; changes by non-admins may fill it up to {shared} bytes ({DELEGATES_QUARTERS}/4 of the store's record limit of {max_record}), the rest is kept for admins"
            )));
        }
        let (tree_name, pool) = scope?;
        let tree = self.cluster.tree(tree_name).ok()?;
        if let Some(e) = tree_room_refusal(tree_name, tree.pools.len()) {
            return Some(e);
        }
        let top = delegation_top(tree, pool, caller)?;
        let (pools, bytes) = subtree_size(tree, top);
        let subtree_bytes = max_record / SUBTREE_PARTS;
        let whose = format!(
            "the subtree of pool '{top}' of pool tree '{tree_name}' that user '{}' administers",
            caller.user
        );
        if pools > MAX_DELEGATED_POOLS {
            return Some(ApiError::limit_reached(format!(
                "refused: {whose} would hold {pools} pools, more than the {MAX_DELEGATED_POOLS} one delegated subtree may hold; an admin may make room"
            )));
        }
        if bytes > subtree_bytes {
            return Some(ApiError::limit_reached(format!(
                "refused: {whose} would take {bytes} bytes of the pool configuration, more than the {subtree_bytes} one delegated subtree may take (1/{SUBTREE_PARTS} of the record limit); remove pools or shorten attributes"
            )));
        }
        None
    }
}
