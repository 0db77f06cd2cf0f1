//! The member's serving certificate over time, with the real kubectl and the `kube` crate: its end is a
//! metric, a certificate near its end raises a Warning Event, and `keel certificate rotate` renews it
//! online while requests keep coming, each on a fresh TLS connection, with none failing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use keel_testkit::binaries::Kind;
use keel_testkit::cluster::Options;
use keel_testkit::keel_bin;
use keel_testkit::kube::{client, KubeCluster};
use keel_testkit::run_bounded;
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// The certificate the API server presents to a new TLS connection.
async fn served_certificate(url: &str, ca_pem: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let hostport = url.trim_start_matches("https://");
    let tcp = tokio::net::TcpStream::connect(hostport).await.unwrap();
    let host = hostport.rsplit_once(':').unwrap().0.to_string();
    let name = ServerName::try_from(host).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn file_certificate(path: &std::path::Path) -> Vec<u8> {
    let pem = std::fs::read_to_string(path).unwrap();
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[test]
fn the_serving_certificate_renews_under_load_without_a_failed_request() {
    // 100 days: inside the 120-day warning window, outside the 90-day renewal one.
    let c = KubeCluster::start_with(
        Options::new(Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--leaf-cert-days=100"),
    );
    let data = c.member(0).data_dir.clone();
    let ca = std::fs::read_to_string(data.join("pki/ca.crt")).unwrap();
    let url = c.member(0).kube_url();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let first = rt.block_on(served_certificate(&url, &ca));
    assert_eq!(first, file_certificate(&data.join("pki/apiserver.crt")));

    // Its end is a metric, and being within 120 days of it is a Warning Event.
    let metrics = c.ok(0, &["get", "--raw", "/metrics"]);
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("keel_certificate_expiry_timestamp_seconds{certificate=\"apiserver\"}")
        })
        .unwrap_or_else(|| panic!("no certificate metric in:\n{metrics}"));
    let end: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    let days = (end - jiff::Timestamp::now().as_second()) / 86_400;
    assert!((99..=100).contains(&days), "{line}: {days} days");
    assert!(metrics.contains("keel_certificate_expiry_timestamp_seconds{certificate=\"ca\"}"));
    let client_end = |metrics: &str| -> i64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(
                    "keel_certificate_expiry_timestamp_seconds{certificate=\"kubelet-client\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no kubelet-client metric in:\n{metrics}"))
    };
    let client_before = client_end(&metrics);
    c.wait_until("the expiry warning", Duration::from_secs(30), || {
        !c.event_messages(0, "kube-system", "kube-system", "CertificateExpiringSoon")
            .is_empty()
    });
    let warned = c.event_messages(0, "kube-system", "kube-system", "CertificateExpiringSoon");
    assert!(
        warned[0].contains("certificate apiserver of member"),
        "{warned:?}"
    );

    // Requests, each on a new connection (a new handshake), while the certificate is rotated.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let kubeconfig = c.member(0).kubeconfig();
    let load = {
        let (stop, done, failures) = (stop.clone(), done.clone(), failures.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let cms: Api<ConfigMap> =
                        Api::namespaced(client(&kubeconfig, true).await, "default");
                    let mut cm = ConfigMap::default();
                    cm.metadata.name = Some(format!("load-{n}"));
                    match cms.create(&PostParams::default(), &cm).await {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => failures.lock().unwrap().push(format!("load-{n}: {e}")),
                    }
                    n += 1;
                }
            })
        })
    };
    c.wait_until("requests flowing", Duration::from_secs(30), || {
        done.load(Ordering::SeqCst) >= 10
    });
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_keel"));
    cmd.args(["certificate", "rotate", "--data-dir"]).arg(&data);
    let out = run_bounded(cmd, None, Duration::from_secs(60));
    assert!(out.success(), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with("serving certificate renewed: ends "),
        "{}",
        out.stdout
    );
    let after_rotation = done.load(Ordering::SeqCst);
    c.wait_until(
        "requests after the rotation",
        Duration::from_secs(30),
        || done.load(Ordering::SeqCst) >= after_rotation + 10,
    );
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap();
    let failed = failures.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "requests failed across the rotation: {failed:?}"
    );

    // New connections get the new certificate, the one on disk.
    let second = rt.block_on(served_certificate(&url, &ca));
    assert_ne!(first, second, "the served certificate did not change");
    assert_eq!(second, file_certificate(&data.join("pki/apiserver.crt")));
    let metrics = c.ok(0, &["get", "--raw", "/metrics"]);
    assert!(
        metrics.contains("keel_certificate_rotations_total 1"),
        "{metrics}"
    );
    // The in-memory client certificates (to agents, to aggregated servers) were renewed with it (their
    // end, a whole day, may not move within a test).
    assert!(
        c.member(0)
            .log()
            .contains("kubelet-client and front-proxy client certificates renewed"),
        "{}",
        c.member(0).log_tail(30)
    );
    assert!(client_end(&metrics) >= client_before, "{metrics}");

    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_keel"));
    cmd.args(["certificate", "check", "--data-dir"]).arg(&data);
    let out = run_bounded(cmd, None, Duration::from_secs(60));
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("apiserver.crt") && out.stdout.contains("ca.crt"),
        "{}",
        out.stdout
    );
}
