//! Batching what is already queued for a node: while one write to a Redis
//! node is in flight, the calls that arrive for it wait (in order) and go
//! out together — one pipeline, one write, one read — as soon as it returns.
//! Nothing waits that would not have: an idle node's call is written at
//! once, as without batching, so a lone client is no slower.
//!
//! Per node there is at most one write in flight of ours: the call that found
//! the node idle, or the batch behind it. The calls queued meanwhile keep
//! the order they were made in, and a batch is one pipeline on one
//! connection, so the node applies them in that order, after the write
//! before them (DESIGN §1.7). Each call keeps its own answer, so each
//! operation is still decided by its own round and deadline. A queued call
//! holds its in-flight slot (`max_in_flight` bounds the queue), and is sent
//! on the connection it was made on or not at all: if that connection broke
//! meanwhile, it fails as a call made on it would have.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, Value};
use tokio::sync::{Notify, oneshot};

/// What became of a queued call: the node's value, or why there is none
/// (made into the caller's error by the caller, who knows the connection).
pub(crate) type Answer = Result<Value, redis::RedisError>;

/// A call waiting for the write in flight to return.
struct Queued {
    /// The connection it was made on.
    generation: u64,
    command: Cmd,
    /// Preceded by `ASKING` (a cluster's migrating slot).
    asking: bool,
    grace: Duration,
    answer: oneshot::Sender<Answer>,
}

/// Writes in flight to a node (single calls, or one batch) before the calls
/// that follow wait to go out together. A lone client never has this many.
pub(crate) const WINDOW: usize = 4;

#[derive(Default)]
struct State {
    /// Writes of ours in flight to the node: single calls, and the batch
    /// being sent (one).
    in_flight: usize,
    queue: Vec<Queued>,
    /// A batch was taken and is not yet written: calls queue behind it.
    taken: bool,
}

/// One node's batching: the queue, and the task that sends it.
pub(crate) struct Batcher {
    state: Mutex<State>,
    /// Wakes the sending task: the write in flight returned and calls wait.
    wake: Notify,
    enabled: bool,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Batcher")
            .field("enabled", &self.enabled)
            .field("in_flight", &state.in_flight)
            .field("queued", &state.queue.len())
            .finish()
    }
}

/// How a call goes out.
pub(crate) enum Route<'a> {
    /// Write it now; the [`Sending`] guard marks the node busy until the
    /// answer (or the call's end).
    Now(Sending<'a>),
    /// Queued behind the write in flight: the answer comes here.
    Queued(oneshot::Receiver<Answer>),
}

/// The node is busy with this call's write until dropped; then the calls
/// queued meanwhile go out.
pub(crate) struct Sending<'a>(Option<&'a Batcher>);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if let Some(batcher) = self.0 {
            batcher.returned();
        }
    }
}

