//! Inspecting a lock from code: what every node holds for a resource, and
//! what a quorum says — held (by whom, for how long, with which fence),
//! free, or unknown.
//!
//! An inspection reads each node once, through the client's own
//! connections (TLS, cluster members, key prefix and interop keys
//! included), with one script per node that changes nothing. It is a
//! **snapshot, never a permission**: by the time it returns, the holder may
//! have released and another taken the lock, and a resource found free may
//! be taken a moment later. "Check, then act" races; to act on a free
//! resource, try to lock it ([`Redlock::try_lock`]), which decides
//! atomically on each node:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redquorum::LockError> {
//! # let redlock = redquorum::testing::redlock(5).await;
//! use std::time::Duration;
//! use redquorum::{LockError, verdict::Verdict};
//!
//! let lock = redlock.lock("nightly", Duration::from_secs(60)).await?;
//! let seen = redlock.inspect("nightly").await?;
//! assert!(matches!(seen.verdict(), Verdict::Held { nodes: 5, .. }));
//! assert!(seen.time_left().is_some());
//! lock.release().await?;
//! // To act on it, lock it: never act on "it looked free".
//! match redlock.try_lock("nightly", Duration::from_secs(60)).await {
//!     Ok(lock) => lock.release().await?,
//!     Err(LockError::Taken { .. }) => { /* someone was quicker */ }
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::api::redlock::Redlock;
use crate::api::semaphore::Semaphore;
use crate::engine::claim::{Claim, Keys};
use crate::proto::error::{LockError, NodeError};
use crate::proto::input::InputError;
use crate::proto::op::{Snapshot, Stored};
use crate::proto::verdict::{self, Read};

mod list;
mod many;
mod read;

pub use crate::proto::input::MAX_LISTED;
pub use list::{Listed, ListedKind, Listing, MAX_SCAN_KEYS};
pub use many::{Reader, RwHolding, RwInspection, SemaphoreInspection};
use read::{holding, readers, stored_fence};

/// A resource's verdict: held by one [`Holder`] on a quorum, free, or
/// neither (see [`crate::verdict`]).
pub type Verdict = verdict::Verdict<Holder>;

/// Who holds a lock key on a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Holder {
    /// The token of a plain or fenced lock (what
    /// [`Redlock::release_token`] needs), or under interop keys whatever
    /// value another client set.
    Token(String),
    /// The owner of a reentrant lock.
    Owner(String),
    /// A key of another type, not written by redquorum (`list`, `set`…).
    Foreign(String),
    /// Kept for the first waiter in the lock's line (its name in line), or
    /// for the readers in line (`readers`): a release found them waiting
    /// (docs/design.md, "Fair waiting").
    Kept(String),
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Token(token) => f.write_str(token),
            Holder::Owner(owner) => write!(f, "owner {owner}"),
            Holder::Foreign(kind) => write!(f, "<{kind} key>"),
            Holder::Kept(waiter) => write!(f, "<kept for {waiter}>"),
        }
    }
}

/// How long a key lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimeLeft {
    /// It expires after this long (the node's `PTTL`).
    For(Duration),
    /// It has no expiry (not set by redquorum).
    Forever,
}

impl TimeLeft {
    fn of(pttl_ms: Option<u64>) -> Self {
        pttl_ms.map_or(TimeLeft::Forever, |ms| {
            TimeLeft::For(Duration::from_millis(ms))
        })
    }
}

/// What one node holds for a resource's lock key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// The holder; `None`: free on this node.
    pub holder: Option<Holder>,
    /// How long the holder's key lives on (`None` when free).
    pub time_left: Option<TimeLeft>,
    /// A reentrant lock's hold count on this node.
    pub holds: Option<u64>,
    /// The resource's fencing counter on this node, if it has one: it may
    /// have moved past the holder's fence since (other candidates' rounds
    /// draw from it).
    pub fence: Option<u64>,
    /// The fence the holder was granted, as its key stores it here (a
    /// fenced lock's grant writes it; `None` for other locks, and while a
    /// grant is under way).
    pub granted_fence: Option<u64>,
    /// The holder's label ([`LockOptions::label`](crate::LockOptions::label)),
    /// if it has one.
    pub label: Option<String>,
}

