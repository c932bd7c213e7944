//! YTsaurus-style admin paths (SPEC 6.1): what `//sys/...` strings name.

use crate::ConfigError;
use ytsched_common::names::TreeName;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminPath {
    /// `//sys/pool_trees`
    PoolTrees,
    /// `//sys/pool_trees/@default_tree`
    DefaultTree,
    /// `//sys/pool_trees/<tree>[/<pool>/<child>...]`; an empty `pool_path` is the root.
    Pool {
        tree: TreeName,
        pool_path: Vec<String>,
    },
    /// `.../<pool>/@` (all attributes) or `.../<pool>/@<attr>[/<key>...]`.
    PoolAttribute {
        tree: TreeName,
        pool_path: Vec<String>,
        attribute: Option<String>,
        sub: Vec<String>,
    },
    /// `//sys/pool_trees/<tree>/@config[/<attr>[/<key>...]]`
    TreeConfig {
        tree: TreeName,
        attribute: Option<String>,
        sub: Vec<String>,
    },
    /// `//sys/cluster_nodes`
    ClusterNodes,
    /// `//sys/cluster_nodes/<node>[/@<attr>[/<key>...]]`
    Node {
        node: String,
        attribute: Option<String>,
        sub: Vec<String>,
    },
    /// `//sys/scheduler/orchid[/...]`
    Orchid(Vec<String>),
}

impl AdminPath {
    pub fn parse(path: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| {
            let shown = ytsched_common::quote::quote(path, ytsched_common::quote::QUOTE_CHARS);
            ConfigError::invalid(format!("bad path '{shown}': {why}"))
        };
        let rest = path
            .strip_prefix("//")
            .ok_or_else(|| bad("paths start with '//', e.g. //sys/pool_trees/default"))?;
        let segs: Vec<&str> = rest.split('/').collect();
        if segs.iter().any(|s| s.is_empty()) {
            return Err(bad("empty path segment (doubled or trailing '/')"));
        }
        let owned = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match segs.as_slice() {
            ["sys", "pool_trees"] => Ok(Self::PoolTrees),
            ["sys", "pool_trees", "@default_tree"] => Ok(Self::DefaultTree),
            ["sys", "pool_trees", tree, rest @ ..] => {
                if tree.starts_with('@') {
                    return Err(bad("the only attribute of //sys/pool_trees is @default_tree"));
                }
                let tree = TreeName::parse(tree).map_err(|e| bad(&e))?;
                let Some(k) = rest.iter().position(|s| s.starts_with('@')) else {
                    return Ok(Self::Pool {
                        tree,
                        pool_path: owned(rest),
                    });
                };
                let attr = &rest[k][1..];
                let sub = owned(&rest[k + 1..]);
                if k == 0 && attr == "config" {
                    let (attribute, sub) = match sub.split_first() {
                        Some((a, s)) => (Some(a.clone()), s.to_vec()),
                        None => (None, vec![]),
                    };
                    return Ok(Self::TreeConfig {
                        tree,
                        attribute,
                        sub,
                    });
                }
                if k == 0 && !attr.is_empty() {
                    return Err(bad(
                        "a pool tree has the @config attribute; pools are below it",
                    ));
                }
                if attr.is_empty() && !sub.is_empty() {
                    return Err(bad("nothing may follow '@'"));
                }
                Ok(Self::PoolAttribute {
                    tree,
                    pool_path: owned(&rest[..k]),
                    attribute: (!attr.is_empty()).then(|| attr.to_string()),
                    sub,
                })
            }
            ["sys", "cluster_nodes"] => Ok(Self::ClusterNodes),
            ["sys", "cluster_nodes", node] => Ok(Self::Node {
                node: node.to_string(),
                attribute: None,
                sub: vec![],
            }),
            ["sys", "cluster_nodes", node, attr, sub @ ..] if attr.starts_with('@') => {
                Ok(Self::Node {
                    node: node.to_string(),
                    attribute: Some(attr[1..].to_string()).filter(|a| !a.is_empty()),
                    sub: owned(sub),
                })
            }
            ["sys", "scheduler", "orchid", rest @ ..] => Ok(Self::Orchid(owned(rest))),
            _ => Err(bad(
                "known paths are under //sys/pool_trees, //sys/cluster_nodes and //sys/scheduler/orchid",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_paths_of_spec_6_1() {
        assert_eq!(
            AdminPath::parse("//sys/pool_trees").unwrap(),
            AdminPath::PoolTrees
        );
        assert_eq!(
            AdminPath::parse("//sys/pool_trees/@default_tree").unwrap(),
            AdminPath::DefaultTree
        );
        assert_eq!(
            AdminPath::parse("//sys/pool_trees/default/company/dev/@weight").unwrap(),
            AdminPath::PoolAttribute {
                tree: TreeName::parse("default").unwrap(),
                pool_path: vec!["company".into(), "dev".into()],
                attribute: Some("weight".into()),
                sub: vec![],
            }
        );
        assert_eq!(
            AdminPath::parse("//sys/pool_trees/t/@config/nodes_filter").unwrap(),
            AdminPath::TreeConfig {
                tree: TreeName::parse("t").unwrap(),
                attribute: Some("nodes_filter".into()),
                sub: vec![],
            }
        );
        assert!(matches!(
            AdminPath::parse("//sys/scheduler/orchid/scheduler/pool_trees/default/pools/a/fair_share_ratio")
                .unwrap(),
            AdminPath::Orchid(v) if v.len() == 6
        ));
        for bad in [
            "sys/pool_trees",
            "//sys//pool_trees",
            "//sys/pool_trees/t/",
            "//tmp/x",
            "//sys/pool_trees/t/@weight",
        ] {
            let e = AdminPath::parse(bad).unwrap_err();
            assert!(e.message.contains(bad), "{e}");
        }
    }
}
