//! The operations a node performs, and its replies: the whole vocabulary
//! between a round and a node.

/// An atomic operation on one node.
///
/// Each is compare-and-act on the lock key: only the holder of `token` can
/// extend or release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op<'a> {
    /// Set `key` to `token` with a TTL of `ttl_ms`, only if `key` is absent.
    Acquire {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
        /// Whether a refusal must say how long the holder's key lives
        /// ([`Reply::Held`] with `Some` TTL): waiters sleep on it. Redis
        /// answers a plain acquire with one native `SET NX PX` and needs a
        /// script for this.
        holder_ttl: bool,
    },
    /// If `key` holds `token`, make it live at least `ttl_ms` from now
    /// (never shorter than it already does). Never re-creates `key`.
    Extend {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// Delete `key` if it holds `token`.
    Release {
        /// The lock key.
        key: &'a str,
        /// The holder's random token.
        token: &'a str,
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
    AcquireFenced {
        /// The lock key.
        key: &'a str,
        /// The fencing counter's key (no TTL).
        fence_key: &'a str,
        /// The holder's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
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
    /// set of reader tokens scored by expiry, in the node's milliseconds)
    /// and writer-intent key. If neither a writer nor a writer's intent
    /// stands, add `token` as a reader for `ttl_ms`; otherwise refuse with
    /// the writer's (or the intent's) TTL.
    AcquireRead {
        /// `[writer, readers, intent]`.
        keys: &'a [String],
        /// The reader's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// If `token` is a live reader, make it live at least `ttl_ms` from now.
    ExtendRead {
        /// `[writer, readers, intent]`.
        keys: &'a [String],
        /// The reader's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// Remove reader `token`.
    ReleaseRead {
        /// `[writer, readers, intent]`.
        keys: &'a [String],
        /// The reader's random token.
        token: &'a str,
    },
    /// Write lock: if no writer and no live reader stands, set the writer
    /// key to `token` for `ttl_ms` (and clear any intent). If readers
    /// stand, mark a writer's intent — which refuses new readers — for as
    /// long as they live plus `ttl_ms` (never shorter than it stands),
    /// holding `token`, and refuse with the readers' longest TTL; if a
    /// writer stands, refuse with its TTL. A write lock is extended as a
    /// plain one on the writer key.
    AcquireWrite {
        /// `[writer, readers, intent]`.
        keys: &'a [String],
        /// The writer's random token.
        token: &'a str,
        /// Time to live in milliseconds.
        ttl_ms: u64,
    },
    /// Release a writer: delete the writer key and the writer-intent key,
    /// each only if it holds `token` (the intent is left on the nodes where
    /// readers refused the writer). [`Reply::Done`] when either was deleted.
    ReleaseWrite {
        /// `[writer, readers, intent]`.
        keys: &'a [String],
        /// The writer's random token.
        token: &'a str,
    },
    /// Read what the node holds under `keys`, all at once, changing
    /// nothing: [`Reply::Snapshot`]. The keys share one Redis Cluster slot.
    Inspect {
        /// The keys to read.
        keys: &'a [String],
    },
}

impl Op<'_> {
    /// The operation's name, as its script is named (`acquire`,
    /// `release-write`…), for logs.
    ///
    /// ```
    /// use redquorum::node::Op;
    /// assert_eq!(Op::Release { key: "k", token: "t" }.name(), "release");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Op::Acquire { .. } => "acquire",
            Op::Extend { .. } => "extend",
            Op::Release { .. } => "release",
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
            Op::Inspect { .. } => "inspect",
        }
    }

    /// The first key the operation touches (all of an operation's keys share
    /// one Redis Cluster slot).
    pub(crate) fn first_key(&self) -> &str {
        match *self {
            Op::Acquire { key, .. }
            | Op::Extend { key, .. }
            | Op::Release { key, .. }
            | Op::AcquireReentrant { key, .. }
            | Op::ExtendReentrant { key, .. }
            | Op::ReleaseReentrant { key, .. }
            | Op::AcquireFenced { key, .. }
            | Op::FenceWriteBack { key, .. } => key,
            Op::AcquireMany { keys, .. }
            | Op::ExtendMany { keys, .. }
            | Op::ReleaseMany { keys, .. }
            | Op::AcquireRead { keys, .. }
            | Op::ExtendRead { keys, .. }
            | Op::ReleaseRead { keys, .. }
            | Op::AcquireWrite { keys, .. }
            | Op::ReleaseWrite { keys, .. }
            | Op::Inspect { keys } => keys.first().map_or("", String::as_str),
        }
    }
}

/// A node's answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The operation took effect (set, extended, deleted).
    Done,
    /// An acquire found the key held; `pttl_ms` is its remaining TTL in
    /// milliseconds.
    Held {
        /// The remaining TTL; `None` when the key has no expiry, or when the
        /// operation did not ask ([`Op::Acquire`] without `holder_ttl`).
        pttl_ms: Option<u64>,
    },
    /// An extend, release or write-back found the key absent or held by
    /// another token (or owner).
    NotHeld,
    /// [`Op::AcquireFenced`] took the lease; the node's counter is now this.
    Fence(u64),
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
