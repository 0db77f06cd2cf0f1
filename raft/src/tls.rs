//! TLS settings of a member's ports (etcd's `--cert-file`/`--peer-cert-file` families) and the
//! rustls configurations built from them. Built from PEM text so that callers holding
//! certificates in memory (e.g. ones generated from the cluster CA) need no files.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::{Channel, Endpoint};

/// Why TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// PEM text holds no certificate or does not parse.
    #[error("{what}: no PEM certificate found")]
    NoCert { what: &'static str },
    /// PEM text holds no private key or does not parse.
    #[error("{what}: no PEM private key found: {reason}")]
    BadKey { what: &'static str, reason: String },
    /// A CA certificate is not usable as a trust anchor.
    #[error("trusted CA: {0}")]
    BadCa(String),
    /// Client certificates are required but no CA to check them against was given.
    #[error("client certificate auth needs a trusted CA file")]
    ClientAuthWithoutCa,
    /// rustls refused the combination (e.g. key does not match certificate).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// One port's TLS settings as file paths, as etcd's flags give them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate (chain) this member presents, PEM.
    pub cert: Option<PathBuf>,
    /// Its private key, PEM.
    pub key: Option<PathBuf>,
    /// CA that signs the other side's certificates, PEM.
    pub trusted_ca: Option<PathBuf>,
    /// Require the other side to present a certificate signed by `trusted_ca`.
    pub client_cert_auth: bool,
}

impl TlsFiles {
    /// True when no TLS setting was given.
    pub fn is_empty(&self) -> bool {
        self.cert.is_none()
            && self.key.is_none()
            && self.trusted_ca.is_none()
            && !self.client_cert_auth
    }

    /// Reads the files; `None` when no certificate and key are given.
    pub fn load(&self) -> Result<Option<TlsPem>, TlsError> {
        let (Some(cert), Some(key)) = (&self.cert, &self.key) else {
            return Ok(None);
        };
        Ok(Some(TlsPem {
            cert: read(cert)?,
            key: read(key)?,
            trusted_ca: self.trusted_ca.as_deref().map(read).transpose()?,
            client_cert_auth: self.client_cert_auth,
            reload_from: Some((cert.clone(), key.clone())),
        }))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// One port's TLS settings as PEM text.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsPem {
    /// Certificate (chain) this member presents.
    pub cert: Vec<u8>,
    /// Its private key.
    pub key: Vec<u8>,
    /// CA that signs the other side's certificates.
    pub trusted_ca: Option<Vec<u8>>,
    /// Require the other side to present a certificate signed by `trusted_ca`.
    pub client_cert_auth: bool,
    /// The certificate and key files `cert` and `key` were read from: the configurations then follow
    /// them, so a renewed certificate is used by new handshakes without a restart (see
    /// [`ReloadingKey`]).
    pub reload_from: Option<(PathBuf, PathBuf)>,
}

// The key must never reach a log.
impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPem")
            .field("trusted_ca", &self.trusted_ca.is_some())
            .field("client_cert_auth", &self.client_cert_auth)
            .finish_non_exhaustive()
    }
}

/// ALPN of a port that carries gRPC (HTTP/2) and plain HTTP/1.1 routes.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(pem: &[u8], what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCert { what })?;
    if certs.is_empty() {
        return Err(TlsError::NoCert { what });
    }
    Ok(certs)
}

fn key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| TlsError::BadKey {
        what: "key",
        reason: e.to_string(),
    })
}

fn roots(pem: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for c in certs(pem, "trusted CA")? {
        store.add(c).map_err(|e| TlsError::BadCa(e.to_string()))?;
    }
    Ok(Arc::new(store))
}

