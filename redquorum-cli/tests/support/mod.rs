//! The CLI's test helpers: the shared ones (the nodes, fresh resource
//! names, clients, direct connections, the TCP proxy) from
//! `redquorum-test-support`, and running the binary (`cli`).

#![allow(dead_code, unused_imports)] // each test binary uses a different part

pub mod cli;

pub use redquorum_test_support::{node_urls, proxy, raw_all, redlock, unique};
