//! The service's bounds, and the gate every lock request passes: at most
//! [`Limits::max_in_flight`] requests at once and [`Limits::max_rate`]
//! per second. A request beyond either is answered at once
//! ([`ServeError::Busy`]), never queued: a queue would only turn a flood
//! into latency, and a lock request's answer is worth less every
//! millisecond it waits.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ServeError;

/// Every bound of the service, with its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body, in bytes (HTTP and gRPC). Default 16 KiB:
    /// a lock request is a few hundred bytes.
    pub max_request_bytes: usize,
    /// The longest resource name, in bytes. Default 1 KiB.
    pub max_resource_bytes: usize,
    /// The longest owner name, in bytes. Default 251: the owner is stored
    /// as the hold's label, behind [`DAPR_LABEL`](crate::DAPR_LABEL),
    /// and a label is at most the library's 256 bytes.
    pub max_owner_bytes: usize,
    /// Lock requests handled at once. Default 4 096.
    pub max_in_flight: usize,
    /// Connections open at once, HTTP and gRPC together; past it the
    /// listeners stop accepting. Default 4 096.
    pub max_connections: usize,
    /// How long a connection may send nothing, so that idle or silent
    /// callers cannot keep every place of `max_connections`. Over HTTP,
    /// the time to send a request's headers, counted from the previous
    /// answer on a kept-alive connection; over gRPC, the time between any
    /// two reads, the service pinging every third of it (a live client's
    /// answers count). Default 30 s.
    pub idle_timeout: Duration,
    /// Lock requests admitted per second (a token bucket of one second's
    /// worth). Default 50 000.
    pub max_rate: u32,
    /// Locks granted through this instance and remembered until they
    /// expire. Default 100 000.
    pub max_held: usize,
    /// Of those, the most for one owner. Default 1 000.
    pub max_held_per_owner: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 16 * 1024,
            max_resource_bytes: 1024,
            max_owner_bytes: redquorum::node::MAX_LABEL - crate::locks::DAPR_LABEL.len(),
            max_in_flight: 4096,
            max_connections: 4096,
            idle_timeout: Duration::from_secs(30),
            max_rate: 50_000,
            max_held: 100_000,
            max_held_per_owner: 1000,
        }
    }
}

impl Limits {
    /// Checks the bounds: each at least 1; the counted ones (requests in
    /// flight, connections, locks held) at most
    /// [`Semaphore::MAX_PERMITS`]; owners no longer than a label leaves
    /// room for.
    ///
    /// # Errors
    ///
    /// The first bound out of range, named as its flag is.
    ///
    /// ```
    /// use redquorum_serve::Limits;
    ///
    /// assert!(Limits::default().check().is_ok());
    /// let none = Limits { max_connections: 0, ..Limits::default() };
    /// assert!(none.check().unwrap_err().contains("--max-connections"));
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let counted = [
            ("--max-in-flight", self.max_in_flight),
            ("--max-connections", self.max_connections),
            ("--max-held", self.max_held),
        ];
        let others = [
            ("--max-request-bytes", self.max_request_bytes),
            ("--max-held-per-owner", self.max_held_per_owner),
            ("the longest resource name", self.max_resource_bytes),
            ("the longest owner name", self.max_owner_bytes),
            ("--max-rate", self.max_rate as usize),
        ];
        for (name, bound) in counted.iter().chain(&others) {
            if *bound == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.idle_timeout < Duration::from_millis(3)
            || self.idle_timeout > Duration::from_secs(24 * 3600)
        {
            return Err("--idle-timeout must be within 3 ms and 24 h".into());
        }
        for (name, bound) in counted {
            if bound > Semaphore::MAX_PERMITS {
                return Err(format!(
                    "{name} {bound} is above the most this service counts ({})",
                    Semaphore::MAX_PERMITS
                ));
            }
        }
        let longest_owner = redquorum::node::MAX_LABEL - crate::locks::DAPR_LABEL.len();
        if self.max_owner_bytes > longest_owner {
            return Err(format!(
                "the longest owner name {} is above {longest_owner} bytes (a label's room)",
                self.max_owner_bytes
            ));
        }
        Ok(())
    }
}

