//! Dapr's lock methods over gRPC: `dapr.proto.runtime.v1.Dapr/TryLockAlpha1`
//! and `/UnlockAlpha1`, the service and messages of Dapr's own definition
//! (proto/dapr/proto/runtime/v1/lock.proto), so that Dapr's SDKs call them
//! unchanged. Every other method of Dapr's service answers UNIMPLEMENTED.
//! Errors carry Dapr's codes: INVALID_ARGUMENT for bad input (malformed
//! protobuf included), INTERNAL when the nodes did not decide,
//! UNAUTHENTICATED without the token, RESOURCE_EXHAUSTED at a bound.

pub mod codec;
pub mod native;

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::auth::ApiToken;
use crate::locks::{LockService, TryLock, Unlock};

/// The messages and service generated from the `.proto`.
pub mod pb {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("dapr.proto.runtime.v1");
}

/// redquorum's own API (proto/redquorum/v1/locks.proto): its messages, and
/// the `Locks` service.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("redquorum.v1");
}

/// The Dapr service, over a [`LockService`].
#[derive(Debug, Clone)]
pub struct DaprLocks {
    locks: Arc<LockService>,
    token: Option<ApiToken>,
}

impl DaprLocks {
    /// The gRPC service for `locks`, requiring `token` if given.
    pub fn new(locks: Arc<LockService>, token: Option<ApiToken>) -> Self {
        DaprLocks { locks, token }
    }

    /// The service, ready to be added to a tonic server.
    pub fn into_service(self) -> pb::dapr_server::DaprServer<Self> {
        let limit = self.locks.limits().max_request_bytes;
        codec::set_max_message(limit);
        // Above the codec's own bound, which answers INVALID_ARGUMENT.
        pb::dapr_server::DaprServer::new(self).max_decoding_message_size(limit.saturating_mul(2))
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        authorize(self.token.as_ref(), request)
    }
}

/// Lets a call through when no token is required or it carries the token
/// (both services' check).
pub(crate) fn authorize<T>(token: Option<&ApiToken>, request: &Request<T>) -> Result<(), Status> {
    match token {
        Some(token)
            if !token.admits(|name| request.metadata().get(name).and_then(|v| v.to_str().ok())) =>
        {
            Err(crate::error::ServeError::Unauthorized.into())
        }
        _ => Ok(()),
    }
}

#[tonic::async_trait]
impl pb::dapr_server::Dapr for DaprLocks {
    async fn try_lock_alpha1(
        &self,
        request: Request<pb::TryLockRequest>,
    ) -> Result<Response<pb::TryLockResponse>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
        let req = TryLock {
            store_name: req.store_name,
            resource_id: req.resource_id,
            lock_owner: req.lock_owner,
            expiry_in_seconds: i64::from(req.expiry_in_seconds),
        };
        let success = self.locks.try_lock(&req).await?;
        Ok(Response::new(pb::TryLockResponse { success }))
    }

    async fn unlock_alpha1(
        &self,
        request: Request<pb::UnlockRequest>,
    ) -> Result<Response<pb::UnlockResponse>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
        let req = Unlock {
            store_name: req.store_name,
            resource_id: req.resource_id,
            lock_owner: req.lock_owner,
        };
        let status = self.locks.unlock(&req).await?;
        Ok(Response::new(pb::UnlockResponse {
            status: status as i32,
        }))
    }
}
