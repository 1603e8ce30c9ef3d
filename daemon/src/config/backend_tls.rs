//! A proxy service's `backend_tls = { ca, server_name, cert, key,
//! insecure_skip_verify }`: the rustls client configuration its backend
//! connections (and health checks) use. The backend's certificate is always
//! verified unless `insecure_skip_verify` says otherwise, which warns.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Source};
use crate::model::{Backend, BackendTls, ServiceKind, Weighted};
use crate::registry::Registry;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBackendTls {
    ca: Option<String>,
    server_name: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    #[serde(default)]
    insecure_skip_verify: bool,
}

/// Builds `raw` for a proxy over `backends`.
pub(crate) fn backend_tls(
    src: Source<'_>,
    raw: &Spanned<RawBackendTls>,
    backends: &[Weighted],
) -> Result<BackendTls, ConfigError> {
    let span = raw.span();
    let fault = |why: String| src.at(span.clone(), format!("backend_tls: {why}"));
    let settings = format!("{:?}", raw.get_ref());
    let raw = raw.get_ref();
    let base = Path::new(src.origin).parent().unwrap_or(Path::new(""));
    let server_name = match &raw.server_name {
        Some(name) => name.clone(),
        None => one_host(backends).map_err(&fault)?,
    };
    let server_name = ServerName::try_from(server_name.clone()).map_err(|_| {
        fault(format!(
            "server_name {server_name:?} is not a host name or IP address"
        ))
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| fault(e.to_string()))?;
    let builder = if raw.insecure_skip_verify {
        let verifier = Arc::new(NoVerify(provider));
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
    } else {
        builder.with_root_certificates(
            roots(raw.ca.as_deref().map(|ca| base.join(ca)).as_deref()).map_err(&fault)?,
        )
    };
    let client = match (&raw.cert, &raw.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let (cert, key) = (base.join(cert), base.join(key));
            let chain = CertificateDer::pem_file_iter(&cert)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| fault(format!("cert {}: {e}", cert.display())))?;
            let private = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| fault(format!("key {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| fault(format!("cert and key: {e}")))?
        }
        _ => return Err(fault("cert and key go together".into())),
    };
    Ok(BackendTls {
        server_name,
        client: Arc::new(client),
        insecure: raw.insecure_skip_verify,
        settings,
    })
}

/// One warning per service that takes any certificate from its backends,
/// at every load, so it is not forgotten.
pub(crate) fn warnings(registry: &Registry) -> Vec<String> {
    let insecure = registry.services().filter(|s| match &s.kind {
        ServiceKind::Proxy(proxy) => proxy.backend_tls.as_ref().is_some_and(|t| t.insecure),
        _ => false,
    });
    insecure
        .map(|s| format!("service {}: backend_tls.insecure_skip_verify = true: its backends' certificates are not checked, so anyone on the path can pose as them", s.name))
        .collect()
}

/// The host every TCP backend names, when they agree on one.
fn one_host(backends: &[Weighted]) -> Result<String, String> {
    let mut hosts = backends.iter().filter_map(|b| match &b.backend {
        Backend::Tcp { host, .. } => Some(host.clone()),
        Backend::Srv(_) => None,
        Backend::Unix(_) => None,
    });
    if backends
        .iter()
        .any(|b| matches!(b.backend, Backend::Srv(_)))
    {
        // The SRV name is no host name a certificate carries, and its
        // targets may be many.
        return Err(
            "srv: backends need server_name, the name their targets' certificates carry".into(),
        );
    }
    let first = hosts.next().ok_or("a Unix backend needs server_name")?;
    match hosts.all(|h| h == first) {
        true => Ok(first),
        false => Err(
            "backends with different hosts need server_name, the name their certificates carry"
                .into(),
        ),
    }
}

/// `ca`'s certificates, or the system's trust store without one.
fn roots(ca: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match ca {
        Some(ca) => CertificateDer::pem_file_iter(ca)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| format!("ca {}: {e}", ca.display()))?,
        None => rustls_native_certs::load_native_certs().certs,
    };
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(match ca {
            Some(ca) => format!("ca {}: no usable certificate in it", ca.display()),
            None => "no CA certificate in the system's trust store: set ca".into(),
        });
    }
    Ok(roots)
}

/// `insecure_skip_verify = true`: any certificate, but signatures are still
/// checked so the session is at least with the key holder.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
