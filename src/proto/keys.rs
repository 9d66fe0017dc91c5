//! The Redis keys of a lock, defined once.
//!
//! A resource `R` is locked under `{R}:lock`; a fenced lock's counter is
//! `{R}:fence`. The braces make `R` the keys' hash tag, so both share one
//! Redis Cluster slot (unless `R` starts with `}`, which empties the tag;
//! see [`slot`](super::slot)). The mapping is injective: distinct resources
//! never share a key, whatever bytes they hold.
//!
//! ```text
//! lock_key("orders:42")  = "{orders:42}:lock"
//! fence_key("orders:42") = "{orders:42}:fence"
//! resource_of("{orders:42}:lock") = "orders:42"
//! ```

/// The lock key of `resource` (not empty: see [`Keys`](crate::claim::Keys)).
pub(crate) fn lock_key(resource: &str) -> String {
    format!("{{{resource}}}:lock")
}

/// The fencing counter's key of `resource`.
pub(crate) fn fence_key(resource: &str) -> String {
    format!("{{{resource}}}:fence")
}

/// The resource a key from [`lock_key`] was made from.
pub(crate) fn resource_of(lock_key: &str) -> &str {
    lock_key
        .get(1..lock_key.len().saturating_sub(":lock".len() + 1))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for resource in ["orders:42", "a}b", "{", "}", "x:lock"] {
            assert_eq!(resource_of(&lock_key(resource)), resource);
            assert_ne!(lock_key(resource), fence_key(resource));
        }
        assert_eq!(lock_key("r"), "{r}:lock");
        assert_eq!(fence_key("r"), "{r}:fence");
    }
}