impl TlsPem {
    /// The server side: presents `cert`; with `client_cert_auth`, refuses at the handshake a
    /// client without a certificate signed by `trusted_ca`.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = if self.client_cert_auth {
            let ca = self
                .trusted_ca
                .as_deref()
                .ok_or(TlsError::ClientAuthWithoutCa)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider())
                .build()
                .map_err(|e| TlsError::BadCa(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_cert_resolver(self.resolver()?);
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }

    /// The client side (a member dialing a peer): verifies the server against `trusted_ca` and
    /// presents `cert` as client certificate.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let ca = self
            .trusted_ca
            .as_deref()
            .ok_or(TlsError::ClientAuthWithoutCa)?;
        let verifier = WebPkiServerVerifier::builder_with_provider(roots(ca)?, provider())
            .build()
            .map_err(|e| TlsError::BadCa(e.to_string()))?;
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_webpki_verifier(verifier)
            .with_client_cert_resolver(self.resolver()?);
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    /// This side's certificate: following its files when it has some, else fixed.
    fn resolver(&self) -> Result<Arc<ReloadingKey>, TlsError> {
        Ok(Arc::new(ReloadingKey {
            files: self.reload_from.clone(),
            state: parking_lot::Mutex::new(Loaded {
                key: Arc::new(certified(&self.cert, &self.key)?),
                cert_pem: self.cert.clone(),
                checked: Instant::now(),
            }),
        }))
    }
}

/// How often a [`ReloadingKey`] looks at its files (at a handshake, never in between).
const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// A certificate and key for rustls that follow their files: at a handshake, at most every
/// [`RELOAD_CHECK`], the files are read again, and a changed certificate whose key matches is used
/// from then on (connections already open keep theirs). A pair that does not load (e.g. read between
/// the writes of a renewal) is skipped until it does; the previous one stays in use.
#[derive(Debug)]
pub struct ReloadingKey {
    files: Option<(PathBuf, PathBuf)>,
    state: parking_lot::Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    cert_pem: Vec<u8>,
    checked: Instant,
}

fn certified(cert: &[u8], k: &[u8]) -> Result<CertifiedKey, TlsError> {
    Ok(CertifiedKey::from_der(
        certs(cert, "certificate")?,
        key(k)?,
        &provider(),
    )?)
}

impl ReloadingKey {
    /// The pair to present now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut s = self.state.lock();
        if let Some((cert_path, key_path)) = &self.files {
            if s.checked.elapsed() >= RELOAD_CHECK {
                s.checked = Instant::now();
                if let (Ok(cert), Ok(k)) = (std::fs::read(cert_path), std::fs::read(key_path)) {
                    if cert != s.cert_pem {
                        match certified(&cert, &k) {
                            Ok(ck) => {
                                s.key = Arc::new(ck);
                                s.cert_pem = cert;
                                tracing::info!(cert = %cert_path.display(), "renewed certificate in use");
                            }
                            Err(e) => {
                                if first_in_a_while(format!("reload {} {e}", cert_path.display())) {
                                    tracing::warn!(cert = %cert_path.display(), error = %e, "changed certificate not usable (yet); keeping the previous one");
                                }
                            }
                        }
                    }
                }
            }
        }
        s.key.clone()
    }
}

