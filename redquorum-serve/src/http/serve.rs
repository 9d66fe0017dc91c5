//! The HTTP listener's loop: each connection served by hyper's HTTP/1.1
//! server with a header-read timeout ([`Limits::idle_timeout`]), which
//! also closes a kept-alive connection that sends no next request, so
//! that idle or slow callers cannot keep the places of
//! [`Limits::max_connections`] (connections.rs). At the stop signal the
//! listener closes, every connection finishes the request under way (for
//! at most the idle timeout) and closes, and the loop returns once all
//! have.
//!
//! [`Limits::idle_timeout`]: crate::Limits::idle_timeout
//! [`Limits::max_connections`]: crate::Limits::max_connections

use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::connections::{Counted, CountedListener};

/// Serves `router` on `listener` until `stop` turns true.
pub(crate) async fn serve(
    listener: CountedListener,
    router: Router,
    idle_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        let counted = tokio::select! {
            counted = listener.next() => counted,
            () = stopped(&mut stop) => break,
        };
        connections.spawn(connection(
            counted,
            router.clone(),
            idle_timeout,
            stop.clone(),
        ));
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// One connection, until it closes or, after `stop`, its request under
/// way is answered.
async fn connection(
    counted: Counted,
    router: Router,
    idle_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    let mut conn =
        pin!(builder.serve_connection(TokioIo::new(counted), TowerToHyperService::new(router)));
    tokio::select! {
        _ = conn.as_mut() => return,
        () = stopped(&mut stop) => conn.as_mut().graceful_shutdown(),
    }
    // The request under way, if any, has the idle timeout to end; then
    // the connection is closed (a caller that stopped reading holds no
    // shutdown back).
    let _ = tokio::time::timeout(idle_timeout, conn).await;
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