/// One node's answer to an inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeView<T> {
    /// The node's name (passwords masked).
    pub node: String,
    /// What it holds, or why it could not be read.
    pub read: Result<T, NodeError>,
}

/// What every node holds for one resource's lock, and the verdict: see the
/// [module docs](self) and [`Redlock::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Inspection {
    resource: String,
    quorum: usize,
    nodes: Vec<NodeView<Holding>>,
    verdict: Verdict,
}

impl Inspection {
    fn new(resource: &str, quorum: usize, nodes: Vec<NodeView<Holding>>) -> Self {
        let reads: Vec<Read<Holder>> = nodes
            .iter()
            .map(|view| match &view.read {
                Err(_) => Read::Unreachable,
                Ok(Holding { holder: None, .. }) => Read::Free,
                Ok(Holding {
                    holder: Some(h), ..
                }) => Read::Held(h.clone()),
            })
            .collect();
        Inspection {
            resource: resource.to_owned(),
            quorum,
            verdict: verdict::verdict(&reads, quorum),
            nodes,
        }
    }

    /// The resource inspected.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The quorum of the client's nodes.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Every node's answer, in configured order.
    pub fn nodes(&self) -> &[NodeView<Holding>] {
        &self.nodes
    }

    /// What a quorum says.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// How many nodes answered.
    pub fn reachable(&self) -> usize {
        self.nodes.iter().filter(|n| n.read.is_ok()).count()
    }

    /// How many nodes hold nothing for the resource.
    pub fn free(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(&n.read, Ok(h) if h.holder.is_none()))
            .count()
    }

    /// For a held verdict, the holder's label, as a node holding it has it
    /// ([`LockOptions::label`](crate::LockOptions::label)); `None` otherwise,
    /// or when the holder gave none.
    pub fn label(&self) -> Option<&str> {
        self.holding().find_map(|h| h.label.as_deref())
    }

    /// For a held verdict, the holder's fencing token (its term, for a
    /// leadership), exactly: the fence its grant stored with its key
    /// ([`Holding::granted_fence`]), which the nodes' counters may have
    /// passed since (other candidates' rounds draw from them). Where its
    /// keys store none (a holder of an older version), the largest counter
    /// among the nodes that hold it. `None` when free, unknown or not
    /// fenced.
    pub fn fence(&self) -> Option<u64> {
        self.stored_fence()
            .or_else(|| self.holding().filter_map(|h| h.fence).max())
    }

    /// For a held verdict, the fence the grant's write-back stored with the
    /// holder's keys: every key that stores one stores the same; should two
    /// differ, the one most nodes store. `None` before the write-back lands
    /// (each node's counter is then its own draw: docs/fencing.md).
    pub(crate) fn stored_fence(&self) -> Option<u64> {
        let mut stored: Vec<u64> = self.holding().filter_map(|h| h.granted_fence).collect();
        stored.sort_unstable();
        stored
            .chunk_by(|a, b| a == b)
            .max_by_key(|run| run.len())
            .map(|run| run[0])
    }

    /// For a held verdict, how long the holder keeps a quorum of keys by
    /// the nodes' clocks (the quorum-th longest time left among the nodes
    /// holding it); `None` otherwise. Keys without expiry count as
    /// [`TimeLeft::Forever`].
    pub fn time_left(&self) -> Option<TimeLeft> {
        let mut left: Vec<TimeLeft> = self.holding().filter_map(|h| h.time_left).collect();
        left.sort_unstable_by(|a, b| b.cmp(a));
        left.get(self.quorum - 1).copied()
    }

    /// For a held verdict, what each node holding the holder's key read;
    /// nothing otherwise.
    fn holding(&self) -> impl Iterator<Item = &Holding> {
        let holder = match &self.verdict {
            Verdict::Held { holder, .. } => Some(holder),
            _ => None,
        };
        self.nodes
            .iter()
            .filter_map(|n| n.read.as_ref().ok())
            .filter(move |h| holder.is_some() && h.holder.as_ref() == holder)
    }
}

/// The slots a semaphore inspection reads at once: bounded well below any
/// node's calls in flight.
const SLOTS_AT_ONCE: usize = 64;

