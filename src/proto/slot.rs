//! Redis Cluster's key-to-slot mapping: which of the 16 384 hash slots a key
//! lives in (CRC16/XMODEM of its hash tag, modulo 16 384).
//!
//! A key's hash tag is what lies between its first `{` and the first `}`
//! after it, when that is not empty; otherwise the whole key. Every key of
//! one resource starts with `{resource}`, so the lock key and the fence
//! counter of a resource share a slot and each per-resource script runs on
//! one shard.
//!
//! ```text
//! slot("foo")                    = 12182
//! slot("{user1000}.following")   = slot("{user1000}.followers") = slot("user1000")
//! slot("{}x") hashes all of "{}x" (an empty tag is no tag)
//! ```

/// How many hash slots a cluster has.
pub(crate) const SLOTS: u16 = 16_384;

/// The slot of `key`.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

/// The part of `key` that is hashed.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis computes it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis() {
        // The check value of CRC16/XMODEM, and slots `CLUSTER KEYSLOT` gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b""), 0);
    }

    #[test]
    fn hash_tags() {
        let tagged = slot(b"user1000");
        assert_eq!(slot(b"{user1000}.following"), tagged);
        assert_eq!(slot(b"{user1000}.followers"), tagged);
        // The first `{` and the first `}` after it.
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}")); // whole key
        assert_ne!(hash_tag(b"foo{}{bar}"), b"bar");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{}x"), b"{}x");
        assert_eq!(hash_tag(b"{x"), b"{x");
    }

    #[test]
    fn a_resource_keys_share_a_slot() {
        for resource in ["orders", "a:b", "{tag}:1", "x}y", "{"] {
            let lock = format!("{{{resource}}}:lock");
            let fence = format!("{{{resource}}}:fence");
            assert_eq!(slot(lock.as_bytes()), slot(fence.as_bytes()), "{resource}");
        }
        // Resources that begin with one `{tag}` share a slot.
        assert_eq!(slot(b"{{tag}:1}:lock"), slot(b"{{tag}:2}:lock"));
    }
}
