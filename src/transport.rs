//! The transport: calls and bytes, not rounds. A node's link (one I/O loop
//! per connection, auto-pipelined, in order, with its bounds on calls in
//! flight), addresses and TLS, RESP, the Lua scripts and their encoding,
//! Redis Cluster routing, pub/sub connections, and the [`Node`](node::Node)
//! trait every backend implements. A call brings its own encoding and its
//! own way to deliver its reply (`link::call::Errand`), so nothing here
//! knows what a claim, a step or a ballot is.
//!
//! # Files
//!
//! | file | role |
//! | --- | --- |
//! | `src/transport/resp.rs` | RESP2 both ways, pure: commands written straight into a connection's buffer; replies parsed incrementally, bounded (at most 8 nested arrays, 2^20 elements per array, 64 MiB per string; anything else is a protocol error and drops the connection) |
//! | `src/transport/link.rs` | `Link`: one per connection (a Redis master, each master of a cluster member, a cluster's seed): its queue of calls (`Pending`), its state, its limits; `submit` makes a call |
//! | `src/transport/link/call.rs` | one call (`Pending`): what it asks, its ticket, whether it may be sent again. A round's call is an `Errand`: it brings its own encoding, reads its own reply and hands its answer on, so the transport knows nothing of claims, steps or ballots |
//! | `src/transport/link/io.rs` | the link's task: connect, drive the connection, reconnect |
//! | `src/transport/link/open.rs` | one connection attempt: the transport and the handshake |
//! | `src/transport/link/tls.rs` | rustls configurations with a `ring` provider of the client's own (the process-wide default is never touched); none is built when every node is plain |
//! | `src/engine/ballot.rs` | one round's ballot box |
//! | `src/transport/master.rs` | `RedisNode` (a master: one link) and `Servers` (one server, one vote) |
//! | `src/transport/cluster.rs`, `src/transport/cluster/mapper.rs` | a Redis Cluster as one member; the task that keeps its slot map |
//! | `src/transport/pubsub.rs` | release notifications on a connection of their own |
//! | `src/transport/scan.rs` | keys by pattern (`SCAN`), bounded, outside every round: for the listing of what is held |
//! | `src/engine/dispatch.rs` | per-node bounds and delivery (`Dispatcher`), for every kind of member |

pub(crate) mod address;
pub(crate) mod agreement;
pub(crate) mod cluster;
pub(crate) mod in_flight;
pub(crate) mod link;
pub(crate) mod master;
pub mod node;
pub(crate) mod pubsub;
pub(crate) mod resp;
pub(crate) mod scan;
pub(crate) mod scripts;
