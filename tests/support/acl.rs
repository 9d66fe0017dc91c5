//! ACL users on the five nodes, for tests about credentials and
//! permissions: created on every node, deleted on drop (even when the test
//! fails).

use std::time::Duration;

use super::{node_urls, raw};

/// An ACL user on every node, deleted on drop.
pub struct AclUser {
    name: String,
}

impl AclUser {
    /// A user named `prefix-<random>` with `rules` (as `ACL SETUSER` takes
    /// them: `on`, `>password`, `~keys`, `+@all`, …) on every node.
    pub async fn create(prefix: &str, rules: &[&str]) -> Self {
        let user = AclUser {
            name: format!("{prefix}-{:08x}", rand::random::<u32>()),
        };
        let mut args = vec!["SETUSER", user.name.as_str()];
        args.extend_from_slice(rules);
        acl_all(&args).await;
        user
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The five node URLs, logging in as this user with `password`.
    pub fn urls(&self, password: &str) -> Vec<String> {
        node_urls()
            .iter()
            .map(|u| u.replacen("redis://", &format!("redis://{}:{password}@", self.name), 1))
            .collect()
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        for i in 0..5 {
            let mut conn = blocking_conn(i);
            let _: redis::Value = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.name)
                .query(&mut conn)
                .expect("ACL DELUSER");
        }
    }
}

/// Runs `ACL args…` on every node.
pub async fn acl_all(args: &[&str]) {
    for i in 0..5 {
        let mut conn = raw(i).await;
        let _: redis::Value = redis::cmd("ACL")
            .arg(args)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// A blocking connection to node `node` (0-based), for clean-up in `Drop`.
pub fn blocking_conn(node: usize) -> redis::Connection {
    redis::Client::open(node_urls()[node].as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connection to restore a node")
}
