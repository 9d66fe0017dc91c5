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

use std::path::PathBuf;
use std::sync::Arc;

use crate::settings::config_error::ConfigError;

/// A parsed, not yet connected node address.
#[derive(Clone)]
pub(crate) struct Address {
    endpoint: Endpoint,
    name: Arc<str>,
    /// `redis+cluster://` or `rediss+cluster://`: the seed of a Redis
    /// Cluster that is one member.
    cluster: bool,
}

/// Where a node is and how to log in: what a connection needs.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) target: Target,
    /// `SELECT`ed after connecting, unless 0.
    pub(crate) db: u32,
    /// `AUTH [user] password`, when a password is given.
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) tls: Tls,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Endpoint")
            .field("target", &self.target)
            .field("db", &self.db)
            .field("user", &self.user)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// A node's transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

/// Whether a TCP node speaks TLS, and whether its certificate is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tls {
    Off,
    Verified,
    /// `#insecure`: certificate verification off (an explicit opt-in).
    Insecure,
}

/// The schemes of a cluster member, and the scheme each one's nodes speak.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// Redis' port, where a URL names none.
const DEFAULT_PORT: u16 = 6379;

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

impl Address {
    /// Parses `url`, accepting `#insecure` only with `tls.accept_invalid`;
    /// the error shows the URL [`redact`]ed.
    pub(crate) fn parse_with(url: &str, tls: &TlsMaterial) -> Result<Self, ConfigError> {
        Self::parse_allowing(url, tls.accept_invalid)
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
        let invalid = |reason: &str| ConfigError::InvalidUrl {
            url: redact(url),
            reason: reason.to_owned(),
        };
        if url.contains('@') && !authority_ends_at_last_at(url) {
            return Err(invalid(
                "an '@' after the host: percent-encode '#', '/', '?' and '@' in the \
                 user name and password",
            ));
        }
        // A cluster member's seed is a node like any other.
        let seed = CLUSTER_SCHEMES
            .iter()
            .find_map(|(ours, theirs)| Some(format!("{theirs}{}", url.strip_prefix(ours)?)));
        let cluster = seed.is_some();
        let parsed = url::Url::parse(seed.as_deref().unwrap_or(url)).map_err(|_| {
            invalid(if url.contains("://") {
                "not a URL"
            } else {
                "not a URL: write redis://HOST:PORT (rediss:// for TLS, redis+unix:// for a socket)"
            })
        })?;
        let endpoint = endpoint(&parsed).map_err(invalid)?;
        if endpoint.tls == Tls::Insecure && !insecure {
            return Err(ConfigError::Insecure { url: redact(url) });
        }
        if cfg!(not(feature = "tls")) && endpoint.tls != Tls::Off {
            return Err(invalid(
                "TLS needs redquorum's feature `tls` (on by default)",
            ));
        }
        if cluster && (endpoint.db != 0 || matches!(endpoint.target, Target::Unix(_))) {
            return Err(invalid(
                "a cluster member is named by one of its nodes' host and port, \
                 and a cluster has only database 0",
            ));
        }
        Ok(Address {
            name: name(&endpoint, cluster).into(),
            endpoint,
            cluster,
        })
    }

    /// Whether certificate verification is off (`#insecure`).
    pub(crate) fn is_insecure(&self) -> bool {
        self.endpoint.tls == Tls::Insecure
    }

    /// Whether this names a Redis Cluster (one member, many shards).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The node at `host:port` of the same cluster: the same scheme,
    /// credentials and TLS settings as this one, database 0.
    pub(crate) fn node_at(&self, host: &str, port: u16) -> Address {
        let endpoint = Endpoint {
            target: Target::Tcp {
                host: host.to_owned(),
                port,
            },
            db: 0,
            ..self.endpoint.clone()
        };
        Address {
            name: name(&endpoint, false).into(),
            endpoint,
            cluster: false,
        }
    }

    /// Where the node is and how to log in.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The node's display name: scheme, address and database, never a
    /// password. Two addresses with one name are the same node.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }
}

