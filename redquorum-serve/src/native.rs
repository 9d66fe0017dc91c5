//! redquorum's own API, beyond Dapr's (proto/redquorum/v1/locks.proto):
//! acquires that wait, fencing tokens, extensions, leases kept alive for
//! as long as a stream stays open, releases by token and inspections —
//! the semantics, whatever the protocol; `grpc::native` and `http` only
//! translate.
//!
//! A grant is remembered by this instance, by token, until it expires or
//! is released (bounded by [`Limits::max_held`](crate::Limits::max_held)):
//! an extension goes through the instance that granted the lock; a release
//! by token works through any instance. Shutdown leaves granted locks to
//! their holders, as Dapr's (docs/serve.md); a kept-alive lease ends with
//! its stream.

mod failure;
mod held;
mod streams;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redquorum::inspect::Holder;
use redquorum::verdict::Verdict;
use redquorum::{AcquireOptions, KeepAlive, Lock, LockOptions, RwLock, Semaphore};
use tokio::sync::OwnedSemaphorePermit;

pub use failure::Failure;
use held::Held;
pub use streams::Leading;

use crate::grpc::v1;
use crate::locks::LockService;

/// The longest an acquire may wait: a caller waiting longer holds a
/// request (and a place among those in flight) for that long.
pub const MAX_WAIT: Duration = Duration::from_secs(15 * 60);

/// The own API's state beside the Dapr service's: the locks granted here.
#[derive(Debug)]
pub(crate) struct Native {
    held: Mutex<Held>,
    closing: tokio::sync::watch::Sender<bool>,
}

impl Native {
    pub(crate) fn new() -> Self {
        Native {
            held: Mutex::new(Held::default()),
            closing: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Ends every kept-alive lease (their streams say why).
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }

    pub(crate) fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }
}

/// A lease kept alive for a stream: dropping it releases the lock.
#[derive(Debug)]
pub struct Lease {
    keep_alive: KeepAlive,
    _place: OwnedSemaphorePermit,
}

impl Lease {
    /// Resolves when the lease could not be kept (`true`: lost) or ended.
    pub async fn ended(&self) -> bool {
        self.keep_alive.lease().ended().await == redquorum::LeaseEnd::Lost
    }
}

impl LockService {
    fn native_held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.native().held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the own API's expired locks, freeing their places.
    pub(crate) fn native_sweep(&self, now: Instant) {
        self.native_held().sweep(now);
    }

    /// Takes the lock, waiting up to `wait_ms` (0: one round).
    ///
    /// # Errors
    ///
    /// A [`Failure`] of kind `taken`, `timeout`, `unavailable`, `busy`,
    /// `expired`, `invalid_argument`, `too_many_requests` or
    /// `shutting_down`, with each node's answer where there are any.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits or asks, its rounds are taken back by the
    /// library; nothing is left held.
    pub async fn acquire(&self, req: &v1::AcquireRequest) -> Result<v1::Grant, Failure> {
        let _admitted = self.admit()?;
        let place = self.place()?;
        let lock = self.unless_closing(self.acquire_lock(req)).await?;
        let grant = grant(&req.resource, &lock);
        self.native_held().insert(&req.resource, lock, place);
        Ok(grant)
    }

    async fn acquire_lock(&self, req: &v1::AcquireRequest) -> Result<Lock, Failure> {
        self.check_resource(&req.resource)?;
        let ttl = self.ttl(req.ttl_ms)?;
        let mut options = AcquireOptions::new();
        if !req.label.is_empty() {
            self.check_label(&req.label)?;
            options = options.label(&req.label);
        }
        if req.wait_ms > 0 {
            options = options.wait(self.wait(req.wait_ms)?);
        }
        let redlock = self.redlock();
        let resource = req.resource.as_str();
        match (req.permits, mode(req.mode)?, req.fenced) {
            (0, v1::Mode::Exclusive, fenced) => {
                let mut lock = LockOptions::from(options);
                if fenced {
                    lock = lock.fenced();
                }
                redlock.lock_with(resource, ttl, &lock).await
            }
            (permits, v1::Mode::Exclusive, false) => {
                let semaphore = Semaphore::new(redlock, resource, permits).map_err(redquorum::LockError::Input)?;
                semaphore.acquire_with(ttl, &options).await.map(redquorum::Permit::into_lock)
            }
            (0, v1::Mode::Read, false) => rw(redlock, resource)?.read_with(ttl, &options).await,
            (0, v1::Mode::Write, false) => rw(redlock, resource)?.write_with(ttl, &options).await,
            _ => {
                return Err(Failure::invalid(
                    "fenced is for locks only, and permits and a read/write mode exclude each other",
                ));
            }
        }
        .map_err(Failure::from)
    }

