//! Admin changes (`set`, `remove`, `create`, and their `--dry-run`): checked against the
//! caller's rights, made on the core, and taken back if what they leave cannot be stored
//! or spends more than a delegate's budget (`core::delegation_budget`).

use crate::core::SchedulerCore;
use crate::store;
use ytsched_common::api::{self, ApiError};
use ytsched_common::identity::Caller;
use ytsched_common::names::{PoolName, TreeName, TreePoolName};

/// Runs an admin change and takes it back if the configuration it leaves could not be
/// stored, or if a delegate (not an admin) would pass its budget in it: a change the store
/// cannot hold must fail, not wedge every later write, and no delegate may fill the
/// record for everyone. `scope` says which pool's subtree the change spends from.
fn within_record_limit(
    core: &mut SchedulerCore,
    caller: &Caller,
    max_record: usize,
    change: impl FnOnce(&mut SchedulerCore) -> Result<(), ApiError>,
    scope: impl FnOnce(&SchedulerCore) -> Option<(TreeName, TreePoolName)>,
) -> Result<(), ApiError> {
    let before = core.cluster_config().clone();
    change(core)?;
    let size = store::config_write(core.cluster_config())
        .map(|w| w.value.len())
        .unwrap_or(usize::MAX);
    let refusal = if size > max_record {
        Some(ApiError::limit_reached(format!(
            "refused: the pool configuration would take {size} bytes, more than the store's record limit of {max_record}; remove pools or shorten attributes"
        )))
    } else {
        let scope = scope(core);
        core.reads().delegate_budget_refusal(
            caller,
            scope.as_ref().map(|(t, p)| (t, p)),
            size,
            max_record,
        )
    };
    if let Some(refusal) = refusal {
        let _ = core.set_cluster_config(before);
        return Err(refusal);
    }
    Ok(())
}

/// Makes one admin change, after checking the caller may: what `set`, `remove` and
/// `create` do, and what `--dry-run` does to a copy of the core.
pub fn apply(
    core: &mut SchedulerCore,
    caller: &Caller,
    change: api::AdminChange,
    max_record: usize,
) -> Result<(), ApiError> {
    match change {
        api::AdminChange::Set(set) => {
            core.reads().authorize_change(caller, &set.path)?;
            let value = json_value(&set.value)?;
            let old = core.reads().admin_get(&set.path).ok();
            within_record_limit(
                core,
                caller,
                max_record,
                |core| core.admin_set(&set.path, value),
                |core| core.reads().pool_scope_of(&set.path),
            )?;
            let new = core.reads().admin_get(&set.path).ok();
            core.note_admin_change(caller.user.as_str(), &set.path, old, new);
            Ok(())
        }
        api::AdminChange::Remove(remove) => {
            core.reads().authorize_change(caller, &remove.path)?;
            let old = core.reads().admin_get(&remove.path).ok();
            core.admin_remove(&remove.path)?;
            core.note_admin_change(caller.user.as_str(), &remove.path, old, None);
            Ok(())
        }
        api::AdminChange::Create(b) => {
            core.reads().authorize_create(
                caller,
                b.object_type,
                b.pool_tree.as_ref().map(TreeName::as_str),
                b.parent_name.as_ref(),
            )?;
            let attributes = match &b.attributes {
                Some(text) => json_value(text)?,
                None => serde_json::Value::Null,
            };
            let scope = b.pool_tree.as_ref().map(|t| {
                let parent = b
                    .parent_name
                    .clone()
                    .map_or_else(TreePoolName::root, TreePoolName::from);
                (t.clone(), parent)
            });
            let create = |core: &mut SchedulerCore| match b.object_type {
                api::ObjectType::SchedulerPool => {
                    let tree = b.pool_tree.as_ref().ok_or_else(|| {
                        ApiError::new("create scheduler_pool needs a pool tree (--pool-tree)")
                    })?;
                    let name = PoolName::parse(&b.name).map_err(ApiError::new)?;
                    core.create_pool(
                        tree.as_str(),
                        name.as_str(),
                        b.parent_name.as_ref().map(PoolName::as_str),
                        attributes,
                    )
                }
                api::ObjectType::SchedulerPoolTree => {
                    let name = TreeName::parse(&b.name).map_err(ApiError::new)?;
                    core.create_pool_tree(name.as_str(), attributes)
                }
            };
            within_record_limit(core, caller, max_record, create, |_| scope)?;
            let path = match &b.pool_tree {
                Some(tree) => format!("//sys/pool_trees/{tree}"),
                None => "//sys/pool_trees".to_string(),
            };
            let created = serde_json::json!({
                "create": b.object_type,
                "name": b.name,
                "parent": b.parent_name,
                "attributes": attributes_text(&b.attributes),
            });
            core.note_admin_change(caller.user.as_str(), &path, None, Some(created));
            Ok(())
        }
    }
}

