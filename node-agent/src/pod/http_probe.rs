//! The `httpGet` probe's client, as the kubelet's prober: HTTP/1.1 GET over plain TCP or TLS (`scheme:
//! HTTPS`, the server's certificate not verified, as upstream's `InsecureSkipVerify`), the configured
//! headers, User-Agent `kube-probe/1.32`, and up to 10 redirects followed only to the same host (a
//! redirect elsewhere ends the chain and its 3xx answer counts, as upstream's `http.ErrUseLastResponse`).

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How many redirects are followed before the probe fails.
const MAX_REDIRECTS: usize = 10;
/// The most of a response's head read.
const MAX_HEAD: usize = 16 * 1024;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// The URL scheme.
    pub fn word(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(keel_client_kit::tls::any_server_cert(provider))
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// `host:port`, with an IPv6 host in brackets.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One request and the head of its answer: status code and `Location`.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    req: &str,
) -> std::io::Result<(u16, Option<String>)> {
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_HEAD {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response")
        })?;
    let location = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.trim().to_string());
    Ok((code, location))
}

/// One GET, no redirects.
async fn get_once(
    scheme: Scheme,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(u16, Option<String>), String> {
    let addr = join_host_port(host, port);
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.32\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        // Header names and values with line breaks would split the request.
        if !k.contains(['\r', '\n']) && !v.contains(['\r', '\n']) {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    req.push_str("\r\n");
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("dial tcp {addr}: connect: {}", short_io(&e)))?;
    match scheme {
        Scheme::Http => exchange(tcp, &req).await.map_err(|e| e.to_string()),
        Scheme::Https => {
            let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
            let tls = tokio_rustls::TlsConnector::from(tls_config()?)
                .connect(name, tcp)
                .await
                .map_err(|e| format!("remote error: tls: {e}"))?;
            exchange(tls, &req).await.map_err(|e| e.to_string())
        }
    }
}

fn short_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

/// Where a `Location` leads from `(scheme, host, port, path)`.
fn follow(
    from: (Scheme, &str, u16, &str),
    location: &str,
) -> Option<(Scheme, String, u16, String)> {
    let (scheme, host, port, path) = from;
    if location.starts_with("http://") || location.starts_with("https://") {
        let uri: hyper::Uri = location.parse().ok()?;
        let s = if uri.scheme_str() == Some("https") {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let h = uri.host()?.trim_start_matches('[').trim_end_matches(']');
        let p = uri.port_u16().unwrap_or(s.default_port());
        let pq = uri.path_and_query().map_or("/", |x| x.as_str()).to_string();
        return Some((s, h.to_string(), p, pq));
    }
    if location.starts_with('/') {
        return Some((scheme, host.to_string(), port, location.to_string()));
    }
    let dir = path.split('?').next().unwrap_or("/");
    let dir = &dir[..dir.rfind('/').map_or(0, |i| i + 1)];
    let dir = if dir.is_empty() { "/" } else { dir };
    Some((scheme, host.to_string(), port, format!("{dir}{location}")))
}

/// GETs `scheme://host:port/path`, following same-host redirects; the final status code, or the error
/// the kubelet would report after `Get "<url>": `.
pub async fn get(
    scheme: Scheme,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<u16, String> {
    let (mut scheme, mut at_host, mut port, mut path) =
        (scheme, host.to_string(), port, path.to_string());
    for _ in 0..=MAX_REDIRECTS {
        let (code, location) = get_once(scheme, &at_host, port, &path, headers).await?;
        let Some(location) = location.filter(|_| (300..400).contains(&code)) else {
            return Ok(code);
        };
        let Some(next) = follow((scheme, &at_host, port, &path), &location) else {
            return Ok(code);
        };
        // Only the same host name: elsewhere the redirect itself is the answer.
        if next.1 != host {
            return Ok(code);
        }
        (scheme, at_host, port, path) = next;
    }
    Err(format!("stopped after {MAX_REDIRECTS} redirects"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS server with a self-signed certificate answering by path; returns its port.
    async fn tls_server() -> u16 {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["somewhere.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut s) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 2048];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = req.split_whitespace().nth(1).unwrap_or("").to_string();
                    let answer = match path.as_str() {
                        "/ok" if req.contains("X-Probe: yes\r\n") => "200 OK".to_string(),
                        "/ok" => "400 Bad Request".to_string(),
                        "/down" => "503 Service Unavailable".to_string(),
                        "/redir" => "302 Found\r\nLocation: /ok".to_string(),
                        "/away" => "302 Found\r\nLocation: https://elsewhere.example:1/x".into(),
                        "/loop" => "302 Found\r\nLocation: loop".to_string(),
                        _ => "404 Not Found".to_string(),
                    };
                    let _ = s
                        .write_all(
                            format!("HTTP/1.1 {answer}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                        )
                        .await;
                    let _ = s.shutdown().await;
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn https_probes_skip_verification_send_headers_and_follow_local_redirects() {
        let port = tls_server().await;
        let h = vec![("X-Probe".to_string(), "yes".to_string())];
        let get = |path: &'static str, h: Vec<(String, String)>| async move {
            get(Scheme::Https, "127.0.0.1", port, path, &h).await
        };
        assert_eq!(get("/ok", h.clone()).await, Ok(200));
        assert_eq!(get("/ok", vec![]).await, Ok(400));
        assert_eq!(get("/down", h.clone()).await, Ok(503));
        assert_eq!(get("/redir", h.clone()).await, Ok(200));
        // A redirect to another host is not followed: its 3xx is the answer.
        assert_eq!(get("/away", h.clone()).await, Ok(302));
        assert_eq!(
            get("/loop", h.clone()).await,
            Err("stopped after 10 redirects".to_string())
        );
        // Plain HTTP to a TLS port fails to read a status.
        assert!(get_once(Scheme::Http, "127.0.0.1", port, "/ok", &h)
            .await
            .is_err());
    }

    #[test]
    fn locations_resolve() {
        let from = (Scheme::Http, "10.0.0.1", 8080, "/a/b?q=1");
        assert_eq!(
            follow(from, "/c"),
            Some((Scheme::Http, "10.0.0.1".into(), 8080, "/c".into()))
        );
        assert_eq!(
            follow(from, "c"),
            Some((Scheme::Http, "10.0.0.1".into(), 8080, "/a/c".into()))
        );
        assert_eq!(
            follow(from, "https://10.0.0.1/d"),
            Some((Scheme::Https, "10.0.0.1".into(), 443, "/d".into()))
        );
    }
}
