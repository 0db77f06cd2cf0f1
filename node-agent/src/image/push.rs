//! Pushes an image ([`super::oci::Built`]) to a registry over the OCI distribution API, so a site's
//! mirror can serve keel's built-in images to nodes that did not import them: each blob is checked
//! (`HEAD`) and uploaded when missing (`POST` then `PUT ?digest=`), then the manifest is put under its
//! tag. Basic credentials are answered to a `Basic` challenge and exchanged for a token at a `Bearer`
//! challenge's realm, as Docker's clients do.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use thiserror::Error;

use super::oci::{digest, Built};

/// The largest answer read from a registry (errors, tokens).
const MAX_ANSWER: usize = 1 << 20;
/// How long one request may take.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Why a push failed.
#[derive(Debug, Error)]
pub enum PushError {
    /// The destination is not `host[:port][/namespace]`.
    #[error("{0:?} is not a registry destination (host[:port][/namespace], optionally with http:// or https://)")]
    Destination(String),
    /// The CA file cannot be used.
    #[error("{path}: {message}")]
    Ca {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The registry cannot be reached.
    #[error("{url}: {message}")]
    Transport {
        /// The request's URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The registry refused a request.
    #[error("{method} {url}: {status}{}", if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Refused {
        /// The request's method.
        method: String,
        /// The request's URL.
        url: String,
        /// The answer's status.
        status: StatusCode,
        /// The registry's error text.
        message: String,
    },
}

type PushResult<T> = std::result::Result<T, PushError>;

/// Where images go: a registry and a namespace (repository prefix) in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `http` or `https`.
    pub scheme: String,
    /// `host[:port]`.
    pub host: String,
    /// Repository prefix without slashes at either end (may be empty).
    pub namespace: String,
}

impl Destination {
    /// Parses `[scheme://]host[:port][/namespace]`; without a scheme, https (`plain_http`: http).
    pub fn parse(raw: &str, plain_http: bool) -> PushResult<Destination> {
        let bad = || PushError::Destination(raw.to_string());
        let (scheme, rest) = match raw.split_once("://") {
            Some(("http", r)) => ("http", r),
            Some(("https", r)) => ("https", r),
            Some(_) => return Err(bad()),
            None if plain_http => ("http", raw),
            None => ("https", raw),
        };
        let (host, namespace) = rest.split_once('/').unwrap_or((rest, ""));
        let namespace = namespace.trim_end_matches('/');
        let valid_repo = |s: &str| {
            s.split('/').all(|c| {
                !c.is_empty()
                    && c.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)
                    })
            })
        };
        if host.is_empty()
            || host.contains(['@', '?', '#', ' '])
            || (!namespace.is_empty() && !valid_repo(namespace))
        {
            return Err(bad());
        }
        Ok(Destination {
            scheme: scheme.into(),
            host: host.to_ascii_lowercase(),
            namespace: namespace.into(),
        })
    }

    /// The repository an image's name maps to here (`localhost/busybox:latest` → `<ns>/busybox`) and its tag.
    pub fn repository_of(&self, image: &str) -> (String, String) {
        let (name, tag) = match image.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, t),
            _ => (image, "latest"),
        };
        // The repository path without the image's own registry.
        let path = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                rest
            }
            _ => name,
        };
        let repo = if self.namespace.is_empty() {
            path.to_string()
        } else {
            format!("{}/{path}", self.namespace)
        };
        (repo, tag.to_string())
    }
}

/// A URL split for a request.
struct Url {
    https: bool,
    host: String,
    port: u16,
    path: String,
}

fn parse_url(url: &str) -> Option<Url> {
    let uri: hyper::Uri = url.parse().ok()?;
    let https = match uri.scheme_str()? {
        "https" => true,
        "http" => false,
        _ => return None,
    };
    Some(Url {
        https,
        host: uri.host()?.trim_matches(['[', ']']).to_string(),
        port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
        path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
    })
}

/// An answer: status, `Location` and `WWW-Authenticate`, body.
struct Answer {
    status: StatusCode,
    location: Option<String>,
    challenge: Option<String>,
    body: Bytes,
}

/// A registry client for one push.
pub struct Pusher {
    dest: Destination,
    tls: Arc<rustls::ClientConfig>,
    basic: Option<String>,
    authorization: Option<String>,
}

