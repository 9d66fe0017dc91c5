//! The operations a node performs, and its replies: the whole vocabulary
//! between a round and a node.

/// An atomic operation on one node.
///
/// Each is compare-and-act on the lock key: only the holder of `token` can
/// extend or release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op<'a> {
    /// Set `key` to `token` with a TTL of `ttl_ms`, only if `key` is absent
    /// — or, for a `waiter`, kept for it ([`Waiter`]); a refused waiter
    /// stays in `line`.
    Acquire {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// Who holds it, for people (an inspection shows it): stored with
        /// the token, never compared (empty: none; see [`MAX_LABEL`]).
        label: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Whether a refusal must say how long the holder's key lives
        /// ([`Reply::Held`] with `Some` TTL): waiters sleep on it. Redis
        /// answers a plain acquire with one native `SET NX PX` and needs a
        /// script for this.
        holder_ttl: bool,
        /// The resource's line `[line, alive]` (empty: the lock has none).
        line: &'a [String],
        /// Who waits in `line`, if this is a waiter's attempt (then
        /// `holder_ttl` too).
        waiter: Option<Waiter<'a>>,
        /// Once per period: refused while the period's mark stands (with
        /// its TTL), and a grant sets the mark ([`Period`]).
        period: Option<Period<'a>>,
    },
    /// If `key` holds `token`, make it live at least `ttl_ms` from now
    /// (never shorter than it already does). With `restore`, a `key` that
    /// is absent is set again, to `token` (and `label`) for `ttl_ms`, and
    /// the answer is [`Reply::Restored`]: a node that lost the key (it
    /// restarted empty, or its clock ran ahead) holds it again. The driver
    /// sends `restore` only while the lock is valid (docs/design.md §4).
    Extend {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// The holder's label, stored with the token when `key` is set
        /// again (empty: none).
        label: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Set `key` again where it is absent.
        restore: bool,
    },
    /// If `key` holds `token`: keep it for the first waiter in `line`
    /// ([`Waiter`]), or delete it when no one waits.
    Release {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// The resource's line `[line, alive]` (empty: none).
        line: &'a [String],
        /// The holder's wait, if it waited in line (or a waiter giving up):
        /// it leaves the line, and a key kept for it is given on too.
        waiter: Option<Waiter<'a>>,
        /// A refused round's undo of a grant with a period: the mark's key
        /// ([`Period::key`]), deleted where it holds `token`. A release
        /// leaves the mark to stand its period.
        period: Option<&'a str>,
    },
    /// Release after a time ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)):
    /// if `key` holds `token`, its expiry becomes exactly `after_ms` from
    /// now (it stays until then, and is not reported released); otherwise
    /// nothing.
    ReleaseAfter {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// How long the key stays, in milliseconds.
        after_ms: u64,
    },
    /// Reentrant acquire: `key` is a hash of `{owner: hold count}` plus one
    /// entry per hold. Create it with count 1 if absent; if `owner` holds
    /// it, count + 1 (once per `hold`, however often this is applied) and make
    /// it live at least `ttl_ms`; otherwise refuse with the holder's TTL.
    AcquireReentrant {
        /// The lock key.
        key: &'a str,
        /// The owner's identity.
        owner: &'a str,
        /// Who holds it, for people (an inspection shows it): stored with
        /// the token, never compared (empty: none; see [`MAX_LABEL`]).
        label: &'a str,
        /// This hold's random token: what makes acquire and release of one
        /// hold happen at most once on a node.
        hold: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// If `owner` holds `key`, make it live at least `ttl_ms` from now.
    ExtendReentrant {
        /// The lock key.
        key: &'a str,
        /// The owner's identity.
        owner: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// If `hold` of `owner` is counted in `key`, count − 1 and forget the
    /// hold (so a second release of it changes nothing); delete `key` at
    /// zero.
    ReleaseReentrant {
        /// The lock key.
        key: &'a str,
        /// The owner's identity.
        owner: &'a str,
        /// The hold being given back.
        hold: &'a str,
    },
    /// Set every key in `keys` to `token` with a TTL of `ttl_ms` if none of
    /// them exists; otherwise set none and refuse with the smallest TTL.
    AcquireMany {
        /// The lock keys.
        keys: &'a [String],
        /// The holder's random token.
        token: &'a str,
        /// Who holds it, for people (an inspection shows it): stored with
        /// the token, never compared (empty: none; see [`MAX_LABEL`]).
        label: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// If every key holds `token`, make each live at least `ttl_ms`.
    ExtendMany {
        /// The lock keys.
        keys: &'a [String],
        /// The holder's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// Delete each of `keys` that holds `token`.
    ReleaseMany {
        /// The lock keys.
        keys: &'a [String],
        /// The holder's random token.
        token: &'a str,
    },
    /// Fenced acquire (phase 1): if `key` is absent, increment the counter
    /// `fence_key` and set `key` to `token` with a TTL of `ttl_ms`, answering
    /// [`Reply::Fence`] with the counter; otherwise refuse with the TTL.
    /// A `waiter` takes a key kept for it as free, as [`Op::Acquire`].
    AcquireFenced {
        /// The lock key.
        key: &'a str,
        /// The fencing counter's key (no TTL).
        fence_key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// Who holds it, for people (an inspection shows it): stored with
        /// the token, never compared (empty: none; see [`MAX_LABEL`]).
        label: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// The resource's line `[line, alive]` (empty: none).
        line: &'a [String],
        /// Who waits in `line`, if this is a waiter's attempt.
        waiter: Option<Waiter<'a>>,
        /// Once per period, as [`Op::Acquire`]'s.
        period: Option<Period<'a>>,
    },
    /// Fenced acquire (phase 2): if `key` still holds `token`, raise the
    /// counter `fence_key` to at least `fence`.
    FenceWriteBack {
        /// The lock key.
        key: &'a str,
        /// The fencing counter's key.
        fence_key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// The fencing token granted.
        fence: u64,
    },
    /// Read lock: `keys` are a resource's writer key, readers key (a sorted
    /// set of reader tokens scored by expiry, in the node's milliseconds),
    /// writer-intent key and line. If neither a writer nor a writer's intent
    /// stands (the readers' turn, [`READERS_TURN`], is no writer), add
    /// `token` as a reader for `ttl_ms`; otherwise refuse with the writer's
    /// (or the intent's) TTL, a `waiter` staying in line.
    AcquireRead {
        /// `[writer, readers, intent, line, alive]`.
        keys: &'a [String],
        /// The reader's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Who waits in line, if this is a waiter's attempt.
        waiter: Option<Waiter<'a>>,
    },
    /// If `token` is a live reader, make it live at least `ttl_ms` from now.
    ExtendRead {
        /// `[writer, readers, intent, line, alive]`.
        keys: &'a [String],
        /// The reader's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// Remove reader `token`.
    ReleaseRead {
        /// `[writer, readers, intent, line, alive]`.
        keys: &'a [String],
        /// The reader's random token.
        token: &'a str,
        /// The reader's wait, if it waited in line: it leaves the line.
        waiter: Option<Waiter<'a>>,
    },
    /// Write lock: if no writer and no live reader stands, set the writer
    /// key to `token` for `ttl_ms` (and clear any intent). If readers
    /// stand, mark a writer's intent — which refuses new readers — for as
    /// long as they live plus `ttl_ms` (never shorter than it stands),
    /// holding `intent`, and refuse with the readers' longest TTL; if a
    /// writer stands, refuse with its TTL. A write lock is extended as a
    /// plain one on the writer key. A `waiter` takes a writer key kept for
    /// it as free, and a refused one stays in line.
    AcquireWrite {
        /// `[writer, readers, intent, line, alive]`.
        keys: &'a [String],
        /// The writer's random token.
        token: &'a str,
        /// Who holds it, for people (an inspection shows it): stored with
        /// the token, never compared (empty: none; see [`MAX_LABEL`]).
        label: &'a str,
        /// What the intent holds: the same for every attempt of one wait
        /// (a node that missed some rounds holds an earlier one's mark, and
        /// the wait's release takes it back there too); a lone attempt's
        /// is its token.
        intent: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Who waits in line, if this is a waiter's attempt.
        waiter: Option<Waiter<'a>>,
    },
    /// Release a writer: the writer key if it holds `token` (kept for the
    /// first waiter in line, or deleted) and the writer-intent key if it
    /// holds `intent` (the intent is left on the nodes where readers
    /// refused the writer). [`Reply::Done`] when either was the writer's.
    ReleaseWrite {
        /// `[writer, readers, intent, line, alive]`.
        keys: &'a [String],
        /// The writer's random token.
        token: &'a str,
        /// Its wait's intent mark ([`Op::AcquireWrite`]'s `intent`).
        intent: &'a str,
        /// The writer's wait, if it waited in line: as [`Op::Release`]'s.
        waiter: Option<Waiter<'a>>,
    },
    /// A semaphore's permit: set the slot `keys[0]` to `token` for `ttl_ms`
    /// if it is free (or kept for `waiter`), and count `token` among the
    /// holders; [`Reply::PermitsDiffer`] when live holders on the node were
    /// granted under another permit count (nothing changes).
    AcquirePermit {
        /// `[slot, holders, count, line, alive]`: the slot, the holders (a
        /// sorted set of tokens scored by expiry), the permit count they
        /// were granted under, the semaphore's line.
        keys: &'a [String],
        /// The holder's random token.
        token: &'a str,
        /// Who holds it, for people (an inspection shows it): stored with
        /// the token, never compared (empty: none; see [`MAX_LABEL`]).
        label: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// The semaphore's permit count, as the caller knows it.
        permits: u32,
        /// Who waits in line, if this is a waiter's attempt.
        waiter: Option<Waiter<'a>>,
    },
    /// If the slot holds `token`, make it (and its place among the holders)
    /// live at least `ttl_ms` from now.
    ExtendPermit {
        /// As [`Op::AcquirePermit`]'s.
        keys: &'a [String],
        /// The holder's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// Leave the holders and, if the slot holds `token`, keep it for the
    /// first waiter in line or delete it.
    ReleasePermit {
        /// As [`Op::AcquirePermit`]'s.
        keys: &'a [String],
        /// The holder's random token.
        token: &'a str,
        /// The holder's wait, if it waited in line: as [`Op::Release`]'s.
        waiter: Option<Waiter<'a>>,
    },
    /// Read what the node holds under `keys`, all at once, changing
    /// nothing: [`Reply::Snapshot`]. The keys share one Redis Cluster slot.
    Inspect {
        /// The keys to read.
        keys: &'a [String],
    },
}

/// Once per period ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)):
/// a grant marks the period with a key of its own, set to the holder's
/// token for `ms`, apart from the lock key (whose TTL stays within
/// `max_ttl`). An acquire with a period is refused while the mark stands;
/// a release leaves it; only a refused round's undo takes it back
/// (docs/guarantees.md, "Once per period").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period<'a> {
    /// The mark's key (`{R}:period`, see [`KeyLayout::period_key`](crate::KeyLayout::period_key)).
    pub key: &'a str,
    /// How long the mark stands from the grant, in milliseconds.
    pub ms: u64,
}

/// A waiter's attempt, for fair waiting: refused, it stays in the lock's
/// line; a lock released while it is first in line is kept for it (as
/// [`KEPT`] followed by its name) for its patience, and no one else takes it
/// meanwhile (docs/design.md, "Fair waiting").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter<'a> {
    /// Who waits: random, the same for every attempt of one wait.
    pub id: &'a str,
    /// Its place in line, lowest first: the client's wall clock when the
    /// wait began (ms since the Unix epoch, at least 1).
    pub ticket: u64,
    /// How long a lock is kept for it, and how long past the holder's time
    /// left it stays in line without trying again (ms).
    pub patience_ms: u64,
}

impl Waiter<'_> {
    /// Its name in line: `w` (a lock, permit or writer) or `r` (a reader),
    /// its patience, `:` and its id; a lock kept for it holds [`KEPT`]
    /// followed by this.
    ///
    /// ```
    /// use redquorum::node::Waiter;
    /// let w = Waiter { id: "abc", ticket: 1, patience_ms: 250 };
    /// assert_eq!(w.name(false), "w250:abc");
    /// assert_eq!(w.name(true), "r250:abc");
    /// ```
    pub fn name(&self, reader: bool) -> String {
        let kind = if reader { 'r' } else { 'w' };
        format!("{kind}{}:{}", self.patience_ms, self.id)
    }
}

/// What a lock key kept for a waiter holds before the waiter's name.
pub const KEPT: &str = "\0line:";

/// What a read/write lock's writer key holds while the readers in line are
/// let in (a writer's release found a reader first in line).
pub const READERS_TURN: &str = "\0readers";

/// The longest label a hold may carry, in bytes: a label is for people
/// (who holds it: a host, a process), stored beside the token.
pub const MAX_LABEL: usize = 256;

/// The most waiters a line holds; past it a waiter is refused as before
/// but not kept in line (it may be served out of turn).
pub const MAX_LINE: usize = 1024;

impl<'a> Op<'a> {
    /// The operation's name, as its script is named (`acquire`,
    /// `release-write`…), for logs.
    ///
    /// ```
    /// use redquorum::node::Op;
    /// let op = Op::Release { key: "k", token: "t", line: &[], waiter: None, period: None };
    /// assert_eq!(op.name(), "release");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Op::Acquire { .. } => "acquire",
            Op::Extend { .. } => "extend",
            Op::Release { .. } => "release",
            Op::ReleaseAfter { .. } => "release-after",
            Op::AcquireFenced { .. } => "acquire-fenced",
            Op::FenceWriteBack { .. } => "fence-write-back",
            Op::AcquireReentrant { .. } => "acquire-reentrant",
            Op::ExtendReentrant { .. } => "extend-reentrant",
            Op::ReleaseReentrant { .. } => "release-reentrant",
            Op::AcquireMany { .. } => "acquire-many",
            Op::ExtendMany { .. } => "extend-many",
            Op::ReleaseMany { .. } => "release-many",
            Op::AcquireRead { .. } => "acquire-read",
            Op::ExtendRead { .. } => "extend-read",
            Op::ReleaseRead { .. } => "release-read",
            Op::AcquireWrite { .. } => "acquire-write",
            Op::ReleaseWrite { .. } => "release-write",
            Op::AcquirePermit { .. } => "acquire-permit",
            Op::ExtendPermit { .. } => "extend-permit",
            Op::ReleasePermit { .. } => "release-permit",
            Op::Inspect { .. } => "inspect",
        }
    }
}

