//! Without the `redis-tests` feature the targets that need real Redis nodes
//! (tests/redis_*.rs, and the command's) are not built: this one test says
//! so in every `cargo test` run, instead of their silence.
#![cfg(not(feature = "redis-tests"))]

#[test]
#[ignore = "the redis_* targets need five Redis nodes: run scripts/test (it starts them and turns on the redis-tests feature)"]
fn redis_targets_were_not_built() {}