impl Pusher {
    /// A client for `dest` with optional `user:password` credentials and a CA bundle (None: the
    /// system's roots).
    pub fn new(
        dest: Destination,
        credentials: Option<(String, String)>,
        ca_file: Option<&std::path::Path>,
    ) -> PushResult<Pusher> {
        let mut roots = rustls::RootCertStore::empty();
        match ca_file {
            Some(path) => {
                let ca_err = |message: String| PushError::Ca {
                    path: path.display().to_string(),
                    message,
                };
                let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
                for c in CertificateDer::pem_slice_iter(&pem) {
                    let c = c.map_err(|e| ca_err(e.to_string()))?;
                    roots.add(c).map_err(|e| ca_err(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(ca_err("no PEM certificate in it".into()));
                }
            }
            None => {
                for c in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(c);
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PushError::Ca {
                path: "TLS".into(),
                message: e.to_string(),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let basic = credentials.map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        });
        Ok(Pusher {
            dest,
            tls: Arc::new(tls),
            basic,
            authorization: None,
        })
    }

    fn base(&self) -> String {
        format!("{}://{}", self.dest.scheme, self.dest.host)
    }

    /// One request on its own connection.
    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> PushResult<Answer> {
        let transport = |message: String| PushError::Transport {
            url: url.to_string(),
            message,
        };
        let u = parse_url(url).ok_or_else(|| transport("not an http(s) URL".into()))?;
        let mut req = Request::builder()
            .method(method)
            .uri(&u.path)
            .header(hyper::header::HOST, format!("{}:{}", u.host, u.port))
            .header(hyper::header::USER_AGENT, "keel-images")
            .header(hyper::header::CONTENT_LENGTH, body.len());
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| transport(e.to_string()))?;
        let work = async {
            let tcp = tokio::net::TcpStream::connect((u.host.as_str(), u.port))
                .await
                .map_err(|e| transport(e.to_string()))?;
            if u.https {
                let name =
                    ServerName::try_from(u.host.clone()).map_err(|e| transport(e.to_string()))?;
                let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| transport(e.to_string()))?;
                exchange(hyper_util::rt::TokioIo::new(tls), req).await
            } else {
                exchange(hyper_util::rt::TokioIo::new(tcp), req).await
            }
            .map_err(transport)
        };
        tokio::time::timeout(REQUEST_TIMEOUT, work)
            .await
            .map_err(|_| transport("timed out".into()))?
    }

    /// A request with the current authorization; at a 401 the challenge is answered once.
    async fn call(
        &mut self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> PushResult<Answer> {
        let mut tried = false;
        loop {
            let mut h = headers.to_vec();
            if let Some(a) = &self.authorization {
                h.push(("authorization", a.clone()));
            }
            let a = self.send(method.clone(), url, &h, body.clone()).await?;
            if a.status != StatusCode::UNAUTHORIZED || tried {
                return Ok(a);
            }
            tried = true;
            let challenge = a.challenge.clone().unwrap_or_default();
            self.authorization = Some(self.answer(&challenge).await?);
        }
    }

    /// The `Authorization` value for a `WWW-Authenticate` challenge.
    async fn answer(&self, challenge: &str) -> PushResult<String> {
        let refused = |message: String| PushError::Refused {
            method: "authenticate".into(),
            url: self.base(),
            status: StatusCode::UNAUTHORIZED,
            message,
        };
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return self
                .basic
                .clone()
                .ok_or_else(|| refused("the registry wants credentials (--username)".into()));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(refused(format!("unsupported challenge {challenge:?}")));
        }
        let param = |name: &str| {
            params.split(',').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                (k.eq_ignore_ascii_case(name)).then(|| v.trim_matches('"').to_string())
            })
        };
        let realm =
            param("realm").ok_or_else(|| refused("a Bearer challenge without realm".into()))?;
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(s) = param("service") {
            query.append_pair("service", &s);
        }
        if let Some(s) = param("scope") {
            query.append_pair("scope", &s);
        }
        let sep = if realm.contains('?') { '&' } else { '?' };
        let url = format!("{realm}{sep}{}", query.finish());
        let mut h = Vec::new();
        if let Some(b) = &self.basic {
            h.push(("authorization", b.clone()));
        }
        let a = self.send(Method::GET, &url, &h, Bytes::new()).await?;
        if !a.status.is_success() {
            return Err(refused(format!("token endpoint answered {}", a.status)));
        }
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap_or_default();
        let token = v["token"]
            .as_str()
            .or_else(|| v["access_token"].as_str())
            .ok_or_else(|| refused("the token endpoint gave no token".into()))?;
        Ok(format!("Bearer {token}"))
    }

    fn check(&self, method: &str, url: &str, a: &Answer, ok: &[StatusCode]) -> PushResult<()> {
        if ok.contains(&a.status) {
            return Ok(());
        }
        // The registry's errors: {"errors":[{"code":…,"message":…}]}.
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap_or_default();
        let message = v["errors"]
            .as_array()
            .map(|es| {
                es.iter()
                    .map(|e| {
                        format!(
                            "{} {}",
                            e["code"].as_str().unwrap_or_default(),
                            e["message"].as_str().unwrap_or_default()
                        )
                        .trim()
                        .to_string()
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default();
        Err(PushError::Refused {
            method: method.into(),
            url: url.into(),
            status: a.status,
            message,
        })
    }

    /// Uploads one blob unless the registry has it.
    async fn blob(&mut self, repo: &str, data: &[u8]) -> PushResult<()> {
        let d = digest(data);
        let url = format!("{}/v2/{repo}/blobs/{d}", self.base());
        let a = self.call(Method::HEAD, &url, &[], Bytes::new()).await?;
        if a.status == StatusCode::OK {
            return Ok(());
        }
        let start = format!("{}/v2/{repo}/blobs/uploads/", self.base());
        let a = self.call(Method::POST, &start, &[], Bytes::new()).await?;
        self.check("POST", &start, &a, &[StatusCode::ACCEPTED])?;
        let location = a.location.ok_or_else(|| PushError::Refused {
            method: "POST".into(),
            url: start.clone(),
            status: a.status,
            message: "no Location for the upload".into(),
        })?;
        let location = if location.starts_with('/') {
            format!("{}{location}", self.base())
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={}", d.replace(':', "%3A"));
        let headers = [("content-type", "application/octet-stream".to_string())];
        let a = self
            .call(Method::PUT, &put, &headers, Bytes::copy_from_slice(data))
            .await?;
        self.check("PUT", &put, &a, &[StatusCode::CREATED])
    }

    /// Pushes `image` (its blobs, then its manifest under its tag) as `repo:tag`; the manifest's digest.
    pub async fn push(&mut self, repo: &str, tag: &str, image: &Built) -> PushResult<String> {
        self.blob(repo, &image.layer).await?;
        self.blob(repo, &image.config).await?;
        let url = format!("{}/v2/{repo}/manifests/{tag}", self.base());
        let headers = [(
            "content-type",
            "application/vnd.oci.image.manifest.v1+json".to_string(),
        )];
        let a = self
            .call(
                Method::PUT,
                &url,
                &headers,
                Bytes::copy_from_slice(&image.manifest),
            )
            .await?;
        self.check("PUT", &url, &a, &[StatusCode::CREATED])?;
        Ok(digest(&image.manifest))
    }
}

async fn exchange<T>(io: T, req: Request<Full<Bytes>>) -> Result<Answer, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let head = req.method() == Method::HEAD;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let header = |n: hyper::header::HeaderName| {
        parts
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let body = if head {
        Bytes::new()
    } else {
        http_body_util::Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes()
    };
    driver.abort();
    Ok(Answer {
        status: parts.status,
        location: header(hyper::header::LOCATION),
        challenge: header(hyper::header::WWW_AUTHENTICATE),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_and_repositories() {
        let d = Destination::parse("127.0.0.1:5000/site/keel", true).unwrap();
        assert_eq!(d.scheme, "http");
        assert_eq!(d.host, "127.0.0.1:5000");
        assert_eq!(
            d.repository_of("localhost/busybox:latest"),
            ("site/keel/busybox".into(), "latest".into())
        );
        let d = Destination::parse("https://mirror.example", true).unwrap();
        assert_eq!(d.scheme, "https");
        assert_eq!(
            d.repository_of("localhost/pause:3.10"),
            ("pause".into(), "3.10".into())
        );
        assert_eq!(
            d.repository_of("docker.io/library/nginx:1.27"),
            ("library/nginx".into(), "1.27".into())
        );
        for bad in [
            "",
            "ftp://x",
            "m.example/Upper",
            "m.example//x",
            "u@m.example",
        ] {
            assert!(Destination::parse(bad, false).is_err(), "{bad}");
        }
        let u = parse_url("https://[::1]:5000/v2/x?y=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 5000, "/v2/x?y=1")
        );
        let u = parse_url("http://auth.example/token").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("auth.example", 80));
    }
}
