//! Pool and pool tree names as they arrive from outside (specs, API requests): parsed
//! once at the boundary, so a name that could widen a subject or escape a path never
//! reaches the scheduler's core.

use crate::pool_config::ROOT_POOL;
use crate::spec::validate_pool_name;

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
    PoolName(String),
    check_pool_name,
    String
);

validated_string!(
    /// A pool tree's name: the same alphabet as pools.
    TreeName(String),
    check_tree_name,
    String
);

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
}