impl Redlock {
    /// What every node holds for `resource`'s lock — a plain, fenced or
    /// reentrant lock's key (for a plain lock under interop keys, the
    /// resource name itself) and its fencing counter — and the verdict:
    /// held by one holder on a quorum, free on a quorum, or neither. Waits
    /// for each node at most the node timeout (50 ms by default); a node
    /// silent by then counts as unreachable. A snapshot, never a
    /// permission: see the [module docs](crate::api::inspect).
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when fewer than a quorum of nodes answered;
    /// [`LockError::Input`] for a name the protocol refuses.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping this future changes nothing on the nodes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// use std::time::Duration;
    /// use redquorum::{inspect::Holder, verdict::Verdict};
    /// let fenced = redquorum::LockOptions::new().fenced();
    /// let lock = redlock.lock_with("ledger", Duration::from_secs(30), &fenced).await?;
    /// let seen = redlock.inspect("ledger").await?;
    /// let Verdict::Held { holder, nodes } = seen.verdict() else { panic!() };
    /// assert_eq!((holder, *nodes), (&Holder::Token(lock.token().into()), 5));
    /// assert_eq!(seen.nodes()[0].read.as_ref().unwrap().fence, lock.fence());
    /// # lock.release().await
    /// # }
    /// ```
    ///
    /// Errors: [`LockError::Input`] for an empty resource (nothing is
    /// sent). An unreachable node is not an error: it is in the answer.
    pub async fn inspect(&self, resource: &str) -> Result<Inspection, LockError> {
        let layout = self.driver().layout();
        let lock_key = layout.plain_key(named(resource)?);
        let mut keys = vec![lock_key, layout.fence_key(resource)];
        // The fencing counter is read only where it shares the lock key's
        // slot (always, but for interop keys naming a hash tag of their own).
        if self
            .driver()
            .check_slots(&Keys::inspect(keys.clone()))
            .is_err()
        {
            keys.truncate(1);
        }
        let outcomes = self.gather(keys).await;
        // Under interop keys a plain lock's value is the token alone, as
        // its peers set it (rslock's token is random bytes, NUL included).
        let whole = layout.interop();
        Ok(self.inspection(resource, outcomes, whole, |s| s.keys.get(1)))
    }

    /// The permit count of the semaphore `name` ([`Semaphore::stored_permits`]).
    pub(crate) async fn semaphore_permits(&self, name: &str) -> Result<Option<u32>, LockError> {
        let [_, _, count, ..] = self.driver().layout().permit_keys(named(name)?, 0);
        let outcomes = self.gather(vec![count]).await;
        let mut counts: Vec<u32> = outcomes
            .iter()
            .filter_map(|o| match o.as_ref().ok()?.keys.first()? {
                Stored::Text { value, .. } => String::from_utf8_lossy(value).parse().ok(),
                _ => None,
            })
            .collect();
        counts.sort_unstable();
        // The most frequent count (the largest of equals).
        let mut best: Option<(usize, u32)> = None;
        for group in counts.chunk_by(|a, b| a == b) {
            if best.is_none_or(|(n, _)| group.len() >= n) {
                best = Some((group.len(), group[0]));
            }
        }
        Ok(best.map(|(_, count)| count))
    }

    /// What every node holds for the read/write lock on `resource`
    /// ([`RwLock::inspect`](crate::RwLock::inspect)).
    pub(crate) async fn inspect_rw(&self, resource: &str) -> Result<RwInspection, LockError> {
        let keys = self.driver().layout().rw_keys(named(resource)?);
        let outcomes = self.gather(keys.to_vec()).await;
        let writer = self.inspection(resource, outcomes.clone(), false, |_| None);
        let nodes: Vec<NodeView<RwHolding>> = self
            .nodes()
            .iter()
            .map(|node| node.name())
            .zip(outcomes)
            .zip(writer.nodes())
            .map(|((node, outcome), writer)| NodeView {
                node: node.to_owned(),
                read: outcome.and_then(|s| {
                    Ok(RwHolding {
                        writer: writer.read.clone()?,
                        readers: readers(&s)?,
                        intent: match s.keys.get(2) {
                            Some(Stored::Text { value, pttl_ms }) => Some((
                                String::from_utf8_lossy(value).into_owned(),
                                TimeLeft::of(*pttl_ms),
                            )),
                            _ => None,
                        },
                    })
                }),
            })
            .collect();
        let mut on: BTreeMap<&str, usize> = BTreeMap::new();
        for holding in nodes.iter().filter_map(|n| n.read.as_ref().ok()) {
            for (token, _) in &holding.readers {
                *on.entry(token).or_default() += 1;
            }
        }
        let readers = on
            .into_iter()
            .map(|(token, nodes)| Reader {
                token: token.to_owned(),
                nodes,
            })
            .collect();
        Ok(RwInspection {
            writer,
            nodes,
            readers,
        })
    }

