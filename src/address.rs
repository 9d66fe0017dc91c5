//! Node addresses: parsing a URL, the name it is shown under, and the one
//! place where a URL given by the user is turned into text for output.
//!
//! A URL can carry a password in its user info (`redis://user:pw@host`), in
//! its query (`redis+unix:///run/redis.sock?pass=pw`), and — when the user
//! forgot to percent-encode it — spread over what a parser takes for the
//! path, query or fragment (`redis://:p#w@host` parses as host-less with the
//! fragment `w@host`). So nothing here ever echoes a URL as given: a node is
//! named from the parsed address (scheme, host, port, database), and a URL
//! that must be shown (in a [`ConfigError`] or `Debug`) goes through
//! [`redact`], which keeps only the parts that can never hold a secret.

use std::sync::Arc;

use crate::error::ConfigError;

/// A parsed, not yet connected node address.
#[derive(Clone)]
pub(crate) struct Address {
    client: redis::Client,
    name: Arc<str>,
    /// `redis+cluster://` or `rediss+cluster://`: the seed of a Redis
    /// Cluster that is one member.
    cluster: bool,
}

/// The schemes of a cluster member, and the scheme each one's nodes speak.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `redis::Client`'s own Debug prints the password.
        f.debug_tuple("Address").field(&self.name).finish()
    }
}

/// TLS material for `rediss://` nodes: a CA bundle to trust instead of the
/// system roots, and a client certificate for servers that require one
/// (mutual TLS). PEM bytes; see [`Builder::tls_ca`](crate::Builder::tls_ca).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsMaterial {
    pub(crate) ca: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    /// `#insecure` URLs are allowed (certificate verification off).
    pub(crate) accept_invalid: bool,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca.as_ref().map(|_| "custom"))
            .field("client_cert", &self.client.as_ref().map(|_| "set"))
            .field("accept_invalid", &self.accept_invalid)
            .finish()
    }
}

#[cfg(feature = "tls")]
impl TlsMaterial {
    /// The PEM given must hold what it is for: redis-rs would take an empty
    /// CA bundle for "trust nothing" and fail every handshake later.
    fn check(&self) -> Result<(), ConfigError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certificates = |pem: &[u8], what: &str| {
            let all: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
            match all {
                Ok(all) if !all.is_empty() => Ok(()),
                Ok(_) => Err(ConfigError::Tls(format!(
                    "{what}: no PEM certificate in it"
                ))),
                Err(e) => Err(ConfigError::Tls(format!("{what}: {e}"))),
            }
        };
        if let Some(ca) = &self.ca {
            certificates(ca, "CA bundle")?;
        }
        if let Some((cert, key)) = &self.client {
            certificates(cert, "client certificate")?;
            // The error names the problem, never the key's bytes.
            PrivateKeyDer::from_pem_slice(key)
                .map_err(|_| ConfigError::Tls("client key: no PEM private key in it".into()))?;
        }
        Ok(())
    }
}

impl Address {
    /// Parses `url`, with `tls` for a `rediss://` one (ignored otherwise);
    /// the error shows the URL [`redact`]ed.
    pub(crate) fn parse_with(url: &str, tls: &TlsMaterial) -> Result<Self, ConfigError> {
        let address = Self::parse_allowing(url, tls.accept_invalid)?;
        #[cfg(feature = "tls")]
        tls.check()?;
        #[cfg(feature = "tls")]
        if (tls.ca.is_some() || tls.client.is_some())
            && matches!(
                address.client.get_connection_info().addr(),
                redis::ConnectionAddr::TcpTls { .. }
            )
        {
            let certificates = redis::TlsCertificates {
                client_tls: tls
                    .client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                root_cert: tls.ca.clone(),
            };
            let info = address.client.get_connection_info().clone();
            let client = redis::Client::build_with_tls(info, certificates)
                .map_err(|e| ConfigError::Tls(without_detail(&e)))?;
            return Ok(Address { client, ..address });
        }
        #[cfg(not(feature = "tls"))]
        let _ = tls;
        Ok(address)
    }

    /// Parses `url`; the error shows it [`redact`]ed.
    ///
    /// An `@` after the authority is refused: it is a password with an
    /// unencoded `#`, `/` or `?` (`redis://p#w@host` parses as host `p`), and
    /// connecting would show the password as a host name.
    pub(crate) fn parse(url: &str) -> Result<Self, ConfigError> {
        Self::parse_allowing(url, false)
    }

