//! Waiting for a waiter to listen: until a quorum of the nodes count a
//! subscriber on a lock key's channel (the waiter was refused and hears the
//! next release), instead of sleeping and hoping it has.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// One connection per node, opened once (a node that does not connect
/// within a second is left out: it cannot count).
pub async fn connections(urls: &[String]) -> Vec<MultiplexedConnection> {
    let mut conns = Vec::new();
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("node URL");
        let connect = client.get_multiplexed_async_connection();
        if let Ok(Ok(conn)) = tokio::time::timeout(Duration::from_secs(1), connect).await {
            conns.push(conn);
        }
    }
    conns
}

/// Waits (at most 5 s, then panics) until `quorum` of `conns` count a
/// subscriber on `key`'s channel. Each node gets 20 ms to answer a poll: a
/// frozen one does not, and simply does not count.
pub async fn until_listening(conns: &mut [MultiplexedConnection], key: &str, quorum: usize) {
    let start = Instant::now();
    loop {
        let mut listening = 0;
        let mut numsub = redis::cmd("PUBSUB");
        numsub.arg("SHARDNUMSUB").arg(key);
        for conn in conns.iter_mut() {
            let numsub = numsub.query_async::<Vec<(String, u64)>>(conn);
            if let Ok(Ok(counts)) = tokio::time::timeout(Duration::from_millis(20), numsub).await
                && counts.first().is_some_and(|(_, n)| *n > 0)
            {
                listening += 1;
            }
        }
        if listening >= quorum {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the waiter never listened on {key}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
