//! The Redis keys of a lock, defined once.
//!
//! By default a resource `R` is locked under `{R}:lock`; a fenced lock's
//! counter is `{R}:fence`. The braces make `R` the keys' hash tag, so both
//! share one Redis Cluster slot (unless `R` starts with `}`, which empties
//! the tag; see `proto::slot`). A [`KeyLayout`] may put a prefix in
//! front (`app:{R}:lock`), and in *interop* mode a plain lock's key is the
//! prefix and the resource name alone (`app:R`), as rslock, node-redlock and
//! redsync name theirs, so that their holders and redquorum's exclude each
//! other. Within one layout the mapping is injective: distinct resources
//! never share a key, whatever bytes they hold.
//!
//! ```
//! use redquorum::KeyLayout;
//!
//! let default = KeyLayout::default();
//! assert_eq!(default.lock_key("orders:42"), "{orders:42}:lock");
//! assert_eq!(default.fence_key("orders:42"), "{orders:42}:fence");
//!
//! let prefixed = KeyLayout::new("billing:", false)?;
//! assert_eq!(prefixed.lock_key("orders:42"), "billing:{orders:42}:lock");
//!
//! // Interop: plain locks use the resource name itself…
//! let interop = KeyLayout::new("", true)?;
//! assert_eq!(interop.plain_key("orders:42"), "orders:42");
//! // …while fenced, reentrant and multi-resource locks keep their layout.
//! assert_eq!(interop.lock_key("orders:42"), "{orders:42}:lock");
//! # Ok::<(), redquorum::InputError>(())
//! ```

use super::input::InputError;
pub use super::input::MAX_KEY_PREFIX;

/// How resources map to Redis keys: an optional prefix, and whether plain
/// locks use interop keys (see the [module docs](self)).
///
/// Set on the client with [`Builder::key_prefix`](crate::Builder::key_prefix)
/// and [`Builder::interop_keys`](crate::Builder::interop_keys); read back
/// with [`Redlock::key_layout`](crate::Redlock::key_layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: Box<str>,
    interop: bool,
}

impl KeyLayout {
    /// A layout with `prefix` in front of every key and, with `interop`,
    /// plain locks keyed by the resource name alone.
    ///
    /// The prefix may not hold `{` or `}` (it would take the hash tag away
    /// from the resource, and so a lock's keys from one cluster slot), and
    /// is at most [`MAX_KEY_PREFIX`] bytes: otherwise
    /// [`InputError::InvalidKeyPrefix`].
    ///
    /// ```
    /// use redquorum::{InputError, KeyLayout};
    /// assert!(KeyLayout::new("app:", true).is_ok());
    /// assert!(matches!(KeyLayout::new("{app}:", false), Err(InputError::InvalidKeyPrefix(_))));
    /// ```
    pub fn new(prefix: &str, interop: bool) -> Result<Self, InputError> {
        if prefix.len() > MAX_KEY_PREFIX || prefix.contains(['{', '}']) {
            return Err(InputError::InvalidKeyPrefix(prefix.to_owned()));
        }
        Ok(KeyLayout {
            prefix: prefix.into(),
            interop,
        })
    }

    /// The prefix in front of every key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether plain locks use interop keys.
    pub fn interop(&self) -> bool {
        self.interop
    }

    /// The key of a plain lock (`try_lock`, `lock`, `lock_with`) on
    /// `resource`: in interop mode the prefix and the resource alone,
    /// otherwise [`lock_key`](Self::lock_key).
    pub fn plain_key(&self, resource: &str) -> String {
        if self.interop {
            format!("{}{resource}", self.prefix)
        } else {
            self.lock_key(resource)
        }
    }

    /// The key of a fenced, reentrant or multi-resource lock on `resource`
    /// (and of a plain one, unless in interop mode): `{prefix}{R}:lock` with
    /// the braces around `R`.
    pub fn lock_key(&self, resource: &str) -> String {
        format!("{}{{{resource}}}:lock", self.prefix)
    }

    /// The key of redquorum's dataset mark, `{prefix}redquorum:dataset:2`:
    /// a hash saying since when the node's dataset has been continuous,
    /// stamped by clients that trust durable restarts, never expiring
    /// (docs/operations.md, "Trusting durable restarts"). The `:2`: the
    /// first mark (a string, the `run_id` the dataset was born in) is left
    /// alone.
    ///
    /// ```
    /// let layout = redquorum::KeyLayout::new("app:", false).unwrap();
    /// assert_eq!(layout.dataset_mark(), "app:redquorum:dataset:2");
    /// ```
    pub fn dataset_mark(&self) -> String {
        format!("{}redquorum:dataset:2", self.prefix)
    }

