//! The in-memory model of a node (`redquorum::testing::Store`, which the
//! in-memory nodes and the simulation run on) against a real Redis master:
//! every operation kind, on both of its branches, through the scripts as a
//! lock round sends them, must get the same reply (times within a
//! tolerance) and leave the same keys.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redquorum::NodeError;
use redquorum::node::{Node, Op, Reply, Snapshot, Stored};
use redquorum::testing::{Store, redis_node};

/// How far apart two times may be (the model's clock is the node's, read
/// once and then followed on this machine's).
const TOLERANCE_MS: u64 = 150;

/// The model beside a Redis node, fed the same operations.
struct Pair {
    redis: Arc<dyn Node>,
    store: Store,
    /// The node's clock when `started`.
    base_ms: u64,
    started: Instant,
    steps: usize,
}

impl Pair {
    async fn new() -> Pair {
        let redis = redis_node(&support::node_urls()[0], Duration::from_secs(2)).expect("node url");
        let snapshot = match redis.call(Op::Inspect { keys: &[] }).await {
            Ok(Reply::Snapshot(s)) => s,
            other => panic!("inspect: {other:?}"),
        };
        Pair {
            redis,
            store: Store::new(),
            base_ms: snapshot.now_ms,
            started: Instant::now(),
            steps: 0,
        }
    }

    fn now(&self) -> u64 {
        self.base_ms + self.started.elapsed().as_millis() as u64
    }

    /// Applies `op` to both and checks the replies agree; returns Redis'.
    async fn both(&mut self, op: Op<'_>) -> Result<Reply, NodeError> {
        self.steps += 1;
        let real = self.redis.call(op).await;
        let model = self.store.apply(op, self.now());
        let agree = match (&real, &model) {
            (Ok(a), Ok(b)) => same_reply(a, b),
            (Err(_), Err(_)) => true,
            _ => false,
        };
        assert!(
            agree,
            "step {}: {op:?}\n  redis: {real:?}\n  model: {model:?}",
            self.steps
        );
        real
    }

    /// Checks both hold the same under `keys`.
    async fn same_keys(&mut self, keys: &[String]) {
        self.both(Op::Inspect { keys }).await.expect("inspect");
    }
}

fn close(a: u64, b: u64) -> bool {
    a.abs_diff(b) <= TOLERANCE_MS
}

fn close_ttl(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (a, b) => a == b,
    }
}

fn same_reply(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Held { pttl_ms: x }, Reply::Held { pttl_ms: y }) => close_ttl(*x, *y),
        (Reply::Snapshot(x), Reply::Snapshot(y)) => same_snapshot(x, y),
        _ => a == b,
    }
}

fn same_snapshot(a: &Snapshot, b: &Snapshot) -> bool {
    close(a.now_ms, b.now_ms)
        && a.keys.len() == b.keys.len()
        && a.keys.iter().zip(&b.keys).all(|pair| match pair {
            (
                Stored::Text {
                    value: v,
                    pttl_ms: t,
                },
                Stored::Text {
                    value: w,
                    pttl_ms: u,
                },
            ) => v == w && close_ttl(*t, *u),
            (
                Stored::Hash {
                    fields: f,
                    pttl_ms: t,
                },
                Stored::Hash {
                    fields: g,
                    pttl_ms: u,
                },
            ) => {
                let (mut f, mut g) = (f.clone(), g.clone());
                f.sort();
                g.sort();
                f == g && close_ttl(*t, *u)
            }
            (
                Stored::Scored {
                    members: m,
                    pttl_ms: t,
                },
                Stored::Scored {
                    members: n,
                    pttl_ms: u,
                },
            ) => {
                m.len() == n.len()
                    && m.iter()
                        .zip(n)
                        .all(|((x, s), (y, r))| x == y && close(*s, *r))
                    && close_ttl(*t, *u)
            }
            (x, y) => x == y,
        })
}

fn keys(base: &str, names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("{{{base}}}:{n}")).collect()
}