/// The gate: a request holds its [`Admitted`] while it runs.
#[derive(Debug)]
pub(crate) struct Gate {
    in_flight: Arc<Semaphore>,
    bucket: Mutex<Bucket>,
    rate: u32,
}

/// Proof of admission: a place among the requests in flight, given back
/// when dropped.
#[derive(Debug)]
pub(crate) struct Admitted {
    _place: OwnedSemaphorePermit,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Gate {
    pub(crate) fn new(limits: &Limits) -> Self {
        Gate {
            in_flight: Arc::new(Semaphore::new(
                limits.max_in_flight.min(Semaphore::MAX_PERMITS),
            )),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(limits.max_rate),
                at: Instant::now(),
            }),
            rate: limits.max_rate,
        }
    }

    /// Admits a request, or says which bound it met.
    pub(crate) fn admit(&self) -> Result<Admitted, ServeError> {
        let place = Arc::clone(&self.in_flight)
            .try_acquire_owned()
            .map_err(|e| match e {
                tokio::sync::TryAcquireError::Closed => ServeError::ShuttingDown,
                tokio::sync::TryAcquireError::NoPermits => {
                    ServeError::Busy("the most requests in flight (--max-in-flight)".into())
                }
            })?;
        if !self.take_token(Instant::now()) {
            return Err(ServeError::Busy("the request rate (--max-rate)".into()));
        }
        Ok(Admitted { _place: place })
    }

    /// Refills the bucket for the time passed (at most a second's worth)
    /// and takes a token if there is one.
    fn take_token(&self, now: Instant) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let rate = f64::from(self.rate);
        let passed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + passed * rate).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Admits nothing from now on; the requests admitted run on.
    pub(crate) fn close(&self) {
        self.in_flight.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max_in_flight: usize, max_rate: u32) -> Gate {
        Gate::new(&Limits {
            max_in_flight,
            max_rate,
            ..Limits::default()
        })
    }

    #[test]
    fn requests_beyond_the_bound_in_flight_are_turned_away_not_queued() {
        let gate = gate(2, 1000);
        let (a, _b) = (gate.admit().unwrap(), gate.admit().unwrap());
        assert!(matches!(gate.admit(), Err(ServeError::Busy(_))));
        drop(a);
        gate.admit().unwrap();
    }

    #[test]
    fn the_rate_is_a_bucket_of_one_seconds_worth() {
        let gate = gate(100, 3);
        for _ in 0..3 {
            drop(gate.admit().unwrap());
        }
        assert!(matches!(gate.admit(), Err(ServeError::Busy(_))));
        let later = Instant::now() + std::time::Duration::from_millis(400);
        assert!(gate.take_token(later), "a third of a second refills one");
        assert!(!gate.take_token(later));
    }

    #[test]
    fn bounds_out_of_range_are_refused_by_name() {
        assert_eq!(Limits::default().check(), Ok(()));
        let refused = |limits: Limits, flag: &str| {
            let why = limits.check().unwrap_err();
            assert!(why.contains(flag), "{why}");
        };
        let base = Limits::default;
        refused(
            Limits {
                max_connections: 0,
                ..base()
            },
            "--max-connections",
        );
        refused(
            Limits {
                max_rate: 0,
                ..base()
            },
            "--max-rate",
        );
        refused(
            Limits {
                max_held_per_owner: 0,
                ..base()
            },
            "--max-held-per-owner",
        );
        refused(
            Limits {
                max_in_flight: usize::MAX,
                ..base()
            },
            "--max-in-flight",
        );
        refused(
            Limits {
                max_held: Semaphore::MAX_PERMITS + 1,
                ..base()
            },
            "--max-held",
        );
        refused(
            Limits {
                max_owner_bytes: 256,
                ..base()
            },
            "owner",
        );
        // At the bounds: accepted.
        let widest = Limits {
            max_in_flight: Semaphore::MAX_PERMITS,
            max_connections: 1,
            max_owner_bytes: 251,
            ..base()
        };
        assert_eq!(widest.check(), Ok(()));
    }

    #[test]
    fn a_closed_gate_admits_no_one() {
        let gate = gate(2, 1000);
        gate.close();
        assert_eq!(gate.admit().unwrap_err(), ServeError::ShuttingDown);
    }
}