    /// [`parse`](Self::parse), accepting `#insecure` if `insecure`.
    fn parse_allowing(url: &str, insecure: bool) -> Result<Self, ConfigError> {
        if url.contains('@') && !authority_ends_at_last_at(url) {
            return Err(ConfigError::InvalidUrl {
                url: redact(url),
                reason: "an '@' after the host: percent-encode '#', '/', '?' and '@' in the \
                         user name and password"
                    .to_owned(),
            });
        }
        // A cluster member's seed is a node like any other.
        let cluster = CLUSTER_SCHEMES
            .iter()
            .find_map(|(ours, theirs)| Some(format!("{theirs}{}", url.strip_prefix(ours)?)));
        let client = redis::Client::open(cluster.as_deref().unwrap_or(url)).map_err(|e| {
            ConfigError::InvalidUrl {
                url: redact(url),
                // redis-rs' parse errors name the part that is wrong, never the
                // URL; the detail (e.g. a bad `protocol=`) is left out all the
                // same, as it is part of the URL.
                reason: without_detail(&e),
            }
        })?;
        let info = client.get_connection_info();
        if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr()
            && !insecure
        {
            return Err(ConfigError::Insecure { url: redact(url) });
        }
        let db = info.redis_settings().db();
        let cluster = cluster.is_some();
        if cluster && (db != 0 || matches!(info.addr(), redis::ConnectionAddr::Unix(_))) {
            return Err(ConfigError::InvalidUrl {
                url: redact(url),
                reason: "a cluster member is named by one of its nodes' host and port, \
                         and a cluster has only database 0"
                    .to_owned(),
            });
        }
        let scheme = match (info.addr(), cluster) {
            (redis::ConnectionAddr::Tcp(..), false) => "redis://",
            (redis::ConnectionAddr::TcpTls { .. }, false) => "rediss://",
            (redis::ConnectionAddr::Tcp(..), true) => "redis+cluster://",
            (redis::ConnectionAddr::TcpTls { .. }, true) => "rediss+cluster://",
            _ => "unix:",
        };
        let name = if db == 0 {
            format!("{scheme}{}", info.addr())
        } else {
            format!("{scheme}{}/{db}", info.addr())
        };
        Ok(Address {
            client,
            name: name.into(),
            cluster,
        })
    }

    /// Whether certificate verification is off (`#insecure`).
    pub(crate) fn is_insecure(&self) -> bool {
        matches!(
            self.client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { insecure: true, .. }
        )
    }

    /// Whether this names a Redis Cluster (one member, many shards).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The node at `host:port` of the same cluster: the same scheme,
    /// credentials and TLS settings as this one, database 0.
    pub(crate) fn node_at(&self, host: &str, port: u16) -> Result<Address, redis::RedisError> {
        let info = self.client.get_connection_info();
        let mut addr = info.addr().clone();
        let scheme = if let redis::ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } = &mut addr
        {
            (*h, *p) = (host.to_owned(), port);
            "rediss://"
        } else {
            addr = redis::ConnectionAddr::Tcp(host.to_owned(), port);
            "redis://"
        };
        let name = format!("{scheme}{addr}");
        let client = redis::Client::open(info.clone().set_addr(addr))?;
        Ok(Address {
            client,
            name: name.into(),
            cluster: false,
        })
    }

    /// The host this address connects to (empty for a Unix socket).
    pub(crate) fn node_host(&self) -> String {
        match self.client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
                host.clone()
            }
            _ => String::new(),
        }
    }

    /// The client for this address (for other connections to the node).
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The node's display name: scheme, address and database, never a
    /// password. Two addresses with one name are the same node.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }
}

/// `url` with everything that could be a secret replaced by `***`: all the
/// user info (up to the *last* `@`, wherever it is), the whole query, and
/// any fragment but `#insecure`. A URL that does not parse shows its scheme
/// only. Over-masking is the point: this is for output, never for
/// connecting.
///
/// ```text
/// redis://user:pw@h:1/2      -> redis://***@h:1/2
/// redis+unix:///s?pass=pw    -> redis+unix:///s?***
/// redis://:p#w@h:1          -> redis://***
/// redis://:pw@               -> redis://***
/// ```
pub(crate) fn redact(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return match scheme_of(url) {
            Some(scheme) => format!("{scheme}://***"),
            None => "***".to_owned(),
        };
    };
    let mut out = format!("{}://", parsed.scheme());
    if url.contains('@') && !authority_ends_at_last_at(url) {
        // An '@' past the authority (in what parsed as the path, query or
        // fragment): anything before it may be part of a password, so show
        // no more than the scheme.
        out.push_str("***");
        return out;
    }
    if url.contains('@') || !parsed.username().is_empty() || parsed.password().is_some() {
        out.push_str("***@");
    }
    if let Some(host) = parsed.host_str() {
        out.push_str(host);
    }
    if let Some(port) = parsed.port() {
        out.push_str(&format!(":{port}"));
    }
    // A path is shown only where it cannot hold a password: a database
    // number, or any path of a URL without an '@' (a Unix socket's). A
    // password with a '/' can land in the path ("redis:/:/p@h" parses so).
    let path = parsed.path();
    let number = path.len() > 1 && path[1..].bytes().all(|b| b.is_ascii_digit());
    if path.is_empty() || path == "/" || number || !url.contains('@') {
        out.push_str(path);
    } else {
        out.push_str("/***");
    }
    // Not even the keys: an unencoded `&` in a password makes a key of it.
    if parsed.query().is_some() {
        out.push_str("?***");
    }
    match parsed.fragment() {
        None => {}
        Some("insecure") => out.push_str("#insecure"),
        Some(_) => out.push_str("#***"),
    }
    out
}