/// A node's answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The operation took effect (set, extended, deleted).
    Done,
    /// [`Op::Extend`] with `restore` found the key absent and set it again:
    /// a yes, counted apart.
    Restored,
    /// An acquire found the key held; `pttl_ms` is its remaining TTL in
    /// milliseconds.
    Held {
        /// The remaining TTL; `None` when the key has no expiry, or when the
        /// operation did not ask ([`Op::Acquire`] without `holder_ttl`).
        pttl_ms: Option<u64>,
        /// For a waiter in line: how many waiters not yet served are ahead
        /// of it on this node, counted up to 64 (`None`: not in line).
        ahead: Option<u32>,
    },
    /// An extend, release or write-back found the key absent or held by
    /// another token (or owner).
    NotHeld,
    /// [`Op::AcquireFenced`] took the lease; the node's counter is now this.
    Fence(u64),
    /// [`Op::AcquirePermit`] found live holders granted under this permit
    /// count, not the one asked with: nothing changed.
    PermitsDiffer {
        /// The count the node's holders were granted under.
        permits: u32,
    },
    /// What [`Op::Inspect`] read.
    Snapshot(Snapshot),
}

/// What a node holds under some keys, read at once ([`Op::Inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The node's clock when it read them, in milliseconds (for Redis:
    /// `TIME`, since the Unix epoch): what the scores of a
    /// [`Stored::Scored`] key are compared with.
    pub now_ms: u64,
    /// Each key asked, in order.
    pub keys: Vec<Stored>,
}

