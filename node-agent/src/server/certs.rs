//! The agent's serving certificate, as a kubelet with `serverTLSBootstrap` gets it: a key made on the
//! node and a `certificates.k8s.io/v1` CertificateSigningRequest (signer `kubernetes.io/kubelet-serving`,
//! subject `CN=system:node:<name>, O=system:nodes`, the node's name and address as SANs, usages digital
//! signature, key encipherment, server auth). The signed certificate and its key are kept in
//! `<root>/pki/kubelet-server-current.pem` and reused while the cluster CA verifies them for the node's
//! names; a new one is requested once 80 % of its lifetime has passed (upstream's rotation point lies
//! between 70 and 90 %).
//!
//! Until a certificate is issued (the request pending, or an API server without the signer) the agent
//! serves with a self-signed one (`kubelet.crt`, `kubelet.key`), which an API server that verifies
//! agents refuses; the request is retried with a back-off.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::error::{Error, Result};

/// The signer of kubelet serving certificates.
pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The file holding the issued certificate and its key.
pub const CURRENT: &str = "kubelet-server-current.pem";
/// How long a request may stay unsigned before it is given up and asked again.
const WAIT_FOR_SIGNING: Duration = Duration::from_secs(15 * 60);

/// The certificate the agent's API presents, swapped when a new one is issued.
#[derive(Debug)]
pub struct ServingCerts {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ServingCerts {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

impl ServingCerts {
    fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
    }
}

/// What the manager needs to know.
#[derive(Debug, Clone)]
pub struct CertConfig {
    /// `<root>/pki`.
    pub dir: PathBuf,
    /// The Node's name.
    pub node: String,
    /// The names and addresses the issued certificate covers (the node's name and address).
    pub sans: Vec<String>,
    /// The cluster CA certificates (DER) the issued certificate must verify against.
    pub roots: Vec<CertificateDer<'static>>,
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Config(format!("agent TLS: {e}"))
}

/// A certified key from PEM certificate(s) and key.
pub(crate) fn certified(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(tls_err)?;
    if certs.is_empty() {
        return Err(tls_err("no certificate"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(tls_err)?;
    let provider = rustls::crypto::ring::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(tls_err)?;
    Ok(Arc::new(CertifiedKey::new(certs, signer)))
}

/// Seconds since the epoch of a certificate's start and end.
fn validity(cert: &CertificateDer<'_>) -> Option<(i64, i64)> {
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some((
        c.validity().not_before.timestamp(),
        c.validity().not_after.timestamp(),
    ))
}

/// When a certificate should be replaced: 80 % into its lifetime.
fn renew_at(cert: &CertificateDer<'_>) -> Option<i64> {
    let (start, end) = validity(cert)?;
    Some(start + (end - start) * 4 / 5)
}

/// Whether the cluster CA verifies `key`'s certificate for every SAN, and it is not due for renewal.
fn usable(cfg: &CertConfig, key: &CertifiedKey) -> bool {
    let Some(leaf) = key.cert.first() else {
        return false;
    };
    let mut roots = rustls::RootCertStore::empty();
    for r in &cfg.roots {
        let _ = roots.add(r.clone());
    }
    if roots.is_empty() {
        return false;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(verifier) =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
    else {
        return false;
    };
    let now = UnixTime::now();
    let verified = cfg.sans.iter().all(|h| {
        ServerName::try_from(h.clone()).is_ok_and(|name| {
            verifier
                .verify_server_cert(leaf, &key.cert[1..], &name, &[], now)
                .is_ok()
        })
    });
    verified && renew_at(leaf).is_some_and(|t| t > jiff::Timestamp::now().as_second())
}

/// The certificate to start with: the issued one when still usable, else the self-signed fallback
/// (made on first use). Returns it and whether it was the issued one.
pub fn initial(cfg: &CertConfig, fallback_hosts: &[String]) -> Result<(Arc<ServingCerts>, bool)> {
    let current = cfg.dir.join(CURRENT);
    if let Ok(pem) = std::fs::read(&current) {
        match certified(&pem, &pem) {
            Ok(k) if usable(cfg, &k) => {
                return Ok((
                    Arc::new(ServingCerts {
                        current: RwLock::new(k),
                    }),
                    true,
                ))
            }
            Ok(_) => {
                info!(path = %current.display(), "serving certificate expiring or not the cluster CA's: requesting a new one")
            }
            Err(e) => {
                warn!(path = %current.display(), error = %e, "serving certificate unreadable: requesting a new one")
            }
        }
    }
    let (c, k) = super::serving_cert(&cfg.dir, fallback_hosts)?;
    Ok((
        Arc::new(ServingCerts {
            current: RwLock::new(certified(c.as_bytes(), k.as_bytes())?),
        }),
        false,
    ))
}

/// Writes `data` to `path` with mode 0600, through a temporary file and a rename.
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, e))?;
    f.write_all(data).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// A key and a PEM certificate request for the node.
pub fn request(node: &str, sans: &[String]) -> Result<(rcgen::KeyPair, String)> {
    let key = rcgen::KeyPair::generate().map_err(tls_err)?;
    let mut params = rcgen::CertificateParams::new(sans.to_vec()).map_err(tls_err)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let csr = params.serialize_request(&key).map_err(tls_err)?;
    let pem = csr.pem().map_err(tls_err)?;
    Ok((key, pem))
}

/// The certificate of a signed request, or why it will not be signed.
fn outcome(csr: &CertificateSigningRequest) -> Option<std::result::Result<Vec<u8>, String>> {
    let status = csr.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
            return Some(Err(format!(
                "{}: {} {}",
                c.type_,
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )));
        }
    }
    status
        .certificate
        .as_ref()
        .filter(|c| !c.0.is_empty())
        .map(|c| Ok(c.0.clone()))
}

/// Waits (up to a minute) until the Node reports every SAN among its addresses, as the kubelet's
/// certificate manager waits for the node's addresses: the signer approves only names the Node shows.
async fn wait_for_addresses(client: &kube::Client, cfg: &CertConfig) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for _ in 0..60 {
        if let Ok(n) = api.get(&cfg.node).await {
            let addrs: Vec<String> = n
                .status
                .and_then(|s| s.addresses)
                .unwrap_or_default()
                .into_iter()
                .map(|a| a.address)
                .collect();
            if cfg.sans.iter().all(|s| *s == cfg.node || addrs.contains(s)) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One request: create the CSR, wait for its certificate, check and keep it.
async fn obtain(client: &kube::Client, cfg: &CertConfig) -> Result<Arc<CertifiedKey>> {
    wait_for_addresses(client, cfg).await;
    let (key, pem) = request(&cfg.node, &cfg.sans)?;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut csr = CertificateSigningRequest::default();
    csr.metadata.generate_name = Some("csr-".into());
    csr.spec = CertificateSigningRequestSpec {
        request: ByteString(pem.into_bytes()),
        signer_name: SIGNER.into(),
        usages: Some(vec![
            "digital signature".into(),
            "key encipherment".into(),
            "server auth".into(),
        ]),
        ..Default::default()
    };
    let made = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(|e| Error::Config(format!("creating a CertificateSigningRequest: {e}")))?;
    let name = made.metadata.name.clone().unwrap_or_default();
    info!(csr = %name, "serving certificate requested");
    let deadline = tokio::time::Instant::now() + WAIT_FOR_SIGNING;
    let mut seen = made;
    let cert = loop {
        match outcome(&seen) {
            Some(Ok(c)) => break c,
            Some(Err(why)) => {
                return Err(Error::Config(format!(
                    "CertificateSigningRequest {name} not signed: {why}"
                )))
            }
            None => {}
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Config(format!(
                "CertificateSigningRequest {name} not signed within {} minutes (approve it with kubectl certificate approve)",
                WAIT_FOR_SIGNING.as_secs() / 60
            )));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        seen = api
            .get(&name)
            .await
            .map_err(|e| Error::Config(format!("reading CertificateSigningRequest {name}: {e}")))?;
    };
    let key_pem = key.serialize_pem();
    let issued = certified(&cert, key_pem.as_bytes())?;
    if !usable(cfg, &issued) {
        return Err(Error::Config(format!(
            "the certificate of CertificateSigningRequest {name} does not verify against the cluster CA for {:?}",
            cfg.sans
        )));
    }
    let mut file = cert.clone();
    if !file.ends_with(b"\n") {
        file.push(b'\n');
    }
    file.extend_from_slice(key_pem.as_bytes());
    std::fs::create_dir_all(&cfg.dir).map_err(|e| Error::io(&cfg.dir, e))?;
    write_private(&cfg.dir.join(CURRENT), &file)?;
    info!(csr = %name, "serving certificate issued by the cluster CA");
    Ok(issued)
}

/// Keeps `certs` issued and fresh: requests a certificate now unless `have_issued`, then again at 80 % of
/// each one's lifetime. Failures are retried after 5 s, doubling to 5 minutes.
pub async fn manage(
    client: kube::Client,
    cfg: CertConfig,
    certs: Arc<ServingCerts>,
    have_issued: bool,
) {
    let mut need = !have_issued;
    let mut delay = Duration::from_secs(5);
    loop {
        if need {
            match obtain(&client, &cfg).await {
                Ok(k) => {
                    certs.set(k);
                    delay = Duration::from_secs(5);
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?delay, "no serving certificate from the cluster CA yet");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(300));
                    continue;
                }
            }
        }
        let leaf = certs
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cert
            .first()
            .cloned();
        let due = leaf.as_ref().and_then(renew_at).unwrap_or(0);
        let wait = (due - jiff::Timestamp::now().as_second()).clamp(0, 24 * 3600);
        // Woken at least daily, so a clock change cannot push renewal past the certificate's end.
        tokio::time::sleep(Duration::from_secs(wait as u64)).await;
        need = leaf
            .is_none_or(|l| renew_at(&l).is_none_or(|t| t <= jiff::Timestamp::now().as_second()));
    }
}

/// The kubeconfig's CA certificates (PEM or DER) as DER.
pub fn roots(blobs: &[Vec<u8>]) -> Vec<CertificateDer<'static>> {
    let mut out = Vec::new();
    for raw in blobs {
        if raw.starts_with(b"-----") {
            out.extend(CertificateDer::pem_slice_iter(raw).filter_map(|c| c.ok()));
        } else {
            out.push(CertificateDer::from(raw.clone()));
        }
    }
    out
}
