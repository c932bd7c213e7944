//! Who may do what (SPEC 5.11): pool ACLs for running and administering, ownership for
//! aborting operations and reading job output, the admin role for everything else.
//!
//! The caller comes from the request's subject, which nats-server vouches for; these
//! checks only decide. Admins pass every check, as YTsaurus superusers do; reads of
//! metadata (operations, pools, nodes, orchid) are open to everyone.

use crate::admin::path::AdminPath;
use crate::queries::reads::CoreReads;
use crate::Operation;
use ytsched_common::acl::{self, Ace, Permission};
use ytsched_common::api::{ApiError, ObjectType};
use ytsched_common::identity::Caller;
use ytsched_common::names::{PoolName, TreePoolName};
use ytsched_common::pool_config::ROOT_POOL;
use ytsched_common::pool_tree::PoolTree;
use ytsched_common::OperationId;

/// Whether `caller` holds `permission` on `pool` of `tree` (the root when absent):
/// the pool's ACL, its ancestors', then the root's (`@config/acl`, by default `use` for
/// everyone and `administer` for admins).
pub(crate) fn pool_allows(
    tree: &PoolTree,
    pool: &TreePoolName,
    caller: &Caller,
    permission: Permission,
) -> bool {
    if caller.admin {
        return true;
    }
    let default_root;
    let root: &[Ace] = match &tree.config.acl {
        Some(acl) => acl,
        None => {
            default_root = acl::root_default();
            &default_root
        }
    };
    let own: Vec<&[Ace]> = if pool == ROOT_POOL {
        vec![]
    } else {
        tree.ancestry(pool)
            .into_iter()
            .filter_map(|p| tree.pools.get(p)?.config.acl.as_deref())
            .collect()
    };
    acl::decide(
        own.into_iter().chain([root]),
        &caller.user,
        caller.admin,
        permission,
    )
}

/// A user's ephemeral pool is that user's (SPEC 5.11): another user may run there only
/// if an administrator granted it `use` on that pool itself (its own `acl`), and may not
/// create an ephemeral pool under a name other than its own, which would squat the pool
/// of the user of that name. `None`: allowed; `Some(why)`: the refusal.
pub(crate) fn ephemeral_pool_refusal(
    tree: &PoolTree,
    tree_name: &str,
    pool: &str,
    creating: bool,
    caller: &Caller,
) -> Option<ApiError> {
    if caller.admin {
        return None;
    }
    let user = caller.user.as_str();
    if creating {
        // `<pool>$<user>` subpools carry the user in their name already.
        if pool.contains('$') || pool == user {
            return None;
        }
        return Some(ApiError::permission_denied(format!(
            "access denied: user '{user}' may not create the ephemeral pool '{pool}' in pool tree '{tree_name}': a user's ephemeral pool carries its own name ('{user}'); pools of other names are made by administrators"
        )));
    }
    let owner = tree.pools.get(pool)?.ephemeral_user.as_deref()?;
    let granted = tree
        .pools
        .get(pool)
        .and_then(|p| p.config.acl.as_deref())
        .is_some_and(|acl| acl::decide([acl], &caller.user, false, Permission::Use));
    (owner != user && !granted).then(|| {
        ApiError::permission_denied(format!(
            "access denied: user '{user}' has no 'use' permission on pool '{pool}' of pool tree '{tree_name}': it is the ephemeral pool of user '{owner}', usable by that user, admins, and users an administrator granted 'use' on it"
        ))
    })
}

/// Whether an operation of `user` may run in `pool` on `caller`'s request: `caller` needs
/// `use` there, and so, when it is someone else's operation (an owner or admin moving
/// it), does the user it runs as, or a move would launder that user into the pool.
pub(crate) fn check_run_access(
    tree: &PoolTree,
    tree_name: &str,
    pool: &TreePoolName,
    new_pool: Option<&crate::operations::new_pool::NewPool>,
    user: &str,
    caller: &Caller,
) -> Result<(), ApiError> {
    check_pool_use(tree, tree_name, pool, new_pool, user, caller)?;
    if caller.user.as_str() != user {
        check_operation_user(tree, tree_name, pool, new_pool, user)?;
    }
    Ok(())
}