    /// Reads `keys` on every node.
    pub(crate) async fn gather(&self, keys: Vec<String>) -> Vec<Result<Snapshot, NodeError>> {
        let claim = Arc::new(Claim::new(Keys::inspect(keys)));
        self.driver().gather(&claim).await
    }

    /// The inspection of `resource` whose lock key was read first, its
    /// fencing counter where `fence` finds it; `whole`: the key's value is
    /// the token alone (interop keys), not `token \0 label \0 fence`.
    pub(crate) fn inspection(
        &self,
        resource: &str,
        outcomes: Vec<Result<Snapshot, NodeError>>,
        whole: bool,
        fence: impl Fn(&Snapshot) -> Option<&Stored>,
    ) -> Inspection {
        let nodes = self
            .nodes()
            .iter()
            .map(|node| node.name())
            .zip(outcomes)
            .map(|(node, outcome)| NodeView {
                node: node.to_owned(),
                read: outcome.and_then(|s| {
                    let mut holding = holding(s.keys.first(), whole)?;
                    holding.granted_fence = stored_fence(s.keys.first()).filter(|_| !whole);
                    holding.fence = match fence(&s) {
                        Some(Stored::Text { value, .. }) => {
                            String::from_utf8_lossy(value).parse().ok()
                        }
                        _ => None,
                    };
                    Ok(holding)
                }),
            })
            .collect();
        Inspection::new(resource, self.driver().quorum(), nodes)
    }
}

impl Semaphore {
    /// Every slot of the semaphore, inspected as [`Redlock::inspect`]
    /// inspects a lock, and how many permits are held (slots held on a
    /// quorum). A snapshot: a permit found free may be taken a moment
    /// later.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when fewer than a quorum of nodes answered;
    /// [`LockError::Input`] for a name the protocol refuses.
    ///
    /// # Cancel safety
    ///
    /// It only reads: dropping this future changes nothing on the nodes.
    ///
    /// ```
    /// # use redquorum::Semaphore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redquorum::LockError> {
    /// # let redlock = redquorum::testing::redlock(5).await;
    /// let api = Semaphore::new(&redlock, "partner-api", 3)?;
    /// let permit = api.try_acquire(std::time::Duration::from_secs(30)).await?;
    /// let seen = api.inspect().await?;
    /// assert_eq!((seen.held(), seen.available()), (1, 2));
    /// # permit.release().await
    /// # }
    /// ```
    pub async fn inspect(&self) -> Result<SemaphoreInspection, LockError> {
        let redlock = self.redlock();
        let mut slots = Vec::with_capacity(self.permits() as usize);
        let all: Vec<u32> = (0..self.permits()).collect();
        // The slots share one hash slot: a chunk is one read per node.
        for chunk in all.chunks(SLOTS_AT_ONCE) {
            let keys = chunk.iter().map(|slot| self.slot_key(*slot)).collect();
            let outcomes = redlock.gather(keys).await;
            for (i, slot) in chunk.iter().enumerate() {
                let one = outcomes
                    .iter()
                    .map(|outcome| {
                        outcome.clone().map(|s| Snapshot {
                            keys: s.keys.get(i).cloned().into_iter().collect(),
                            ..s
                        })
                    })
                    .collect();
                let label = format!("{}:permit:{slot}", self.name());
                slots.push(redlock.inspection(&label, one, false, |_| None));
            }
        }
        Ok(SemaphoreInspection { slots })
    }
}

/// Refuses an empty resource name.
fn named(resource: &str) -> Result<&str, InputError> {
    crate::proto::input::check_name(resource)?;
    Ok(resource)
}