#[tokio::test]
async fn the_model_answers_every_operation_as_redis_does() {
    let mut pair = Pair::new().await;
    let base = support::unique("model");
    let k = keys(
        &base,
        &[
            "lock", "fence", "a", "b", "c", "writer", "readers", "intent", "hash",
        ],
    );
    let (lock, fence) = (k[0].as_str(), k[1].as_str());
    let ttl_ms = 10_000;

    // Plain: set, refused (with and without the holder's TTL), extended,
    // released by its holder only.
    let acquire = |token, holder_ttl| Op::Acquire {
        key: lock,
        token,
        ttl_ms,
        holder_ttl,
    };
    assert_eq!(pair.both(acquire("a", false)).await, Ok(Reply::Done));
    pair.both(acquire("b", false)).await.unwrap();
    pair.both(acquire("b", true)).await.unwrap();
    pair.both(Op::Extend {
        key: lock,
        token: "a",
        ttl_ms: 20_000,
    })
    .await
    .unwrap();
    pair.both(Op::Extend {
        key: lock,
        token: "a",
        ttl_ms: 1_000,
    })
    .await
    .unwrap(); // never shorter
    pair.both(Op::Extend {
        key: lock,
        token: "b",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.same_keys(&k[..1]).await;
    pair.both(Op::Release {
        key: lock,
        token: "b",
    })
    .await
    .unwrap();
    pair.both(Op::Release {
        key: lock,
        token: "a",
    })
    .await
    .unwrap();
    pair.both(Op::Release {
        key: lock,
        token: "a",
    })
    .await
    .unwrap();

    // Fenced: a counter drawn, refused while held, written back only by
    // the holder, never lowered.
    let fenced = |token| Op::AcquireFenced {
        key: lock,
        fence_key: fence,
        token,
        ttl_ms,
    };
    pair.both(fenced("f1")).await.unwrap();
    pair.both(fenced("f2")).await.unwrap();
    pair.both(Op::FenceWriteBack {
        key: lock,
        fence_key: fence,
        token: "f1",
        fence: 7,
    })
    .await
    .unwrap();
    pair.both(Op::FenceWriteBack {
        key: lock,
        fence_key: fence,
        token: "f2",
        fence: 9,
    })
    .await
    .unwrap();
    pair.both(Op::FenceWriteBack {
        key: lock,
        fence_key: fence,
        token: "f1",
        fence: 3,
    })
    .await
    .unwrap();
    pair.same_keys(&k[..2]).await;
    pair.both(Op::Release {
        key: lock,
        token: "f1",
    })
    .await
    .unwrap();
    assert_eq!(pair.both(fenced("f3")).await, Ok(Reply::Fence(8)));
    pair.both(Op::Release {
        key: lock,
        token: "f3",
    })
    .await
    .unwrap();

    // Reentrant: one count per hold however often applied, another owner
    // refused, released hold by hold.
    let hash = k[8].as_str();
    let enter = |owner, hold| Op::AcquireReentrant {
        key: hash,
        owner,
        hold,
        ttl_ms,
    };
    pair.both(enter("o", "h1")).await.unwrap();
    pair.both(enter("o", "h1")).await.unwrap();
    pair.both(enter("o", "h2")).await.unwrap();
    pair.both(enter("p", "h3")).await.unwrap();
    pair.both(Op::ExtendReentrant {
        key: hash,
        owner: "o",
        ttl_ms: 30_000,
    })
    .await
    .unwrap();
    pair.both(Op::ExtendReentrant {
        key: hash,
        owner: "p",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.same_keys(&k[8..9]).await;
    pair.both(Op::ReleaseReentrant {
        key: hash,
        owner: "o",
        hold: "h1",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseReentrant {
        key: hash,
        owner: "o",
        hold: "h1",
    })
    .await
    .unwrap();
    pair.same_keys(&k[8..9]).await;
    pair.both(Op::ReleaseReentrant {
        key: hash,
        owner: "o",
        hold: "h2",
    })
    .await
    .unwrap();
    pair.same_keys(&k[8..9]).await;
    // A string is another holder to a reentrant owner, and a hash is not
    // a plain lock's token.
    pair.both(acquire("s", false)).await.unwrap();
    pair.both(Op::AcquireReentrant {
        key: lock,
        owner: "o",
        hold: "h4",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseReentrant {
        key: lock,
        owner: "o",
        hold: "h4",
    })
    .await
    .unwrap();
    pair.both(enter("o", "h5")).await.unwrap();
    pair.both(Op::Extend {
        key: hash,
        token: "o",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.both(Op::Release {
        key: hash,
        token: "o",
    })
    .await
    .unwrap();
    pair.both(Op::Release {
        key: lock,
        token: "s",
    })
    .await
    .unwrap();

    // Many: all or nothing.
    let (ab, bc) = (&k[2..4], &k[3..5]);
    pair.both(Op::AcquireMany {
        keys: ab,
        token: "m1",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.both(Op::AcquireMany {
        keys: bc,
        token: "m2",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.same_keys(&k[2..5]).await;
    pair.both(Op::ExtendMany {
        keys: ab,
        token: "m1",
        ttl_ms: 20_000,
    })
    .await
    .unwrap();
    pair.both(Op::ExtendMany {
        keys: bc,
        token: "m1",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseMany {
        keys: bc,
        token: "m2",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseMany {
        keys: bc,
        token: "m1",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseMany {
        keys: ab,
        token: "m1",
    })
    .await
    .unwrap();
    pair.same_keys(&k[2..5]).await;

    // Read/write: readers together, a writer refused by them marks its
    // intent, which turns new readers away; the writer once they are gone.
    let rw = &k[5..8];
    let read = |token| Op::AcquireRead {
        keys: rw,
        token,
        ttl_ms,
    };
    let write = |token| Op::AcquireWrite {
        keys: rw,
        token,
        ttl_ms,
    };
    pair.both(read("r1")).await.unwrap();
    pair.both(read("r2")).await.unwrap();
    pair.both(write("w1")).await.unwrap();
    pair.both(read("r3")).await.unwrap();
    pair.same_keys(rw).await;
    pair.both(Op::ExtendRead {
        keys: rw,
        token: "r1",
        ttl_ms: 20_000,
    })
    .await
    .unwrap();
    pair.both(Op::ExtendRead {
        keys: rw,
        token: "r9",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.same_keys(rw).await;
    pair.both(Op::ReleaseRead {
        keys: rw,
        token: "r1",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseRead {
        keys: rw,
        token: "r1",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseRead {
        keys: rw,
        token: "r2",
    })
    .await
    .unwrap();
    pair.both(write("w2")).await.unwrap();
    pair.both(read("r4")).await.unwrap();
    pair.both(write("w3")).await.unwrap();
    pair.same_keys(rw).await;
    pair.both(Op::ReleaseWrite {
        keys: rw,
        token: "w1",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseWrite {
        keys: rw,
        token: "w2",
    })
    .await
    .unwrap();
    pair.both(Op::ReleaseWrite {
        keys: rw,
        token: "w2",
    })
    .await
    .unwrap();
    pair.same_keys(rw).await;

    // Keys of the wrong type: the readers key holding a string fails the
    // read/write scripts; a reader is no plain lock's token.
    let odd = [k[5].clone(), k[0].clone(), k[7].clone()];
    pair.both(acquire("x", false)).await.unwrap();
    assert!(
        pair.both(Op::AcquireRead {
            keys: &odd,
            token: "r",
            ttl_ms
        })
        .await
        .is_err()
    );
    assert!(
        pair.both(Op::AcquireWrite {
            keys: &odd,
            token: "w",
            ttl_ms
        })
        .await
        .is_err()
    );
    pair.both(Op::ReleaseRead {
        keys: &odd,
        token: "x",
    })
    .await
    .unwrap();
    pair.both(Op::ExtendRead {
        keys: &odd,
        token: "x",
        ttl_ms,
    })
    .await
    .unwrap();
    pair.both(Op::Release {
        key: lock,
        token: "x",
    })
    .await
    .unwrap();

    // Expiry: a short key gone on both after its TTL.
    pair.both(Op::Acquire {
        key: lock,
        token: "t",
        ttl_ms: 100,
        holder_ttl: false,
    })
    .await
    .unwrap();
    pair.both(read("short")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    pair.same_keys(&k).await;
    pair.both(Op::Release {
        key: lock,
        token: "t",
    })
    .await
    .unwrap();
    pair.same_keys(&k).await;
    // Clean up what the fenced lock left (a counter has no TTL).
    let mut raw = support::raw(0).await;
    let _: () = redis::AsyncCommands::del(&mut raw, &k).await.expect("del");
}
