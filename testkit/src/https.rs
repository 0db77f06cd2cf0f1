//! HTTPS servers a test runs in its own process (an aggregated API, admission webhooks): a CA the test
//! makes, a serving certificate from it for the names the API server dials, and an optional client CA
//! the server requires certificates from. The server stops when its handle drops.

#![allow(clippy::expect_used)] // test support stops loudly

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate authority made for one test.
pub struct TestCa {
    /// The CA certificate (PEM), for a `caBundle`.
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    /// A new CA named `cn`.
    pub fn new(cn: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A serving certificate (DER) and its key (PEM) for `names` (DNS names or IP addresses).
    pub fn leaf(&self, names: &[&str]) -> (CertificateDer<'static>, String) {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .expect("leaf params")
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        (cert.der().clone(), key.serialize_pem())
    }
}

/// A running HTTPS server; dropping it stops accepting and ends its connections.
pub struct HttpsServer {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `handler` over HTTPS/1.1 on 127.0.0.1 (an ephemeral port) with a certificate from `ca` for
/// `names`; with `client_ca` (PEM), clients must present a certificate it signed. Call from a Tokio
/// runtime.
pub async fn serve<F, Fut>(
    ca: &TestCa,
    names: &[&str],
    client_ca: Option<&str>,
    handler: F,
) -> HttpsServer
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let (cert, key) = ca.leaf(names);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = match client_ca {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(c.expect("client CA")).expect("client CA");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(
            vec![cert],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("leaf key"),
        )
        .expect("server config");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local address").port();
    let task = tokio::spawn(async move {
        // Connections live in this set, so aborting the server ends them too.
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let handler = handler.clone();
            conns.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    HttpsServer { port, task }
}

/// Manifests (YAML) of a selector-less Service `ns/name` on port 443 and a hand-made EndpointSlice
/// sending it to `127.0.0.1:port`, so the API server reaches a server of the test's own process as it
/// would reach a Service's pods.
pub fn loopback_service(ns: &str, name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  ports: [{{name: https, port: 443, targetPort: {port}}}]\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: {ns}\n  \
         labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\n\
         endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]\n\
         ports: [{{name: https, port: {port}, protocol: TCP}}]\n"
    )
}
