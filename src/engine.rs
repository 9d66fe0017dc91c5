//! The engine: runs the pure rounds of `crate::proto` over the nodes. The
//! driver (one round from its first call to its outcome, extensions,
//! releases, shutdown), the dispatch of a round's calls to the transport,
//! the ballot that counts their answers, claims (what a lock holds and
//! where), the table of held keys, per-resource turns, tokens, and the
//! hub of release notifications that wakes waiters.

pub(crate) mod ballot;
pub(crate) mod claim;
pub(crate) mod dispatch;
pub(crate) mod driver;
pub(crate) mod holds;
pub(crate) mod token;
pub(crate) mod turns;
pub(crate) mod wakeup;
