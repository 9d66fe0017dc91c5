//! What a connection coming up or going down does to its link: calls
//! released to go out, or failed (releases kept for the next connection),
//! and the waiters on the link's state told.

use tokio::time::Instant;

use super::{Hello, Link, State};
use crate::proto::error::NodeError;

impl Link {
    /// Connected: calls go out. Returns until when the node is
    /// quarantined (see [`check`](Self::check)).
    pub(super) fn up(&self, hello: &Hello) -> Option<Instant> {
        let mut shared = self.lock();
        shared.state = State::Up;
        shared.kicked = false;
        // Releases kept from a connection that failed under them go first,
        // in the order they were made.
        while let Some(call) = shared.retained.pop_back() {
            shared.queue.push_front(call);
        }
        shared.same_as = None;
        shared.misconfigured = None;
        if let Some(server) = &hello.server {
            shared.server = Some(server.as_str().into());
        }
        let quarantine = shared
            .standing
            .update(self.checks.as_ref(), &self.name, hello);
        drop(shared);
        self.changed.notify_waiters();
        quarantine
    }

    /// The attempt begun at `began` failed with `error`: the node is down,
    /// and every call queued for it fails, never sent — but releases, kept
    /// for the next connection, and the calls made since `began` if the link
    /// was kicked meanwhile, which stay queued for the next attempt.
    pub(super) fn down(&self, error: NodeError, began: Instant) {
        let now = Instant::now();
        let mut failed = Vec::new();
        {
            let mut shared = self.lock();
            // Kicked while the attempt was under way (a probe, a shutdown):
            // the calls made since it began wait for the next attempt, made
            // at once (the kick stays for the backoff to see), not for this
            // one's failure. Once: that attempt began after them.
            let again = shared.kicked && !shared.closing;
            shared.state = State::Down(error.clone());
            // Releases wait for the next connection (while their key may
            // live): one sent before and cut, or one made while the link
            // reconnected, whose acquire may have landed on the connection
            // that died. Every other call fails, never sent.
            let queued = std::mem::take(&mut shared.queue);
            let retained = std::mem::take(&mut shared.retained);
            for call in retained.into_iter().chain(queued) {
                if again && call.made >= began {
                    // In the order made, releases too: a release stays
                    // behind its acquire (`retained` goes first, and holds
                    // only older calls).
                    shared.queue.push_back(call);
                } else if call.resendable(now) {
                    shared.retained.push_back(call);
                } else {
                    failed.push(call);
                }
            }
            if !shared.queue.is_empty() {
                // Calls made now queue for that attempt too.
                shared.state = State::Reconnecting;
            }
        }
        self.changed.notify_waiters();
        let refused = NodeError::NotConnected(error.to_string().into());
        for call in failed {
            call.finish(Err(refused.clone()), self.limits.late);
        }
    }
}
