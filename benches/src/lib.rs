//! What the experiments (`src/bin/`) share: CPU time from `/proc`, lone
//! lock+release cycles, waiting for a waiter to listen, a loaded host and a
//! latency proxy; and where this repository is, for their default paths.

pub mod cpu;
pub mod listening;
/// A copy of `tests/support/load.rs`, which the library's tests keep: they
/// are targets of the root package and cannot use this crate without
/// building it, and its dependencies, into every test run.
pub mod load;
pub mod lone;
/// A copy of `tests/support/proxy.rs`, kept for the same reason as
/// [`load`]. The experiments only add latency with it.
pub mod proxy;

/// `path` under this repository's root (the workspace's, one level above
/// this crate), where `scripts/`, `docs/` and `target/` are: the experiments'
/// defaults resolve there from any working directory.
pub fn repo(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the bench crate sits in the repository");
    root.join(path).display().to_string()
}
