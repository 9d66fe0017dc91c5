//! The random token that marks a lock's keys as ours.

use std::fmt;

use rand::Rng;

/// 128 bits from a CSPRNG, as 32 lowercase hex characters.
///
/// Every release and extend is compare-and-act against it, so a client can
/// only ever act on keys it set itself. Stored inline: no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Token([u8; 32]);

impl Token {
    /// A fresh token from the thread-local CSPRNG (ChaCha, seeded by the OS).
    pub(crate) fn random() -> Self {
        let mut raw = [0u8; 16];
        rand::rng().fill_bytes(&mut raw);
        Self::from_raw(raw)
    }

    /// A token from two random draws (a seeded client's are replayable).
    pub(crate) fn from_draws(a: u64, b: u64) -> Self {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&a.to_le_bytes());
        raw[8..].copy_from_slice(&b.to_le_bytes());
        Self::from_raw(raw)
    }

    fn from_raw(raw: [u8; 16]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for (i, b) in raw.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        Token(out)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A prefix identifies a lock in logs without handing out the token.
        write!(f, "Token({}…)", &self.as_str()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(
            a.as_str()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(Token::from_raw([0xab; 16]).as_str(), "ab".repeat(16));
    }
}
