//! The member's serving TLS: the cluster PKI read (or made by the first member), the names the serving
//! certificate covers, and the rustls configuration.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tracing::debug;

use super::{KubeOptions, KubeServeError};
use crate::alloc;
use crate::pki::{ClusterPki, PkiError, PKI_KEY};
use crate::status::ApiError;
use crate::storage::Storage;

pub(super) fn host_of(url: &str) -> Option<String> {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let hostport = rest.split('/').next()?;
    let host = if let Some(h) = hostport.strip_prefix('[') {
        h.split(']').next()?.to_string()
    } else {
        hostport
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(hostport)
            .to_string()
    };
    (!host.is_empty()).then_some(host)
}

/// Reads the cluster PKI from the store, creating it first if this is the first member to get here.
/// `initial` is the PKI to store when none is (`keel server --init` makes it before the member starts,
/// since its peer certificates come from the same CA); without it a fresh one is made.
pub(super) async fn bootstrap_pki(
    storage: &Storage,
    initial: Option<&ClusterPki>,
) -> Result<ClusterPki, KubeServeError> {
    let mut delay = Duration::from_millis(200);
    loop {
        let attempt = async {
            if let Some(raw) = storage.get_raw(PKI_KEY).await? {
                return Ok::<_, ApiError>(Some(raw));
            }
            let fresh = match initial {
                Some(p) => p.clone(),
                None => ClusterPki::generate().map_err(|e| ApiError::Internal(e.to_string()))?,
            };
            let bytes =
                serde_json::to_vec(&fresh).map_err(|e| ApiError::Internal(e.to_string()))?;
            storage.create_raw(PKI_KEY, bytes).await?;
            storage.get_raw(PKI_KEY).await
        };
        match attempt.await {
            Ok(Some(raw)) => return Ok(serde_json::from_slice(&raw).map_err(PkiError::Decode)?),
            Ok(None) => {}
            Err(e) => debug!(error = %e, "cluster PKI not readable yet"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

pub(super) fn tls_config(
    pki: &ClusterPki,
    resolver: Arc<crate::certs::ServingResolver>,
) -> Result<rustls::ServerConfig, KubeServeError> {
    let tls = |e: &dyn std::fmt::Display| KubeServeError::Tls(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pki.ca_cert.as_bytes()) {
        roots.add(c.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    keel_client_kit::tls::server_config(roots, resolver, &[b"h2", b"http/1.1"]).map_err(|e| tls(&e))
}

/// Every name this member's serving certificate covers.
pub(super) fn serving_hosts(storage: &Storage, opts: &KubeOptions) -> Vec<String> {
    let mut hosts: Vec<String> = vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        "kubernetes.default.svc.cluster.local".into(),
        alloc::KUBERNETES_SERVICE_IP.to_string(),
        opts.listen.ip().to_string(),
    ];
    hosts.extend(host_of(&opts.advertise_url));
    for u in storage.member_urls() {
        hosts.extend(host_of(&u));
    }
    if let Ok(h) = std::fs::read_to_string("/etc/hostname") {
        let h = h.trim();
        if !h.is_empty() {
            hosts.push(h.to_string());
        }
    }
    hosts.extend(opts.extra_sans.iter().cloned());
    hosts.retain(|h| h != "0.0.0.0" && h != "::");
    hosts.dedup();
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_from_urls() {
        assert_eq!(
            host_of("https://127.0.0.11:6443").as_deref(),
            Some("127.0.0.11")
        );
        assert_eq!(host_of("http://[::1]:2380").as_deref(), Some("::1"));
        assert_eq!(host_of("http://node-a:2380/x").as_deref(), Some("node-a"));
    }
}
