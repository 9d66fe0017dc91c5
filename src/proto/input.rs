//! Invalid input, refused before anything is sent to a node: a TTL or key
//! the protocol cannot use, a resource list or name that makes no lock.

use std::fmt;
use std::time::Duration;

use super::quorum::{DriftFactor, MAX_TTL_MS};

/// The longest key prefix accepted, in bytes.
pub const MAX_KEY_PREFIX: usize = 256;

/// The most permits a semaphore may have (each is a slot key per node, and
/// an acquisition tries up to all of them).
pub const MAX_PERMITS: u32 = 1024;

/// `2^k` for a power of two, as messages write a bound.
pub(crate) struct Pow2(pub(crate) u64);

impl fmt::Display for Pow2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "2^{}", self.0.ilog2())
    }
}

/// The most entries one listing returns ([`Redlock::list`](crate::Redlock::list)).
pub const MAX_LISTED: usize = 10_000;

/// Invalid input to one call (or a builder setting the protocol checks),
/// detected before anything is sent to a node.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InputError {
    /// The TTL is zero, not a whole number of milliseconds ≥ 1, or above
    /// [`MAX_TTL_MS`](crate::proto::quorum::MAX_TTL_MS).
    InvalidTtl(Duration),
    /// The TTL is not longer than the clock-drift allowance, so no lock with
    /// it could ever be valid.
    TtlNotAboveDrift {
        /// The TTL given.
        ttl: Duration,
        /// `ceil(ttl × drift_factor) + 2 ms`.
        drift: Duration,
    },
    /// The TTL is longer than the deployment's longest TTL
    /// ([`Builder::max_ttl`](crate::Builder::max_ttl)), which a node that
    /// restarted without persistence waits out before it counts again: a
    /// longer lock could outlive that wait (docs/operations.md, restarts).
    TtlAboveMax {
        /// The TTL given.
        ttl: Duration,
        /// The longest TTL configured.
        max_ttl: Duration,
    },
    /// [`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)
    /// of zero, or not a whole number of milliseconds ≥ 1, or above
    /// [`MAX_TTL_MS`](crate::proto::quorum::MAX_TTL_MS).
    InvalidHoldAtLeast(Duration),
    /// The resource name is empty.
    EmptyResource,
    /// A multi-resource lock over no resources.
    NoResources,
    /// A semaphore with 0 permits or more than
    /// [`MAX_PERMITS`].
    InvalidPermits(u32),
    /// A key prefix ([`Builder::key_prefix`](crate::Builder::key_prefix))
    /// that holds `{` or `}`, or is longer than
    /// [`MAX_KEY_PREFIX`](crate::proto::keys::MAX_KEY_PREFIX) bytes.
    InvalidKeyPrefix(String),
    /// A multi-resource lock naming one resource twice.
    DuplicateResource(String),
    /// A background task was asked for outside a tokio runtime.
    NoRuntime,
    /// A reentrant lock with an empty owner name.
    EmptyOwner,
    /// A lease extension interval that is zero or not shorter than the
    /// lease's validity (the lease would lapse before its first extension).
    InvalidExtendInterval {
        /// The interval given.
        every: Duration,
        /// The validity of the lease's TTL.
        validity: Duration,
    },
    /// The drift factor is not a finite number in `[0, 1)`.
    InvalidDriftFactor(f64),
    /// A lock whose keys hash to different slots of a Redis Cluster member
    /// (`redis+cluster://`): one script cannot set them all atomically
    /// there, so the lock is refused before anything is sent. Resources that
    /// begin with one hash tag share a slot: `{acct}:1` and `{acct}:2`.
    CrossSlot {
        /// The resources of the lock.
        resources: Vec<String>,
    },
    /// An explicit token (for [`Redlock::release_token`](crate::Redlock::release_token))
    /// that is empty.
    EmptyToken,
    /// A holder's label ([`LockOptions::label`](crate::LockOptions::label),
    /// [`Builder::label`](crate::Builder::label)) longer than
    /// [`MAX_LABEL`](crate::transport::node::MAX_LABEL) bytes, or holding a NUL byte.
    InvalidLabel(String),
    /// A listing's limit ([`Redlock::list`](crate::Redlock::list)) of 0 or
    /// above [`MAX_LISTED`](crate::inspect::MAX_LISTED).
    InvalidListLimit(usize),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::InvalidTtl(a) => {
                write!(
                    f,
                    "invalid TTL {a:?}: must be between 1 ms and {} ms",
                    Pow2(MAX_TTL_MS)
                )
            }
            InputError::TtlNotAboveDrift { drift, ttl, .. } => write!(
                f,
                "TTL {ttl:?} is not above the clock-drift allowance {drift:?}"
            ),
            InputError::TtlAboveMax { ttl, max_ttl } => write!(
                f,
                "TTL {ttl:?} is above the longest TTL {max_ttl:?}: raise Builder::max_ttl \
                 (CLI --max-ttl), which a node restarted without persistence waits out"
            ),
            InputError::InvalidHoldAtLeast(at_least) => write!(
                f,
                "invalid hold at least {at_least:?}: must be between 1 ms and {} ms",
                Pow2(MAX_TTL_MS)
            ),
            InputError::EmptyResource => write!(f, "resource name is empty"),
            InputError::NoResources => write!(f, "no resources given"),
            InputError::InvalidPermits(n) => {
                write!(f, "a semaphore needs 1 to {MAX_PERMITS} permits, not {n}")
            }
            InputError::InvalidKeyPrefix(prefix) => write!(
                f,
                "key prefix {prefix:?} must hold no '{{' or '}}' and be at most {} bytes",
                MAX_KEY_PREFIX
            ),
            InputError::DuplicateResource(a) => {
                write!(f, "resource {0:?} is listed more than once", a)
            }
            InputError::NoRuntime => write!(f, "no tokio runtime is running"),
            InputError::EmptyOwner => write!(f, "reentrant owner name is empty"),
            InputError::InvalidExtendInterval {
                every, validity, ..
            } => write!(
                f,
                "lease extension interval {every:?} must be above zero and below the validity {validity:?}"
            ),
            InputError::InvalidDriftFactor(a) => {
                write!(f, "drift factor {0} is not a finite number in [0, 1)", a)
            }
            InputError::CrossSlot { resources, .. } => write!(
                f,
                "the keys of {resources:?} hash to different slots of a cluster member; \
         give the resources one hash tag (\"{{tag}}:a\", \"{{tag}}:b\")"
            ),
            InputError::EmptyToken => write!(f, "token is empty"),
            InputError::InvalidLabel(label) => write!(
                f,
                "label {:?} must be at most {} bytes, with no NUL byte",
                label.chars().take(32).collect::<String>(),
                super::op::MAX_LABEL
            ),
            InputError::InvalidListLimit(n) => write!(
                f,
                "a listing's limit must be between 1 and {MAX_LISTED}, not {n}"
            ),
        }
    }
}

