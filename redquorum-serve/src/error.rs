//! What a request can fail with, and how each protocol says it: Dapr's
//! error codes (`ERR_MALFORMED_REQUEST`, `ERR_LOCK_STORE_NOT_FOUND`,
//! `ERR_TRY_LOCK`, `ERR_UNLOCK`) with their HTTP statuses and gRPC codes,
//! and this service's own for its bounds and its token.

use std::fmt;

/// Why a request was not carried out. Its text names what to change and
/// never carries a secret (node passwords are masked by the library; the
/// API token is never echoed).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServeError {
    /// Bad input: malformed JSON or protobuf, an unknown field, an empty or
    /// oversized name, an expiry out of bounds. Nothing was sent.
    Malformed(String),
    /// The store named is not one this service serves (`--store`).
    StoreNotFound(String),
    /// No valid API token was given, where one is required.
    Unauthorized,
    /// A bound of this service was reached (calls in flight, request rate,
    /// locks held): try again later. Nothing was sent.
    Busy(String),
    /// The nodes did not decide a try-lock (too few answered, or it ended
    /// past its validity): nothing is held.
    TryLock(String),
    /// The nodes did not decide an unlock: the lock may still be held until
    /// it expires.
    Unlock(String),
    /// The service is shutting down.
    ShuttingDown,
}

impl ServeError {
    /// Dapr's `errorCode` for it (this service's own where Dapr has none).
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::Malformed(_) => "ERR_MALFORMED_REQUEST",
            ServeError::StoreNotFound(_) => "ERR_LOCK_STORE_NOT_FOUND",
            ServeError::Unauthorized => "ERR_UNAUTHORIZED",
            ServeError::Busy(_) => "ERR_TOO_MANY_REQUESTS",
            ServeError::TryLock(_) => "ERR_TRY_LOCK",
            ServeError::Unlock(_) => "ERR_UNLOCK",
            ServeError::ShuttingDown => "ERR_SHUTTING_DOWN",
        }
    }

    /// The HTTP status Dapr answers it with.
    pub fn http_status(&self) -> u16 {
        match self {
            ServeError::Malformed(_) | ServeError::StoreNotFound(_) => 400,
            ServeError::Unauthorized => 401,
            ServeError::Busy(_) => 429,
            ServeError::TryLock(_) | ServeError::Unlock(_) => 500,
            ServeError::ShuttingDown => 503,
        }
    }

    /// The gRPC status Dapr answers it with.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            ServeError::Malformed(_) | ServeError::StoreNotFound(_) => tonic::Code::InvalidArgument,
            ServeError::Unauthorized => tonic::Code::Unauthenticated,
            ServeError::Busy(_) => tonic::Code::ResourceExhausted,
            ServeError::TryLock(_) | ServeError::Unlock(_) => tonic::Code::Internal,
            ServeError::ShuttingDown => tonic::Code::Unavailable,
        }
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Malformed(why) => write!(f, "malformed request: {why}"),
            ServeError::StoreNotFound(store) => write!(f, "lock store {store} not found"),
            ServeError::Unauthorized => {
                f.write_str("no valid API token (header dapr-api-token, or Authorization: Bearer)")
            }
            ServeError::Busy(why) => write!(f, "too many requests: {why}"),
            ServeError::TryLock(why) => write!(f, "failed to try acquiring lock: {why}"),
            ServeError::Unlock(why) => write!(f, "failed to release lock: {why}"),
            ServeError::ShuttingDown => f.write_str("the service is shutting down"),
        }
    }
}

impl std::error::Error for ServeError {}

impl From<ServeError> for tonic::Status {
    fn from(e: ServeError) -> Self {
        tonic::Status::new(e.grpc_code(), e.to_string())
    }
}