    pub(crate) fn wait(&self, wait_ms: u64) -> Result<Duration, Failure> {
        let wait = Duration::from_millis(wait_ms);
        if wait > MAX_WAIT {
            return Err(Failure::invalid(format!(
                "waitMs {wait_ms} is above the longest wait ({} s)",
                MAX_WAIT.as_secs()
            )));
        }
        Ok(wait)
    }

    /// Extends a lock granted through this instance to `ttl_ms` from now.
    ///
    /// # Errors
    ///
    /// `not_found` when this instance holds no such lock (granted
    /// elsewhere, released, or expired); `expired` when the nodes no
    /// longer hold it; `unavailable` when too few answered (it stays valid
    /// until its deadline).
    ///
    /// # Cancel safety
    ///
    /// Dropped before it ends, the lock is given back to the table with
    /// its old deadline (nodes that got the extension keep the longer
    /// expiry, under its token).
    pub async fn extend(&self, req: &v1::ExtendRequest) -> Result<v1::Grant, Failure> {
        let _admitted = self.admit()?;
        self.check_resource(&req.resource)?;
        let ttl = self.ttl(req.ttl_ms)?;
        let Some(entry) = self
            .native_held()
            .take(&req.token, &req.resource, Instant::now())
        else {
            return Err(Failure::not_found(
                "no such lock granted through this instance: released, expired, or granted \
                 through another (extend through the instance that granted it)",
            ));
        };
        // Back in the table whatever happens to this future, unless the
        // nodes no longer hold it.
        let mut guard = Taken {
            resource: &req.resource,
            entry: Some(entry),
            service: self,
        };
        let lock = &mut guard.entry.as_mut().expect("just taken").lock;
        match lock.extend(ttl).await {
            Ok(()) => Ok(grant(&req.resource, lock)),
            Err(e @ redquorum::LockError::Expired { .. }) => {
                if let Some(entry) = guard.entry.take() {
                    let _ = entry.lock.detach(); // gone from the nodes: nothing to release
                }
                Err(Failure::from(e))
            }
            Err(e) => Err(Failure::from(e)),
        }
    }

    /// Releases `token`'s lock wherever it is held (through any instance).
    ///
    /// # Errors
    ///
    /// `unavailable` when fewer than a quorum answered (its keys live on
    /// where they were not deleted, until their TTL); `invalid_argument`.
    ///
    /// # Cancel safety
    ///
    /// Each node's release is handed over at the first poll and happens at
    /// most once.
    pub async fn release(&self, req: &v1::ReleaseRequest) -> Result<v1::ReleaseResponse, Failure> {
        let _admitted = self.admit()?;
        self.check_resource(&req.resource)?;
        if req.token.is_empty() {
            return Err(Failure::invalid("token is empty"));
        }
        let redlock = self.redlock();
        let votes = match (req.permits, mode(req.mode)?) {
            (0, v1::Mode::Exclusive) => redlock.release_token(&req.resource, &req.token).await,
            (permits, v1::Mode::Exclusive) => {
                let semaphore = Semaphore::new(redlock, &req.resource, permits)
                    .map_err(redquorum::LockError::Input)?;
                semaphore.release_token(&req.token).await
            }
            (0, _) => rw(redlock, &req.resource)?.release_token(&req.token).await,
            _ => {
                return Err(Failure::invalid(
                    "permits and a read/write mode exclude each other",
                ));
            }
        }
        .map_err(Failure::from)?;
        // Released somewhere: this instance no longer keeps it. An
        // undecided release, or one that released nothing (a release of
        // another kind than the acquire's leaves the lock held), leaves it
        // here, to be extended or released again.
        if votes.yes() > 0
            && let Some(entry) = self
                .native_held()
                .take(&req.token, &req.resource, Instant::now())
        {
            let _ = entry.lock.detach(); // released by token above
        }
        Ok(v1::ReleaseResponse {
            released_on: u32::try_from(votes.yes()).unwrap_or(u32::MAX),
            nodes: u32::try_from(self.redlock().nodes().len()).unwrap_or(u32::MAX),
        })
    }

