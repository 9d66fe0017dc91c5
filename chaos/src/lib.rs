//! redquorum's recorded chaos runs (docs/guarantees.md, "Recorded chaos
//! runs"): client processes take every kind of lock on five real nodes
//! while a nemesis injects faults; every process appends what it did to
//! one history ([`history`]); the offline checker ([`check`]) reads it
//! afterwards and reports every violation. `scripts/chaos` runs it.

pub mod check;
pub mod client;
pub mod history;
pub mod link_log;
pub mod nemesis;
pub mod store;
