//! The own API's gRPC service, `redquorum.v1.Locks`, over a
//! [`LockService`]: each call as [`crate::native`] carries it out; a
//! failure is the status of its kind, with the typed
//! [`Failure`](crate::native::Failure) encoded in its details.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::v1;
use crate::auth::ApiToken;
use crate::locks::LockService;
use crate::native::{Leading, Lease};

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

/// A lease or a leadership that a stream keeps: ended when dropped.
trait Kept: Send + 'static {
    /// Resolves when it could not be kept (`true`: lost) or ended.
    fn ended(&self) -> impl Future<Output = bool> + Send + '_;
}

impl Kept for Lease {
    fn ended(&self) -> impl Future<Output = bool> + Send + '_ {
        Lease::ended(self)
    }
}

impl Kept for Leading {
    fn ended(&self) -> impl Future<Output = bool> + Send + '_ {
        Leading::ended(self)
    }
}

/// The stream of a kept-alive lease or a leadership: the grant, then,
/// once `kept` is lost (`lost` says so) or the service closes (`closed`),
/// why. `kept` lives in the stream's state, so a stream the caller closes
/// ends it (released or resigned).
fn lease_events(
    grant: v1::Grant,
    kept: impl Kept,
    closing: watch::Receiver<bool>,
    lost: &'static str,
    closed: &'static str,
) -> Events {
    let first = v1::LeaseEvent {
        event: Some(v1::lease_event::Event::Granted(grant)),
    };
    let events = futures::stream::unfold(
        (Some(first), Some(kept), closing),
        move |(first, kept, mut closing)| async move {
            if let Some(first) = first {
                return Some((Ok(first), (None, kept, closing)));
            }
            let kept = kept?;
            let why = tokio::select! {
                was_lost = kept.ended() => was_lost.then_some(lost),
                _ = closing.wait_for(|c| *c) => Some(closed),
            };
            drop(kept);
            let event = v1::LeaseEvent {
                event: Some(v1::lease_event::Event::Lost(why?.to_owned())),
            };
            Some((Ok(event), (None, None, closing)))
        },
    );
    Box::pin(events)
}

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
        let (grant, lease) = self.locks.keep_alive(request.get_ref()).await?;
        Ok(Response::new(lease_events(
            grant,
            lease,
            self.locks.closing(),
            "the lease could not be kept alive: another holder may have it",
            "the service is shutting down: the lease is released",
        )))
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
        let (grant, leading) = self.locks.campaign(request.get_ref()).await?;
        Ok(Response::new(lease_events(
            grant,
            leading,
            self.locks.closing(),
            "the leadership could not be kept: another may lead now",
            "the service is shutting down: the leadership is resigned",
        )))
    }

    type ObserveStream = Pin<Box<dyn Stream<Item = Result<v1::LeaderState, Status>> + Send>>;

    async fn observe(
        &self,
        request: Request<v1::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        self.authorize(&request)?;
        let states = self.locks.observe(request.get_ref())?;
        Ok(Response::new(Box::pin(futures::StreamExt::map(states, Ok))))
    }

    async fn inspect(
        &self,
        request: Request<v1::InspectRequest>,
    ) -> Result<Response<v1::Inspection>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.locks.inspect(request.get_ref()).await?))
    }
}
