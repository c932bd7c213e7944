//! Where an operation goes in each pool tree (SPEC 5.5): the pool it asks for, an
//! existing pool, its `<pool>$<user>` subpool or a new ephemeral pool; whether the
//! caller may use it; and the operation count limits that hold it pending (5.4) or not
//! (lightweight operations, 5.6). Asked of the configuration, at admission and when an
//! operation moves.

use crate::operations::access::check_run_access;
use crate::operations::new_pool::NewPool;
use crate::operations::operation::TreeSlot;
use crate::operations::operation_counts::PoolCountMap;
use crate::ClusterConfig;
use ytsched_common::api::ApiError;
use ytsched_common::identity::Caller;
use ytsched_common::names::{PoolName, TreeName, TreePoolName};
use ytsched_common::pool_config::{limits_vector, PoolConfig, PoolMode, ROOT_POOL};
use ytsched_common::pool_tree::PoolTree;
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::{validate_pool_name, VanillaSpec};

/// What admission decided for one tree of an operation.
pub(crate) struct TreeAdmission {
    pub(crate) slot: TreeSlot,
    pub(crate) new_pool: Option<NewPool>,
    /// A running-operation count limit is reached: the operation waits as pending.
    /// The first such pool up from the operation's, with its running count and limit.
    pub(crate) blocked: Option<(TreePoolName, u32, u32)>,
}

/// The pool an operation asks for in `tree_name`: the tree's override, else its spec's
/// pool, else its user's name (an ephemeral pool).
pub(crate) fn requested_pool(spec: &VanillaSpec, tree_name: &str, user: &str) -> String {
    spec.scheduling_options_per_pool_tree
        .get(tree_name)
        .and_then(|o| o.pool.as_ref())
        .or(spec.pool.as_ref())
        .map(|p| p.to_string())
        .unwrap_or_else(|| user.to_string())
}

/// Where an operation that asked for `requested` goes in `tree` (SPEC 5.5): an existing
/// pool, its `<pool>$<user>` subpool, or a new ephemeral pool under `default_parent_pool`.
/// Returns the pool name and the pool to create, if any.
pub(crate) fn resolve_pool(
    tree: &PoolTree,
    tree_name: &str,
    requested: &str,
    user: &str,
) -> Result<(TreePoolName, Option<NewPool>), ApiError> {
    if requested == ROOT_POOL {
        if tree.config.forbid_immediate_operations_in_root {
            return Err(ApiError::new(format!(
                "pool tree '{tree_name}' forbids operations directly in {ROOT_POOL} (forbid_immediate_operations_in_root)"
            )));
        }
        return Ok((TreePoolName::root(), None));
    }
    match tree.pools.get_key_value(requested) {
        Some((parent, pool)) if pool.config.create_ephemeral_subpools == Some(true) => {
            validate_pool_name(user).map_err(|m| {
                ApiError::new(format!("cannot create an ephemeral subpool for user: {m}"))
            })?;
            let name =
                TreePoolName::parse(&format!("{requested}${user}")).map_err(ApiError::new)?;
            if tree.pools.contains_key(&name) {
                return Ok((name, None));
            }
            let new = ephemeral_pool(tree, tree_name, parent, user)?;
            Ok((name, Some(new)))
        }
        Some((name, pool)) => {
            if pool.config.forbid_immediate_operations == Some(true) {
                return Err(ApiError::new(format!(
                    "pool '{requested}' forbids immediate operations (forbid_immediate_operations); use one of its subpools"
                )));
            }
            Ok((name.clone(), None))
        }
        None => {
            let name = PoolName::parse(requested)
                .map(TreePoolName::from)
                .map_err(|m| ApiError::new(format!("pool: {m}")))?;
            let parent = TreePoolName::from(tree.config.default_parent_pool.clone());
            let new = ephemeral_pool(tree, tree_name, &parent, user)?;
            Ok((name, Some(new)))
        }
    }
}

/// An ephemeral pool under `parent` for `user`, configured from the parent's
/// `ephemeral_subpool_config`, if the user's `max_ephemeral_pool_per_user` allows one more.
fn ephemeral_pool(
    tree: &PoolTree,
    tree_name: &str,
    parent: &TreePoolName,
    user: &str,
) -> Result<NewPool, ApiError> {
    let held = tree.ephemeral_pools_of(user);
    let max = tree.config.max_ephemeral_pool_per_user;
    if held as u32 >= max {
        return Err(ApiError::limit_reached(format!(
            "user '{user}' already holds {held} ephemeral pool(s) in pool tree '{tree_name}', max_ephemeral_pool_per_user is {max}"
        )));
    }
    let template = tree
        .pools
        .get(parent)
        .and_then(|p| p.config.ephemeral_subpool_config.clone())
        .unwrap_or_default();
    Ok(NewPool {
        parent: parent.clone(),
        config: PoolConfig {
            mode: template.mode,
            max_running_operation_count: template.max_running_operation_count,
            max_operation_count: template.max_operation_count,
            resource_limits: template.resource_limits,
            ..Default::default()
        },
    })
}

