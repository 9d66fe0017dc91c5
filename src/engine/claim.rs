//! What a lock holds on each node: its keys, and the token (or reentrant
//! owner) that marks them as ours.

use crate::engine::token::Token;
use crate::proto::input::InputError;
use crate::proto::op::{Op, Period, Waiter};
use crate::proto::round::Step;

#[cfg(test)]
mod tests;

pub(crate) use crate::proto::call_keys::{Flavor, Keys};

/// One holder's claim on some keys: a fresh random token per acquisition
/// round, a reentrant owner's name with a fresh random token for this hold,
/// or an operator's token for another holder's lock.
#[derive(Debug)]
pub(crate) struct Claim {
    keys: Keys,
    mark: Mark,
    /// A writer's intent mark, where it differs from the token: drawn once
    /// per wait, the same for each of its attempts
    /// ([`Op::AcquireWrite`]'s `intent`).
    intent: Option<Token>,
    /// The wait this claim's acquire is an attempt of, if it waits in line.
    waiter: Option<InLine>,
    /// The holder's label, stored with the token where the keys carry one.
    label: Option<std::sync::Arc<str>>,
    /// A fenced lock's label and fence as its key stores them once granted
    /// (`label \0 fence`, see `fence_writeback.lua`): what a restore sets.
    stored: std::sync::OnceLock<Box<str>>,
    /// Held at least this long from its grant
    /// ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)).
    at_least: Option<std::time::Duration>,
    /// Held at least until then (set at the grant, from `at_least`): a
    /// release before it leaves the key to expire then (within the TTL),
    /// and a release of a claim never granted takes its period's mark
    /// back.
    keep_until: std::sync::OnceLock<tokio::time::Instant>,
    /// A release was made: no restore may follow it (see
    /// [`unless_released`](Claim::unless_released)).
    released: std::sync::Mutex<bool>,
}

/// A wait's place in line (fair waiting; see [`Waiter`]): drawn once per
/// wait, the same for each of its attempts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InLine {
    id: Token,
    ticket: u64,
    patience_ms: u64,
    /// The attempt follows releases that named this waiter: the lock is
    /// kept for it (no other round of its client can win it).
    kept: bool,
}

impl InLine {
    /// A wait whose place is `ticket` (at least 1: see [`Waiter::ticket`]),
    /// named by two random draws, whose waiter comes back within
    /// `patience`.
    pub(crate) fn new(ticket: u64, draws: (u64, u64), patience: std::time::Duration) -> Self {
        InLine {
            id: Token::from_draws(draws.0, draws.1),
            ticket: ticket.max(1),
            patience_ms: u64::try_from(patience.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
            kept: false,
        }
    }

    /// The same wait, its next attempt one the lock is kept for (`kept`).
    pub(crate) fn kept(self, kept: bool) -> Self {
        InLine { kept, ..self }
    }

    /// Its name in line (`r…` for a reader, `w…` else): what a release
    /// that keeps the lock for it names.
    pub(crate) fn name(&self, reader: bool) -> String {
        self.waiter().name(reader)
    }

    fn waiter(&self) -> Waiter<'_> {
        Waiter {
            id: self.id.as_str(),
            ticket: self.ticket,
            patience_ms: self.patience_ms,
        }
    }
}

/// What the keys hold for a claim.
#[derive(Debug)]
enum Mark {
    /// Drawn here, inline (no allocation).
    Random(Token),
    /// A reentrant owner, and this hold's own token: the owner name is
    /// shared by every hold, the hold token makes each hold's acquire and
    /// release happen at most once per node.
    Owner { owner: Box<str>, hold: Token },
    /// Given by the caller.
    Given(Box<str>),
}

impl Claim {
    /// A claim with a fresh random token.
    pub(crate) fn new(keys: Keys) -> Self {
        Claim {
            keys,
            mark: Mark::Random(Token::random()),
            intent: None,
            waiter: None,
            label: None,
            stored: std::sync::OnceLock::new(),
            at_least: None,
            keep_until: std::sync::OnceLock::new(),
            released: std::sync::Mutex::default(),
        }
    }

