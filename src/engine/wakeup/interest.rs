//! A waiter's interest in one channel, and the releases each node has
//! reported there: what wakes a waiter once a quorum of nodes has each
//! reported one since its last attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;
use tokio::sync::Notify;

use super::Hub;

/// The releases reported on one channel, per node, and the waiters'
/// wake-up.
#[derive(Debug)]
pub(super) struct Released {
    /// Per node: how many releases it has reported on the channel.
    reported: Box<[AtomicU64]>,
    /// Nodes that must have reported since a waiter's last attempt.
    quorum: usize,
    notify: Notify,
}

impl Released {
    pub(super) fn new(nodes: usize, quorum: usize) -> Self {
        Released {
            reported: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            quorum,
            notify: Notify::new(),
        }
    }

    pub(super) fn snapshot(&self) -> SmallVec<[u64; 5]> {
        self.reported
            .iter()
            .map(|n| n.load(Ordering::Acquire))
            .collect()
    }

    /// Node `node` reported a release: its waiters check their quorum.
    /// Woken in the order they started waiting (a `watch` would wake them
    /// in a random order, which a seeded simulation could not replay).
    pub(super) fn report(&self, node: usize) {
        self.reported[node].fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// The nodes whose count passed `seen`'s.
    fn advanced<'a>(&'a self, seen: &'a [u64]) -> impl Iterator<Item = bool> + 'a {
        self.reported
            .iter()
            .zip(seen)
            .map(|(now, seen)| now.load(Ordering::Acquire) > *seen)
    }
}

/// A waiter's registration on one channel; unregisters when dropped.
#[derive(Debug)]
pub(crate) struct Interest {
    /// `None` when the hub was full: no wake-up will come.
    pub(super) registered: Option<(Arc<Hub>, Arc<str>)>,
    pub(super) released: Arc<Released>,
    /// Per node: the releases it had reported when last marked seen.
    pub(super) seen: SmallVec<[u64; 5]>,
    /// A waiter in line: its name, and the releases that named it.
    pub(super) mine: Option<(Box<str>, Arc<Released>)>,
    pub(super) seen_mine: SmallVec<[u64; 5]>,
}

impl Interest {
    pub(super) fn unregistered() -> Self {
        Interest {
            registered: None,
            released: Arc::new(Released::new(0, 1)),
            seen: SmallVec::new(),
            mine: None,
            seen_mine: SmallVec::new(),
        }
    }

    /// Forgets releases seen so far: call before each attempt.
    pub(crate) fn mark_seen(&mut self) {
        self.seen = self.released.snapshot();
        if let Some((_, mine)) = &self.mine {
            self.seen_mine = mine.snapshot();
        }
    }

    /// Resolves at the first release since [`mark_seen`](Self::mark_seen):
    /// `true` when a quorum of nodes named this waiter (the lock is kept for
    /// it), `false` for releases that named no one.
    pub(crate) async fn released(&mut self) -> bool {
        if self.registered.is_none() {
            std::future::pending::<()>().await;
        }
        loop {
            let notified = self.released.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let named = self.mine.as_ref().map(|(_, mine)| mine.notify.notified());
            let mut named = std::pin::pin!(named);
            if let Some(named) = named.as_mut().as_pin_mut() {
                named.enable();
            }
            if let Some(for_me) = self.has_changed() {
                return for_me;
            }
            match named.as_pin_mut() {
                Some(named) => {
                    tokio::select! {
                        biased;
                        () = notified => {}
                        () = named => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Whether a quorum of nodes have each reported, since
    /// [`mark_seen`](Self::mark_seen), a release that named no one or named
    /// this waiter: `Some(true)` when the nodes that named it alone make a
    /// quorum.
    pub(super) fn has_changed(&self) -> Option<bool> {
        let any = self.released.advanced(&self.seen);
        let (count, mine) = match &self.mine {
            Some((_, mine)) => {
                let named: SmallVec<[bool; 5]> = mine.advanced(&self.seen_mine).collect();
                let count = any.zip(&named).filter(|(a, n)| *a || **n).count();
                (count, named.iter().filter(|n| **n).count())
            }
            None => (any.filter(|a| *a).count(), 0),
        };
        (count >= self.released.quorum).then_some(mine >= self.released.quorum)
    }

    /// Whether a wake-up can be counted on: the channel is subscribed on a
    /// quorum of nodes.
    pub(crate) fn listening(&self) -> bool {
        self.registered
            .as_ref()
            .is_some_and(|(hub, key)| hub.confirmed(key))
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if let Some((hub, key)) = &self.registered {
            hub.unregister(key, self.mine.as_ref().map(|(me, _)| &**me));
        }
    }
}
