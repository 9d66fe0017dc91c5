//! A waiter that stops waiting leaves nothing behind: a semaphore's waiter
//! waits in line for every slot, and a slot released while it waits is
//! kept for it; when it gives up (or is dropped) it gives back what every
//! slot keeps for it. Before, only its last round's slot was given back:
//! a slot kept for it stayed held for a waiter long gone, until its
//! patience ran out. In-memory nodes.
//!
//! A waiting writer takes its intent back on every node, those that missed
//! some of its rounds too.

use std::time::Duration;

use crate::support::memory::{Until, five, five_failing};
use redquorum::NodeError;
use redquorum::node::Op;
use redquorum::{AcquireOptions, RwLock, Semaphore};

const TTL: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_semaphore_waiter_keeps_no_permit() {
    let (nodes, redlock) = five().await;
    // The slot a waiter tries last is drawn at random: enough rounds that
    // the slot kept for it is not its last one's in some.
    for round in 0..8 {
        let name = format!("api-{round}");
        let api = Semaphore::new(&redlock, &name, 2).unwrap();
        let line = format!("{{{name}}}:permits:line");
        let first = api.try_acquire(TTL).await.unwrap();
        let second = api.try_acquire(TTL).await.unwrap();
        let waiter = {
            let api = api.clone();
            tokio::spawn(async move {
                let wait = AcquireOptions::new().wait(Duration::from_secs(30));
                api.acquire_with(TTL, &wait).await
            })
        };
        for n in &nodes {
            n.until(BOUND, "the waiter in line", |n| n.waiting(&line) == 1)
                .await;
        }
        // A slot released while it waits is kept for it…
        first.release().await.unwrap();
        // …and it stops waiting before it comes for it.
        waiter.abort();
        let _ = waiter.await;
        second.release().await.unwrap();
        crate::support::settled(&redlock).await;
        let a = api.try_acquire(TTL).await.expect("a first permit");
        let b = api.try_acquire(TTL).await.unwrap_or_else(|e| {
            panic!("round {round}: a permit is kept for a waiter that left: {e}")
        });
        a.release().await.unwrap();
        b.release().await.unwrap();
    }
}

/// A waiting writer marks its intent on every node that refuses it for
/// readers; a node that misses its later rounds keeps an earlier round's
/// mark. Whether the writer gives up or gets the lock and releases it,
/// its mark goes from every node, that one too: readers are not turned
/// away there for a writer no longer coming. Before, each round marked
/// with its own token and only the last round's was taken back: a chaos
/// run found an intent left on a node whose connection dropped for a
/// round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_takes_its_intent_back_where_it_missed_rounds() {
    const INTENT: &str = "{doc}:intent";
    for gets_it in [false, true] {
        // Its acquires lost as on a connection that is down.
        let (nodes, links, redlock) = five_failing(
            |op| matches!(op, Op::AcquireWrite { .. }),
            || NodeError::NotConnected("link down (test)".into()),
        )
        .await;
        let rw = RwLock::new(&redlock, "doc").unwrap();
        let reader = rw.read(TTL).await.unwrap();
        let writer = {
            let rw = rw.clone();
            tokio::spawn(async move {
                let wait = AcquireOptions::new().wait(Duration::from_secs(60));
                rw.write_with(TTL, &wait).await
            })
        };
        for n in &nodes {
            n.until(BOUND, "the writer's intent", |n| n.holder(INTENT).is_some())
                .await;
        }
        // Node 0 misses the rounds from here on; a later one reaches node 1.
        links[0].fail(true);
        let before = nodes[1].applied();
        nodes[1]
            .until(BOUND, "a later round", |n| n.applied() > before)
            .await;
        if gets_it {
            reader.release().await.unwrap();
            let lock = writer.await.unwrap().expect("the writer gets the lock");
            lock.release().await.unwrap();
        } else {
            writer.abort();
            let _ = writer.await;
            reader.release().await.unwrap();
        }
        crate::support::settled(&redlock).await;
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(
                n.holder(INTENT),
                None,
                "gets it: {gets_it}: node {i} keeps the intent of a writer gone"
            );
        }
    }
}
