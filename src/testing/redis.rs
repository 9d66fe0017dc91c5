//! A Redis master as a [`Node`] of your own, to check a model against it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::proto::error::NodeError;
use crate::proto::op::{Op, Reply};
use crate::settings::config_error::ConfigError;
use crate::transport::address::{Address, TlsMaterial};
use crate::transport::link::{Limits, Link, LinkHandle, Options, tls};
use crate::transport::node::Node;

/// One connection to a Redis master that performs each [`Op`] as a lock
/// round would (the same scripts, sent by `EVAL`, the same reply parsing),
/// for tests that compare a [`Store`](super::Store), or a node of your own,
/// with Redis.
///
/// Errors: [`ConfigError::InvalidUrl`] for a URL that is not a plain
/// `redis://` or `unix://` one (no TLS here). The connection is made in the
/// background; a call waits for it up to the node timeout it was given.
pub fn redis_node(url: &str, node_timeout: Duration) -> Result<Arc<dyn Node>, ConfigError> {
    let address = Address::parse(url)?;
    let tls = tls::Configs::new(&TlsMaterial::default(), [address.endpoint().tls])?;
    let options = Options {
        limits: Limits::new(64, node_timeout, node_timeout),
        checks: None,
        identity: None,
    };
    let link = Link::start(address, tls, options);
    Ok(Arc::new(RedisTestNode { link }))
}

#[derive(Debug)]
struct RedisTestNode {
    link: LinkHandle,
}

impl Node for RedisTestNode {
    fn name(&self) -> &Arc<str> {
        self.link.name()
    }

    fn call<'a>(&'a self, op: Op<'a>) -> BoxFuture<'a, Result<Reply, NodeError>> {
        let mut command = Vec::new();
        let shape = crate::transport::scripts::encode(&op, false, &mut command);
        let link = Arc::clone(self.link.arc());
        Box::pin(async move {
            let frame = link.query(command, None).await?;
            crate::transport::scripts::parse_reply(shape, frame)
        })
    }
}