impl Batcher {
    /// A batcher; with `enabled` false every call is written at once.
    pub(crate) fn new(enabled: bool) -> Self {
        Batcher {
            state: Mutex::default(),
            wake: Notify::new(),
            enabled,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Routes a call made on connection `generation`: at once if the node is
    /// idle, else into the queue (in order).
    pub(crate) fn route(
        &self,
        generation: u64,
        command: &Cmd,
        asking: bool,
        grace: Duration,
    ) -> Route<'_> {
        if !self.enabled {
            return Route::Now(Sending(None));
        }
        let mut state = self.lock();
        // Never past a queued call: that would reorder them.
        if state.queue.is_empty() && !state.taken && state.in_flight < WINDOW {
            state.in_flight += 1;
            return Route::Now(Sending(Some(self)));
        }
        let (answer, receiver) = oneshot::channel();
        state.queue.push(Queued {
            generation,
            command: command.clone(),
            asking,
            grace,
            answer,
        });
        Route::Queued(receiver)
    }

    /// A write of ours returned (a single call's, or a batch's): the sender
    /// goes on if calls wait.
    fn returned(&self) {
        let mut state = self.lock();
        state.in_flight -= 1;
        self.wake_if_queued(state);
    }

    /// Wakes the sender if calls wait.
    fn wake_if_queued(&self, state: std::sync::MutexGuard<'_, State>) {
        let waiting = !state.queue.is_empty();
        drop(state);
        if waiting {
            self.wake.notify_one();
        }
    }

    /// The calls queued so far, counted as one write in flight; `None` if
    /// there are none or the window is full (a returning write wakes the
    /// sender again).
    fn take(&self) -> Option<Vec<Queued>> {
        let mut state = self.lock();
        if state.queue.is_empty() || state.in_flight >= WINDOW {
            return None;
        }
        state.in_flight += 1;
        state.taken = true;
        Some(std::mem::take(&mut state.queue))
    }

    /// The batch taken is written (or failed): calls may go out again.
    fn written(&self) {
        let mut state = self.lock();
        state.taken = false;
        self.wake_if_queued(state);
    }
}

/// The node's sender: whenever woken, sends what is queued as one pipeline
/// on the current connection, hands each call its answer, and goes on until
/// the queue is empty. `connection` gives the current connection and its
/// generation (or why there is none); `broken` reports a connection that
/// outlived a batch's grace.
pub(crate) async fn send_queued(
    node: Arc<str>,
    batcher: Arc<Batcher>,
    connection: impl Fn() -> Result<(u64, MultiplexedConnection), redis::RedisError>,
    broken: Arc<dyn Fn(u64) + Send + Sync>,
) {
    let batched = metrics::counter!(crate::telemetry::NODE_BATCHED, "node" => node.to_string());
    loop {
        batcher.wake.notified().await;
        while let Some(batch) = batcher.take() {
            batched.increment(batch.len() as u64);
            send(&batcher, batch, &connection, &broken);
        }
    }
}

/// Writes one batch now, and hands each call its answer when it comes —
/// in a task of the batch's own, so that a batch stuck on a connection
/// that was dropped meanwhile holds up no later one.
fn send(
    batcher: &Arc<Batcher>,
    batch: Vec<Queued>,
    connection: &impl Fn() -> Result<(u64, MultiplexedConnection), redis::RedisError>,
    broken: &Arc<dyn Fn(u64) + Send + Sync>,
) {
    let (generation, mut conn) = match connection() {
        Ok(current) => current,
        Err(e) => {
            batcher.written();
            batcher.returned();
            fail(batch, &e);
            return;
        }
    };
    // Calls made on a connection that broke meanwhile fail as it did: none
    // is sent on a later one, behind calls made after it.
    let (batch, stale): (Vec<Queued>, Vec<Queued>) =
        batch.into_iter().partition(|q| q.generation == generation);
    fail(stale, &reset());
    if batch.is_empty() {
        batcher.written();
        batcher.returned();
        return;
    }
    let grace = batch.iter().map(|q| q.grace).max().unwrap_or_default();
    let mut pipe = redis::pipe();
    for queued in &batch {
        if queued.asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(queued.command.clone());
    }
    let count = batch.len() + batch.iter().filter(|q| q.asking).count();
    let (done, broken) = (Arc::clone(batcher), Arc::clone(broken));
    // Never held back by the task's budget: the first poll must write the
    // pipeline.
    let mut sending = Box::pin(tokio::task::coop::unconstrained(async move {
        let sent = tokio::time::timeout(grace, conn.send_packed_commands(&pipe, 0, count)).await;
        match sent {
            Ok(Ok(values)) if values.len() == count => {
                let mut values = values.into_iter();
                for queued in batch {
                    if queued.asking {
                        values.next(); // ASKING's OK
                    }
                    let value = values.next().ok_or_else(mismatch);
                    let _ = queued.answer.send(value.and_then(Value::extract_error));
                }
            }
            Ok(Ok(_)) => fail(batch, &mismatch()),
            Ok(Err(e)) => fail(batch, &e),
            Err(_) => {
                // Unresponsive: what the callers' own graces would find.
                broken(generation);
                fail(batch, &timed_out());
            }
        }
        done.returned();
    }));
    // The first poll writes the pipeline (the connection's queue has room
    // for every call in flight); only then may later calls go out on their
    // own without overtaking it.
    let first = sending
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    batcher.written();
    // Bounded: a batch holds one of the node's `WINDOW` writes in flight
    // until this task ends, which its grace guarantees.
    if first.is_pending() {
        tokio::spawn(sending);
    }
}

fn fail(batch: Vec<Queued>, e: &redis::RedisError) {
    for queued in batch {
        let _ = queued.answer.send(Err(copy(e)));
    }
}

/// A like error for each call of a failed batch (`RedisError` is not
/// `Clone`).
fn copy(e: &redis::RedisError) -> redis::RedisError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            e.to_string(),
        ))
    } else {
        redis::RedisError::from((redis::ErrorKind::Client, "batch failed", e.to_string()))
    }
}

