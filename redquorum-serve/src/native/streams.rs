//! The own API's long-lived calls, each holding one of `max_held`
//! places for as long as it lasts: a leadership kept while its stream is
//! open ([`LockService::campaign`]), an election's leader observed
//! ([`LockService::observe`]), and the events of a kept lease or
//! leadership as a stream ([`LockService::keep_alive_events`],
//! [`LockService::campaign_events`]), which gRPC and HTTP both serve. All
//! end when the service closes.

use std::future::Future;

use futures::{Stream, StreamExt};
use redquorum::election::{Election, LeaderState, Leadership};
use redquorum::{AcquireOptions, LeaseOptions};
use tokio::sync::OwnedSemaphorePermit;

use super::{Failure, Lease, millis};
use crate::grpc::v1;
use crate::locks::LockService;

/// A leadership held for a stream: dropping it resigns.
#[derive(Debug)]
pub struct Leading {
    leadership: Leadership,
    _place: OwnedSemaphorePermit,
}

impl Leading {
    /// Resolves when the leadership is lost (`true`) or ended.
    pub async fn ended(&self) -> bool {
        self.leadership.lease().ended().await == redquorum::LeaseEnd::Lost
    }
}

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

/// The events of a kept lease or leadership: the grant, then, once `kept`
/// is lost (`lost` says so) or the service closes (`closed`), why. `kept`
/// lives in the stream's state, so a stream its caller drops ends it
/// (released or resigned).
fn lease_events(
    grant: v1::Grant,
    kept: impl Kept,
    closing: tokio::sync::watch::Receiver<bool>,
    lost: &'static str,
    closed: &'static str,
) -> impl Stream<Item = v1::LeaseEvent> + Send + 'static {
    let first = v1::LeaseEvent {
        event: Some(v1::lease_event::Event::Granted(grant)),
    };
    futures::stream::unfold(
        (Some(first), Some(kept), closing),
        move |(first, kept, mut closing)| async move {
            if let Some(first) = first {
                return Some((first, (None, kept, closing)));
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
            Some((event, (None, None, closing)))
        },
    )
}

impl LockService {
    /// [`keep_alive`](Self::keep_alive) as a stream of events: the grant,
    /// then `lost` if the lease could not be kept or the service closes.
    /// Dropping the stream releases the lock.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire)'s.
    pub async fn keep_alive_events(
        &self,
        req: &v1::AcquireRequest,
    ) -> Result<impl Stream<Item = v1::LeaseEvent> + Send + use<>, Failure> {
        let (grant, lease) = self.keep_alive(req).await?;
        Ok(lease_events(
            grant,
            lease,
            self.closing(),
            "the lease could not be kept alive: another holder may have it",
            "the service is shutting down: the lease is released",
        ))
    }

    /// [`campaign`](Self::campaign) as a stream of events: the leadership
    /// (its term in `fence`), then `lost` if it could not be kept or the
    /// service closes. Dropping the stream resigns.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire)'s.
    pub async fn campaign_events(
        &self,
        req: &v1::CampaignRequest,
    ) -> Result<impl Stream<Item = v1::LeaseEvent> + Send + use<>, Failure> {
        let (grant, leading) = self.campaign(req).await?;
        Ok(lease_events(
            grant,
            leading,
            self.closing(),
            "the leadership could not be kept: another may lead now",
            "the service is shutting down: the leadership is resigned",
        ))
    }

    /// Stands in `req.election`, waiting up to `wait_ms`, and leads until
    /// the [`Leading`] is dropped or lost.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire)'s.
    pub async fn campaign(
        &self,
        req: &v1::CampaignRequest,
    ) -> Result<(v1::Grant, Leading), Failure> {
        let _admitted = self.admit()?;
        let place = self.place()?;
        self.check_resource(&req.election)?;
        let ttl = self.ttl(req.ttl_ms)?;
        let mut options = AcquireOptions::new();
        if !req.label.is_empty() {
            self.check_label(&req.label)?;
            options = options.label(&req.label);
        }
        // 0 is one round (the library's campaign without a wait waits for
        // ever).
        options = options.wait(self.wait(req.wait_ms)?);
        let election =
            Election::new(self.redlock(), &req.election).map_err(redquorum::LockError::Input)?;
        let campaign = async {
            election
                .campaign_with(ttl, &options, &LeaseOptions::default())
                .await
                .map_err(|e| match e {
                    // One round asked: its own error, as an acquire's.
                    redquorum::LockError::Timeout { last, .. } if req.wait_ms == 0 => {
                        Failure::from(*last)
                    }
                    e => Failure::from(e),
                })
        };
        let leadership = self.unless_closing(campaign).await?;
        let lease = leadership.lease();
        let grant = v1::Grant {
            resource: req.election.clone(),
            token: lease.token().to_owned(),
            fence: Some(leadership.term()),
            valid_for_ms: u64::try_from(lease.remaining().as_millis()).unwrap_or(u64::MAX),
        };
        Ok((
            grant,
            Leading {
                leadership,
                _place: place,
            },
        ))
    }

    /// `req.election`'s leader now, then at every change, until the
    /// service closes or the stream is dropped.
    ///
    /// # Errors
    ///
    /// `invalid_argument` for an empty name; `too_many_requests` past
    /// `max_held` streams.
    pub fn observe(
        &self,
        req: &v1::ObserveRequest,
    ) -> Result<impl Stream<Item = v1::LeaderState> + Send + use<>, Failure> {
        let _admitted = self.admit()?;
        let place = self.place()?;
        self.check_resource(&req.election)?;
        let election =
            Election::new(self.redlock(), &req.election).map_err(redquorum::LockError::Input)?;
        let mut closing = self.closing();
        let until_closed = async move {
            let _ = closing.wait_for(|c| *c).await;
        };
        Ok(election
            .observe()
            .map(move |state| {
                let _held = &place; // the place lives as long as the stream
                leader_state(state)
            })
            .take_until(Box::pin(until_closed)))
    }
}

fn leader_state(state: LeaderState) -> v1::LeaderState {
    match state {
        LeaderState::Leading(leader) => v1::LeaderState {
            state: "leading".into(),
            term: Some(leader.term),
            label: leader.label,
            token_prefix: Some(leader.token_prefix),
            time_left_ms: leader.time_left.and_then(millis),
        },
        LeaderState::Vacant => v1::LeaderState {
            state: "vacant".into(),
            ..Default::default()
        },
        _ => v1::LeaderState {
            state: "unknown".into(),
            ..Default::default()
        },
    }
}