/// Where an operation may run, as the configuration says.
pub(crate) trait AdmitInTrees {
    fn admit_in_tree(
        &self,
        tree_name: &str,
        user: &str,
        caller: Option<&Caller>,
        spec: &VanillaSpec,
        counts: Option<&PoolCountMap>,
    ) -> Result<TreeAdmission, ApiError>;
    fn operation_trees(&self, spec: &VanillaSpec) -> Result<Vec<TreeName>, ApiError>;
}

impl AdmitInTrees for ClusterConfig {
    /// How an operation would run in one tree: its pool there (and the ephemeral pool to
    /// create), weight and limits after per-tree overrides, and whether a running-count
    /// limit holds it back. Total-count limits refuse it outright. Without `counts`, no
    /// count limit is looked at (an operation staying in its pool).
    fn admit_in_tree(
        &self,
        tree_name: &str,
        user: &str,
        caller: Option<&Caller>,
        spec: &VanillaSpec,
        counts: Option<&PoolCountMap>,
    ) -> Result<TreeAdmission, ApiError> {
        let tree = self.tree(tree_name)?;
        let (pool, new_pool) = resolve_pool(
            tree,
            tree_name,
            &requested_pool(spec, tree_name, user),
            user,
        )?;
        let no_counts = PoolCountMap::new();
        let check_counts = counts.is_some();
        let counts = counts.unwrap_or(&no_counts);
        if let Some(c) = caller {
            check_run_access(tree, tree_name, &pool, new_pool.as_ref(), user, c)?;
        }
        // The pool and its ancestors up to the root, a pool still to be created first.
        let chain: Vec<&TreePoolName> = match &new_pool {
            Some(np) => std::iter::once(&pool)
                .chain(tree.lineage(&np.parent))
                .collect(),
            None => tree.lineage(&pool),
        };
        let limit_of = |p: &TreePoolName| match &new_pool {
            Some(np) if *p == pool => tree.count_limits_of(&np.config),
            _ => tree.count_limits(p),
        };
        for &p in chain.iter().filter(|_| check_counts) {
            let c = counts.get(p).copied().unwrap_or_default();
            let (max, _) = limit_of(p);
            if c.total >= max {
                let what = if p.is_root() {
                    format!("pool tree '{tree_name}'")
                } else {
                    format!("pool '{p}' of pool tree '{tree_name}'")
                };
                return Err(ApiError::limit_reached(format!(
                    "{what} already has {} operations, its max_operation_count is {max}",
                    c.total
                )));
            }
        }
        let root_config = PoolConfig::default();
        let pool_config = match &new_pool {
            Some(np) => &np.config,
            None if pool == ROOT_POOL => &root_config,
            None => &tree.pool(&pool).expect("resolved").config,
        };
        let lightweight = pool_config.mode() == PoolMode::Fifo
            && pool_config.enable_lightweight_operations == Some(true);
        let blocked = chain
            .iter()
            .filter(|_| check_counts && !lightweight)
            .find_map(|&p| {
                let running = counts.get(p).copied().unwrap_or_default().running;
                let max = limit_of(p).1;
                (running >= max).then(|| (p.clone(), running, max))
            });
        Ok(TreeAdmission {
            slot: TreeSlot {
                pool,
                weight: spec.weight_in(tree_name),
                resource_limits: limits_vector(spec.resource_limits_in(tree_name)),
                lightweight,
                usage: ResourceVector::ZERO,
            },
            new_pool,
            blocked,
        })
    }

    /// The trees an operation runs in: its `pool_trees`, else the default tree.
    fn operation_trees(&self, spec: &VanillaSpec) -> Result<Vec<TreeName>, ApiError> {
        match spec.pool_trees.as_deref() {
            Some(trees) => {
                for t in trees {
                    self
                        .tree(t.as_str())
                        .map_err(|e| ApiError::new(format!("pool_trees: {e}")))?;
                }
                Ok(trees.to_vec())
            }
            None => self
                .default_tree
                .as_ref()
                .map(|t| vec![t.clone()])
                .ok_or_else(|| {
                    ApiError::new(
                        "no default pool tree is set (//sys/pool_trees/@default_tree); name one in pool_trees",
                    )
                }),
        }
    }
}