fn reset() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "the connection the call was made on broke before it was sent",
    ))
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer within the grace",
    ))
}

fn mismatch() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "a batch was answered with the wrong number of values",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> Cmd {
        redis::cmd("PING")
    }

    #[test]
    fn no_call_overtakes_a_queued_or_unwritten_one() {
        let batcher = Batcher::new(true);
        let grace = Duration::from_secs(1);
        // A lone client's calls go out at once, up to the window.
        let now: Vec<Route<'_>> = (0..WINDOW)
            .map(|_| batcher.route(1, &cmd(), false, grace))
            .collect();
        assert!(now.iter().all(|r| matches!(r, Route::Now(_))));
        // Past it they queue…
        assert!(matches!(
            batcher.route(1, &cmd(), false, grace),
            Route::Queued(_)
        ));
        // …and once one queued, so does every later call, even with room.
        drop(now);
        assert!(matches!(
            batcher.route(1, &cmd(), false, grace),
            Route::Queued(_)
        ));
        // The sender takes the queue in order; until it is written, calls
        // still queue behind it.
        let batch = batcher.take().expect("a batch");
        assert_eq!(batch.len(), 2);
        assert!(matches!(
            batcher.route(1, &cmd(), false, grace),
            Route::Queued(_)
        ));
        batcher.written();
        let next = batcher.take().expect("the call queued meanwhile");
        assert_eq!(next.len(), 1);
        batcher.written();
        batcher.returned();
        batcher.returned();
        // Idle again: at once.
        assert!(matches!(
            batcher.route(1, &cmd(), false, grace),
            Route::Now(_)
        ));
    }

    #[test]
    fn a_returning_batch_wakes_the_sender_for_what_waits() {
        use futures::FutureExt;
        let batcher = Batcher::new(true);
        let grace = Duration::from_secs(1);
        let mut now: Vec<Route<'_>> = (0..WINDOW)
            .map(|_| batcher.route(1, &cmd(), false, grace))
            .collect();
        let _first = batcher.route(1, &cmd(), false, grace);
        now.pop(); // one write returns: the sender is woken…
        assert!(batcher.wake.notified().now_or_never().is_some());
        assert_eq!(batcher.take().map(|b| b.len()), Some(1)); // …and sends it
        batcher.written();
        // The window is full again (three writes and the batch); a call waits.
        let _second = batcher.route(1, &cmd(), false, grace);
        assert!(batcher.take().is_none(), "past the window");
        while batcher.wake.notified().now_or_never().is_some() {}
        // Only the batch returns: it must wake the sender.
        batcher.returned();
        assert!(
            batcher.wake.notified().now_or_never().is_some(),
            "the sender was not woken"
        );
        assert_eq!(batcher.take().map(|b| b.len()), Some(1));
        drop(now);
    }

    #[test]
    fn off_means_always_at_once() {
        let batcher = Batcher::new(false);
        let routes: Vec<Route<'_>> = (0..100)
            .map(|_| batcher.route(1, &cmd(), false, Duration::from_secs(1)))
            .collect();
        assert!(routes.iter().all(|r| matches!(r, Route::Now(_))));
    }
}
