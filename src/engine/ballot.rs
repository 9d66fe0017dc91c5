//! One round's ballot box: where each node's answer is cast — by the node's
//! I/O loop as the reply is read, or at once for a call refused before it
//! was sent — and what the round waits on.
//!
//! The box counts with the round's pure tally ([`Round`]) and wakes the
//! round once, when it may stop listening: a round is one allocation and
//! one wake-up, not one per call. Answers cast after the round stopped
//! listening are logged in its span and otherwise dropped.
//!
//! # One round, one ballot
//!
//! A round's calls cast their answers into one `Ballot` (`src/engine/ballot.rs`): the link's
//! loop casts each as it parses the reply, and a call refused before it was sent casts
//! its refusal at once. The ballot counts with the round's pure `Round` and wakes the
//! round once, when it may stop listening (the decision, or every node it waits for).
//! A round is one allocation and one wake-up, not one per call. Answers cast after the
//! round stopped listening are logged in its span and otherwise dropped, except an
//! extension's late `NotHeld`, which is handed to its restore (docs/design.md docs/design.md §4). The ballot lives in
//! the round's `RoundCalls` (`src/engine/dispatch.rs`, one allocation per round), the errand
//! every call of the round carries: the link says, as it writes a call, whether the node
//! is quarantined on that connection and keeps that with the call; the errand encodes
//! its operation for it (an extension restores there, `Claim::op_on`), reads the reply
//! as it was written, and casts the answer with it (docs/design.md docs/design.md §4b).

use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

use tokio::time::Instant;

use crate::proto::error::NodeError;
use crate::proto::joint::Sets;
use crate::proto::op::Reply;
use crate::proto::round::{Round, Step, Tally, Wait};

/// What a round does with an answer cast after it stopped listening (an
/// extension's restore of a key a node lost: `crate::engine::driver`).
pub(crate) type Late = Arc<dyn Fn(usize, &Result<Reply, NodeError>) + Send + Sync>;

/// One round's ballot box.
pub(crate) struct Ballot {
    inner: Mutex<Inner>,
    /// The round's span: every answer is logged in it, and the nodes' names
    /// (only when it is enabled).
    span: tracing::Span,
    names: Option<Arc<[Arc<str>]>>,
    /// When the calls were made.
    made: Instant,
    /// Hears the answers cast after the round stopped listening.
    late: Option<Late>,
}

impl std::fmt::Debug for Ballot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ballot")
            .field("inner", &self.inner)
            .field("late", &self.late.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Inner {
    /// `None` once the round stopped listening.
    tally: Option<Round>,
    until: Wait,
    waker: Option<Waker>,
    /// When the round stopped listening (for the late answers' log).
    decided: Option<Instant>,
}

impl Ballot {
    /// A box for a round of `step` on the nodes marked in `asked`, granted
    /// by a majority of each of `sets`, listening `until`; `late` hears the
    /// answers that come after.
    pub(crate) fn new(
        step: Step,
        asked: &[bool],
        sets: &Sets,
        until: Wait,
        span: tracing::Span,
        names: &Arc<[Arc<str>]>,
        late: Option<Late>,
    ) -> Self {
        let names = (!span.is_disabled()).then(|| Arc::clone(names));
        Ballot {
            names,
            made: Instant::now(),
            late,
            inner: Mutex::new(Inner {
                tally: Some(Round::new(step, asked, sets)),
                until,
                waker: None,
                decided: None,
            }),
            span,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Node `i`'s name, for the log.
    fn name(&self, i: usize) -> &str {
        self.names.as_ref().map_or("", |names| &names[i])
    }

    /// Node `node`'s answer, from a node `quarantined` or not (see
    /// [`Round::on_reply`]). Wakes the round if it may now stop listening.
    pub(crate) fn cast(&self, node: usize, outcome: Result<Reply, NodeError>, quarantined: bool) {
        let mut inner = self.lock();
        let Some(tally) = &mut inner.tally else {
            let after = inner.decided.map(|t| t.elapsed());
            drop(inner);
            if let Some(late) = &self.late {
                late(node, &outcome);
            }
            if !self.span.is_disabled() {
                tracing::debug!(
                    parent: &self.span,
                    node = self.name(node),
                    ?outcome,
                    after_decision_ms = after.map_or(0, |a| a.as_millis() as u64),
                    "answer after the decision"
                );
            }
            return;
        };
        tally.on_reply(node, outcome, quarantined);
        if !self.span.is_disabled() {
            tracing::debug!(
                parent: &self.span,
                node = self.name(node),
                answer = ?tally.answer(node),
                latency_us = self.made.elapsed().as_micros() as u64,
            );
        }
        let Inner {
            tally,
            until,
            waker,
            ..
        } = &mut *inner;
        if tally.as_ref().is_some_and(|tally| tally.is_done(until))
            && let Some(waker) = waker.take()
        {
            drop(inner);
            waker.wake();
        }
    }

    /// Resolves once the round may stop listening.
    pub(crate) async fn decided(&self) {
        poll_fn(|cx| {
            let mut inner = self.lock();
            let Inner {
                tally,
                until,
                waker,
                ..
            } = &mut *inner;
            match tally {
                Some(tally) if !tally.is_done(until) => {
                    match waker {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => *waker = Some(cx.waker().clone()),
                    }
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }
        })
        .await;
    }

    /// Stops listening: every node still silent counts as timed out if
    /// `timed_out`, and the round's result.
    pub(crate) fn close(&self, timed_out: bool) -> Tally {
        let mut inner = self.lock();
        inner.decided = Some(Instant::now());
        let mut tally = inner
            .tally
            .take()
            .expect("a ballot is closed once, by its round");
        if timed_out {
            tally.on_timeout();
        }
        let (decision, yes, no) = tally.counts();
        if !self.span.is_disabled() {
            tracing::debug!(parent: &self.span, ?decision, yes, no, timed_out);
        }
        tally.finish()
    }
}
