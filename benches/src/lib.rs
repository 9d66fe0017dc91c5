//! What the experiments (`src/bin/`) share: CPU time from `/proc`, lone
//! lock+release cycles, waiting for a waiter to listen, a loaded host and a
//! latency proxy; and where this repository is, for their default paths.

pub mod cpu;
pub mod listening;
pub mod lone;

/// The loaded host and the TCP proxy of the tests (`redquorum-test-support`);
/// the experiments only add latency with the proxy.
pub use redquorum_test_support::{load, proxy};

/// `path` under this repository's root (the workspace's, one level above
/// this crate), where `scripts/`, `docs/` and `target/` are: the experiments'
/// defaults resolve there from any working directory.
pub fn repo(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the bench crate sits in the repository");
    root.join(path).display().to_string()
}
