//! A waiter that stops waiting leaves nothing behind: a semaphore's waiter
//! waits in line for every slot, and a slot released while it waits is
//! kept for it; when it gives up (or is dropped) it gives back what every
//! slot keeps for it. Before, only its last round's slot was given back:
//! a slot kept for it stayed held for a waiter long gone, until its
//! patience ran out. In-memory nodes.

use std::time::Duration;

use crate::support::memory::{Until, five};
use redquorum::AcquireOptions;
use redquorum::Semaphore;

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
