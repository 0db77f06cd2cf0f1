//! The member's serving certificate over time: it lives a year ([`crate::pki::LEAF_DAYS`]) and is renewed
//! online [`RENEW_BEFORE_DAYS`] days before it ends, or at once when `keel certificate rotate` asks (the
//! file [`ROTATE_REQUEST`] in the data directory). New TLS handshakes get the new certificate; connections
//! already open keep theirs, so no request fails. From [`WARN_BEFORE_DAYS`] days before the end of the
//! serving certificate or the CA, a Warning Event says so once a day; every certificate's end is a metric.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::json;
use tracing::{info, warn};

use crate::handler::KubeState;
use crate::pki::ClusterPki;

/// Renewal starts this many days before the serving certificate ends.
pub const RENEW_BEFORE_DAYS: i64 = 90;
/// Warning Events start this many days before a certificate ends.
pub const WARN_BEFORE_DAYS: i64 = 120;
/// The file (under the data directory) whose presence asks the running member to rotate now.
pub const ROTATE_REQUEST: &str = "pki/rotate-request";

/// The serving certificate TLS handshakes get, swappable while the server runs.
#[derive(Debug)]
pub struct ServingResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

fn certified(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, String> {
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(|e| e.to_string())
}

impl ServingResolver {
    /// A resolver that serves `cert_pem` with `key_pem`.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        Ok(ServingResolver {
            current: RwLock::new(Arc::new(certified(cert_pem, key_pem)?)),
        })
    }

    /// Serves `cert_pem` from the next handshake on.
    pub fn swap(&self, cert_pem: &str, key_pem: &str) -> Result<(), String> {
        let next = Arc::new(certified(cert_pem, key_pem)?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }
}