    /// The key of the deployment record, `{prefix}redquorum:deployment`: a
    /// hash with the node's id, the members and `max_ttl` every client of
    /// these nodes must agree on, never expiring (docs/agreement.md).
    ///
    /// ```
    /// let layout = redquorum::KeyLayout::new("app:", false).unwrap();
    /// assert_eq!(layout.deployment(), "app:redquorum:deployment");
    /// ```
    pub fn deployment(&self) -> String {
        format!("{}redquorum:deployment", self.prefix)
    }

    /// The fencing counter's key of `resource`: `{prefix}{R}:fence`.
    pub fn fence_key(&self, resource: &str) -> String {
        format!("{}{{{resource}}}:fence", self.prefix)
    }

    /// The line of waiters (fair waiting) of the lock on `resource` whose key
    /// is [`plain_key`](Self::plain_key) (`plain`) or
    /// [`lock_key`](Self::lock_key): `{R}:lock:line` and `{R}:lock:alive`
    /// (the prefix in front), or for an interop key `K`, `{K}:lock:line`
    /// and `{K}:lock:alive`. `None` where they would not share the lock
    /// key's Redis Cluster slot (a resource whose braces move the hash
    /// tag): such a lock waits without a line.
    pub(crate) fn line_keys(&self, resource: &str, plain: bool) -> Option<[String; 2]> {
        self.beside(resource, plain, ["lock:line", "lock:alive"])
    }

    /// The key of the period mark (once per period,
    /// [`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)) of
    /// the lock on `resource` whose key is [`plain_key`](Self::plain_key)
    /// (`plain`) or [`lock_key`](Self::lock_key): `{R}:period` (the prefix
    /// in front), or for an interop key `K`, `{K}:period`. `None` where it
    /// would not share the lock key's Redis Cluster slot (a resource that
    /// begins with `}`, or an interop key whose braces move the hash tag).
    ///
    /// ```
    /// let layout = redquorum::KeyLayout::new("app:", false).unwrap();
    /// assert_eq!(layout.period_key("nightly", true).as_deref(), Some("app:{nightly}:period"));
    /// let interop = redquorum::KeyLayout::new("app:", true).unwrap();
    /// assert_eq!(interop.period_key("nightly", true).as_deref(), Some("{app:nightly}:period"));
    /// assert_eq!(layout.period_key("}odd", true), None);
    /// ```
    pub fn period_key(&self, resource: &str, plain: bool) -> Option<String> {
        self.beside(resource, plain, ["period"]).map(|[key]| key)
    }

    /// Keys beside the lock on `resource` (see [`line_keys`](Self::line_keys)),
    /// one per role: `{R}:role` (the prefix in front), or for an interop key
    /// `K`, `{K}:role`; `None` where one would not share the lock key's
    /// Redis Cluster slot.
    fn beside<const N: usize>(
        &self,
        resource: &str,
        plain: bool,
        roles: [&str; N],
    ) -> Option<[String; N]> {
        let (key, keys) = if plain && self.interop {
            let key = self.plain_key(resource);
            let keys = roles.map(|role| format!("{{{key}}}:{role}"));
            (key, keys)
        } else {
            let p = &self.prefix;
            let keys = roles.map(|role| format!("{p}{{{resource}}}:{role}"));
            (self.lock_key(resource), keys)
        };
        let at = super::slot::slot(key.as_bytes());
        keys.iter()
            .all(|k| super::slot::slot(k.as_bytes()) == at)
            .then_some(keys)
    }

    /// The keys of a read/write lock on `resource`, in one hash slot: the
    /// writer key `{R}:writer`, the readers key `{R}:readers`, the
    /// writer-intent key `{R}:intent` and the lock's line, `{R}:rw:line`
    /// and `{R}:rw:alive` (with the prefix in front).
    ///
    /// ```
    /// let keys = redquorum::KeyLayout::default().rw_keys("doc");
    /// assert_eq!(
    ///     keys,
    ///     ["{doc}:writer", "{doc}:readers", "{doc}:intent", "{doc}:rw:line", "{doc}:rw:alive"]
    /// );
    /// ```
    pub fn rw_keys(&self, resource: &str) -> [String; 5] {
        ["writer", "readers", "intent", "rw:line", "rw:alive"]
            .map(|role| format!("{}{{{resource}}}:{role}", self.prefix))
    }

