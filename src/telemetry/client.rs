//! What one client counts of its locks (not per node): grants and
//! refusals by kind and reason, extensions, expirations, restorations,
//! leases lost and waits (docs/operations.md, "Metrics").

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Histogram, counter, histogram};

use super::{EXPIRATIONS, EXTENSIONS, GRANTS, LEASES_LOST, REFUSALS, RESTORATIONS, Resolved, WAIT};
use crate::proto::error::LockError;

/// The `kind` labels of [`GRANTS`] and [`REFUSALS`], in the order of
/// [`kind_index`].
const KINDS: [&str; 7] = [
    "plain",
    "fenced",
    "reentrant",
    "many",
    "read",
    "write",
    "permit",
];

/// The `reason` labels of [`REFUSALS`].
const REASONS: [&str; 8] = [
    "taken",
    "unavailable",
    "expired",
    "timeout",
    "permit_count",
    "input",
    "busy",
    "shut_down",
];

/// The `kind` label of a lock.
pub(crate) type Kind = &'static str;

fn kind_index(kind: Kind) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0)
}

/// The `reason` label of an error.
fn reason(error: &LockError) -> usize {
    match error {
        LockError::Taken { .. } => 0,
        LockError::Unavailable { .. } => 1,
        LockError::Busy { .. } => 6,
        LockError::Expired { .. } => 2,
        LockError::Timeout { .. } => 3,
        LockError::PermitCount { .. } => 4,
        // `Lost` ends a lease, not an acquisition.
        LockError::Input(_) | LockError::Lost { .. } => 5,
        LockError::ShutDown => 7,
    }
}

/// A client's own instruments (not per node), each registered on first
/// use: a lock call costs an atomic update, never a registration.
#[derive(Default)]
struct ClientInstruments {
    grants: [OnceLock<Counter>; KINDS.len()],
    refusals: [[OnceLock<Counter>; REASONS.len()]; KINDS.len()],
    /// `extended`, `refused`, `expired`.
    extensions: [OnceLock<Counter>; 3],
    expirations: OnceLock<Counter>,
    restorations: OnceLock<Counter>,
    leases_lost: OnceLock<Counter>,
    /// `granted`, `timeout`, `refused`.
    waits: [OnceLock<Histogram>; 3],
}

/// What one client counts of its locks, through whichever recorder is
/// installed (resolved again, once, if one appears after the client was
/// built).
pub(crate) struct ClientTelemetry {
    instruments: Resolved<ClientInstruments>,
}

impl std::fmt::Debug for ClientTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTelemetry").finish_non_exhaustive()
    }
}

impl Default for ClientTelemetry {
    fn default() -> Self {
        ClientTelemetry {
            instruments: Resolved::new(ClientInstruments::default()),
        }
    }
}

impl ClientTelemetry {
    fn instruments(&self) -> &ClientInstruments {
        self.instruments.get(ClientInstruments::default)
    }

    /// An acquisition of a `kind` lock ended; `waited` is how long a waiting
    /// one (`LockOptions::wait`) took.
    pub(crate) fn acquired<T>(
        &self,
        kind: Kind,
        result: &Result<T, LockError>,
        waited: Option<Duration>,
    ) {
        let i = self.instruments();
        let k = kind_index(kind);
        match result {
            Ok(_) => i.grants[k].get_or_init(|| counter!(GRANTS, "kind" => KINDS[k])),
            Err(e) => {
                let r = reason(e);
                i.refusals[k][r]
                    .get_or_init(|| counter!(REFUSALS, "kind" => KINDS[k], "reason" => REASONS[r]))
            }
        }
        .increment(1);
        if let Some(waited) = waited {
            const RESULTS: [&str; 3] = ["granted", "timeout", "refused"];
            let r = match result {
                Ok(_) => 0,
                Err(LockError::Timeout { .. }) => 1,
                Err(_) => 2,
            };
            i.waits[r]
                .get_or_init(|| histogram!(WAIT, "result" => RESULTS[r]))
                .record(waited.as_secs_f64());
        }
    }

    /// An extension ended.
    pub(crate) fn extended<T>(&self, result: &Result<T, LockError>) {
        const RESULTS: [&str; 3] = ["extended", "refused", "expired"];
        let r = match result {
            Ok(_) => 0,
            Err(LockError::Expired { .. }) => {
                self.expired();
                2
            }
            Err(_) => 1,
        };
        self.instruments().extensions[r]
            .get_or_init(|| counter!(EXTENSIONS, "result" => RESULTS[r]))
            .increment(1);
    }

    /// An extension set a lost key again on `nodes` nodes.
    pub(crate) fn restored(&self, nodes: usize) {
        self.instruments()
            .restorations
            .get_or_init(|| counter!(RESTORATIONS))
            .increment(nodes as u64);
    }

    /// A lock was found expired (by an extension or a release).
    pub(crate) fn expired(&self) {
        self.instruments()
            .expirations
            .get_or_init(|| counter!(EXPIRATIONS))
            .increment(1);
    }

    /// A lease was lost.
    pub(crate) fn lease_lost(&self) {
        self.instruments()
            .leases_lost
            .get_or_init(|| counter!(LEASES_LOST))
            .increment(1);
    }
}
