//! The public API: the client handle ([`Redlock`](redlock::Redlock)) and
//! each lock kind, with what it offers beside it: a held lock and its
//! lease, waiting, run-under-a-lock, semaphores, read/write locks,
//! election, inspection, and the operator's tools (probe, forced release).
//! Everything here runs on the engine (`crate::engine`); nothing here
//! touches a connection.

pub(crate) mod admin;
pub mod election;
pub mod inspect;
pub(crate) mod lease;
pub(crate) mod lock;
pub(crate) mod probe;
pub(crate) mod redlock;
pub(crate) mod run;
pub mod rwlock;
pub mod semaphore;
pub(crate) mod wait;
