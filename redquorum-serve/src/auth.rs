//! The API token: required on every address but loopback. A request
//! carries it as Dapr's SDKs do (`dapr-api-token: T`, set from
//! `DAPR_API_TOKEN`) or as `Authorization: Bearer T`; it is compared in
//! constant time and never logged or echoed. The health endpoints need
//! none (Dapr's do not), so that probes and SDKs waiting for the sidecar
//! work before they have it.

use std::fmt;
use std::sync::Arc;

/// A secret every request must carry.
#[derive(Clone)]
pub struct ApiToken(Arc<str>);

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(..)")
    }
}

impl ApiToken {
    /// The token `secret` (surrounding white space, a file's last newline,
    /// trimmed); `None` when that leaves nothing.
    pub fn new(secret: &str) -> Option<Self> {
        let secret = secret.trim();
        (!secret.is_empty()).then(|| ApiToken(secret.into()))
    }

    /// Whether a request carries the token, `header(name)` reading its
    /// headers (HTTP's, or gRPC's metadata: nothing is copied).
    pub(crate) fn admits<'a>(&self, header: impl Fn(&'static str) -> Option<&'a str>) -> bool {
        let dapr = header("dapr-api-token");
        let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer "));
        [dapr, bearer]
            .into_iter()
            .flatten()
            .any(|given| self.is(given))
    }

    /// Constant-time in the token's length: how much of a guess matches
    /// does not show in the time taken.
    fn is(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        let mut differ = a.len() ^ b.len();
        for (i, x) in a.iter().enumerate() {
            differ |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
        }
        differ == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request with the one header `name: value`.
    fn headers<'a>(name: &'a str, value: &'a str) -> impl Fn(&'static str) -> Option<&'a str> {
        move |asked| (asked == name).then_some(value)
    }

    #[test]
    fn the_token_is_taken_from_either_header_and_only_whole() {
        let token = ApiToken::new("s3cret\n").unwrap();
        assert!(token.admits(headers("dapr-api-token", "s3cret")));
        assert!(token.admits(headers("authorization", "Bearer s3cret")));
        for wrong in ["s3cre", "s3crett", "S3cret", ""] {
            assert!(!token.admits(headers("dapr-api-token", wrong)), "{wrong:?}");
        }
        assert!(!token.admits(headers("authorization", "s3cret")));
        assert!(!token.admits(|_| None));
        assert_eq!(format!("{token:?}"), "ApiToken(..)");
        assert!(ApiToken::new(" \n").is_none());
    }
}
