//! Pool access control lists (SPEC 5.11, YTsaurus semantics): entries inherited from
//! ancestors, a matching `deny` beating any `allow`, no match meaning no access.

use crate::identity::UserName;
use serde::{Deserialize, Serialize};

/// Entries one pool's `acl` may hold, and subjects one entry may name.
pub const MAX_ACL_ENTRIES: usize = 64;
pub const MAX_ACE_SUBJECTS: usize = 256;

/// The ACL group words live with the identities' name space, which reserves them.
pub use crate::identity::{ADMINS, EVERYONE};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AceAction {
    Allow,
    Deny,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Run operations in the pool.
    Use,
    /// Change the pool's attributes, create pools under it, remove it.
    Administer,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Permission::Use => "use",
            Permission::Administer => "administer",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ace {
    pub action: AceAction,
    /// User names, or the groups `everyone` and `admins`.
    pub subjects: Vec<String>,
    pub permissions: Vec<Permission>,
}

impl Ace {
    fn matches(&self, user: &UserName, admin: bool, permission: Permission) -> bool {
        // A group word is a group, never a user of that name (no identity may carry one).
        self.permissions.contains(&permission)
            && self.subjects.iter().any(|s| match s.as_str() {
                EVERYONE => true,
                ADMINS => admin,
                name => name == user.as_str(),
            })
    }
}

/// Checks one `acl` value on its own; the message names what is wrong.
pub fn validate(acl: &[Ace]) -> Result<(), String> {
    if acl.len() > MAX_ACL_ENTRIES {
        return Err(format!(
            "{} entries is more than the {MAX_ACL_ENTRIES} an acl may hold",
            acl.len()
        ));
    }
    for (i, ace) in acl.iter().enumerate() {
        if ace.subjects.is_empty() || ace.permissions.is_empty() {
            return Err(format!("entry {i} needs subjects and permissions"));
        }
        if ace.subjects.len() > MAX_ACE_SUBJECTS {
            return Err(format!(
                "entry {i}: {} subjects is more than the {MAX_ACE_SUBJECTS} an entry may name",
                ace.subjects.len()
            ));
        }
        for s in &ace.subjects {
            UserName::parse(s).map_err(|e| format!("entry {i}: subject {e}"))?;
        }
    }
    Ok(())
}

/// The decision over a chain of ACLs (a pool's own first, then its ancestors'):
/// any matching deny refuses, otherwise any matching allow grants.
pub fn decide<'a>(
    chain: impl IntoIterator<Item = &'a [Ace]>,
    user: &UserName,
    admin: bool,
    permission: Permission,
) -> bool {
    let mut allowed = false;
    for acl in chain {
        for ace in acl.iter().filter(|a| a.matches(user, admin, permission)) {
            match ace.action {
                AceAction::Deny => return false,
                AceAction::Allow => allowed = true,
            }
        }
    }
    allowed
}

/// What a tree's `<Root>` grants: `use` to everyone, `administer` to admins.
pub fn root_default() -> Vec<Ace> {
    vec![
        Ace {
            action: AceAction::Allow,
            subjects: vec![EVERYONE.into()],
            permissions: vec![Permission::Use],
        },
        Ace {
            action: AceAction::Allow,
            subjects: vec![ADMINS.into()],
            permissions: vec![Permission::Administer],
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ace(action: AceAction, who: &str, p: Permission) -> Ace {
        Ace {
            action,
            subjects: vec![who.into()],
            permissions: vec![p],
        }
    }

    #[test]
    fn deny_wins_and_inheritance_applies() {
        let alice = UserName::parse("alice").unwrap();
        let bob = UserName::parse("bob").unwrap();
        let root = root_default();
        let team = vec![ace(AceAction::Deny, "bob", Permission::Use)];
        let chain = || [team.as_slice(), root.as_slice()];
        assert!(decide(chain(), &alice, false, Permission::Use));
        assert!(!decide(chain(), &bob, false, Permission::Use));
        assert!(!decide(chain(), &alice, false, Permission::Administer));
        assert!(decide(chain(), &alice, true, Permission::Administer));
        let owner = vec![ace(AceAction::Allow, "alice", Permission::Administer)];
        assert!(decide(
            [owner.as_slice(), root.as_slice()],
            &alice,
            false,
            Permission::Administer
        ));
        assert!(!decide(
            std::iter::empty::<&[Ace]>(),
            &alice,
            false,
            Permission::Use
        ));
    }

    #[test]
    fn bad_acls_are_named() {
        let e = validate(&[ace(AceAction::Allow, "a.b", Permission::Use)]).unwrap_err();
        assert!(e.contains("'a.b'"), "{e}");
        let many = vec![ace(AceAction::Allow, "a", Permission::Use); MAX_ACL_ENTRIES + 1];
        assert!(validate(&many).unwrap_err().contains("64"));
    }
}
