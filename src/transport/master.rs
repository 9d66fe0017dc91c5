//! A Redis master as a lock member: one [`Link`], and which server it is.
//!
//! Each connection asks the server who it is (`INFO server`'s `run_id`), so
//! that two members that are one server — `localhost:7001` and
//! `127.0.0.1:7001` — never count as two votes ([`Servers`]).
//!
//! # One server, one vote
//!
//! Each connection's handshake reads `INFO server`'s `run_id`, and `Servers` records
//! which member is which server. Two members reporting the same one (`localhost:7001`
//! and `127.0.0.1:7001`, or two databases of one server) fail `build()` with
//! `ConfigError::SameServer`; a member found to be a duplicate later has its connection
//! refused (logged once at `ERROR`) and votes `NotConnected`. Where `INFO` is not allowed
//! (an ACL without `+info`) the check is skipped for that node.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::proto::error::NodeError;
use crate::settings::config_error::ConfigError;
use crate::transport::address::Address;
use crate::transport::link::{
    Checks, First, Hello, Identity, Limits, Link, LinkHandle, Options, Standing, tls,
};

/// Which server each Redis member is, by the `run_id` it last reported:
/// shared by the members of one client, so that one server never votes
/// twice.
#[derive(Debug)]
pub(crate) struct Servers {
    names: Vec<Arc<str>>,
    run_ids: Mutex<Vec<Option<Box<str>>>>,
}

impl Servers {
    /// For the members named `names`, in order.
    pub(crate) fn new(names: Vec<Arc<str>>) -> Arc<Self> {
        let run_ids = Mutex::new(vec![None; names.len()]);
        Arc::new(Servers { names, run_ids })
    }

    /// Records that member `index` is the server `run_id`, unless another
    /// member already is: then that member's name.
    pub(crate) fn claim(&self, index: usize, run_id: &str) -> Result<(), Arc<str>> {
        let mut ids = self.run_ids.lock().unwrap_or_else(PoisonError::into_inner);
        let other = ids
            .iter()
            .enumerate()
            .find(|(i, id)| *i != index && id.as_deref() == Some(run_id));
        if let Some((other, _)) = other {
            return Err(Arc::clone(&self.names[other]));
        }
        ids[index] = Some(run_id.into());
        Ok(())
    }

    /// The identity check of member `index`'s connections: the server must
    /// be no other member (logged once per duplicate, not per attempt).
    pub(crate) fn identity(self: &Arc<Self>, index: usize, name: Arc<str>) -> Identity {
        let servers = Arc::clone(self);
        let reported: Mutex<Option<Arc<str>>> = Mutex::new(None);
        Box::new(move |hello: &Hello| {
            let Some(run_id) = &hello.run_id else {
                return Ok(()); // `INFO` not allowed: the check is skipped
            };
            servers.claim(index, run_id).inspect_err(|other| {
                let mut reported = reported.lock().unwrap_or_else(PoisonError::into_inner);
                if reported.as_ref() != Some(other) {
                    tracing::error!(node = %name, same_as = %other, "two members are one server; this one gets no vote");
                    *reported = Some(Arc::clone(other));
                }
            })
        })
    }
}

/// A Redis master, reached through one link.
#[derive(Debug)]
pub(crate) struct RedisNode {
    link: LinkHandle,
}

impl RedisNode {
    /// Starts connecting to `address` (member `index` of `servers`) in the
    /// background and waits at most `wait` for the first attempt. A node that
    /// is down or frozen is not an error here (it may come back); credentials
    /// it rejects are, and so is a server that is already a member.
    ///
    /// Returns the node and how its first attempt failed, if it did within
    /// `wait` (a node that fails TLS like every other is a configuration
    /// error; see `Builder::build`).
    pub(crate) async fn connect(
        address: Address,
        identity: Option<Identity>,
        tls: tls::Configs,
        limits: Limits,
        checks: Checks,
        wait: Duration,
    ) -> Result<(Self, Option<NodeError>), ConfigError> {
        let options = Options {
            limits,
            checks: Some(checks),
            identity,
        };
        let link = Link::start(address, tls, options);
        let node = RedisNode { link };
        match node.link.first_outcome(wait).await {
            Some(Err(First::Failed(NodeError::Auth(message)))) => Err(ConfigError::Auth {
                node: node.name().to_string(),
                message: message.to_string(),
            }),
            Some(Err(First::SameAs(first))) => Err(ConfigError::SameServer {
                first: first.to_string(),
                second: node.name().to_string(),
            }),
            Some(Err(First::Misconfigured(error))) => Err(error),
            Some(Err(First::Failed(error))) => Ok((node, Some(error))),
            Some(Ok(())) | None => Ok((node, None)),
        }
    }

    /// The node's display name (passwords masked).
    pub(crate) fn name(&self) -> &Arc<str> {
        self.link.name()
    }

    /// Its link.
    pub(crate) fn link(&self) -> &Arc<Link> {
        self.link.arc()
    }

    /// `Ok` while a connection is up; otherwise why not.
    pub(crate) fn ready(&self) -> Result<(), NodeError> {
        self.link.ready()
    }

    /// The server and version its last connection reported.
    pub(crate) fn server(&self) -> Option<Arc<str>> {
        self.link.server()
    }

    /// What its connections told of it.
    pub(crate) fn standing(&self) -> Standing {
        self.link.standing()
    }

    /// One `PING` (for readiness probes; the caller bounds it).
    pub(crate) async fn ping(&self) -> Result<(), NodeError> {
        self.link().ping().await
    }

    /// Its keys matching `pattern`, at most `limit`, and whether there may
    /// be more ([`scan`](crate::transport::scan::scan)).
    pub(crate) async fn keys(
        &self,
        pattern: &str,
        limit: usize,
        within: std::time::Duration,
    ) -> Result<(Vec<String>, bool), NodeError> {
        crate::transport::scan::scan(self.link(), pattern, limit, within).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_server_one_member() {
        let servers = Servers::new(vec!["a".into(), "b".into()]);
        assert_eq!(servers.claim(0, "x"), Ok(()));
        assert_eq!(servers.claim(0, "x"), Ok(())); // a reconnect
        assert_eq!(servers.claim(1, "x"), Err("a".into()));
        assert_eq!(servers.claim(1, "y"), Ok(()));
    }
}