    /// Takes the lock and keeps it alive until the [`Lease`] is dropped
    /// or lost.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire)'s.
    pub async fn keep_alive(
        &self,
        req: &v1::AcquireRequest,
    ) -> Result<(v1::Grant, Lease), Failure> {
        let _admitted = self.admit()?;
        let place = self.place()?;
        let lock = self.unless_closing(self.acquire_lock(req)).await?;
        let grant = grant(&req.resource, &lock);
        let keep_alive = lock.keep_alive().map_err(Failure::from)?;
        Ok((
            grant,
            Lease {
                keep_alive,
                _place: place,
            },
        ))
    }

    /// What every node holds for `resource`, and the verdict.
    ///
    /// # Errors
    ///
    /// `unavailable` when fewer than a quorum answered; `invalid_argument`.
    pub async fn inspect(&self, req: &v1::InspectRequest) -> Result<v1::Inspection, Failure> {
        let _admitted = self.admit()?;
        self.check_resource(&req.resource)?;
        let seen = self
            .redlock()
            .inspect(&req.resource)
            .await
            .map_err(Failure::from)?;
        let verdict = match seen.verdict() {
            Verdict::Held { .. } => "held",
            Verdict::Free { .. } => "free",
            Verdict::NotHeld { .. } => "not_held",
            Verdict::Unknown { .. } => "unknown",
        };
        let nodes = seen
            .nodes()
            .iter()
            .map(|view| match &view.read {
                Ok(holding) => v1::NodeRead {
                    node: view.node.clone(),
                    holder: holding.holder.as_ref().map(holder).unwrap_or_default(),
                    time_left_ms: holding.time_left.and_then(millis),
                    error: String::new(),
                },
                Err(e) => v1::NodeRead {
                    node: view.node.clone(),
                    error: e.to_string(),
                    ..Default::default()
                },
            })
            .collect();
        Ok(v1::Inspection {
            resource: req.resource.clone(),
            verdict: verdict.to_owned(),
            quorum: u32::try_from(seen.quorum()).unwrap_or(u32::MAX),
            label: seen.label().map(str::to_owned),
            fence: seen.fence(),
            nodes,
        })
    }

    /// What is held on a quorum, by name pattern (`*`: any run).
    ///
    /// # Errors
    ///
    /// `invalid_argument` for an empty pattern or a limit of 0 or above
    /// the library's; a node that cannot be scanned is named in the answer.
    pub async fn list(&self, req: &v1::ListRequest) -> Result<v1::Listing, Failure> {
        let _admitted = self.admit()?;
        let limit = usize::try_from(req.limit).unwrap_or(usize::MAX);
        let listing = self
            .redlock()
            .list(&req.pattern, limit)
            .await
            .map_err(Failure::from)?;
        Ok(v1::Listing {
            held: listing
                .held
                .iter()
                .map(|l| v1::Listed {
                    resource: l.resource.clone(),
                    kind: l.kind.name().to_owned(),
                    label: l.label.clone(),
                    holder: l.holder.clone(),
                    time_left_ms: l.time_left.and_then(millis),
                    nodes: u32::try_from(l.nodes).unwrap_or(u32::MAX),
                    fence: l.fence,
                    holds: u32::try_from(l.holds).unwrap_or(u32::MAX),
                })
                .collect(),
            complete: listing.complete,
            unscanned: listing
                .unscanned
                .iter()
                .map(|(node, e)| format!("{node}: {e}"))
                .collect(),
        })
    }

