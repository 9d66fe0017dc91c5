//! The own API's typed error ([`v1::Failure`]): a kind a program can
//! branch on, a message for people, and each node's answer where the
//! library gives them; with the gRPC code and HTTP status of each kind.

use redquorum::{LockError, Votes};

use crate::error::ServeError;
use crate::grpc::v1;

/// A failed call of the own API.
pub type Failure = v1::Failure;

impl v1::Failure {
    fn new(kind: &str, message: impl Into<String>) -> Self {
        v1::Failure {
            kind: kind.to_owned(),
            message: message.into(),
            nodes: Vec::new(),
        }
    }

    /// Bad input: nothing was sent.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }

    /// No such lock here.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new("not_found", message)
    }

    fn with_votes(mut self, votes: &Votes) -> Self {
        self.nodes = votes
            .iter()
            .map(|(node, answer)| v1::NodeAnswer {
                node: node.to_owned(),
                answer: answer.to_string(),
            })
            .collect();
        self
    }

    /// The gRPC code of its kind.
    pub fn grpc_code(&self) -> tonic::Code {
        match self.kind.as_str() {
            "taken" => tonic::Code::Aborted,
            "timeout" => tonic::Code::DeadlineExceeded,
            "unavailable" | "shutting_down" => tonic::Code::Unavailable,
            "busy" | "too_many_requests" => tonic::Code::ResourceExhausted,
            "expired" | "lost" => tonic::Code::FailedPrecondition,
            "invalid_argument" => tonic::Code::InvalidArgument,
            "not_found" => tonic::Code::NotFound,
            "unauthorized" => tonic::Code::Unauthenticated,
            _ => tonic::Code::Internal,
        }
    }

    /// The HTTP status of its kind.
    pub fn http_status(&self) -> u16 {
        match self.kind.as_str() {
            "taken" | "timeout" => 409,
            "unavailable" | "shutting_down" => 503,
            "busy" | "too_many_requests" => 429,
            "expired" | "lost" => 410,
            "invalid_argument" => 400,
            "not_found" => 404,
            "unauthorized" => 401,
            _ => 500,
        }
    }
}

impl From<LockError> for v1::Failure {
    fn from(e: LockError) -> Self {
        let message = e.to_string();
        match &e {
            LockError::Taken { votes } => Self::new("taken", message).with_votes(votes),
            LockError::Unavailable { votes } => Self::new("unavailable", message).with_votes(votes),
            LockError::Busy { votes } => Self::new("busy", message).with_votes(votes),
            LockError::Expired { votes } => Self::new("expired", message).with_votes(votes),
            LockError::Timeout { last, .. } => {
                let nodes = Self::from((**last).clone()).nodes;
                v1::Failure {
                    nodes,
                    ..Self::new("timeout", message)
                }
            }
            LockError::Lost { .. } => Self::new("lost", message),
            LockError::Input(_) => Self::new("invalid_argument", message),
            LockError::ShutDown => Self::new("shutting_down", message),
            _ => Self::new("internal", message),
        }
    }
}

impl From<ServeError> for v1::Failure {
    fn from(e: ServeError) -> Self {
        let kind = match &e {
            ServeError::Malformed(_) | ServeError::StoreNotFound(_) => "invalid_argument",
            ServeError::Unauthorized => "unauthorized",
            ServeError::Busy(_) => "too_many_requests",
            ServeError::ShuttingDown => "shutting_down",
            ServeError::TryLock(_) | ServeError::Unlock(_) => "unavailable",
        };
        Self::new(kind, e.to_string())
    }
}

impl From<v1::Failure> for tonic::Status {
    fn from(f: v1::Failure) -> Self {
        let details = prost::Message::encode_to_vec(&f);
        tonic::Status::with_details(f.grpc_code(), f.message.clone(), details.into())
    }
}

impl std::fmt::Display for v1::Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for v1::Failure {}
