//! The protocol, pure: what every round decides, with no I/O, no runtime,
//! no clock and no randomness that is not handed in.
//!
//! - [`quorum`]: the arithmetic — quorum size, validity, the per-node
//!   timeout, the votes of one round and its decision;
//! - [`error`]: a round's votes and the error of a lock operation, and
//!   [`input`]: input the protocol refuses;
//! - [`keys`]: which Redis keys a lock uses, [`call_keys`]: the keys one
//!   call takes, by kind, checked, and [`slot`]: which cluster slot a key
//!   lives in;
//! - [`keeper`]: keeping a lease — when to extend next, when it is gone;
//! - [`op`]: the operations a node performs and its replies;
//! - [`round`]: one round's tally — replies and timeouts in, the decision,
//!   each node's answer, the fencing maximum, which nodes to clean up and the
//!   error a failed round reports out;
//! - `joint`: the member sets a round counts in (two while membership
//!   changes) and the decision over all of them;
//! - [`per_node`]: a value per node, in place for small clusters;
//! - [`acquire`]: one acquisition's rounds — write-back, grant, or the
//!   clean-up sets and error of a refusal;
//! - [`health`]: when a node counts as degraded or recovered, for the
//!   operator's log;
//! - [`verdict`]: what a quorum says about a resource from what each node
//!   holds (an inspection's verdict);
//! - [`restart`]: when a node that restarted may count toward a new grant
//!   again (the delayed restart, kept by the client), and what its `INFO`
//!   says of its persistence and memory policy;
//! - [`deployment`]: the deployment record the nodes hold — members and
//!   longest TTL — and what a client decides from what its nodes answered;
//! - [`retry`]: the retry policy, and the pause before the next round as a
//!   function of the last outcome, the time left and a random draw.
//!
//! The driver (`crate::engine::driver`) feeds these with what the nodes answered and
//! what the clock says, and does what they say.

pub(crate) mod acquire;
pub(crate) mod call_keys;
pub mod deployment;
pub(crate) mod error;
pub(crate) mod health;
pub(crate) mod input;
pub(crate) mod joint;
pub(crate) mod keeper;
pub mod keys;
pub(crate) mod op;
pub(crate) mod per_node;
pub(crate) mod quorum;
pub mod restart;
pub(crate) mod retry;
pub(crate) mod round;
pub(crate) mod slot;
pub mod verdict;