impl Snapshot {
    /// A snapshot read at `now_ms`.
    pub fn new(now_ms: u64, keys: Vec<Stored>) -> Self {
        Snapshot { now_ms, keys }
    }
}

/// One key as a node holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stored {
    /// No such key.
    Absent,
    /// A string: a lock's token, a fencing counter.
    Text {
        /// Its value.
        value: Vec<u8>,
        /// Its time to live in ms; `None`: no expiry.
        pttl_ms: Option<u64>,
    },
    /// A hash: a reentrant lock's `{owner: hold count}`, plus one field per
    /// hold, named byte 255 followed by the hold's token.
    Hash {
        /// Its fields and values.
        fields: Vec<(Vec<u8>, Vec<u8>)>,
        /// Its time to live in ms; `None`: no expiry.
        pttl_ms: Option<u64>,
    },
    /// A sorted set: a read/write lock's readers, each scored by its expiry
    /// on the node's clock ([`Snapshot::now_ms`]).
    Scored {
        /// Its members and scores, lowest score first.
        members: Vec<(Vec<u8>, u64)>,
        /// Its time to live in ms; `None`: no expiry.
        pttl_ms: Option<u64>,
    },
    /// A key of another type, not written by redquorum.
    Other {
        /// Its type, as `TYPE` names it.
        kind: String,
    },
}
