//! A node's calls in flight, counted against its bound
//! (`Limits::max_in_flight`, docs/design.md §11 "Delivery and bounds"): a
//! call takes a [`Place`] when it is made and gives it back when it ends
//! (answered, given up, or dropped), which wakes whoever waits for the
//! node to drain.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A node's calls in flight, and the event of one ending.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    calls: AtomicUsize,
    /// Woken each time a call ends.
    ended: tokio::sync::Notify,
}

impl InFlight {
    /// Calls in flight right now.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    /// A place for one more call, unless `limit` are in flight.
    pub(crate) fn take(self: &Arc<Self>, limit: usize) -> Option<Place> {
        self.calls
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(Arc::clone(self)))
    }

    /// The event of a call ending (register it before checking
    /// [`calls`](Self::calls), so that no ending is missed).
    pub(crate) fn ended(&self) -> tokio::sync::futures::Notified<'_> {
        self.ended.notified()
    }
}

/// One call's place among its node's calls in flight, given back when the
/// call that holds it ends.
pub(crate) struct Place(Arc<InFlight>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_waiters();
    }
}
