//! Pool and pool tree names as they arrive from outside (specs, API requests): parsed
//! once at the boundary, so a name that could widen a subject or escape a path never
//! reaches the scheduler's core.

/// The root pool of every tree: not a name a pool may take, but one a path may name.
pub const ROOT_POOL: &str = "<Root>";

/// Longest pool (and pool tree) name.
pub const MAX_POOL_NAME_LEN: usize = 100;

/// Pool names match `[-_a-z0-9:A-Z]+` (SPEC 4.2), at most `MAX_POOL_NAME_LEN` bytes.
pub fn validate_pool_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_POOL_NAME_LEN {
        return Err(format!(
            "'{}…' is not a valid pool name: {} bytes is longer than the limit of {MAX_POOL_NAME_LEN}",
            name.chars().take(40).collect::<String>(),
            name.len()
        ));
    }
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':'))
    {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a valid pool name (letters, digits, '-', '_' and ':' only)"
        ))
    }
}

fn check_pool_name(s: &str) -> Result<(), String> {
    if s == ROOT_POOL {
        return Ok(());
    }
    validate_pool_name(s)
}

fn check_tree_name(s: &str) -> Result<(), String> {
    validate_pool_name(s).map_err(|m| m.replace("pool name", "pool tree name"))
}

validated_string!(
    /// A pool's name: letters, digits, '-', '_' and ':' (at most 100 bytes), or `<Root>`.
    PoolName(Arc<str>),
    check_pool_name,
    String
);

validated_string!(
    /// A pool tree's name: the same alphabet as pools.
    TreeName(String),
    check_tree_name,
    String
);

fn check_tree_pool(s: &str) -> Result<(), String> {
    match s.split_once('$') {
        Some((parent, user)) => {
            validate_pool_name(parent)?;
            validate_pool_name(user)
                .map_err(|m| format!("'{s}': the ephemeral pool's user part: {m}"))
        }
        None => check_pool_name(s),
    }
}

validated_string!(
    /// A pool as a tree holds it: a configured name, `<Root>`, or an ephemeral
    /// `<parent>$<user>` pool the scheduler made. Wider than `PoolName`, which is what a
    /// user or admin may ask for: no request names a `$` pool directly.
    TreePoolName(Arc<str>),
    check_tree_pool,
    String
);

impl TreePoolName {
    /// `<Root>`, the top of every tree.
    pub fn root() -> Self {
        TreePoolName(ROOT_POOL.into())
    }

    /// `<Root>` borrowed for as long as the program runs: chains of pools up to the root
    /// are chains of borrowed names, and no tree holds its root as a pool.
    pub fn root_ref() -> &'static TreePoolName {
        static ROOT: std::sync::LazyLock<TreePoolName> =
            std::sync::LazyLock::new(TreePoolName::root);
        &ROOT
    }

    pub fn is_root(&self) -> bool {
        &*self.0 == ROOT_POOL
    }
}

impl PoolName {
    /// `<Root>`, the top of every tree.
    pub fn root() -> Self {
        PoolName(ROOT_POOL.into())
    }
}

impl From<PoolName> for TreePoolName {
    fn from(p: PoolName) -> Self {
        TreePoolName(p.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_they_are_decoded() {
        assert!(PoolName::parse("team-1:a").is_ok());
        assert!(PoolName::parse(ROOT_POOL).is_ok());
        assert!(TreeName::parse(ROOT_POOL).is_err());
        for bad in ["", "a/b", "a.b", "../x", "a b"] {
            assert!(PoolName::parse(bad).is_err(), "{bad}");
            assert!(TreeName::parse(bad).is_err(), "{bad}");
        }
        let e = serde_json::from_str::<PoolName>(&format!("\"{}\"", "p".repeat(300)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("limit of 100"), "{e}");
        let e = serde_json::from_str::<TreeName>("\"a.b\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pool tree name"), "{e}");
    }

    #[test]
    fn a_trees_pools_include_ephemeral_ones_that_no_request_may_name() {
        assert!(TreePoolName::parse("research$alice").is_ok());
        assert!(TreePoolName::parse("<Root>").is_ok());
        assert!(PoolName::parse("research$alice").is_err());
        for bad in ["a$", "$b", "a$b$c", "a/b$c", ""] {
            assert!(TreePoolName::parse(bad).is_err(), "{bad}");
        }
    }
}