    /// A fenced lock was granted `fence`: its key, set again where a node
    /// lost it, carries the fence as the write-back stored it.
    pub(crate) fn granted_fence(&self, fence: u64) {
        let label = self.label.as_deref().unwrap_or_default();
        let _ = self.stored.set(format!("{label}\0{fence}").into());
    }

    /// The same claim, its lock kept at least `at_least` from its grant
    /// however soon it is released (plain and fenced locks: the release
    /// leaves the key to expire then).
    pub(crate) fn held_at_least(mut self, at_least: Option<std::time::Duration>) -> Self {
        self.at_least = at_least;
        self
    }

    /// Its round was granted now: a lock held at least a while is kept
    /// until then from here on (a release, the shutdown's too, leaves the
    /// key to expire then).
    pub(crate) fn granted(&self) {
        if let Some(at_least) = self.at_least {
            let _ = self.keep_until.set(tokio::time::Instant::now() + at_least);
        }
    }

    /// The same claim, its hold labelled `label` (see
    /// [`check_label`](crate::proto::input::check_label)).
    pub(crate) fn labeled(mut self, label: Option<&std::sync::Arc<str>>) -> Self {
        self.label = label.cloned();
        self
    }

    /// Whether its acquire is an attempt of a waiter the lock is kept for
    /// (woken by releases that named it).
    pub(crate) fn kept_for_it(&self) -> bool {
        self.waiter.is_some_and(|w| w.kept)
    }

    /// The same claim, a writer's attempt of a wait that marks its intent
    /// with `intent` (the same for each of its attempts), not this
    /// attempt's token.
    pub(crate) fn marking_intent(mut self, intent: Option<Token>) -> Self {
        self.intent = intent;
        self
    }

    /// The same claim, its acquire an attempt of `wait` in line (where its
    /// lock has a line).
    pub(crate) fn in_line(mut self, wait: Option<InLine>) -> Self {
        self.waiter = wait;
        self
    }

    /// A reentrant claim: the owner name is the token, and each claim is a
    /// hold of its own.
    pub(crate) fn owned(keys: Keys, owner: &str) -> Result<Self, InputError> {
        if owner.is_empty() {
            return Err(InputError::EmptyOwner);
        }
        Ok(Claim {
            keys,
            mark: Mark::Owner {
                owner: owner.into(),
                hold: Token::random(),
            },
            intent: None,
            waiter: None,
            label: None,
            stored: std::sync::OnceLock::new(),
            at_least: None,
            keep_until: std::sync::OnceLock::new(),
            released: std::sync::Mutex::default(),
        })
    }

    /// A claim on a plain or fenced lock by a token the caller already knows
    /// (an operator releasing another process's lock): stored as given, not
    /// checked against the random-token format.
    pub(crate) fn with_token(keys: Keys, token: &str) -> Result<Self, InputError> {
        Self::given(keys, token, InputError::EmptyToken)
    }

    fn given(keys: Keys, mark: &str, empty: InputError) -> Result<Self, InputError> {
        if mark.is_empty() {
            return Err(empty);
        }
        Ok(Claim {
            keys,
            mark: Mark::Given(mark.into()),
            intent: None,
            waiter: None,
            label: None,
            stored: std::sync::OnceLock::new(),
            at_least: None,
            keep_until: std::sync::OnceLock::new(),
            released: std::sync::Mutex::default(),
        })
    }

    /// Marks the claim released, before its release is made: a restore
    /// made after this point would set the key again behind the release.
    pub(crate) fn release_begins(&self) {
        *self
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    }

