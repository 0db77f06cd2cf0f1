//! TLS pieces both the API server and the node agent need.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ResolvesServerCert, VerifierBuilderError, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// Why a TLS server configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ServerTlsError {
    /// The client CA certificates were refused.
    #[error("{0}")]
    ClientVerifier(#[from] VerifierBuilderError),
    /// rustls refused the configuration.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// An HTTPS server's configuration: its certificate from `certs` (so renewal swaps it without a
/// restart); a client certificate is optional (a bearer token will do, and an anonymous request gets
/// a proper 401 rather than a handshake failure), but one that is shown must chain to `client_cas`.
pub fn server_config(
    client_cas: RootCertStore,
    certs: Arc<dyn ResolvesServerCert>,
    alpn: &[&[u8]],
) -> Result<ServerConfig, ServerTlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(client_cas), provider.clone())
            .allow_unauthenticated()
            .build()?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(certs);
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// Accepts any server certificate, still checking the handshake's signatures.
#[derive(Debug)]
struct AnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A verifier that accepts any server certificate but still checks the handshake's signatures (HTTPS
/// probes, which upstream does not verify; APIServices with `insecureSkipTLSVerify`).
pub fn any_server_cert(provider: Arc<CryptoProvider>) -> Arc<dyn ServerCertVerifier> {
    Arc::new(AnyServerCert(provider))
}
