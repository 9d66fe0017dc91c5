//! The helpers `tests/cli.rs` needs from the library's test support
//! (`../tests/support/`): the nodes, fresh resource names, and its TCP proxy
//! (the same file, not a copy).
#![allow(dead_code)] // not every helper of proxy.rs is used here

#[path = "../../../tests/support/proxy.rs"]
pub mod proxy;

/// The node URLs, in order (node 1 first).
pub fn node_urls() -> Vec<String> {
    let nodes = std::env::var("REDQUORUM_NODES").expect(
        "REDQUORUM_NODES is not set: these tests need five Redis nodes; run scripts/test \
         (or scripts/nodes up and export REDQUORUM_NODES=$(scripts/nodes urls))",
    );
    let urls: Vec<String> = nodes.split(',').map(|s| s.trim().to_owned()).collect();
    assert_eq!(urls.len(), 5, "REDQUORUM_NODES must list five nodes");
    urls
}

/// A resource name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!("test:{prefix}:{:016x}", rand::random::<u64>())
}
