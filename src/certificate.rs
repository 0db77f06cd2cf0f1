//! `keel certificate rotate|check`: a member's certificates, from its data directory.

use std::time::{Duration, Instant};

use keel_kube_api::certs::{not_after, request_rotation, ROTATE_REQUEST};

use crate::cli::{CertificateArgs, CertificateCommand};
use crate::server::ServerError;

fn err(e: impl std::fmt::Display) -> ServerError {
    ServerError::Config(e.to_string())
}

fn describe(end: Option<i64>) -> String {
    match end {
        Some(t) => {
            let days = (t - jiff::Timestamp::now().as_second()) / 86_400;
            let when = jiff::Timestamp::from_second(t)
                .map(|t| t.to_string())
                .unwrap_or_default();
            format!("{when} ({days} days)")
        }
        None => "unreadable".into(),
    }
}

/// Runs `keel certificate ...`.
pub(crate) async fn run(a: CertificateArgs) -> Result<(), ServerError> {
    let pki = a.data_dir.join("pki");
    match a.command {
        CertificateCommand::Check => {
            let crts = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
                let mut files: Vec<_> = std::fs::read_dir(dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "crt"))
                    .collect();
                files.sort();
                files
            };
            let tls = a.data_dir.join(keel_kube_api::pki::MEMBER_TLS_DIR);
            if !pki.exists() && !tls.exists() {
                return Err(err(format!(
                    "{}: no pki/ or tls/ directory",
                    a.data_dir.display()
                )));
            }
            // pki/: the Kubernetes side; tls/: peer TLS and the etcd client port.
            for (prefix, f) in crts(&pki)
                .into_iter()
                .map(|f| ("", f))
                .chain(crts(&tls).into_iter().map(|f| ("tls/", f)))
            {
                let pem = std::fs::read_to_string(&f)
                    .map_err(|e| err(format!("{}: {e}", f.display())))?;
                println!(
                    "{:<28}{}",
                    format!(
                        "{prefix}{}",
                        f.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                    ),
                    describe(not_after(&pem))
                );
            }
            Ok(())
        }
        CertificateCommand::Rotate { timeout } => {
            let crt = pki.join("apiserver.crt");
            let before = std::fs::read_to_string(&crt)
                .map_err(|e| err(format!("{}: {e}", crt.display())))?;
            // A member made with --init/--join renews its peer and etcd certificates too.
            let peer = a
                .data_dir
                .join(keel_kube_api::pki::MEMBER_TLS_DIR)
                .join("peer.crt");
            let peer_before = std::fs::read_to_string(&peer).ok();
            request_rotation(&a.data_dir).map_err(|e| {
                err(format!(
                    "{}: {e}",
                    a.data_dir.join(ROTATE_REQUEST).display()
                ))
            })?;
            // The running member picks the request up within seconds and serves the new certificate to
            // every new connection; open ones keep theirs.
            let start = Instant::now();
            while start.elapsed() < timeout {
                let now = std::fs::read_to_string(&crt).unwrap_or_default();
                if !a.data_dir.join(ROTATE_REQUEST).exists() && now != before {
                    println!(
                        "serving certificate renewed: ends {}",
                        describe(not_after(&now))
                    );
                    if peer_before.is_some() {
                        let peer_now = std::fs::read_to_string(&peer).ok();
                        if peer_now != peer_before {
                            println!(
                                "peer and etcd certificates renewed: end {}",
                                describe(peer_now.as_deref().and_then(not_after))
                            );
                        }
                    }
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err(format!(
                "no running member renewed its certificate within {timeout:?}; the request stays in {} and is served when the member starts",
                a.data_dir.join(ROTATE_REQUEST).display()
            )))
        }
    }
}
