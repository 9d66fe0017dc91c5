//! Ending a client: every lock it still holds released, every lease
//! ended, then every call already made waited for (docs/operations.md,
//! shutdown).

use super::{Dispatcher, Driver, MAX_TTL_MS, Step, Wait};

impl Driver {
    /// Ends the client's work on the nodes: every lock still held is
    /// released — dropped ones whose release is not made yet, and those
    /// owned by tasks still running, whose leases end as lost — then every
    /// later call is refused, and it waits until every call already made
    /// has ended (answered, or given up at its node's grace, which bounds
    /// the wait).
    pub(crate) async fn shutdown(&self) {
        let ttl_ms = u64::try_from(self.settings.max_ttl.as_millis()).unwrap_or(MAX_TTL_MS);
        // Closed to new acquisitions, and every claim released — held,
        // in flight (behind its acquire's calls), a waiter's marks — in one
        // step under the table's lock: no acquisition is made or granted
        // in between.
        self.holds.close(|claim| {
            claim.release_begins();
            drop(self.submit(claim, Step::Release, ttl_ms, None, Wait::Decision));
        });
        // Then told: a round in flight stops listening, a waiter stops
        // waiting, a lease ends as lost.
        self.closing.send_replace(true);
        for node in self.nodes.iter() {
            node.close();
        }
        futures::future::join_all(self.nodes.iter().map(Dispatcher::drained)).await;
    }

    /// Resolves once `shutdown` has begun.
    pub(crate) async fn closing(&self) {
        let mut closing = self.closing.subscribe();
        let _ = closing.wait_for(|c| *c).await;
    }
}
