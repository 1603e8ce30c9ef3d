//! TLS: a listener's certificate settings (`tls = { cert, key, client_ca,
//! client_auth }`) with the server configuration loaded from them, and what a
//! TLS client proved about itself.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::acme::AcmeSettings;
use super::HostMap;

/// A TLS listener's settings. The files are read when the configuration is
/// (at start and on each SIGHUP), so a renewed certificate needs no restart.
#[derive(Clone)]
pub struct Tls {
    /// The certificate for every name `certs` does not take.
    pub default: DefaultCert,
    /// The CA that client certificates must chain to, if they are asked for.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// CRLs that client certificates are checked against (`client_crl`).
    pub client_crl: Vec<PathBuf>,
    /// More certificates (`certs = [{ cert, key }, ...]`), each served for
    /// the names in its subjectAltNames.
    pub certs: Vec<CertPair>,
    /// Each certificate's first name and its notAfter (Unix seconds), for
    /// `tcpmuxd_tls_certificate_expiry_timestamp_seconds`.
    pub expiries: Vec<(String, i64)>,
    /// What rustls serves: the chain, the key, the verifier, ALPN.
    pub server: ServerConfigs,
}

/// The rustls configurations a TLS listener serves with, all sharing its
/// certificates, verifier and ticket keys; they differ in ALPN only.
#[derive(Clone)]
pub struct ServerConfigs {
    /// For every client but those below: ALPN `tcpmux`, then the protocols
    /// of the services' `alpn`.
    pub default: Arc<rustls::ServerConfig>,
    /// For the names a service's `sni_terminate` takes: that service's own
    /// `alpn` (none: the client's ALPN is accepted without agreeing on a
    /// protocol, as by an HTTPS site behind a terminator).
    pub terminated: Arc<HostMap<Arc<rustls::ServerConfig>>>,
    /// With `acme`: for ACME's TLS-ALPN-01 validation (ALPN `acme-tls/1`),
    /// serving the challenge certificates.
    pub challenge: Option<Arc<rustls::ServerConfig>>,
}

impl ServerConfigs {
    pub fn new(default: rustls::ServerConfig) -> Self {
        ServerConfigs {
            default: Arc::new(default),
            terminated: Arc::default(),
            challenge: None,
        }
    }

    /// The configuration for a client that asks for `server_name`, and
    /// whether it offers ACME's validation protocol.
    pub fn for_hello(&self, server_name: Option<&str>, acme: bool) -> &Arc<rustls::ServerConfig> {
        if let Some(challenge) = self.challenge.as_ref().filter(|_| acme) {
            return challenge;
        }
        server_name
            .and_then(|name| self.terminated.get(name))
            .unwrap_or(&self.default)
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("default", &self.default)
            .field("client_ca", &self.client_ca)
            .field("client_auth", &self.client_auth)
            .field("certs", &self.certs)
            .field("client_crl", &self.client_crl)
            .finish_non_exhaustive()
    }
}

/// Equal when read from the same files into the same loaded configuration.
impl PartialEq for Tls {
    fn eq(&self, other: &Self) -> bool {
        self.default == other.default
            && self.client_ca == other.client_ca
            && self.client_auth == other.client_auth
            && self.certs == other.certs
            && self.client_crl == other.client_crl
            && Arc::ptr_eq(&self.server.default, &other.server.default)
            && Arc::ptr_eq(&self.server.terminated, &other.server.terminated)
    }
}

impl Eq for Tls {}

/// Where a listener's default certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefaultCert {
    /// `cert` and `key`.
    Files { cert: PathBuf, key: PathBuf },
    /// `acme`: obtained and renewed by the daemon, served from the slot
    /// `keys` holds for these settings.
    Acme(AcmeSettings),
}

/// One more certificate of a listener, and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Whether a TLS listener asks clients for a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// No `client_ca`: no certificate is asked for.
    #[default]
    None,
    /// A client may present one (verified if it does) or not.
    Optional,
    /// The handshake fails without a certificate that chains to `client_ca`.
    Required,
}

/// What the TLS layer established about a client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsClient {
    /// `TLSv1.3` or `TLSv1.2`, as OpenSSL writes them.
    pub version: String,
    /// The cipher suite's IANA name, such as `TLS_AES_128_GCM_SHA256`.
    pub cipher: String,
    /// The verified certificate's names: its DNS subject alternative names,
    /// or its subject CN when it has none. Empty without a certificate.
    pub names: Vec<String>,
    /// The verified certificate's subject CN, if it has one.
    pub common_name: Option<String>,
    /// The server name the client asked for (SNI), lower case.
    pub server_name: Option<String>,
    /// The application protocol the handshake agreed on (ALPN), if any.
    pub alpn: Option<String>,
    /// Whether the session was resumed (from a ticket) rather than new.
    pub resumed: bool,
}

impl TlsClient {
    /// The name exec programs see as `TLS_CLIENT_NAME`: the first of `names`.
    pub fn name(&self) -> Option<&str> {
        self.names.first().map(String::as_str)
    }

    /// Whether the verified certificate carries one of `allowed` (case-insensitive).
    pub fn has_any_name(&self, allowed: &[String]) -> bool {
        self.names
            .iter()
            .any(|name| allowed.iter().any(|a| a.eq_ignore_ascii_case(name)))
    }
}

/// A certificate's DNS subject alternative names (or its subject CN when it
/// has none), and its CN.
pub fn certificate_names(der: &[u8]) -> (Vec<String>, Option<String>) {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return (Vec::new(), None);
    };
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    if names.is_empty() {
        names.extend(common_name.clone());
    }
    (names, common_name)
}

/// When a certificate stops being valid (notAfter), in seconds since the
/// Unix epoch.
pub fn certificate_expiry(der: &[u8]) -> Option<i64> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}
