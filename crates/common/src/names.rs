//! Pool and pool tree names as they arrive from outside (specs, API requests): parsed
//! once at the boundary, so a name that could widen a subject or escape a path never
//! reaches the scheduler's core.

use crate::pool_config::ROOT_POOL;
use crate::spec::validate_pool_name;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A pool's name: letters, digits, '-', '_' and ':' (at most 100 bytes), or `<Root>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PoolName(String);

/// A pool tree's name: the same alphabet as pools.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TreeName(String);

impl PoolName {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s != ROOT_POOL {
            validate_pool_name(s)?;
        }
        Ok(PoolName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TreeName {
    pub fn parse(s: &str) -> Result<Self, String> {
        validate_pool_name(s).map_err(|m| m.replace("pool name", "pool tree name"))?;
        Ok(TreeName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! string_conversions {
    ($name:ident) => {
        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                $name::parse(&s)
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $name::parse(s)
            }
        }

        impl From<$name> for String {
            fn from(n: $name) -> String {
                n.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

string_conversions!(PoolName);
string_conversions!(TreeName);

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
