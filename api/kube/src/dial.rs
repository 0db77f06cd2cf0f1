//! Connections out of the API server: to node agents (logs, exec, attach, port-forward, metrics, the node
//! proxy) with this member's kubelet-client certificate, and to aggregated API servers. Errors read as Go's
//! net/http writes them, as kubectl users know them.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::status::ApiError;

/// How long connecting to an agent may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The TLS client configuration for agents: the kubelet-client certificate and key (PEM), and the
/// cluster CA (PEM) the agents' serving certificates must chain to, for the address dialed.
pub(crate) fn agent_tls(
    cert_pem: &str,
    key_pem: &str,
    ca_pem: &str,
) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(certs, key)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(cfg))
}

/// The agent's `host:port` from the Node: InternalIP, else Hostname, and its advertised port.
pub(crate) fn agent_address(node: &Value) -> Option<(String, u16)> {
    let addrs = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)?;
    let pick = |ty: &str| {
        addrs
            .iter()
            .find(|a| a.get("type").and_then(Value::as_str) == Some(ty))
            .and_then(|a| a.get("address").and_then(Value::as_str))
            .map(str::to_string)
    };
    let host = pick("InternalIP").or_else(|| pick("Hostname"))?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(10250);
    Some((host, port))
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A connect error as Go's net package words it (`connect: connection refused`), not Rust's
/// (`Connection refused (os error 111)`).
fn go_dial_error(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        ErrorKind::TimedOut => "i/o timeout".into(),
        ErrorKind::HostUnreachable => "connect: no route to host".into(),
        ErrorKind::NetworkUnreachable => "connect: network is unreachable".into(),
        _ => {
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or_default();
            let mut chars = text.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => String::new(),
            }
        }
    }
}

/// A TLS connection to `addr` whose certificate must name `server_name`; the dial and the handshake
/// are each bounded by `timeout`. Errors read as Go's net/http writes them.
pub(crate) async fn dial_tls(
    tls: Arc<rustls::ClientConfig>,
    addr: &str,
    server_name: &str,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| format!("dial tcp {addr}: i/o timeout"))?
        .map_err(|e| format!("dial tcp {addr}: {}", go_dial_error(&e)))?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    tokio::time::timeout(
        timeout,
        tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
    )
    .await
    .map_err(|_| "net/http: TLS handshake timeout".to_string())?
    .map_err(|e| e.to_string())
}

/// A TLS connection to the agent at `host:port`, with this member's kubelet-client certificate.
pub(crate) async fn connect_agent(
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    dial_tls(tls, &join_host_port(host, port), host, CONNECT_TIMEOUT).await
}

/// One GET to an agent over HTTPS (HTTP/1.1); the response with its body still streaming.
pub(crate) async fn get_from_agent(
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
    path: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, ApiError> {
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::Internal(format!(
            "Get \"https://{host}:{port}{}\": {e}",
            path.split('?').next().unwrap_or_default()
        ))
    };
    let stream = connect_agent(tls, host, port)
        .await
        .map_err(|e| unreachable(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let addr = join_host_port(host, port);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.as_str())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| unreachable(&e))?;
    sender.send_request(req).await.map_err(|e| unreachable(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agents_are_found_by_internal_ip() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}}}});
        assert_eq!(agent_address(&node), Some(("10.0.0.5".into(), 10251)));
    }
}