impl std::error::Error for InputError {}

/// A checked TTL and the validity it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl {
    /// Whole milliseconds (sub-millisecond parts dropped, as Redis would).
    pub(crate) ms: u64,
    /// How long a lock of this TTL is valid from its first request.
    pub(crate) validity: Duration,
}

impl Ttl {
    /// Checks `ttl`: 1 ms to 2^40 ms, at most `max_ttl` (the deployment's
    /// longest), and longer than its drift allowance under `factor`.
    pub(crate) fn check(
        ttl: Duration,
        max_ttl: Duration,
        factor: DriftFactor,
    ) -> Result<Ttl, InputError> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 || ms > MAX_TTL_MS {
            return Err(InputError::InvalidTtl(ttl));
        }
        if Duration::from_millis(ms) > max_ttl {
            return Err(InputError::TtlAboveMax { ttl, max_ttl });
        }
        let validity = factor.validity(ms).ok_or(InputError::TtlNotAboveDrift {
            ttl,
            drift: factor.drift(ms),
        })?;
        Ok(Ttl { ms, validity })
    }
}

/// Checks a time to hold a lock at least (once per period): 1 ms to 2^40
/// ms, in whole milliseconds (sub-millisecond parts dropped). Not bounded
/// by the TTL nor by `max_ttl`: the period's mark is a key of its own,
/// which a holder does not hold (docs/guarantees.md, "Once per period").
pub(crate) fn check_hold_at_least(at_least: Duration) -> Result<Duration, InputError> {
    let ms = u64::try_from(at_least.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 || ms > MAX_TTL_MS {
        return Err(InputError::InvalidHoldAtLeast(at_least));
    }
    Ok(Duration::from_millis(ms))
}

/// Checks a resource name (or a lock type's name): not empty. Every
/// call's keys are built through it, and each lock type's constructor
/// calls it, so that a bad name fails where it is given.
pub(crate) fn check_name(name: &str) -> Result<(), InputError> {
    if name.is_empty() {
        return Err(InputError::EmptyResource);
    }
    Ok(())
}

/// Checks a label: at most [`MAX_LABEL`](crate::proto::op::MAX_LABEL)
/// bytes, no NUL byte (what separates it from the token in a key).
pub(crate) fn check_label(label: &str) -> Result<std::sync::Arc<str>, InputError> {
    if label.len() > crate::proto::op::MAX_LABEL || label.contains('\0') {
        return Err(InputError::InvalidLabel(label.to_owned()));
    }
    Ok(label.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TTL is checked once, here: its bounds, the deployment's longest,
    /// the drift allowance; a label, its length and its NUL byte.
    #[test]
    fn ttls_and_labels_are_checked_at_the_boundary() {
        let (max, factor) = (Duration::from_secs(60), DriftFactor::default());
        let ttl = Ttl::check(Duration::from_micros(10_000_900), max, factor).unwrap();
        assert_eq!(ttl.ms, 10_000);
        assert!(ttl.validity < Duration::from_secs(10));
        let refused = |ttl| Ttl::check(ttl, max, factor).unwrap_err();
        assert!(matches!(refused(Duration::ZERO), InputError::InvalidTtl(_)));
        assert!(matches!(refused(Duration::MAX), InputError::InvalidTtl(_)));
        assert!(matches!(
            refused(Duration::from_secs(61)),
            InputError::TtlAboveMax { .. }
        ));
        assert!(matches!(
            refused(Duration::from_millis(2)),
            InputError::TtlNotAboveDrift { .. }
        ));
        assert_eq!(&*check_label("worker-7").unwrap(), "worker-7");
        assert!(check_label("a\0b").is_err());
        assert!(check_label(&"x".repeat(crate::proto::op::MAX_LABEL + 1)).is_err());
    }
}
