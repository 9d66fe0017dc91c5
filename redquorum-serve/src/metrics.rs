//! The service's own metrics, beside the library's (`redquorum_*`), on
//! `GET /metrics`:
//!
//! - `redquorum_serve_requests_total{method, outcome}`: lock requests by
//!   method (`try_lock`, `unlock`) and outcome (`granted`, `taken`,
//!   `released`, `not_found`, `others`, or the error code);
//! - `redquorum_serve_grants_remembered`: locks granted through this
//!   instance and not yet released or expired (bounded by `--max-held`).

use metrics::{counter, describe_counter, describe_gauge, gauge};

/// Requests by method and outcome.
pub const REQUESTS: &str = "redquorum_serve_requests_total";
/// Grants remembered now.
pub const REMEMBERED: &str = "redquorum_serve_grants_remembered";

/// Describes them to the installed recorder.
pub(crate) fn describe() {
    describe_counter!(REQUESTS, "Lock requests by method and outcome");
    describe_gauge!(
        REMEMBERED,
        "Locks granted through this instance, not yet released or expired"
    );
}

pub(crate) fn request(method: &'static str, outcome: &'static str) {
    counter!(REQUESTS, "method" => method, "outcome" => outcome).increment(1);
}

pub(crate) fn remembered(n: usize) {
    gauge!(REMEMBERED).set(n as f64);
}
