//! Upgrades: the data directory records its format, so a keel that cannot read it refuses with a clear
//! message instead of guessing, and a member refuses to run next to members more than one minor version
//! away (upgrade one member at a time, one minor version at a time).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use keel_kube_api::join::{compatible, VERSION};

/// The file that records a data directory's format.
pub(crate) const FORMAT_FILE: &str = "format";
/// The format this keel writes and reads.
pub(crate) const DATA_FORMAT: u32 = 1;

/// Checks (and on a new or pre-versioning directory, records) the data format of `dir`.
pub(crate) fn check_data_format(dir: &Path) -> Result<(), String> {
    let path = dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found = text
                .trim()
                .strip_prefix("keel-data-format ")
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| {
                    format!(
                        "{}: unreadable data format {:?}",
                        path.display(),
                        text.trim()
                    )
                })?;
            if found > DATA_FORMAT {
                return Err(format!(
                    "{} holds data format {found}, written by a newer keel; this keel ({VERSION}) reads format {DATA_FORMAT}. Run the newer keel, or restore a snapshot into a fresh directory",
                    dir.display()
                ));
            }
            // Older formats would be migrated here; format 1 is the first.
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A new directory, or one from before formats were recorded (which is format 1).
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
            std::fs::write(&tmp, format!("keel-data-format {DATA_FORMAT}\n"))
                .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The keel version a member reports on `GET <client url>/version` (None when it does not answer or is
/// not keel). `https://` URLs need `tls` (the etcd client CA, and a client certificate when the port
/// asks for one); without it they are not asked.
fn member_version(
    client_url: &str,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Option<String> {
    let (hostport, tls) = match client_url.strip_prefix("https://") {
        Some(rest) => (rest, Some(tls?)),
        None => (client_url.strip_prefix("http://")?, None),
    };
    let hostport = hostport.trim_end_matches('/');
    let addr = std::net::ToSocketAddrs::to_socket_addrs(hostport)
        .ok()?
        .next()?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    // One write: a request in pieces may meet a peer that answers after the first and resets.
    let request = format!("GET /version HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n");
    let mut body = String::new();
    match tls {
        None => {
            let mut s = s;
            s.write_all(request.as_bytes()).ok()?;
            s.take(64 * 1024).read_to_string(&mut body).ok()?;
        }
        Some(config) => {
            // The client port speaks gRPC (h2) and HTTP/1.1; this asks in HTTP/1.1.
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let host = hostport
                .rsplit_once(':')
                .map_or(hostport, |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let name = rustls::pki_types::ServerName::try_from(host).ok()?;
            let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).ok()?;
            let mut s = rustls::StreamOwned::new(conn, s);
            s.write_all(request.as_bytes()).ok()?;
            // A TLS peer may close without close_notify once it answered; keep what came.
            let _ = s.take(64 * 1024).read_to_string(&mut body);
        }
    }
    let json = body.split_once("\r\n\r\n")?.1;
    let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
    v.get("keel")?.as_str().map(str::to_string)
}

/// Refuses to run next to a member whose keel is more than one minor version away.
pub(crate) async fn check_skew(
    members: Vec<(String, Vec<String>)>,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> Result<(), String> {
    for (name, urls) in members {
        let Some(url) = urls.into_iter().next() else {
            continue;
        };
        let tls = tls.clone();
        let found = tokio::task::spawn_blocking(move || member_version(&url, tls))
            .await
            .ok()
            .flatten();
        if let Some(theirs) = found {
            tracing::info!(member = %name, version = %theirs, "member version checked");
            if !compatible(&theirs, VERSION) {
                return Err(format!(
                    "keel {VERSION} cannot run in a cluster whose member {name} runs keel {theirs}: members may be at most one minor version apart; upgrade one member at a time, one minor version at a time"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_recorded_and_newer_ones_refused() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        check_data_format(dir.path())?;
        let text =
            std::fs::read_to_string(dir.path().join(FORMAT_FILE)).map_err(|e| e.to_string())?;
        assert_eq!(text, "keel-data-format 1\n");
        check_data_format(dir.path())?;
        std::fs::write(dir.path().join(FORMAT_FILE), "keel-data-format 2\n")
            .map_err(|e| e.to_string())?;
        let err = check_data_format(dir.path()).err().unwrap_or_default();
        assert!(
            err.contains("holds data format 2, written by a newer keel"),
            "{err}"
        );
        Ok(())
    }

    /// A member that answers `/version` with `keel`.
    fn fake_member(keel: &'static str) -> Result<String, String> {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body =
                    format!(r#"{{"etcdserver":"3.4.0","etcdcluster":"3.4.0","keel":"{keel}"}}"#);
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Ok(format!("http://{addr}"))
    }

    #[tokio::test]
    async fn members_two_minor_versions_away_are_refused() -> Result<(), String> {
        let near = fake_member(VERSION)?;
        check_skew(vec![("m2".into(), vec![near])], None).await?;
        let far = fake_member("0.9.0")?;
        let err = check_skew(vec![("m3".into(), vec![far])], None)
            .await
            .err()
            .unwrap_or_default();
        assert!(err.contains("whose member m3 runs keel 0.9.0"), "{err}");
        // A member that does not answer is no reason to refuse.
        check_skew(vec![("m4".into(), vec!["http://127.0.0.1:1".into()])], None).await?;
        Ok(())
    }
}