    /// The keys of slot `slot` of the semaphore `name`, in one hash slot:
    /// the slot `{S}:permit:k`, the holders `{S}:permits:holders`, the
    /// permit count `{S}:permits` and the line, `{S}:permits:line` and
    /// `{S}:permits:alive` (with the prefix in front).
    ///
    /// ```
    /// let keys = redquorum::KeyLayout::default().permit_keys("api", 2);
    /// assert_eq!(
    ///     keys,
    ///     [
    ///         "{api}:permit:2",
    ///         "{api}:permits:holders",
    ///         "{api}:permits",
    ///         "{api}:permits:line",
    ///         "{api}:permits:alive",
    ///     ]
    /// );
    /// ```
    pub fn permit_keys(&self, name: &str, slot: u32) -> [String; 5] {
        let p = &self.prefix;
        [
            format!("{p}{{{name}}}:permit:{slot}"),
            format!("{p}{{{name}}}:permits:holders"),
            format!("{p}{{{name}}}:permits"),
            format!("{p}{{{name}}}:permits:line"),
            format!("{p}{{{name}}}:permits:alive"),
        ]
    }

    /// How many bytes come before and after the resource in a key from
    /// [`plain_key`](Self::plain_key) (`plain`) or
    /// [`lock_key`](Self::lock_key).
    pub(crate) fn around(&self, plain: bool) -> (usize, usize) {
        if plain && self.interop {
            (self.prefix.len(), 0)
        } else {
            (self.prefix.len() + 1, "}:lock".len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource_of(layout: &KeyLayout, key: &str, plain: bool) -> String {
        let (before, after) = layout.around(plain);
        key[before..key.len() - after].to_owned()
    }

    #[test]
    fn round_trips_in_every_layout() {
        let layouts = [
            KeyLayout::default(),
            KeyLayout::new("app:", false).unwrap(),
            KeyLayout::new("", true).unwrap(),
            KeyLayout::new("app:", true).unwrap(),
        ];
        for layout in &layouts {
            for resource in ["orders:42", "a}b", "{", "}", "x:lock", "é"] {
                let plain = layout.plain_key(resource);
                assert_eq!(resource_of(layout, &plain, true), resource);
                let locked = layout.lock_key(resource);
                assert_eq!(resource_of(layout, &locked, false), resource);
                assert_ne!(locked, layout.fence_key(resource));
            }
        }
        assert_eq!(KeyLayout::default().lock_key("r"), "{r}:lock");
        assert_eq!(KeyLayout::default().fence_key("r"), "{r}:fence");
    }

    #[test]
    fn a_line_shares_its_lock_key_slot_or_there_is_none() {
        let slot = |k: &str| super::super::slot::slot(k.as_bytes());
        let default = KeyLayout::default();
        let line = default.line_keys("orders", true).unwrap();
        assert_eq!(line, ["{orders}:lock:line", "{orders}:lock:alive"]);
        let interop = KeyLayout::new("app:", true).unwrap();
        let line = interop.line_keys("orders", true).unwrap();
        assert_eq!(line, ["{app:orders}:lock:line", "{app:orders}:lock:alive"]);
        assert_eq!(slot(&line[0]), slot("app:orders"));
        // A fenced lock keeps the braced layout in interop mode too.
        let fenced = interop.line_keys("orders", false).unwrap();
        assert_eq!(
            fenced,
            ["app:{orders}:lock:line", "app:{orders}:lock:alive"]
        );
        for (layout, plain) in [(&default, true), (&interop, true), (&interop, false)] {
            for resource in ["a", "a{b}c", "}x", "{", "é"] {
                let key = if plain {
                    layout.plain_key(resource)
                } else {
                    layout.lock_key(resource)
                };
                if let Some(line) = layout.line_keys(resource, plain) {
                    assert!(line.iter().all(|k| slot(k) == slot(&key)), "{resource}");
                }
            }
        }
        assert_eq!(interop.line_keys("a{b}c", true), None);
    }

    #[test]
    fn bad_prefixes_are_refused() {
        for bad in ["{", "}", "a{b}", &"x".repeat(MAX_KEY_PREFIX + 1)] {
            assert_eq!(
                KeyLayout::new(bad, false),
                Err(InputError::InvalidKeyPrefix(bad.to_owned()))
            );
        }
        assert!(KeyLayout::new(&"x".repeat(MAX_KEY_PREFIX), false).is_ok());
    }
}
