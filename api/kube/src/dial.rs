//! Connections out of the API server: to node agents (logs, exec, attach, port-forward, metrics, the node
//! proxy) with this member's kubelet-client certificate, and to Services (aggregated API servers,
//! admission webhooks) resolved to a ready endpoint. Errors read as Go's
//! net/http writes them, as kubectl users know them.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::object::{self, path};
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage};

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

/// Why a Service has no endpoint to dial: upstream's reason (an APIService condition's) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unavailable {
    pub reason: &'static str,
    pub message: String,
}

pub(crate) fn unavailable(reason: &'static str, message: String) -> Unavailable {
    Unavailable { reason, message }
}

/// A ready endpoint of a Service: where to connect and the TLS server name to check.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub host: String,
    pub port: u16,
    /// `<service>.<namespace>.svc`, the name upstream verifies the backend's certificate for.
    pub server_name: String,
}

impl Endpoint {
    pub(crate) fn authority(&self) -> String {
        join_host_port(&self.host, self.port)
    }
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    path(v, p).and_then(Value::as_str).unwrap_or("")
}

/// Resolves Service `ns/name`'s `port` to one ready endpoint (picked at random among the ready ones),
/// with upstream's reasons when it cannot; an ExternalName Service resolves to its name.
pub(crate) fn resolve_service(
    storage: &Storage,
    ns: &str,
    name: &str,
    port: i64,
) -> Result<Endpoint, Unavailable> {
    let server_name = format!("{name}.{ns}.svc");
    let key = format!("/registry/services/specs/{ns}/{name}");
    let not_present = || {
        unavailable(
            "ServiceNotFound",
            format!("service/{name} in {ns:?} is not present"),
        )
    };
    let svc = match storage.range(key.as_bytes(), &prefix_end(key.as_bytes()), 0, 1) {
        Ok(page) => page
            .items
            .into_iter()
            .find(|(k, _)| k == key.as_bytes())
            .map(|(_, st)| st.object)
            .ok_or_else(not_present)?,
        Err(e) => return Err(unavailable("ServiceNotFound", e.to_string())),
    };
    if s(&svc, "spec.type") == "ExternalName" {
        let host = s(&svc, "spec.externalName").to_string();
        return Ok(Endpoint {
            host,
            port: u16::try_from(port).unwrap_or(443),
            server_name,
        });
    }
    let ports = path(&svc, "spec.ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(svc_port) = ports
        .iter()
        .find(|p| p.get("port").and_then(Value::as_i64) == Some(port))
    else {
        return Err(unavailable(
            "ServicePortError",
            format!("service/{name} in {ns:?} is not listening on port {port}"),
        ));
    };
    let port_name = s(svc_port, "name").to_string();
    let prefix = format!("/registry/endpointslices/{ns}/");
    let slices: Vec<Value> = storage
        .range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)
        .map(|p| p.items.into_iter().map(|(_, st)| st.object).collect())
        .unwrap_or_default();
    let slices: Vec<&Value> = slices
        .iter()
        .filter(|sl| {
            object::labels(sl)
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .and_then(Value::as_str)
                == Some(name)
        })
        .collect();
    if slices.is_empty() {
        return Err(unavailable(
            "EndpointsNotFound",
            format!("cannot find endpoints for service/{name} in {ns:?}"),
        ));
    }
    let mut ready = Vec::new();
    for slice in slices {
        let Some(p) = path(slice, "ports")
            .and_then(Value::as_array)
            .and_then(|ps| ps.iter().find(|p| s(p, "name") == port_name))
            .and_then(|p| p.get("port").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for ep in path(slice, "endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // An absent `ready` means ready (EndpointSlice's rule for unknown readiness).
            if path(ep, "conditions.ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            if let Some(addr) = path(ep, "addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
            {
                ready.push((addr.to_string(), p));
            }
        }
    }
    if ready.is_empty() {
        return Err(unavailable(
            "MissingEndpoints",
            format!("endpoints for service/{name} in {ns:?} have no addresses with port name {port_name:?}"),
        ));
    }
    let pick = rand::Rng::gen_range(&mut rand::thread_rng(), 0..ready.len());
    let (host, port) = ready.swap_remove(pick);
    Ok(Endpoint {
        host,
        port,
        server_name,
    })
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
