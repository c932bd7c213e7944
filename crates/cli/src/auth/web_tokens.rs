//! Web tokens for the scheduler's HTTP face (`ytsched auth token`): made for a user or
//! admin identity, printed once, kept as digests beside the identities, and removed
//! with their identity.

use super::AuthDir;
use anyhow::bail;
use std::path::PathBuf;
use ytsched_common::http_tokens::{TokenEntry, HTTP_TOKENS_FILE};
use ytsched_common::identity::{Role, UserName};

impl AuthDir {
    /// The web tokens file the scheduler reads (`--http-tokens`).
    pub fn http_tokens_path(&self) -> PathBuf {
        self.dir.join(HTTP_TOKENS_FILE)
    }

    /// Makes a web token for user or admin `name`; returns the token, of which only the
    /// digest is kept.
    pub fn new_http_token(&mut self, name: &UserName) -> anyhow::Result<String> {
        let Some(id) = self.registry.identities.iter().find(|i| &i.name == name) else {
            bail!("no identity named '{name}' (add it with add-user first)");
        };
        let admin = match id.role {
            Role::Admin => true,
            Role::User => false,
            other => bail!("'{name}' is a {other} identity; web tokens are for users and admins"),
        };
        if self.registry.http_tokens.len() >= ytsched_common::http_tokens::MAX_TOKENS {
            bail!(
                "{} web tokens already: the most one directory holds (revoke identities to make room)",
                self.registry.http_tokens.len()
            );
        }
        let token = ytsched_common::http_tokens::new_token()
            .map_err(|e| anyhow::anyhow!("cannot draw a random token: {e}"))?;
        self.registry.http_tokens.push(TokenEntry {
            user: name.clone(),
            admin,
            sha256: ytsched_common::http_tokens::digest(&token),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        });
        self.save()?;
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use ytsched_common::http_tokens::HttpTokens;

    #[test]
    fn web_tokens_are_for_users_and_go_with_their_identity() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("auth");
        let root = UserName::parse("root").unwrap();
        let mut auth = AuthDir::init(&dir, "lab", &root).unwrap();
        let alice = UserName::parse("alice").unwrap();
        auth.add(alice.clone(), Role::User).unwrap();
        auth.add(UserName::parse("n1").unwrap(), Role::Node)
            .unwrap();
        let a = auth.new_http_token(&alice).unwrap();
        let r = auth.new_http_token(&root).unwrap();
        let path = auth.http_tokens_path();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(&a) && !text.contains(&r),
            "only digests kept"
        );
        let file = HttpTokens::parse(&text).unwrap();
        assert_eq!(
            file.caller(&a).map(|c| (c.user, c.admin)),
            Some((alice.clone(), false))
        );
        assert_eq!(file.caller(&r).map(|c| c.admin), Some(true));
        for refused in ["n1", "scheduler", "scheduler-bus", "nobody"] {
            let err = auth
                .new_http_token(&UserName::parse(refused).unwrap())
                .unwrap_err();
            assert!(err.to_string().contains(refused), "{err}");
        }
        auth.revoke(&alice).unwrap();
        let file = HttpTokens::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(file.caller(&a), None, "revoked with alice");
        assert!(file.caller(&r).is_some());
    }
}
