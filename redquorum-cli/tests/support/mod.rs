//! The helpers `tests/cli.rs` needs from the library's test support
//! (`../tests/support/`): the nodes, fresh resource names, and its TCP proxy
//! (the same file, not a copy).
#![allow(dead_code)] // not every helper of proxy.rs is used here

pub mod cli;
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

/// A library client over the five nodes, with a patient node timeout (1 s).
pub async fn redlock() -> redquorum::Redlock {
    redquorum::Redlock::builder()
        .nodes(node_urls())
        .node_timeout(std::time::Duration::from_secs(1))
        .build()
        .await
        .expect("connect")
}

/// Direct connections to the five nodes, bypassing redquorum.
pub async fn raw_all() -> Vec<redis::aio::MultiplexedConnection> {
    let mut conns = Vec::new();
    for url in node_urls() {
        let client = redis::Client::open(url.as_str()).expect("url");
        conns.push(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("raw connection"),
        );
    }
    conns
}
