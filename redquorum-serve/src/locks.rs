//! Dapr's lock semantics over a quorum of nodes, whatever the protocol
//! that carries them: [`LockService::try_lock`] and
//! [`LockService::unlock`]. `http` and `grpc` only translate.
//!
//! **Owners and tokens.** Every grant has a random token, as every
//! redquorum lock does; the owner is stored beside it on each node as the
//! hold's label, behind [`DAPR_LABEL`] (the own API refuses labels that
//! begin with it, so none of its locks passes for a Dapr owner's). An
//! unlock names the resource and the owner: the instance
//! that granted the lock knows its token; any other instance reads it
//! from the nodes ([`Redlock::inspect`]: the quorum's holder and its
//! label) and releases by that token. The owner is never the token: two
//! requests with the same owner (Dapr allows it) would then undo each
//! other's rounds (docs/serve.md, "Owners and tokens").
//!
//! **A lock outlives its request.** A grant is handed over
//! ([`redquorum::Lock::detach`]): this process does not release it when
//! the request ends, nor at shutdown. It ends by an unlock, or at its
//! expiry on the nodes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::inspect::Holder;
use redquorum::verdict::Verdict;
use redquorum::{LockError, LockOptions, Redlock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ServeError;
use crate::grants::{Grant, Grants};
use crate::limits::{Gate, Limits};
use crate::metrics;

/// What a Dapr owner's label begins with on the nodes: `dapr:` and the
/// owner. Labels given through the own API may not begin with it
/// (docs/serve.md, "Owners and tokens").
pub const DAPR_LABEL: &str = "dapr:";

/// The label `owner`'s locks carry.
fn dapr_label(owner: &str) -> String {
    format!("{DAPR_LABEL}{owner}")
}

/// A try-lock request (Dapr's `TryLockRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryLock {
    /// The lock store named (`--store`).
    pub store_name: String,
    /// The resource to lock.
    pub resource_id: String,
    /// Who holds it: the name an unlock must give.
    pub lock_owner: String,
    /// How long it lives unless released, in seconds: 1 to `max_ttl`.
    pub expiry_in_seconds: i64,
}

/// An unlock request (Dapr's `UnlockRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlock {
    /// The lock store named (`--store`).
    pub store_name: String,
    /// The resource to unlock.
    pub resource_id: String,
    /// The owner its try-lock gave.
    pub lock_owner: String,
}

/// What an unlock found (Dapr's `UnlockResponse.Status`, same numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum UnlockStatus {
    /// Released.
    Success = 0,
    /// No lock held on a quorum for the resource (never taken, released,
    /// or expired).
    LockDoesNotExist = 1,
    /// Held by another owner: nothing was released.
    LockBelongsToOthers = 2,
    /// Not decided: see the request's error instead.
    InternalError = 3,
}

/// The lock service: one client of the nodes, the grants this instance
/// made, and its bounds.
pub struct LockService {
    redlock: Redlock,
    stores: Vec<String>,
    max_ttl: Duration,
    limits: Limits,
    gate: Gate,
    /// The locks remembered through this instance, Dapr's and the own
    /// API's (grants, held locks, leases): `max_held` places.
    places: Arc<Semaphore>,
    grants: Mutex<Grants>,
    native: crate::native::Native,
}

