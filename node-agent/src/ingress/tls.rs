//! TLS for the Ingress controller: the certificate of each Ingress's `tls` entry, from its Secret
//! (`kubernetes.io/tls`: `tls.crt`, `tls.key`), chosen by the client's SNI (exact host, then a `*.`
//! wildcard entry); a client that names no known host gets a self-signed default certificate, as
//! upstream controllers serve one. Secrets are read one by one (the Node authorizer lets an agent read a
//! Secret an Ingress of its classes names for TLS) and read again after [`REFRESH`], so a renewed
//! certificate is served without a restart.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use kube::{Api, Client};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// How long a Secret read stays good.
pub const REFRESH: Duration = Duration::from_secs(30);

/// The certificates by host.
#[derive(Debug, Default)]
struct CertTable {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

/// The resolver rustls asks for each handshake.
#[derive(Debug)]
pub struct SniCerts {
    table: RwLock<Arc<CertTable>>,
    fallback: Arc<CertifiedKey>,
}

impl SniCerts {
    /// An empty table with a fresh self-signed default certificate.
    pub fn new() -> Result<SniCerts> {
        let key =
            rcgen::KeyPair::generate().map_err(|e| Error::Config(format!("ingress TLS: {e}")))?;
        let params = rcgen::CertificateParams::new(vec!["keel-ingress-default".to_string()])
            .map_err(|e| Error::Config(format!("ingress TLS: {e}")))?;
        let cert = params
            .self_signed(&key)
            .map_err(|e| Error::Config(format!("ingress TLS: {e}")))?;
        let fallback =
            crate::server::certs::certified(cert.pem().as_bytes(), key.serialize_pem().as_bytes())?;
        Ok(SniCerts {
            table: RwLock::new(Arc::new(CertTable::default())),
            fallback,
        })
    }

    fn swap(&self, t: CertTable) {
        match self.table.write() {
            Ok(mut g) => *g = Arc::new(t),
            Err(p) => *p.into_inner() = Arc::new(t),
        }
    }

    fn current(&self) -> Arc<CertTable> {
        match self.table.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The certificate for `sni` (None: the default one).
    fn lookup(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let t = self.current();
        let Some(host) = sni.map(str::to_ascii_lowercase) else {
            return self.fallback.clone();
        };
        t.exact
            .get(&host)
            .or_else(|| {
                let (_, rest) = host.split_once('.')?;
                t.wildcard.get(rest)
            })
            .cloned()
            .unwrap_or_else(|| self.fallback.clone())
    }
}

impl ResolvesServerCert for SniCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.lookup(hello.server_name()))
    }
}

/// One Secret read: when, and its certificate (None: unreadable).
type Read = (Instant, Option<Arc<CertifiedKey>>);

/// Secrets read so far, by (namespace, name).
#[derive(Default)]
pub struct SecretCache {
    read: HashMap<(String, String), Read>,
}

impl SecretCache {
    async fn get(&mut self, client: &Client, ns: &str, name: &str) -> Option<Arc<CertifiedKey>> {
        let key = (ns.to_string(), name.to_string());
        if let Some((at, cert)) = self.read.get(&key) {
            if at.elapsed() < REFRESH {
                return cert.clone();
            }
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), ns);
        let cert = match api.get(name).await {
            Ok(s) => {
                let data = s.data.unwrap_or_default();
                match (data.get("tls.crt"), data.get("tls.key")) {
                    (Some(c), Some(k)) => match crate::server::certs::certified(&c.0, &k.0) {
                        Ok(ck) => Some(ck),
                        Err(e) => {
                            warn!(secret = %format!("{ns}/{name}"), error = %e, "ingress TLS Secret unusable");
                            None
                        }
                    },
                    _ => {
                        warn!(secret = %format!("{ns}/{name}"), "ingress TLS Secret lacks tls.crt or tls.key");
                        None
                    }
                }
            }
            Err(e) => {
                debug!(secret = %format!("{ns}/{name}"), error = %e, "ingress TLS Secret not readable");
                None
            }
        };
        self.read.insert(key, (Instant::now(), cert.clone()));
        cert
    }

    /// Reads the Secrets `ingresses` name (older Ingresses first, so theirs win a shared host) and puts
    /// the table in `certs`.
    pub async fn refresh(&mut self, client: &Client, ingresses: &[&Ingress], certs: &SniCerts) {
        let mut sorted: Vec<&Ingress> = ingresses.to_vec();
        sorted.sort_by_key(|i| i.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let mut t = CertTable::default();
        for ing in sorted {
            let ns = ing.metadata.namespace.as_deref().unwrap_or_default();
            for tls in ing.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
                let Some(secret) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) else {
                    continue;
                };
                let Some(cert) = self.get(client, ns, secret).await else {
                    continue;
                };
                for host in tls.hosts.iter().flatten() {
                    let host = host.to_ascii_lowercase();
                    let (map, key) = match host.strip_prefix("*.") {
                        Some(rest) => (&mut t.wildcard, rest.to_string()),
                        None => (&mut t.exact, host),
                    };
                    map.entry(key).or_insert_with(|| cert.clone());
                }
            }
        }
        self.read.retain(|_, (at, _)| at.elapsed() < REFRESH * 4);
        certs.swap(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_get_the_default_certificate() {
        let certs = SniCerts::new().expect("certs");
        let other = SniCerts::new().expect("certs").fallback.clone();
        let mut t = CertTable::default();
        t.exact.insert("a.test".into(), other.clone());
        t.wildcard.insert("w.test".into(), other.clone());
        certs.swap(t);
        assert!(Arc::ptr_eq(&certs.lookup(Some("A.test")), &other));
        assert!(Arc::ptr_eq(&certs.lookup(Some("x.w.test")), &other));
        assert!(Arc::ptr_eq(
            &certs.lookup(Some("y.x.w.test")),
            &certs.fallback
        ));
        assert!(Arc::ptr_eq(&certs.lookup(None), &certs.fallback));
    }
}
