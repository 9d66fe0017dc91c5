//! A real node and the model side by side ([`Pair`]), and how their
//! replies and keys are compared (times within a tolerance).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redquorum::NodeError;
use redquorum::internals::{Store, redis_node};
use redquorum::node::{Node, Op, Reply, Snapshot, Stored, Waiter};

use crate::support;

/// How far apart two times may be (the model's clock is the node's, read
/// once and then followed on this machine's).
pub(crate) const TOLERANCE_MS: u64 = 150;

/// The model beside a Redis node, fed the same operations.
pub(crate) struct Pair {
    pub(crate) redis: Arc<dyn Node>,
    pub(crate) store: Store,
    /// The node's clock when `started`.
    pub(crate) base_ms: u64,
    pub(crate) started: Instant,
    pub(crate) steps: usize,
}

impl Pair {
    pub(crate) async fn new() -> Pair {
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

    pub(crate) fn now(&self) -> u64 {
        self.base_ms + self.started.elapsed().as_millis() as u64
    }

    /// Applies `op` to both and checks the replies agree; returns Redis'.
    pub(crate) async fn both(&mut self, op: Op<'_>) -> Result<Reply, NodeError> {
        self.steps += 1;
        let before = self.now();
        let real = self.redis.call(op).await;
        // Redis ran it somewhere within the call: the model at its start,
        // and every comparison of times allows for the slowest call (a
        // loaded machine stalls one now and then).
        let took = self.now() - before;
        SLOWEST_CALL_MS.fetch_max(took, std::sync::atomic::Ordering::Relaxed);
        let model = self.store.apply(op, before);
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
    pub(crate) async fn same_keys(&mut self, keys: &[String]) {
        self.both(Op::Inspect { keys }).await.expect("inspect");
    }
}

/// The slowest call to Redis so far, in ms: what a time read by Redis and
/// one of the model's may differ by, beside [`TOLERANCE_MS`], once for the
/// call that set a key and once for the one that reads it.
pub(crate) static SLOWEST_CALL_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

pub(crate) fn close(a: u64, b: u64) -> bool {
    let slowest = SLOWEST_CALL_MS.load(std::sync::atomic::Ordering::Relaxed);
    a.abs_diff(b) <= TOLERANCE_MS + 2 * slowest
}

pub(crate) fn close_ttl(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (a, b) => a == b,
    }
}

/// Two fencing counters drawn at about the same time: each is floored at
/// its node's clock in microseconds (Redis' `TIME`, the model's clock), so
/// they may differ by as much as the clocks do.
pub(crate) fn close_counter(a: u64, b: u64) -> bool {
    let slowest = SLOWEST_CALL_MS.load(std::sync::atomic::Ordering::Relaxed);
    a.abs_diff(b) <= (TOLERANCE_MS + 2 * slowest + 1) * 1000
}

/// Two stored values alike: equal, or both counters floored at a clock
/// ([`close_counter`]; below 10^12 a counter is no clock's).
pub(crate) fn same_value(a: &[u8], b: &[u8]) -> bool {
    let number = |v: &[u8]| std::str::from_utf8(v).ok()?.parse::<u64>().ok();
    match (number(a), number(b)) {
        (Some(x), Some(y)) if x.min(y) >= 1_000_000_000_000 => close_counter(x, y),
        _ => a == b,
    }
}

pub(crate) fn same_reply(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (
            Reply::Held {
                pttl_ms: x,
                ahead: a,
            },
            Reply::Held {
                pttl_ms: y,
                ahead: b,
            },
        ) => a == b && close_ttl(*x, *y),
        (Reply::Fence(x), Reply::Fence(y)) => close_counter(*x, *y),
        (Reply::Snapshot(x), Reply::Snapshot(y)) => same_snapshot(x, y),
        _ => a == b,
    }
}

pub(crate) fn same_snapshot(a: &Snapshot, b: &Snapshot) -> bool {
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
            ) => same_value(v, w) && close_ttl(*t, *u),
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
                // Members scored within the tolerance may come in either
                // order: compare them by name.
                let (mut m, mut n) = (m.clone(), n.clone());
                m.sort();
                n.sort();
                m.len() == n.len()
                    && m.iter()
                        .zip(&n)
                        .all(|((x, s), (y, r))| x == y && close(*s, *r))
                    && close_ttl(*t, *u)
            }
            (x, y) => x == y,
        })
}

pub(crate) fn keys(base: &str, names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("{{{base}}}:{n}")).collect()
}

/// The keys of one run, under a fresh hash tag.
pub(crate) struct K {
    pub(crate) all: Vec<String>,
}

impl K {
    pub(crate) const NAMES: [&'static str; 20] = [
        "lock",
        "fence",
        "a",
        "b",
        "c",
        "writer",
        "readers",
        "intent",
        "rw:line",
        "rw:alive",
        "hash",
        "lock:line",
        "lock:alive",
        "permit:0",
        "permits:holders",
        "permits",
        "permits:line",
        "permits:alive",
        "permit:1",
        "period",
    ];

    pub(crate) fn new() -> K {
        K {
            all: keys(&support::unique("model"), &Self::NAMES),
        }
    }

    pub(crate) fn get(&self, name: &str) -> &str {
        &self.all[Self::NAMES.iter().position(|n| *n == name).expect(name)]
    }

    /// The keys `from..=to` by name, in order.
    pub(crate) fn range(&self, from: &str, to: &str) -> &[String] {
        let at = |name: &str| Self::NAMES.iter().position(|n| *n == name).expect(name);
        &self.all[at(from)..=at(to)]
    }
}

pub(crate) fn write_label<'a>(keys: &'a [String], token: &'a str, label: &'a str) -> Op<'a> {
    Op::AcquireWrite {
        keys,
        token,
        label,
        intent: token,
        ttl_ms: 10_000,
        waiter: None,
    }
}

pub(crate) fn waiter(id: &str, ticket: u64) -> Option<Waiter<'_>> {
    Some(Waiter {
        id,
        ticket,
        patience_ms: 5_000,
    })
}
