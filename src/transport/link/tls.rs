//! TLS to the nodes, with a crypto provider of the client's own: building a
//! client never touches the process-wide default (an application may
//! install its own, before or after), and a client whose nodes are all
//! plain `redis://` builds no TLS at all.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::settings::config_error::ConfigError;
use crate::transport::address::{Tls, TlsMaterial};

/// The TLS settings of one client: one for verified nodes, one for
/// `#insecure` ones, built only where some node needs it.
#[derive(Clone, Default)]
pub(crate) struct Configs {
    verified: Option<Arc<ClientConfig>>,
    insecure: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for Configs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Configs")
            .field("verified", &self.verified.is_some())
            .field("insecure", &self.insecure.is_some())
            .finish()
    }
}

impl Configs {
    /// The settings for `modes` (the nodes' TLS modes) from `material`.
    pub(crate) fn new(
        material: &TlsMaterial,
        modes: impl IntoIterator<Item = Tls>,
    ) -> Result<Self, ConfigError> {
        let mut configs = Configs::default();
        for mode in modes {
            match mode {
                Tls::Off => {}
                Tls::Verified if configs.verified.is_none() => {
                    configs.verified = Some(Arc::new(config(material, false)?));
                }
                Tls::Insecure if configs.insecure.is_none() => {
                    configs.insecure = Some(Arc::new(config(material, true)?));
                }
                _ => {}
            }
        }
        Ok(configs)
    }

    /// The settings for a node of TLS mode `mode` (`None`: plain text).
    pub(crate) fn get(&self, mode: Tls) -> Option<&Arc<ClientConfig>> {
        match mode {
            Tls::Off => None,
            Tls::Verified => self.verified.as_ref(),
            Tls::Insecure => self.insecure.as_ref(),
        }
    }
}

/// The crypto provider of every TLS connection of redquorum's: `ring`,
/// held by each configuration (never installed as the process default).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config(material: &TlsMaterial, insecure: bool) -> Result<ClientConfig, ConfigError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Tls(e.to_string()))?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(
                provider.signature_verification_algorithms,
            )))
    } else {
        builder.with_root_certificates(roots(material.ca.as_deref())?)
    };
    match &material.client {
        Some((cert, key)) => {
            let chain = certificates(cert, "client certificate")?;
            // The error names the problem, never the key's bytes.
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|_| ConfigError::Tls("client key: no PEM private key in it".into()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ConfigError::Tls(format!("client certificate: {e}")))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The CA certificates in `pem`, or the system's roots.
fn roots(pem: Option<&[u8]>) -> Result<RootCertStore, ConfigError> {
    let mut roots = RootCertStore::empty();
    match pem {
        Some(pem) => {
            for cert in certificates(pem, "CA bundle")? {
                roots
                    .add(cert)
                    .map_err(|e| ConfigError::Tls(format!("CA bundle: {e}")))?;
            }
        }
        None => {
            // Unreadable ones are skipped, as a browser would.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    Ok(roots)
}

/// Every certificate in `pem`; an error naming `what` if there is none or
/// one does not parse. (An empty CA bundle would trust nothing, and fail
/// every handshake later.)
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let all: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
    match all {
        Ok(all) if !all.is_empty() => Ok(all),
        Ok(_) => Err(ConfigError::Tls(format!(
            "{what}: no PEM certificate in it"
        ))),
        Err(e) => Err(ConfigError::Tls(format!("{what}: {e}"))),
    }
}

/// The name a node's certificate must carry: its host (or IP address).
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_owned()).map_err(|e| format!("{host:?} as a TLS name: {e}"))
}

/// `#insecure`: any certificate is accepted (signatures are still checked,
/// so the session is encrypted, but with whoever answered).
#[derive(Debug)]
struct AcceptAny(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_material_is_a_config_error_that_never_shows_the_key() {
        let bad_ca = TlsMaterial {
            ca: Some(b"not a certificate".to_vec()),
            ..TlsMaterial::default()
        };
        let e = Configs::new(&bad_ca, [Tls::Verified]).unwrap_err();
        assert!(e.to_string().contains("CA bundle"), "{e}");
        let secret = b"-----BEGIN NOTHING-----\nsecret-key-bytes\n".to_vec();
        let bad_key = TlsMaterial {
            client: Some((b"x".to_vec(), secret)),
            ..TlsMaterial::default()
        };
        let e = Configs::new(&bad_key, [Tls::Verified]).unwrap_err();
        assert!(!e.to_string().contains("secret-key-bytes"), "{e}");
    }

    #[test]
    fn plain_nodes_build_no_tls_and_the_process_default_is_untouched() {
        let configs = Configs::new(&TlsMaterial::default(), [Tls::Off, Tls::Off]).unwrap();
        assert!(configs.get(Tls::Verified).is_none());
        let configs =
            Configs::new(&TlsMaterial::default(), [Tls::Verified, Tls::Insecure]).unwrap();
        assert!(configs.get(Tls::Verified).is_some() && configs.get(Tls::Insecure).is_some());
        assert!(CryptoProvider::get_default().is_none());
    }
}