/// Whether `caller` may run an operation in `pool` (or create it, when it is an
/// ephemeral pool still to be made): the `use` permission on the nearest existing pool,
/// except in the caller's own ephemeral pool.
fn check_pool_use(
    tree: &PoolTree,
    tree_name: &str,
    pool: &TreePoolName,
    new_pool: Option<&crate::operations::new_pool::NewPool>,
    user: &str,
    caller: &Caller,
) -> Result<(), ApiError> {
    if let Some(e) = ephemeral_pool_refusal(tree, tree_name, pool, new_pool.is_some(), caller) {
        return Err(e);
    }
    let first_existing = new_pool.map_or(pool, |np| &np.parent);
    let own_ephemeral = new_pool.is_some() && *pool == user;
    if !own_ephemeral && !pool_allows(tree, first_existing, caller, Permission::Use) {
        return Err(refusal(
            caller,
            Permission::Use,
            &format!("pool '{first_existing}' of pool tree '{tree_name}'"),
        ));
    }
    Ok(())
}

/// `use` for the user an operation runs as (YTsaurus checks the operation's user, not
/// whoever moves it). Admin rights are the caller's, not carried by the operation, so
/// its user is judged as an ordinary user.
fn check_operation_user(
    tree: &PoolTree,
    tree_name: &str,
    pool: &TreePoolName,
    new_pool: Option<&crate::operations::new_pool::NewPool>,
    user: &str,
) -> Result<(), ApiError> {
    let Ok(name) = ytsched_common::identity::UserName::parse(user) else {
        return Err(ApiError::permission_denied(format!(
            "the operation's user '{user}' is not a valid user name"
        )));
    };
    let as_user = Caller {
        user: name,
        admin: false,
    };
    check_pool_use(tree, tree_name, pool, new_pool, user, &as_user).map_err(|e| {
        ApiError::permission_denied(format!(
            "the operation's own user is refused: {}",
            e.message
        ))
    })
}

/// Owner, a user of the spec's `owners`, or an admin.
fn controls(caller: &Caller, op: &Operation) -> bool {
    controls_operation_of(caller, &op.user, &op.spec.owners)
}

/// The same rule for an operation known only by its owner and `owners` (an archived
/// one).
pub fn controls_operation_of(caller: &Caller, owner: &str, owners: &[String]) -> bool {
    let user = caller.user.as_str();
    caller.admin || owner == user || owners.iter().any(|o| o == user)
}

/// Abort and job output of operation `id`, owned by `owner` with spec `owners`: allowed
/// by `controls_operation_of`, refused naming who may.
pub fn authorize_operation_of(
    caller: &Caller,
    id: &OperationId,
    owner: &str,
    owners: &[String],
    action: &str,
) -> Result<(), ApiError> {
    if controls_operation_of(caller, owner, owners) {
        return Ok(());
    }
    Err(ApiError::permission_denied(format!(
        "access denied: user '{}' may not {action} operation {id}: only its owner '{owner}', the users in its spec's owners and admins may",
        caller.user
    )))
}

pub(crate) fn refusal(caller: &Caller, permission: Permission, what: &str) -> ApiError {
    ApiError::permission_denied(format!(
        "access denied: user '{}' has no '{permission}' permission on {what}",
        caller.user
    ))
}

impl<'a> CoreReads<'a> {
    /// Abort and job output: the operation's owner, its spec's `owners`, and admins.
    pub fn authorize_operation(
        &self,
        caller: &Caller,
        id: &OperationId,
        action: &str,
    ) -> Result<(), ApiError> {
        let op = self.operation(id)?;
        authorize_operation_of(caller, id, &op.user, &op.spec.owners, action)
    }