impl ResolvesServerCert for ServingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// The end of the first certificate in `pem`, as Unix seconds.
pub fn not_after(pem: &str) -> Option<i64> {
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// What the renewal loop needs.
pub struct Renewal {
    pub state: Arc<KubeState>,
    pub pki: ClusterPki,
    pub hosts: Vec<String>,
    pub data_dir: PathBuf,
    pub advertise_url: String,
    pub resolver: Arc<ServingResolver>,
    /// Days a renewed serving certificate lives.
    pub days: u32,
    /// The serving certificate in use (PEM).
    pub serving: String,
    pub member: String,
    /// For a member with `<data-dir>/tls/` (made with `--init`/`--join`): the hosts its peer and etcd
    /// client-port certificates name, so they are renewed with the serving certificate.
    pub member_tls_hosts: Option<(Vec<String>, Vec<String>)>,
    /// The kubelet-client certificate in use (PEM); it and the front-proxy client certificate are made
    /// at start, never written, and renewed together in memory.
    pub client_cert: String,
}

/// `keel_certificate_expiry_timestamp_seconds{certificate}` and `keel_certificate_rotations_total`.
#[derive(Clone, Default)]
struct CertMetrics {
    expiry: Family<Vec<(String, String)>, Gauge>,
    rotations: Counter,
}

impl CertMetrics {
    fn set(&self, name: &str, pem: &str) {
        if let Some(t) = not_after(pem) {
            self.expiry
                .get_or_create(&vec![("certificate".to_string(), name.to_string())])
                .set(t);
        }
    }
}

/// Keeps the serving certificate fresh until the server stops.
pub async fn run(mut r: Renewal) {
    let metrics = CertMetrics::default();
    r.state.metrics.register_more(|reg| {
        reg.register(
            "keel_certificate_expiry_timestamp_seconds",
            "When each certificate of this member ends (Unix time)",
            metrics.expiry.clone(),
        );
        reg.register(
            "keel_certificate_rotations",
            "Serving certificates renewed while the member ran",
            metrics.rotations.clone(),
        );
    });
    metrics.set("ca", &r.pki.ca_cert);
    metrics.set("admin", &r.pki.admin_cert);
    metrics.set("apiserver", &r.serving);
    metrics.set("kubelet-client", &r.client_cert);
    // The member's etcd-side certificates (peer TLS and the etcd client port), when it has them.
    let member_tls = |r: &Renewal| -> Vec<(&'static str, String)> {
        let dir = r.data_dir.join(crate::pki::MEMBER_TLS_DIR);
        [
            ("peer", "peer.crt"),
            ("etcd-server", "etcd-server.crt"),
            ("etcd-client", "etcd-client.crt"),
        ]
        .into_iter()
        .filter_map(|(name, file)| Some((name, std::fs::read_to_string(dir.join(file)).ok()?)))
        .collect()
    };
    for (name, pem) in member_tls(&r) {
        metrics.set(name, &pem);
    }
    let request = r.data_dir.join(ROTATE_REQUEST);
    let mut stop = r.state.shutdown.clone();
    let mut last_warned: Option<i64> = None;
    let mut tick = 0u64;
    loop {
        let now = jiff::Timestamp::now().as_second();
        let left = |pem: &str| not_after(pem).map(|t| (t - now) / 86_400);
        let asked = request.exists();
        // Looked at every 2 s for a request, every 10 minutes for age.
        if asked || tick.is_multiple_of(300) {
            // The peer and etcd certificates first: a rotation request is done once it is gone.
            if let Some((peer_hosts, client_hosts)) = &r.member_tls_hosts {
                let present = member_tls(&r);
                let due = present
                    .iter()
                    .any(|(_, pem)| left(pem).is_some_and(|d| d < RENEW_BEFORE_DAYS));
                if !present.is_empty() && (asked || due) {
                    let dir = r.data_dir.join(crate::pki::MEMBER_TLS_DIR);
                    // The member's TLS configurations follow these files (new handshakes only).
                    match r
                        .pki
                        .member_tls(peer_hosts, client_hosts, r.days)
                        .and_then(|t| t.write(&dir))
                    {
                        Ok(()) => {
                            for (name, pem) in member_tls(&r) {
                                metrics.set(name, &pem);
                            }
                            metrics.rotations.inc();
                            info!(asked, "peer and etcd certificates renewed");
                        }
                        Err(e) => {
                            warn!(%e, "renewing the peer and etcd certificates failed; retrying")
                        }
                    }
                }
            }
            let client_due = left(&r.client_cert).is_some_and(|d| d < RENEW_BEFORE_DAYS);
            if !r.client_cert.is_empty() && (asked || client_due) {
                match renew_clients(&r) {
                    Ok(pem) => {
                        r.client_cert = pem;
                        metrics.set("kubelet-client", &r.client_cert);
                        info!(
                            asked,
                            "kubelet-client and front-proxy client certificates renewed"
                        );
                    }
                    Err(e) => warn!(%e, "renewing the client certificates failed; retrying"),
                }
            }
            let due = left(&r.serving).is_some_and(|d| d < RENEW_BEFORE_DAYS);
            if asked || due {
                match renew(&r) {
                    Ok(pem) => {
                        r.serving = pem;
                        metrics.set("apiserver", &r.serving);
                        metrics.rotations.inc();
                        info!(asked, until = ?not_after(&r.serving), "serving certificate renewed");
                    }
                    Err(e) => warn!(%e, "renewing the serving certificate failed; retrying"),
                }
                if asked {
                    let _ = std::fs::remove_file(&request);
                }
            }
            let today = now / 86_400;
            if last_warned != Some(today) {
                let mut certs: Vec<(&str, String)> = vec![
                    ("apiserver", r.serving.clone()),
                    ("ca", r.pki.ca_cert.clone()),
                ];
                certs.extend(member_tls(&r));
                for (name, pem) in &certs {
                    if let Some(days) = left(pem).filter(|d| *d < WARN_BEFORE_DAYS) {
                        warn_event(&r, name, pem, days).await;
                        last_warned = Some(today);
                    }
                }
            }
        }
        tick += 1;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Signs new kubelet-client and front-proxy client certificates and presents them from the next
/// connection to an agent or an aggregated server on; returns the kubelet-client one.
fn renew_clients(r: &Renewal) -> Result<String, String> {
    let kubelet = r
        .pki
        .kubelet_client_cert(r.days)
        .map_err(|e| e.to_string())?;
    let proxy = r
        .pki
        .front_proxy_client_cert(r.days)
        .map_err(|e| e.to_string())?;
    let tls = crate::dial::agent_tls(&kubelet.cert, &kubelet.key, &r.pki.ca_cert)?;
    *r.state
        .kubelet_tls_config
        .write()
        .unwrap_or_else(|e| e.into_inner()) = Some(tls);
    r.state.aggregator.set_client(proxy.cert, proxy.key);
    Ok(kubelet.cert)
}

/// Signs a new serving certificate, writes it where the old one was and serves it.
fn renew(r: &Renewal) -> Result<String, String> {
    let serving = r
        .pki
        .serving_cert_for(&r.hosts, r.days)
        .map_err(|e| e.to_string())?;
    r.pki
        .write_files(&r.data_dir, &serving, &r.advertise_url)
        .map_err(|e| e.to_string())?;
    r.resolver.swap(&serving.cert, &serving.key)?;
    Ok(serving.cert)
}

/// A Warning Event in `kube-system` about certificate `name`.
async fn warn_event(r: &Renewal, name: &str, pem: &str, days: i64) {
    let until = not_after(pem)
        .and_then(|t| jiff::Timestamp::from_second(t).ok())
        .map(|t| t.to_string())
        .unwrap_or_default();
    let now = crate::object::now_rfc3339();
    let event_name = format!(
        "keel-certificate-{}-{name}.{}",
        r.member,
        jiff::Timestamp::now().as_second()
    );
    let message = if name == "ca" {
        format!("the cluster CA ends at {until} ({days} days); plan a CA rotation")
    } else {
        format!(
            "certificate {name} of member {} ends at {until} ({days} days) and was not renewed",
            r.member
        )
    };
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name, "namespace": "kube-system", "uid": crate::object::new_uid(), "creationTimestamp": now},
        "involvedObject": {"kind": "Namespace", "name": "kube-system", "apiVersion": "v1"},
        "reason": "CertificateExpiringSoon",
        "message": message,
        "type": "Warning",
        "source": {"component": "keel-server", "host": r.member},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": "keel-server",
        "reportingInstance": r.member,
    });
    let key = format!("/registry/events/kube-system/{event_name}");
    let lease = r.state.ttl_lease("events").await.unwrap_or(0);
    if let Err(e) = r.state.storage.put_if_leased(&key, &event, 0, lease).await {
        warn!(%e, "recording the certificate warning failed");
    }
    warn!(certificate = name, days, %until, "certificate ends soon");
}

/// Asks the member whose data directory is `data_dir` to rotate its serving certificate now.
pub fn request_rotation(data_dir: &Path) -> std::io::Result<()> {
    std::fs::write(data_dir.join(ROTATE_REQUEST), b"")
}