impl std::fmt::Debug for LockService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("stores", &self.stores)
            .field("max_ttl", &self.max_ttl)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl LockService {
    /// A service over `redlock` (built with no retries: a try-lock is one
    /// round), answering for the lock stores named `stores`, with
    /// expiries of at most `max_ttl` (the client's).
    pub fn new(
        redlock: Redlock,
        stores: Vec<String>,
        max_ttl: Duration,
        limits: Limits,
    ) -> Arc<Self> {
        Arc::new(LockService {
            gate: Gate::new(&limits),
            // Clamped as Limits::check would refuse (no panic in tokio).
            places: Arc::new(Semaphore::new(limits.max_held.min(Semaphore::MAX_PERMITS))),
            grants: Mutex::new(Grants::new(limits.max_held_per_owner)),
            native: crate::native::Native::new(),
            redlock,
            stores,
            max_ttl,
            limits,
        })
    }

    /// The client of the nodes.
    pub fn redlock(&self) -> &Redlock {
        &self.redlock
    }

    /// The service's bounds.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The longest TTL granted (the deployment's `max_ttl`).
    pub fn max_ttl(&self) -> Duration {
        self.max_ttl
    }

    pub(crate) fn native(&self) -> &crate::native::Native {
        &self.native
    }

    /// Admits a request (the in-flight and rate bounds), or says which
    /// bound it met.
    pub(crate) fn admit(&self) -> Result<crate::limits::Admitted, ServeError> {
        self.gate.admit()
    }

    /// Tries to take the lock for `req.lock_owner`, once, without waiting:
    /// `Ok(true)` when granted, `Ok(false)` when held (by anyone, the same
    /// owner included, as Dapr's stores answer).
    ///
    /// # Errors
    ///
    /// [`ServeError::Malformed`] for bad input and
    /// [`ServeError::StoreNotFound`] for another store (nothing sent);
    /// [`ServeError::Busy`] at a bound; [`ServeError::TryLock`] when the
    /// nodes did not decide (nothing is held).
    ///
    /// # Cancel safety
    ///
    /// Dropped before it ends, the round is taken back by the library: no
    /// key is left for a lock nobody was told of.
    pub async fn try_lock(&self, req: &TryLock) -> Result<bool, ServeError> {
        let outcome = self.try_lock_admitted(req).await;
        metrics::request(
            "try_lock",
            match &outcome {
                Ok(true) => "granted",
                Ok(false) => "taken",
                Err(e) => e.code(),
            },
        );
        outcome
    }

    async fn try_lock_admitted(&self, req: &TryLock) -> Result<bool, ServeError> {
        let _admitted = self.gate.admit()?;
        self.check(&req.store_name, &req.resource_id, &req.lock_owner)?;
        let ttl = self.expiry(req.expiry_in_seconds)?;
        let owner: Arc<str> = req.lock_owner.as_str().into();
        // Both places before the round, given back if it grants nothing.
        let place = self.place()?;
        let reserved = self.reserve_owner(owner)?;
        let label = dapr_label(&req.lock_owner);
        let options = LockOptions::new().label(&label);
        match self
            .redlock
            .lock_with(&req.resource_id, ttl, &options)
            .await
        {
            Ok(lock) => {
                let deadline = lock.deadline();
                let token = lock.detach();
                reserved.fill(&req.resource_id, token, deadline, place);
                Ok(true)
            }
            Err(LockError::Taken { .. }) => Ok(false),
            Err(e) => Err(self.failed(e, ServeError::TryLock)),
        }
    }

    /// Releases the lock `req.resource_id` if `req.lock_owner` holds it.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock)'s, and [`ServeError::Unlock`] when
    /// the nodes did not decide (the lock may live on until it expires).
    ///
    /// # Cancel safety
    ///
    /// A release handed to the nodes is delivered whether or not this
    /// future is polled again; an inspection only reads.
    pub async fn unlock(&self, req: &Unlock) -> Result<UnlockStatus, ServeError> {
        let outcome = self.unlock_admitted(req).await;
        metrics::request(
            "unlock",
            match &outcome {
                Ok(UnlockStatus::Success) => "released",
                Ok(UnlockStatus::LockDoesNotExist) => "not_found",
                Ok(UnlockStatus::LockBelongsToOthers) => "others",
                Ok(UnlockStatus::InternalError) => "internal",
                Err(e) => e.code(),
            },
        );
        outcome
    }

    async fn unlock_admitted(&self, req: &Unlock) -> Result<UnlockStatus, ServeError> {
        let _admitted = self.gate.admit()?;
        self.check(&req.store_name, &req.resource_id, &req.lock_owner)?;
        let resource = req.resource_id.as_str();
        // The fast path: this instance granted it, to this owner.
        let known = {
            let grants = self.grants();
            let grant = grants.get(resource, Instant::now());
            grant
                .filter(|g| *g.owner == *req.lock_owner)
                .map(|g| g.token.clone())
        };
        if let Some(token) = known {
            let released = self.release_by_token(resource, &token).await?;
            self.forget(resource, &token);
            if released {
                return Ok(UnlockStatus::Success);
            }
            // Gone from every node (released through another instance, or
            // lapsed early): the nodes say whether the owner holds it anew.
        }
        let seen = self
            .redlock
            .inspect(resource)
            .await
            .map_err(|e| self.failed(e, ServeError::Unlock))?;
        match seen.verdict() {
            Verdict::Held {
                holder: Holder::Token(token),
                ..
            } => {
                if seen.label() != Some(dapr_label(&req.lock_owner).as_str()) {
                    return Ok(UnlockStatus::LockBelongsToOthers);
                }
                let released = self.release_by_token(resource, token).await?;
                self.forget(resource, token);
                Ok(if released {
                    UnlockStatus::Success
                } else {
                    UnlockStatus::LockDoesNotExist // it lapsed in between
                })
            }
            // A reentrant holder, a waiter's kept key, a foreign key: not a
            // Dapr lock, and not this owner's.
            Verdict::Held { .. } => Ok(UnlockStatus::LockBelongsToOthers),
            Verdict::Free { .. } | Verdict::NotHeld { .. } => Ok(UnlockStatus::LockDoesNotExist),
            Verdict::Unknown { reachable } => Err(ServeError::Unlock(format!(
                "only {reachable} of {} nodes answered: who holds it is unknown",
                self.redlock.nodes().len()
            ))),
        }
    }

    /// Releases `resource` by `token`: whether any node held it.
    async fn release_by_token(&self, resource: &str, token: &str) -> Result<bool, ServeError> {
        match self.redlock.release_token(resource, token).await {
            Ok(votes) => Ok(votes.yes() > 0),
            Err(e) => Err(self.failed(e, ServeError::Unlock)),
        }
    }

    /// Forgets this instance's grant of `resource` if it is `token`'s.
    fn forget(&self, resource: &str, token: &str) {
        let mut grants = self.grants();
        if grants
            .get(resource, Instant::now())
            .is_some_and(|g| g.token == token)
        {
            grants.remove(resource);
        }
        metrics::remembered(grants.len());
    }

    /// Closes the service to new requests; those under way run on, and
    /// kept-alive leases end (released).
    pub fn close(&self) {
        self.gate.close();
        self.native.close();
    }

    /// Resolves (`true`) once the service closes.
    pub(crate) fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.native.closing()
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.grants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place among the `max_held` locks remembered through this
    /// instance, taken before a round and held by what it grants. Places
    /// held by expired entries are freed (both tables swept) when none is
    /// left.
    pub(crate) fn place(&self) -> Result<OwnedSemaphorePermit, ServeError> {
        let take = || Arc::clone(&self.places).try_acquire_owned();
        if let Ok(place) = take() {
            return Ok(place);
        }
        let now = Instant::now();
        self.grants().forget_expired(now);
        self.native_sweep(now);
        take().map_err(|_| {
            ServeError::Busy(format!(
                "{} locks, leases, leaderships and observers held through this instance \
                 (--max-held)",
                self.limits.max_held
            ))
        })
    }

    /// Reserves one of `owner`'s grants, given back unless filled.
    fn reserve_owner(&self, owner: Arc<str>) -> Result<Reserved<'_>, ServeError> {
        if !self.grants().reserve(&owner, Instant::now()) {
            return Err(ServeError::Busy(format!(
                "{} locks held by this owner (--max-held-per-owner)",
                self.limits.max_held_per_owner
            )));
        }
        Ok(Reserved {
            service: self,
            owner: Some(owner),
        })
    }

    /// Checks the store and both names (Dapr's order: resource, owner, store).
    fn check(&self, store: &str, resource: &str, owner: &str) -> Result<(), ServeError> {
        let in_store = |e: ServeError| match e {
            ServeError::Malformed(why) => {
                ServeError::Malformed(format!("{why} in lock store {store}"))
            }
            other => other,
        };
        self.check_resource(resource).map_err(in_store)?;
        self.check_owner(owner).map_err(in_store)?;
        if !self.stores.iter().any(|s| s == store) {
            return Err(ServeError::StoreNotFound(store.to_owned()));
        }
        Ok(())
    }

    /// A resource name: not empty, at most `max_resource_bytes`.
    pub(crate) fn check_resource(&self, resource: &str) -> Result<(), ServeError> {
        if resource.is_empty() {
            return Err(ServeError::Malformed("ResourceId is empty".into()));
        }
        if resource.len() > self.limits.max_resource_bytes {
            return Err(ServeError::Malformed(format!(
                "ResourceId is longer than {} bytes",
                self.limits.max_resource_bytes
            )));
        }
        Ok(())
    }

    /// An owner (a label): not empty, at most `max_owner_bytes`, no NUL.
    pub(crate) fn check_owner(&self, owner: &str) -> Result<(), ServeError> {
        if owner.is_empty() {
            return Err(ServeError::Malformed("LockOwner is empty".into()));
        }
        if owner.len() > self.limits.max_owner_bytes || owner.contains('\0') {
            return Err(ServeError::Malformed(format!(
                "LockOwner is longer than {} bytes or has a NUL byte",
                self.limits.max_owner_bytes
            )));
        }
        Ok(())
    }

    /// The TTL for `seconds`: 1 to `max_ttl`.
    fn expiry(&self, seconds: i64) -> Result<Duration, ServeError> {
        if seconds <= 0 {
            return Err(ServeError::Malformed(
                "ExpiryInSeconds is not positive".into(),
            ));
        }
        let ttl = Duration::from_secs(seconds.unsigned_abs());
        if ttl > self.max_ttl {
            return Err(ServeError::Malformed(format!(
                "ExpiryInSeconds {seconds} is above the deployment's longest TTL ({} s, --max-ttl)",
                self.max_ttl.as_secs()
            )));
        }
        Ok(ttl)
    }

    /// A library error as the service's: bad input stays bad input.
    fn failed(&self, e: LockError, undecided: fn(String) -> ServeError) -> ServeError {
        match e {
            LockError::Input(e) => ServeError::Malformed(e.to_string()),
            LockError::ShutDown => ServeError::ShuttingDown,
            LockError::Busy { .. } => ServeError::Busy(e.to_string()),
            other => undecided(other.to_string()),
        }
    }
}

/// An owner's reserved grant: given back when dropped unfilled (the round
/// refused, failed, or dropped).
struct Reserved<'a> {
    service: &'a LockService,
    owner: Option<Arc<str>>,
}

impl Reserved<'_> {
    /// Fills the reservation with the grant made.
    fn fill(
        mut self,
        resource: &str,
        token: String,
        deadline: Instant,
        place: OwnedSemaphorePermit,
    ) {
        let Some(owner) = self.owner.take() else {
            return;
        };
        let mut grants = self.service.grants();
        grants.insert(
            resource,
            Grant {
                owner,
                token,
                deadline,
                _place: place,
            },
        );
        metrics::remembered(grants.len());
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.service.grants().unreserve(&owner);
        }
    }
}
