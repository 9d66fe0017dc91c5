//! The transport: calls and bytes, not rounds. A node's link (one I/O loop
//! per connection, auto-pipelined, in order, with its bounds on calls in
//! flight), addresses and TLS, RESP, the Lua scripts and their encoding,
//! Redis Cluster routing, pub/sub connections, and the [`Node`](node::Node)
//! trait every backend implements. A call brings its own encoding and its
//! own way to deliver its reply (`link::call::Errand`), so nothing here
//! knows what a claim, a step or a ballot is.

pub(crate) mod address;
pub(crate) mod agreement;
pub(crate) mod cluster;
pub(crate) mod in_flight;
pub(crate) mod link;
pub(crate) mod master;
pub mod node;
pub(crate) mod pubsub;
pub(crate) mod resp;
pub(crate) mod scripts;