/// The endpoint a parsed URL names, or why it names none.
fn endpoint(url: &url::Url) -> Result<Endpoint, &'static str> {
    let decode =
        |text: &str| percent_decode(text).ok_or("the user name or password is not valid UTF-8");
    let query = |key: &str| {
        url.query_pairs()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    };
    let database = |db: &str| db.parse::<u32>().map_err(|_| "invalid database number");
    match url.scheme() {
        "redis" | "rediss" | "valkey" | "valkeys" => {
            let host = match url.host() {
                Some(url::Host::Domain(host)) => host.to_owned(),
                Some(url::Host::Ipv4(ip)) => ip.to_string(),
                Some(url::Host::Ipv6(ip)) => ip.to_string(),
                None => return Err("missing host name"),
            };
            if host == "0.0.0.0" || host == "::" {
                return Err("cannot connect to a wildcard address (0.0.0.0 or ::)");
            }
            let tls = match (matches!(url.scheme(), "rediss" | "valkeys"), url.fragment()) {
                (false, _) => Tls::Off,
                (true, None) => Tls::Verified,
                (true, Some("insecure")) => Tls::Insecure,
                (true, Some(_)) => return Err("only #insecure is supported as URL fragment"),
            };
            Ok(Endpoint {
                target: Target::Tcp {
                    host,
                    port: url.port().unwrap_or(DEFAULT_PORT),
                },
                db: match url.path().trim_matches('/') {
                    "" => 0,
                    db => database(db)?,
                },
                user: Some(url.username())
                    .filter(|u| !u.is_empty())
                    .map(decode)
                    .transpose()?,
                password: url.password().map(decode).transpose()?,
                tls,
            })
        }
        "unix" | "redis+unix" | "valkey+unix" => Ok(Endpoint {
            target: Target::Unix(url.to_file_path().map_err(|()| "missing path")?),
            db: query("db")
                .as_deref()
                .map(database)
                .transpose()?
                .unwrap_or(0),
            user: query("user"),
            password: query("pass"),
            tls: Tls::Off,
        }),
        _ => Err("not a redis://, rediss://, redis+unix:// or unix:// URL \
             (valkey:// and valkey+unix:// too), nor a redis+cluster:// member"),
    }
}

/// `text` percent-decoded, if that is UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)),
            _ => None,
        };
        match escaped {
            Some((hi, lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The name of a node: scheme, address and database.
fn name(endpoint: &Endpoint, cluster: bool) -> String {
    let at = match &endpoint.target {
        Target::Unix(path) => format!("unix:{}", path.display()),
        Target::Tcp { host, port } => {
            let scheme = match (endpoint.tls != Tls::Off, cluster) {
                (false, false) => "redis://",
                (true, false) => "rediss://",
                (false, true) => "redis+cluster://",
                (true, true) => "rediss+cluster://",
            };
            if host.contains(':') {
                format!("{scheme}[{host}]:{port}")
            } else {
                format!("{scheme}{host}:{port}")
            }
        }
    };
    if endpoint.db == 0 {
        at
    } else {
        format!("{at}/{}", endpoint.db)
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
        // An entry that cannot hold a password (no '@', no query, nothing
        // but what a host and port are made of) is shown as given: the
        // operator must see what they wrote (`127.0.0.1:7701`).
        let plain = url.len() <= 256
            && url
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".:-_[]/".contains(&b));
        return match (plain, scheme_of(url)) {
            (true, _) => url.to_owned(),
            (false, Some(scheme)) => format!("{scheme}://***"),
            (false, None) => "***".to_owned(),
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
            // Nothing that can hold a password: shown as written.
            ("127.0.0.1:7701", "127.0.0.1:7701"),
            ("pw@127.0.0.1:7701", "***"),
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
        let shard = t.node_at("127.0.0.1", 7302);
        assert!(!shard.is_cluster());
        assert_eq!(&**shard.name(), "redis://127.0.0.1:7302");
        // The credentials go with it.
        assert_eq!(shard.endpoint().password.as_deref(), Some("pw"));
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
            &**t.node_at("10.0.0.2", 6381).name(),
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
    fn parses_what_a_connection_needs() {
        let t = Address::parse("redis://us%40er:p%3Aw@[::1]:7001/3").unwrap();
        let e = t.endpoint();
        assert_eq!(
            e.target,
            Target::Tcp {
                host: "::1".into(),
                port: 7001
            }
        );
        assert_eq!(
            (e.db, e.user.as_deref(), e.password.as_deref()),
            (3, Some("us@er"), Some("p:w"))
        );
        assert_eq!(&**t.name(), "redis://[::1]:7001/3");
        let t = Address::parse("valkey://h").unwrap();
        assert_eq!(&**t.name(), "redis://h:6379");
        let t = Address::parse("unix:///run/r.sock?db=2&user=u&pass=p").unwrap();
        let e = t.endpoint();
        assert_eq!(e.target, Target::Unix("/run/r.sock".into()));
        assert_eq!(
            (e.db, e.user.as_deref(), e.password.as_deref()),
            (2, Some("u"), Some("p"))
        );
        assert_eq!(&**t.name(), "unix:/run/r.sock/2");
        assert!(!format!("{e:?}").contains("\"p\""));
        assert_eq!(percent_decode("a%2"), Some("a%2".into()));
        assert_eq!(percent_decode("%ff"), None);
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
            "redis://0.0.0.0:1",
            "redis://h:1/x",
            "redis+unix://",
        ] {
            assert!(
                matches!(Address::parse(url), Err(ConfigError::InvalidUrl { .. })),
                "{url}"
            );
        }
    }
}