/// A create's attributes as the event log tells them: the JSON given, or none.
fn attributes_text(text: &Option<String>) -> serde_json::Value {
    text.as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn json_value(text: &str) -> Result<serde_json::Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::new(format!("value is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::delegation_budget::MAX_DELEGATED_POOLS;
    use crate::core::CoreConfig;
    use ytsched_common::api::{AdminChange, AdminCreate, AdminSet, ErrorKind, ObjectType};

    /// The record limit under a NATS server's default 1 MiB payload.
    const MAX_RECORD: usize = (1 << 20) - 16 * 1024;

    fn create(
        tree: &str,
        name: &str,
        parent: Option<&str>,
        attributes: Option<&str>,
    ) -> AdminChange {
        AdminChange::Create(AdminCreate {
            object_type: ObjectType::SchedulerPool,
            name: name.into(),
            parent_name: parent.map(|p| PoolName::parse(p).unwrap()),
            pool_tree: Some(TreeName::parse(tree).unwrap()),
            attributes: attributes.map(String::from),
        })
    }

    /// Two trees; bob administers `team` of `default`, carol `lab` of it.
    fn delegated() -> SchedulerCore {
        let mut core = SchedulerCore::new(CoreConfig::default());
        let root = Caller::admin("root");
        let tree = AdminChange::Create(AdminCreate {
            object_type: ObjectType::SchedulerPoolTree,
            name: "gpu".into(),
            parent_name: None,
            pool_tree: None,
            attributes: None,
        });
        apply(&mut core, &root, tree, MAX_RECORD).unwrap();
        for (pool, user) in [("team", "bob"), ("lab", "carol")] {
            let acl = format!(
                r#"{{"acl": [{{"action": "allow", "subjects": ["{user}"], "permissions": ["administer"]}}]}}"#
            );
            apply(
                &mut core,
                &root,
                create("default", pool, None, Some(&acl)),
                MAX_RECORD,
            )
            .unwrap();
        }
        core
    }

    #[test]
    fn a_delegate_fills_only_its_own_budget_and_admins_keep_working() {
        let mut core = delegated();
        let bob = Caller::user("bob");
        // Bob's subtree holds `team` and what he makes under it, nested or not.
        let mut parent = "team".to_string();
        for i in 1..MAX_DELEGATED_POOLS {
            let name = format!("b{i}");
            let under = if i % 2 == 0 {
                parent.clone()
            } else {
                "team".into()
            };
            apply(
                &mut core,
                &bob,
                create("default", &name, Some(&under), None),
                MAX_RECORD,
            )
            .unwrap_or_else(|e| panic!("pool {i}: {e}"));
            parent = name;
        }
        let before = core.cluster_config().clone();
        let e = apply(
            &mut core,
            &bob,
            create("default", "one-more", Some("b3"), None),
            MAX_RECORD,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitReached);
        assert!(
            e.message
                .contains("pool 'team' of pool tree 'default' that user 'bob' administers")
                && e.message
                    .contains(&format!("{MAX_DELEGATED_POOLS} one delegated subtree")),
            "{e}"
        );
        assert_eq!(
            core.cluster_config(),
            &before,
            "nothing of the refused change stays"
        );
        // Carol's subtree and the admins' changes elsewhere are untouched by bob's.
        let carol = Caller::user("carol");
        apply(
            &mut core,
            &carol,
            create("default", "c1", Some("lab"), None),
            MAX_RECORD,
        )
        .unwrap();
        let root = Caller::admin("root");
        apply(
            &mut core,
            &root,
            create("gpu", "training", None, None),
            MAX_RECORD,
        )
        .unwrap();
        // Bob cannot grow one pool's attributes past his subtree's bytes either.
        let subjects: Vec<String> = (0..256).map(|i| format!("{i:0>40}")).collect();
        let ace =
            serde_json::json!({"action": "allow", "subjects": subjects, "permissions": ["use"]});
        let big = serde_json::Value::Array(vec![ace; 8]).to_string();
        let set = AdminChange::Set(AdminSet {
            path: "//sys/pool_trees/default/team/b1/@acl".into(),
            value: big,
        });
        let e = apply(&mut core, &bob, set.clone(), MAX_RECORD).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitReached, "{e}");
        assert!(e.message.contains("bytes of the pool configuration"), "{e}");
        apply(&mut core, &root, set, MAX_RECORD).expect("an admin's change has the record's room");
    }

    /// Bob grants `administer` on a pool of his to dave: dave's pools count toward the
    /// one budget of bob's delegation, not a fresh one of dave's.
    #[test]
    fn a_sub_delegate_spends_the_budget_of_the_delegation_it_lies_in() {
        let mut core = delegated();
        let (bob, dave) = (Caller::user("bob"), Caller::user("dave"));
        let acl = r#"{"acl": [{"action": "allow", "subjects": ["dave"], "permissions": ["administer"]}]}"#;
        apply(
            &mut core,
            &bob,
            create("default", "d", Some("team"), Some(acl)),
            MAX_RECORD,
        )
        .unwrap();
        for i in 0..MAX_DELEGATED_POOLS - 3 {
            apply(
                &mut core,
                &bob,
                create("default", &format!("b{i}"), Some("team"), None),
                MAX_RECORD,
            )
            .unwrap_or_else(|e| panic!("pool {i}: {e}"));
        }
        // team, d and bob's pools: one left in the delegation's budget.
        apply(
            &mut core,
            &dave,
            create("default", "d0", Some("d"), None),
            MAX_RECORD,
        )
        .unwrap();
        let e = apply(
            &mut core,
            &dave,
            create("default", "d1", Some("d"), None),
            MAX_RECORD,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitReached);
        assert!(e.message.contains("subtree of pool 'team'"), "{e}");
    }

    /// Delegates cannot fill a tree to its pool limit: the last pools are kept for
    /// users' ephemeral pools and admins.
    #[test]
    fn delegates_leave_room_in_the_tree_for_ephemeral_pools() {
        use crate::core::delegation_budget::{tree_room_refusal, POOLS_KEPT_FROM_DELEGATES};
        let room = crate::core::pool_tree::MAX_POOLS_PER_TREE - POOLS_KEPT_FROM_DELEGATES;
        let tree = TreeName::parse("default").unwrap();
        assert!(tree_room_refusal(&tree, room).is_none());
        let e = tree_room_refusal(&tree, room + 1).unwrap();
        assert_eq!(e.kind, ErrorKind::LimitReached);
        assert!(
            e.message
                .contains("kept for users' ephemeral pools and admins"),
            "{e}"
        );
    }

    #[test]
    fn delegates_together_leave_a_quarter_of_the_record_to_admins() {
        let core = delegated();
        let bob = Caller::user("bob");
        let (tree, pool) = (
            TreeName::parse("default").unwrap(),
            TreePoolName::parse("team").unwrap(),
        );
        let scope = Some((&tree, &pool));
        let shared = MAX_RECORD / 4 * 3;
        let e = core
            .reads()
            .delegate_budget_refusal(&bob, scope, shared + 1, MAX_RECORD)
            .unwrap();
        assert!(e.message.contains("kept for admins"), "{e}");
        assert!(core
            .reads()
            .delegate_budget_refusal(&bob, scope, shared, MAX_RECORD)
            .is_none());
        assert!(core
            .reads()
            .delegate_budget_refusal(&Caller::admin("root"), scope, MAX_RECORD, MAX_RECORD)
            .is_none());
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;
    use crate::core::CoreConfig;
    use ytsched_common::api::{AdminChange, AdminSet, ErrorKind};

    fn set(path: &str, value: &str) -> AdminChange {
        AdminChange::Set(AdminSet {
            path: path.into(),
            value: value.into(),
        })
    }

    /// A missing tree or pool is "not found" (exit status 3, HTTP 404), not a bad
    /// argument; a bad value stays "invalid argument".
    #[test]
    fn admin_errors_carry_their_kind() {
        let mut core = SchedulerCore::new(CoreConfig::default());
        let root = Caller::admin("root");
        for missing in [
            "//sys/pool_trees/nope/@config/max_operation_count",
            "//sys/pool_trees/default/ghost/@weight",
        ] {
            let e = apply(&mut core, &root, set(missing, "3"), 1 << 20).unwrap_err();
            assert_eq!(e.kind, ErrorKind::NotFound, "{missing}: {e}");
        }
        let e = apply(
            &mut core,
            &root,
            set(
                "//sys/pool_trees/default/@config/max_operation_count",
                "\"many\"",
            ),
            1 << 20,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    }
}
