//! Giving keys back: a release (or a refused round's undo) made now and
//! waited for after, so that its calls can be made under a caller's lock
//! (`crate::engine::holds`), and one made without waiting, for `Drop`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Driver, Sent};
use crate::engine::claim::Claim;
use crate::proto::quorum;
use crate::proto::round::{Step, Tally, Wait};

/// A release whose calls are made ([`Driver::release_now`]), its answers
/// to be waited for until `timer` ([`Driver::settle`]).
#[derive(Debug)]
pub(crate) struct Releasing {
    round: Sent,
    timer: Instant,
}

impl Driver {
    /// Releases `claim` on every node (or those marked in `only`). Returns
    /// once `until` is satisfied or the node timeout passed; the calls still
    /// in flight then reach their nodes all the same (bounded by each node's
    /// grace), with no task of their own.
    ///
    /// The calls are made at the first poll: from then on, dropping this
    /// future changes nothing on the nodes.
    pub(crate) async fn release(
        &self,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        until: Wait,
        only: Option<&[bool]>,
    ) -> Tally {
        let releasing = self.release_now(claim, ttl_ms, until, only);
        self.settle(releasing).await
    }

    /// [`release`](Self::release)'s calls, made now (synchronously: under
    /// a lock of the caller's, `crate::engine::holds`); [`settle`](Self::settle)
    /// waits for their answers.
    pub(crate) fn release_now(
        &self,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        until: Wait,
        only: Option<&[bool]>,
    ) -> Releasing {
        claim.release_begins();
        self.give_back(Step::Release, claim, ttl_ms, until, only)
    }

    /// Waits until a release's round may stop listening (`until`), or its
    /// node timeout passed.
    pub(crate) async fn settle(&self, releasing: Releasing) -> Tally {
        self.collect(&releasing.round, releasing.timer).await
    }

    /// [`release_now`](Self::release_now) as `step`: [`Step::Release`], or
    /// [`Step::Undo`] for a refused round (whose claim is not released).
    pub(super) fn give_back(
        &self,
        step: Step,
        claim: &Arc<Claim>,
        ttl_ms: u64,
        until: Wait,
        only: Option<&[bool]>,
    ) -> Releasing {
        let per_node = quorum::node_timeout(self.settings.node_timeout, ttl_ms, Duration::MAX);
        let timer = Instant::now() + per_node;
        let round = self.submit(claim, step, ttl_ms, only, until);
        Releasing { round, timer }
    }

    /// Makes a release of `claim` on every node (or those marked in `only`)
    /// without waiting, for `Drop`. Outside a tokio runtime nothing is sent
    /// (the keys expire at their TTL).
    pub(crate) fn release_detached(&self, claim: &Arc<Claim>, ttl_ms: u64, only: Option<&[bool]>) {
        if claim.is_released() {
            return; // by `shutdown`
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            claim.release_begins();
            drop(self.submit(claim, Step::Release, ttl_ms, only, Wait::Decision));
        }
    }
}