    /// Forgets every lock this API granted, leaving each to its holder
    /// (shutdown).
    pub(crate) fn leave_granted(&self) {
        self.native_held().leave_all();
    }

    /// `future`'s outcome, or `shutting_down` once the service closes: a
    /// wait (up to [`MAX_WAIT`]) never holds a shutdown back. Dropping the
    /// acquire is safe: the library takes its rounds back.
    pub(crate) async fn unless_closing<T>(
        &self,
        future: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        let mut closing = self.closing();
        tokio::select! {
            outcome = future => outcome,
            _ = closing.wait_for(|closed| *closed) => {
                Err(Failure::from(crate::ServeError::ShuttingDown))
            }
        }
    }

    /// A label given through the own API: at most the library's longest,
    /// no NUL byte, and not in Dapr owners' namespace
    /// ([`DAPR_LABEL`](crate::DAPR_LABEL)), so that a Dapr unlock
    /// never takes one of these locks for its owner's.
    pub(crate) fn check_label(&self, label: &str) -> Result<(), Failure> {
        use crate::locks::DAPR_LABEL;
        if label.starts_with(DAPR_LABEL) {
            return Err(Failure::invalid(format!(
                "a label may not begin with {DAPR_LABEL:?}: Dapr owners' locks carry it"
            )));
        }
        if label.len() > redquorum::node::MAX_LABEL || label.contains('\0') {
            return Err(Failure::invalid(format!(
                "label is longer than {} bytes or has a NUL byte",
                redquorum::node::MAX_LABEL
            )));
        }
        Ok(())
    }

    pub(crate) fn ttl(&self, ms: u64) -> Result<Duration, Failure> {
        let ttl = Duration::from_millis(ms);
        if ms == 0 || ttl > self.max_ttl() {
            return Err(Failure::invalid(format!(
                "ttlMs {ms} is not within 1 ms and the deployment's longest TTL ({} ms, --max-ttl)",
                self.max_ttl().as_millis()
            )));
        }
        Ok(ttl)
    }
}

/// A lock taken out of the table for an extension: put back when dropped.
struct Taken<'a> {
    resource: &'a str,
    entry: Option<held::Entry>,
    service: &'a LockService,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            let held::Entry { lock, place, .. } = entry;
            self.service
                .native_held()
                .insert(self.resource, lock, place);
        }
    }
}

fn mode(mode: i32) -> Result<v1::Mode, Failure> {
    v1::Mode::try_from(mode).map_err(|_| Failure::invalid(format!("mode {mode} is not 0, 1 or 2")))
}

fn rw(redlock: &redquorum::Redlock, name: &str) -> Result<RwLock, redquorum::LockError> {
    RwLock::new(redlock, name).map_err(redquorum::LockError::Input)
}

fn grant(resource: &str, lock: &Lock) -> v1::Grant {
    v1::Grant {
        resource: resource.to_owned(),
        token: lock.token().to_owned(),
        fence: lock.fence(),
        valid_for_ms: u64::try_from(lock.remaining().as_millis()).unwrap_or(u64::MAX),
    }
}

/// A holder as an inspection shows it: a token's first 8 characters only
/// (a whole token releases the lock), other holders as they are.
fn holder(holder: &Holder) -> String {
    match holder {
        Holder::Token(t) | Holder::Kept(t) => t.chars().take(8).collect(),
        Holder::Owner(t) | Holder::Foreign(t) => t.clone(),
        other => format!("{other:?}"),
    }
}

pub(crate) fn millis(left: redquorum::inspect::TimeLeft) -> Option<u64> {
    match left {
        redquorum::inspect::TimeLeft::For(d) => u64::try_from(d.as_millis()).ok(),
        _ => None,
    }
}
