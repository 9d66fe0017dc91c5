//! The own API's long-lived calls, each holding one of `max_held`
//! places for as long as it lasts: a leadership kept while its stream is
//! open ([`LockService::campaign`]) and an election's leader observed
//! ([`LockService::observe`]). Both end when the service closes.

use futures::{Stream, StreamExt};
use redquorum::election::{Election, LeaderState, Leadership};
use redquorum::{AcquireOptions, LeaseOptions};
use tokio::sync::OwnedSemaphorePermit;

use super::{Failure, millis};
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

impl LockService {
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
    ) -> Result<impl Stream<Item = v1::LeaderState> + Send + 'static, Failure> {
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