    /// Whether `caller` may see everything of operation `id` (its environment and
    /// stdin); unknown operations say no.
    pub fn may_see_secrets_of(&self, caller: &Caller, id: &OperationId) -> bool {
        self.operations
            .get(id)
            .is_some_and(|op| controls(caller, op))
    }

    /// `set` and `remove`: `administer` on the pool's parent for a pool or its
    /// attributes (the root's for a top pool: the admin role unless the root's ACL
    /// grants it); the admin role for trees, tree configuration, the default tree and
    /// nodes. As in YTsaurus, `administer` on a pool lets a delegate shape what is below
    /// it; the pool's own guarantee, weight, limits, preemption settings and ACL (so
    /// who else administers it) are its parent's administrator's to give.
    pub fn authorize_change(&self, caller: &Caller, path: &str) -> Result<(), ApiError> {
        if caller.admin {
            return Ok(());
        }
        let pool = match AdminPath::parse(path)? {
            AdminPath::Pool { tree, pool_path } if !pool_path.is_empty() => Some((tree, pool_path)),
            AdminPath::PoolAttribute {
                tree, pool_path, ..
            } if !pool_path.is_empty() => Some((tree, pool_path)),
            _ => None,
        };
        let Some((tree_name, pool_path)) = pool else {
            return Err(ApiError::permission_denied(format!(
                "access denied: user '{}' may not change {path}: only admins may change pool trees, their configuration and nodes",
                caller.user
            )));
        };
        let tree = self.cluster.tree(&tree_name)?;
        let segs: Vec<&str> = pool_path.iter().map(String::as_str).collect();
        let pool = tree.resolve_path(&segs)?;
        let parent = tree
            .pools
            .get(&pool)
            .map_or_else(TreePoolName::root, |p| p.parent.clone());
        if pool_allows(tree, &parent, caller, Permission::Administer) {
            return Ok(());
        }
        let what = if parent.is_root() {
            format!("pool tree '{tree_name}' (the root, parent of pool '{pool}')")
        } else {
            format!("pool '{parent}' of pool tree '{tree_name}', the parent of pool '{pool}'")
        };
        let mut refused = refusal(caller, Permission::Administer, &what);
        if pool_allows(tree, &pool, caller, Permission::Administer) {
            refused.message.push_str(&format!(
                "; 'administer' on '{pool}' lets you shape the pools below it, while its own attributes and ACL are its parent's administrator's to set"
            ));
        }
        Err(refused)
    }

    /// `create`: a pool needs `administer` on its parent, a pool tree the admin role.
    pub fn authorize_create(
        &self,
        caller: &Caller,
        object_type: ObjectType,
        tree_name: Option<&str>,
        parent: Option<&PoolName>,
    ) -> Result<(), ApiError> {
        if caller.admin {
            return Ok(());
        }
        match (object_type, tree_name) {
            (ObjectType::SchedulerPool, Some(tree_name)) => {
                let tree = self.cluster.tree(tree_name)?;
                let parent = parent
                    .cloned()
                    .map_or_else(TreePoolName::root, TreePoolName::from);
                if !tree.contains(&parent) {
                    return Err(ApiError::not_found(format!(
                        "pool tree '{tree_name}' has no pool '{parent}'"
                    )));
                }
                if pool_allows(tree, &parent, caller, Permission::Administer) {
                    Ok(())
                } else {
                    Err(refusal(
                        caller,
                        Permission::Administer,
                        &format!("pool '{parent}' of pool tree '{tree_name}'"),
                    ))
                }
            }
            (ObjectType::SchedulerPool, None) => Ok(()), // the create itself names what is missing
            (ObjectType::SchedulerPoolTree, _) => Err(ApiError::permission_denied(format!(
                "access denied: user '{}' may not create pool trees: only admins may",
                caller.user
            ))),
        }
    }
}
