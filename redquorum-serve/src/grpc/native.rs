//! The own API's gRPC service, `redquorum.v1.Locks`, over a
//! [`LockService`]: each call as [`crate::native`] carries it out; a
//! failure is the status of its kind, with the typed
//! [`Failure`](crate::native::Failure) encoded in its details.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::v1;
use crate::auth::ApiToken;
use crate::locks::LockService;

/// The `Locks` service.
#[derive(Debug, Clone)]
pub struct Locks {
    locks: Arc<LockService>,
    token: Option<ApiToken>,
}

impl Locks {
    /// The service for `locks`, requiring `token` if given.
    pub fn new(locks: Arc<LockService>, token: Option<ApiToken>) -> Self {
        Locks { locks, token }
    }

    /// Ready to be added to a tonic server.
    pub fn into_service(self) -> v1::locks_server::LocksServer<Self> {
        let limit = self.locks.limits().max_request_bytes;
        v1::locks_server::LocksServer::new(self).max_decoding_message_size(limit.saturating_mul(2))
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        super::authorize(self.token.as_ref(), request)
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<v1::LeaseEvent, Status>> + Send>>;

#[tonic::async_trait]
impl v1::locks_server::Locks for Locks {
    async fn acquire(
        &self,
        request: Request<v1::AcquireRequest>,
    ) -> Result<Response<v1::Grant>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.locks.acquire(request.get_ref()).await?))
    }

    async fn extend(
        &self,
        request: Request<v1::ExtendRequest>,
    ) -> Result<Response<v1::Grant>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.locks.extend(request.get_ref()).await?))
    }

    async fn release(
        &self,
        request: Request<v1::ReleaseRequest>,
    ) -> Result<Response<v1::ReleaseResponse>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.locks.release(request.get_ref()).await?))
    }

    type KeepAliveStream = Events;

    async fn keep_alive(
        &self,
        request: Request<v1::AcquireRequest>,
    ) -> Result<Response<Events>, Status> {
        self.authorize(&request)?;
        let events = self.locks.keep_alive_events(request.get_ref()).await?;
        Ok(Response::new(Box::pin(events.map(Ok))))
    }

    async fn list(
        &self,
        request: Request<v1::ListRequest>,
    ) -> Result<Response<v1::Listing>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.locks.list(request.get_ref()).await?))
    }

    type CampaignStream = Events;

    async fn campaign(
        &self,
        request: Request<v1::CampaignRequest>,
    ) -> Result<Response<Events>, Status> {
        self.authorize(&request)?;
        let events = self.locks.campaign_events(request.get_ref()).await?;
        Ok(Response::new(Box::pin(events.map(Ok))))
    }

    type ObserveStream = Pin<Box<dyn Stream<Item = Result<v1::LeaderState, Status>> + Send>>;

    async fn observe(
        &self,
        request: Request<v1::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        self.authorize(&request)?;
        let states = self.locks.observe(request.get_ref())?;
        Ok(Response::new(Box::pin(states.map(Ok))))
    }

    async fn inspect(
        &self,
        request: Request<v1::InspectRequest>,
    ) -> Result<Response<v1::Inspection>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.locks.inspect(request.get_ref()).await?))
    }
}