/// A redis-rs error's text without its detail, which for a URL error quotes
/// part of the URL.
fn without_detail(e: &redis::RedisError) -> String {
    let text = e.to_string();
    match e.detail() {
        Some(detail) => text.strip_suffix(detail).map_or_else(
            || e.category().to_owned(),
            |t| t.trim_end_matches([':', ' ']).to_owned(),
        ),
        None => text,
    }
}

/// The scheme of `url` if it starts like one (`letters+.-://`).
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once("://")?;
    let ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some(scheme)
}

/// Whether the last `@` of `url` ends its authority: no `/`, `?` or `#`
/// between `://` and it. (Then the parser saw the user info where it is.)
fn authority_ends_at_last_at(url: &str) -> bool {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return false;
    };
    let Some(at) = url.rfind('@') else {
        return true;
    };
    at >= start && !url[start..at].contains(['/', '?', '#'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_every_password_form() {
        for (url, shown) in [
            ("redis://:secret@h:1/0", "redis://***@h:1/0"),
            ("redis://user:secret@h:1", "redis://***@h:1"),
            ("redis://secret@h:1", "redis://***@h:1"),
            ("redis://h:1/0", "redis://h:1/0"),
            ("redis://:p#w@h:1", "redis://***"),
            ("redis://:p/w@h:1", "redis://***"),
            ("redis://:p?w@h:1", "redis://***"),
            ("redis://:pw@", "redis://***"),
            (
                "redis+unix:///run/r.sock?pass=pw&db=2",
                "redis+unix:///run/r.sock?***",
            ),
            ("unix:///run/r.sock?pass=pw", "unix:///run/r.sock?***"),
            ("rediss://h:1/#insecure", "rediss://h:1/#insecure"),
            ("rediss://h:1/#pw", "rediss://h:1/#***"),
            ("not a url", "***"),
            ("redis://h:1/a@b", "redis://***"),
            ("redis:/://pw@127.0.0.1:7001", "redis://***@/***"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn names_hide_passwords() {
        let t = Address::parse("redis://:pw@127.0.0.1:7001/2").unwrap();
        assert_eq!(&**t.name(), "redis://127.0.0.1:7001/2");
        assert!(!format!("{t:?}").contains("pw"));
        let t = Address::parse("redis+unix:///tmp/r.sock?pass=pw").unwrap();
        assert_eq!(&**t.name(), "unix:/tmp/r.sock");
    }

    #[test]
    fn cluster_members() {
        let t = Address::parse("redis+cluster://:pw@127.0.0.1:7301").unwrap();
        assert!(t.is_cluster());
        assert_eq!(&**t.name(), "redis+cluster://127.0.0.1:7301");
        let shard = t.node_at("127.0.0.1", 7302).unwrap();
        assert!(!shard.is_cluster());
        assert_eq!(&**shard.name(), "redis://127.0.0.1:7302");
        // The credentials go with it.
        assert_eq!(
            shard
                .client()
                .get_connection_info()
                .redis_settings()
                .password(),
            Some("pw")
        );
        assert!(!Address::parse("redis://h:1").unwrap().is_cluster());
        for url in [
            "redis+cluster://h:1/2",
            "redis+cluster://",
            "redis+cluster://:pw@",
        ] {
            assert!(
                matches!(Address::parse(url), Err(ConfigError::InvalidUrl { .. })),
                "{url}"
            );
        }
        assert_eq!(
            redact("rediss+cluster://u:pw@h:1"),
            "rediss+cluster://***@h:1"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_cluster_members_keep_their_scheme() {
        let t = Address::parse("rediss+cluster://h:6380").unwrap();
        assert_eq!(&**t.name(), "rediss+cluster://h:6380");
        assert_eq!(
            &**t.node_at("10.0.0.2", 6381).unwrap().name(),
            "rediss://10.0.0.2:6381"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn insecure_only_by_opt_in() {
        let url = "rediss://:pw@h:1/#insecure";
        match Address::parse(url) {
            Err(ConfigError::Insecure { url }) => assert!(!url.contains("pw")),
            other => panic!("{other:?}"),
        }
        let opted = TlsMaterial {
            accept_invalid: true,
            ..TlsMaterial::default()
        };
        assert!(Address::parse_with(url, &opted).unwrap().is_insecure());
    }

    #[test]
    fn rejects_malformed_urls() {
        for url in [
            "",
            "http://h:1",
            "redis://:pw@",
            "redis://h:notaport",
            "garbage",
            "redis://p#w@h:1",
            "redis://:p/w@h:1",
        ] {
            assert!(
                matches!(Address::parse(url), Err(ConfigError::InvalidUrl { .. })),
                "{url}"
            );
        }
    }
}