    /// Whether the claim's release has begun.
    pub(crate) fn is_released(&self) -> bool {
        *self
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `make` (which makes a restore's calls) unless the claim's
    /// release has begun, and so before that release is made: on every
    /// node the restore comes before the release. Whether it ran.
    pub(crate) fn unless_released(&self, make: impl FnOnce()) -> bool {
        let released = self
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *released {
            return false;
        }
        make();
        true
    }

    /// The channels a release of this claim may report on (its lock keys)
    /// and the nonce it reports there ([`wakeup`](crate::engine::wakeup)).
    pub(crate) fn notices(&self) -> (&[String], &str) {
        (self.keys.lock_keys(), self.hold())
    }

    /// The token of this hold (a reentrant claim's own; otherwise the token).
    fn hold(&self) -> &str {
        match &self.mark {
            Mark::Owner { hold, .. } => hold.as_str(),
            _ => self.token(),
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Whether its acquire is an attempt of a wait in its lock's line.
    pub(crate) fn waits_in_line(&self) -> bool {
        self.waiter.is_some()
            && match self.keys.flavor() {
                Flavor::Plain | Flavor::Fenced => !self.keys.line().is_empty(),
                Flavor::Read | Flavor::Write | Flavor::Permit => true,
                Flavor::Reentrant | Flavor::Many | Flavor::Inspect => false,
            }
    }

    /// What the keys hold: the given string, else the random token.
    pub(crate) fn token(&self) -> &str {
        match &self.mark {
            Mark::Random(token) => token.as_str(),
            Mark::Owner { owner, .. } => owner,
            Mark::Given(given) => given,
        }
    }

    /// How long the key must still stay at `now` (whole milliseconds,
    /// rounded up), when held at least until a time not yet come that is
    /// within `ttl_ms`: a key is never left for longer than the lock's TTL
    /// (within `max_ttl`, which a restarted node waits out); a longer rest
    /// of the period is the period mark's alone.
    fn kept_for_ms(&self, ttl_ms: u64, now: impl Fn() -> tokio::time::Instant) -> Option<u64> {
        let left = self.keep_until.get()?.saturating_duration_since(now());
        let ms = u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        (ms > 0 && ms <= ttl_ms).then_some(ms)
    }

    /// The period of a lock held at least a while, marked at its grant
    /// ([`Period`]).
    fn period(&self) -> Option<Period<'_>> {
        let ms = self.at_least?.as_millis();
        Some(Period {
            key: self.keys.period_key()?,
            ms: u64::try_from(ms).unwrap_or(u64::MAX),
        })
    }

    /// The operation a call of `step` writes at the time `now` gives, on a
    /// connection whose
    /// node is `quarantined` there — learnt by that connection's handshake,
    /// which may come after the round chose its steps (a node restarted and
    /// still reconnecting when an extension is made): an extension of a
    /// restorable lock then sets the key again where it is absent, and
    /// counts (docs/design.md §4b). Every other call is [`op`](Self::op)'s.
    pub(crate) fn op_on(
        &self,
        step: Step,
        ttl_ms: u64,
        quarantined: bool,
        now: impl Fn() -> tokio::time::Instant,
    ) -> Op<'_> {
        let step = match step {
            Step::Extend { restore: false } if quarantined && self.keys.restorable() => {
                Step::Extend { restore: true }
            }
            other => other,
        };
        self.op(step, ttl_ms, now)
    }

    /// The node operation for `step` on this claim, written at the time
    /// `now` gives (a release of a lock held at least until later leaves its
    /// key for the time left then). Pure: the caller gives the clock, read
    /// only for such a release — not on every call of the acquire round.
    pub(crate) fn op(
        &self,
        step: Step,
        ttl_ms: u64,
        now: impl Fn() -> tokio::time::Instant,
    ) -> Op<'_> {
        let keys = self.keys.lock_keys();
        let key = keys[0].as_str();
        let token = self.token();
        let hold = self.hold();
        let intent = self.intent.as_ref().map_or(token, Token::as_str);
        let fence_key = self.keys.fence_key().unwrap_or_default();
        let line = self.keys.line();
        let label = match (&self.label, self.keys.labeled()) {
            (Some(label), true) => &**label,
            _ => "",
        };
        // A lock with no line waits without one.
        let waiter = self.waiter.as_ref().map(InLine::waiter);
        let in_line = if line.is_empty() { None } else { waiter };
        match (self.keys.flavor(), step) {
            (Flavor::Inspect, _) | (_, Step::Inspect) => Op::Inspect { keys },
            (Flavor::Plain, Step::Acquire { holder_ttl }) => Op::Acquire {
                key,
                token,
                label,
                ttl_ms,
                holder_ttl: holder_ttl || in_line.is_some(),
                line,
                waiter: in_line,
                period: self.period(),
            },
            (Flavor::Fenced, Step::Acquire { .. }) => Op::AcquireFenced {
                key,
                fence_key,
                token,
                label,
                ttl_ms,
                line,
                waiter: in_line,
                period: self.period(),
            },
            // A plain or fenced lock's key is set again where a node lost
            // it, when the driver asks (docs/design.md §4).
            (Flavor::Plain | Flavor::Fenced, Step::Extend { restore }) => Op::Extend {
                key,
                token,
                label: self.stored.get().map_or(label, |stored| &**stored),
                ttl_ms,
                restore,
            },
            // A holder that waited leaves the line where it still stands;
            // a refused round's undo keeps its place for the retries.
            // Held at least until a time not yet come: the key stays until
            // then (computed as the release is written: a resend shortens it).
            (Flavor::Plain | Flavor::Fenced, Step::Release)
                if let Some(after_ms) = self.kept_for_ms(ttl_ms, &now) =>
            {
                Op::ReleaseAfter {
                    key,
                    token,
                    after_ms,
                }
            }
            // A granted lock's release leaves its period's mark to stand;
            // a round never granted to its caller (released by the
            // shutdown while in flight) takes it back.
            (Flavor::Plain | Flavor::Fenced, Step::Release) => Op::Release {
                key,
                token,
                line,
                waiter: in_line,
                period: match self.keep_until.get() {
                    Some(_) => None,
                    None => self.keys.period_key(),
                },
            },
            // A refused round takes back its period mark too.
            (Flavor::Plain | Flavor::Fenced, Step::Undo) => Op::Release {
                key,
                token,
                line,
                waiter: None,
                period: self.keys.period_key(),
            },
            (_, Step::WriteBack(fence)) => Op::FenceWriteBack {
                key,
                fence_key,
                token,
                fence,
            },
            (Flavor::Reentrant, Step::Acquire { .. }) => Op::AcquireReentrant {
                key,
                owner: token,
                label,
                hold,
                ttl_ms,
            },
            (Flavor::Reentrant, Step::Extend { .. }) => Op::ExtendReentrant {
                key,
                owner: token,
                ttl_ms,
            },
            (Flavor::Reentrant, Step::Release | Step::Undo) => Op::ReleaseReentrant {
                key,
                owner: token,
                hold,
            },
            (Flavor::Many, Step::Acquire { .. }) => Op::AcquireMany {
                keys,
                token,
                label,
                ttl_ms,
            },
            (Flavor::Many, Step::Extend { .. }) => Op::ExtendMany {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Many, Step::Release | Step::Undo) => Op::ReleaseMany { keys, token },
            (Flavor::Read, Step::Acquire { .. }) => Op::AcquireRead {
                keys,
                token,
                ttl_ms,
                waiter,
            },
            (Flavor::Read, Step::Extend { .. }) => Op::ExtendRead {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Read, Step::Release) => Op::ReleaseRead {
                keys,
                token,
                waiter,
            },
            (Flavor::Read, Step::Undo) => Op::ReleaseRead {
                keys,
                token,
                waiter: None,
            },
            (Flavor::Write, Step::Acquire { .. }) => Op::AcquireWrite {
                keys,
                token,
                label,
                intent,
                ttl_ms,
                waiter,
            },
            // The writer key is a plain lock's, but never set again: a node
            // that lost it may have readers now.
            (Flavor::Write, Step::Extend { .. }) => Op::Extend {
                key,
                token,
                label,
                ttl_ms,
                restore: false,
            },
            (Flavor::Write, Step::Release) => Op::ReleaseWrite {
                keys,
                token,
                intent,
                waiter,
            },
            // A refused round keeps the intent it marked, for its retries;
            // what it won goes to the first in line.
            (Flavor::Write, Step::Undo) => Op::Release {
                key,
                token,
                line: &keys[3..],
                waiter: None,
                period: None,
            },
            (Flavor::Permit, Step::Acquire { .. }) => Op::AcquirePermit {
                keys,
                token,
                label,
                ttl_ms,
                permits: self.keys.permits(),
                waiter,
            },
            (Flavor::Permit, Step::Extend { .. }) => Op::ExtendPermit {
                keys,
                token,
                ttl_ms,
            },
            (Flavor::Permit, Step::Release) => Op::ReleasePermit {
                keys,
                token,
                waiter,
            },
            (Flavor::Permit, Step::Undo) => Op::ReleasePermit {
                keys,
                token,
                waiter: None,
            },
        }
    }
}