impl rustls::server::ResolvesServerCert for ReloadingKey {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl rustls::client::ResolvesClientCert for ReloadingKey {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A client setup for a tool dialing a TLS port (etcdctl's `--cacert`, `--cert`, `--key`): verifies
/// the server against `ca` and presents `identity` (certificate and key, PEM) when given; ALPN h2.
pub fn tool_client_config(
    ca: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let verifier = WebPkiServerVerifier::builder_with_provider(roots(ca)?, provider())
        .build()
        .map_err(|e| TlsError::BadCa(e.to_string()))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_webpki_verifier(verifier);
    let mut config = match identity {
        Some((cert, k)) => builder.with_client_auth_cert(certs(cert, "certificate")?, key(k)?)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A tonic channel that dials `endpoint`'s host over TCP, then TLS with `config` (which verifies the
/// server and presents this side's client certificate), connecting lazily as
/// [`Endpoint::connect_lazy`] does. The endpoint's connect timeout bounds TCP and handshake together;
/// its HTTP/2 settings (keep-alive, windows) apply unchanged.
///
/// The endpoint should carry an `http://` URI: the TLS is done here, so tonic must not look for a TLS
/// setup of its own (with one of its TLS features on, an `https://` URI without it fails).
pub fn lazy_tls_channel(endpoint: &Endpoint, config: Arc<ClientConfig>) -> Channel {
    let connector = tower::service_fn(move |uri: tonic::codegen::http::Uri| {
        let config = config.clone();
        async move {
            let bad = |what: &str| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{uri}: {what}"))
            };
            let host = uri.host().ok_or_else(|| bad("no host"))?;
            // An IPv6 literal comes bracketed.
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
            let name = ServerName::try_from(host.clone()).map_err(|e| bad(&e.to_string()))?;
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            // Raft messages are small and latency-bound.
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .inspect_err(|e| {
                    // A certificate the peer CA did not sign, or a peer refusing ours: say so
                    // here, where the reason is known (the caller only sees "unreachable").
                    let peer = format!("{host}:{port}");
                    if first_in_a_while(format!("dial {peer} {e}")) {
                        tracing::warn!(%peer, error = %e, "TLS handshake with peer failed");
                    } else {
                        tracing::debug!(%peer, error = %e, "TLS handshake with peer failed");
                    }
                })?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
        }
    });
    endpoint.connect_with_connector_lazy(connector)
}

/// Turns `https://host:port` into `http://host:port` (the scheme [`lazy_tls_channel`] wants) and
/// says whether it was TLS.
pub fn split_tls_scheme(url: &str) -> (String, bool) {
    match url.strip_prefix("https://") {
        Some(rest) => (format!("http://{rest}"), true),
        None => (url.to_string(), false),
    }
}

/// True unless the same handshake failure (`key`: direction, address and error) was reported in
/// the last [`REPEAT_QUIET`]: a misconfigured member retries many times a second, and one warning
/// per failure and address is enough (the rest go to debug).
fn first_in_a_while(key: String) -> bool {
    static SEEN: std::sync::OnceLock<
        parking_lot::Mutex<std::collections::HashMap<String, Instant>>,
    > = std::sync::OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock();
    let now = Instant::now();
    if seen.len() > 1024 {
        seen.retain(|_, t| now.duration_since(*t) < REPEAT_QUIET);
    }
    match seen.get(&key) {
        Some(t) if now.duration_since(*t) < REPEAT_QUIET => false,
        _ => {
            seen.insert(key, now);
            true
        }
    }
}

/// See [`first_in_a_while`].
const REPEAT_QUIET: Duration = Duration::from_secs(30);

/// How long a caller gets to finish its TLS handshake on a server port.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A server-side TLS connection, with the TCP peer address for tonic.
pub struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl TlsConn {
    /// The certificates the other side presented (leaf first), if any.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.0.get_ref().1.peer_certificates()
    }
}

impl Connected for TlsConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Accepts TLS connections on `listener` for tonic's `serve_with_incoming`: each handshake runs in
/// its own task so a slow or failing caller never holds up the others, and a failed handshake is
/// logged (naming `what`, e.g. "peer") and dropped, since an error item would stop tonic's server.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    what: &'static str,
) -> ReceiverStream<std::io::Result<TlsConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                // The server stopped and dropped the stream.
                _ = tx.closed() => return,
            };
            let (conn, from) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::debug!(error = %e, "accept on the TLS {what} port");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = conn.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(conn)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(TlsConn(tls))).await;
                    }
                    Ok(Err(e)) => {
                        if first_in_a_while(format!("accept {what} {} {e}", from.ip())) {
                            tracing::warn!(
                                from = %from,
                                error = %e,
                                "TLS handshake on the {what} port failed; connection refused"
                            )
                        } else {
                            tracing::debug!(from = %from, error = %e, "TLS handshake on the {what} port failed")
                        }
                    }
                    Err(_) => {
                        tracing::debug!(from = %from, "TLS handshake on the {what} port timed out")
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    struct Ca {
        pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let k = KeyPair::generate().unwrap();
        let c = p.self_signed(&k).unwrap();
        Ca {
            pem: c.pem(),
            issuer: Issuer::new(p, k),
        }
    }

    fn leaf(ca: &Ca) -> (String, String) {
        let p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let k = KeyPair::generate().unwrap();
        let c = p.signed_by(&k, &ca.issuer).unwrap();
        (c.pem(), k.serialize_pem())
    }

    fn pem(ca: &Ca, auth: bool) -> TlsPem {
        let (cert, key) = leaf(ca);
        TlsPem {
            cert: cert.into(),
            key: key.into(),
            trusted_ca: Some(ca.pem.clone().into()),
            client_cert_auth: auth,
            reload_from: None,
        }
    }

    /// Runs one handshake in memory; true when both sides accept it.
    fn handshake(server: Arc<ServerConfig>, client: Arc<ClientConfig>) -> bool {
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut c = rustls::ClientConnection::new(client, name).unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).unwrap();
            }
            if !buf.is_empty()
                && (s.read_tls(&mut &buf[..]).is_err() || s.process_new_packets().is_err())
            {
                return false;
            }
            let mut buf = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut buf).unwrap();
            }
            if !buf.is_empty()
                && (c.read_tls(&mut &buf[..]).is_err() || c.process_new_packets().is_err())
            {
                return false;
            }
            if !c.is_handshaking() && !s.is_handshaking() {
                return true;
            }
        }
        false
    }

    #[test]
    fn same_ca_handshakes_and_other_ca_is_refused() {
        let ca1 = ca("ca1");
        let ca2 = ca("ca2");
        let server = pem(&ca1, true).server_config().unwrap();
        assert!(handshake(
            server.clone(),
            pem(&ca1, true).client_config().unwrap()
        ));
        // A client whose certificate another CA signed, but which trusts the server's CA.
        let mut other = pem(&ca2, true);
        other.trusted_ca = Some(ca1.pem.clone().into());
        assert!(!handshake(server, other.client_config().unwrap()));
        // Without client-cert-auth the same client is accepted.
        let lax = pem(&ca1, false).server_config().unwrap();
        assert!(handshake(lax, other.client_config().unwrap()));
    }

    #[test]
    fn a_renewed_certificate_is_picked_up_from_its_files() {
        let ca1 = ca("ca1");
        let dir = tempfile::tempdir().unwrap();
        let (crt, key_file) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        let (c1, k1) = leaf(&ca1);
        std::fs::write(&crt, &c1).unwrap();
        std::fs::write(&key_file, &k1).unwrap();
        let files = TlsFiles {
            cert: Some(crt.clone()),
            key: Some(key_file.clone()),
            ..Default::default()
        };
        let r = files.load().unwrap().unwrap().resolver().unwrap();
        let first = r.current().cert[0].clone();
        assert_eq!(first, certs(c1.as_bytes(), "c").unwrap()[0]);
        // A certificate whose key is not (yet) beside it is not used.
        let (c2, k2) = leaf(&ca1);
        std::fs::write(&crt, &c2).unwrap();
        std::thread::sleep(RELOAD_CHECK + Duration::from_millis(100));
        assert_eq!(r.current().cert[0], first);
        // Once the pair is whole, the next check takes it.
        std::fs::write(&key_file, &k2).unwrap();
        std::thread::sleep(RELOAD_CHECK + Duration::from_millis(100));
        assert_eq!(r.current().cert[0], certs(c2.as_bytes(), "c").unwrap()[0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let ca1 = ca("ca1");
        let mut p = pem(&ca1, true);
        p.trusted_ca = None;
        assert!(matches!(
            p.server_config(),
            Err(TlsError::ClientAuthWithoutCa)
        ));
        let mut p = pem(&ca1, false);
        p.key = b"garbage".to_vec();
        assert!(matches!(p.server_config(), Err(TlsError::BadKey { .. })));
        let files = TlsFiles {
            cert: Some("/nonexistent/c.pem".into()),
            key: Some("/nonexistent/k.pem".into()),
            ..Default::default()
        };
        assert!(matches!(files.load(), Err(TlsError::Read { .. })));
        assert!(TlsFiles::default().load().unwrap().is_none());
    }
}
