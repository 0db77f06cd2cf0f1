//! TLS on the etcd client port (etcd's `--cert-file`, `--key-file`, `--trusted-ca-file`,
//! `--client-cert-auth`): etcdctl with the right certificates works (put, get, member list,
//! endpoint status, snapshot save), without a client certificate or in plaintext it is refused,
//! and `/health` answers over TLS beside gRPC.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_testkit::{etcdctl_with, free_ports, require_etcd_tools, CtlOutput};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

/// Writes `ca.crt`, a server certificate for 127.0.0.1 (`server.crt`/`.key`, serverAuth and
/// clientAuth as etcd peer certificates are) and a client certificate (`client.crt`/`.key`).
fn make_certs(dir: &Path) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, "test-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    std::fs::write(dir.join("ca.crt"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    for (name, sans, usages) in [
        (
            "server",
            vec!["127.0.0.1".to_string()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        ),
        (
            "client",
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        ),
    ] {
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = usages;
        let k = KeyPair::generate().unwrap();
        let c = p.signed_by(&k, &issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), c.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), k.serialize_pem()).unwrap();
    }
}

/// A `keel server` process, killed and reaped on drop.
struct Member(Child);

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ctl(endpoint: &str, dir: &Path, args: &[&str], certs: bool) -> CtlOutput {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let mut global = vec![
        "--command-timeout=5s".to_string(),
        "--dial-timeout=3s".to_string(),
        format!("--cacert={}", p("ca.crt")),
    ];
    if certs {
        global.push(format!("--cert={}", p("client.crt")));
        global.push(format!("--key={}", p("client.key")));
    }
    let global: Vec<&str> = global.iter().map(String::as_str).collect();
    etcdctl_with(endpoint, args, None, &global)
}

#[test]
fn etcdctl_over_tls_with_client_cert_auth() {
    require_etcd_tools();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_certs(dir);
    let ports = free_ports(2);
    let client = format!("https://127.0.0.1:{}", ports[0]);
    let peer = format!("http://127.0.0.1:{}", ports[1]);
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let log = std::fs::File::create(dir.join("m1.log")).unwrap();
    let _member = Member(
        Command::new(KEEL)
            .args(["server", "--name", "m1", "--kube-listen", ""])
            .arg("--data-dir")
            .arg(dir.join("m1"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args(["--listen-peer-urls", &peer])
            .args([
                "--cert-file",
                &p("server.crt"),
                "--key-file",
                &p("server.key"),
            ])
            .args(["--trusted-ca-file", &p("ca.crt"), "--client-cert-auth"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !ctl(&client, dir, &["endpoint", "health"], true).success() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "member never became healthy: {}",
            std::fs::read_to_string(dir.join("m1.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let put = ctl(&client, dir, &["put", "k", "v"], true);
    assert!(put.success(), "put: {}", put.stderr);
    let get = ctl(&client, dir, &["get", "k", "--print-value-only"], true);
    assert_eq!(get.stdout.trim(), "v", "get: {}", get.stderr);
    let members = ctl(&client, dir, &["member", "list"], true);
    assert!(members.stdout.contains(&client), "member list: {members:?}");
    let status = ctl(&client, dir, &["endpoint", "status"], true);
    assert!(status.success(), "endpoint status: {}", status.stderr);
    let snap = dir.join("snap.db");
    let save = ctl(
        &client,
        dir,
        &["snapshot", "save", &snap.to_string_lossy()],
        true,
    );
    assert!(save.success(), "snapshot save: {}", save.stderr);
    assert!(std::fs::metadata(&snap).unwrap().len() > 0);

    // No client certificate: refused at the handshake.
    let anon = ctl(&client, dir, &["get", "k"], false);
    assert!(!anon.success(), "a client without certificate was served");
    // Plaintext to the TLS port.
    let plain = format!("http://127.0.0.1:{}", ports[0]);
    let out = etcdctl_with(&plain, &["get", "k"], None, &["--command-timeout=3s"]);
    assert!(!out.success(), "plaintext was served on the TLS port");

    // /health over TLS beside gRPC, with curl as an operator would.
    // curl with the CA and the client certificate, as an operator would.
    let curl = |extra: &[&str], path: &str| {
        Command::new("curl")
            .args([
                "-s",
                "--cacert",
                &p("ca.crt"),
                "--cert",
                &p("client.crt"),
                "--key",
            ])
            .arg(p("client.key"))
            .args(extra)
            .arg(format!("{client}{path}"))
            .output()
            .unwrap()
    };
    let health = curl(&[], "/health");
    let body = String::from_utf8_lossy(&health.stdout);
    assert!(body.contains("\"health\":\"true\""), "/health: {body}");

    // The JSON gateway over TLS: the value put through gRPC above, read with curl.
    let range = curl(&["-X", "POST", "-d", r#"{"key":"aw=="}"#], "/v3/kv/range");
    let body = String::from_utf8_lossy(&range.stdout);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(
        v["kvs"][0]["value"], "dg==",
        "/v3/kv/range over TLS: {body}"
    );

    // A client that sends the IP address as SNI (as some TLS stacks do) is served without a log line
    // per connection (rustls warns about it; etcd logs nothing).
    for _ in 0..3 {
        let out = Command::new("openssl")
            .args(["s_client", "-connect"])
            .arg(client.trim_start_matches("https://"))
            .args(["-servername", "127.0.0.1", "-CAfile", &p("ca.crt")])
            .args(["-cert", &p("client.crt"), "-key", &p("client.key")])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("BEGIN CERTIFICATE") || text.contains("Server certificate"),
            "{text}"
        );
    }
    // The log is written as lines arrive; a request served after the handshakes orders them.
    assert!(ctl(&client, dir, &["get", "k"], true).success());
    let log = std::fs::read_to_string(dir.join("m1.log")).unwrap_or_default();
    assert!(!log.contains("SNI"), "SNI warnings in the log:\n{log}");
}

#[test]
fn https_client_url_without_certificate_is_a_startup_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let out = Command::new(KEEL)
        .args(["server", "--kube-listen", ""])
        .arg("--data-dir")
        .arg(tmp.path().join("m"))
        .args([
            "--listen-client-urls",
            &format!("https://127.0.0.1:{}", ports[0]),
        ])
        .args([
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{}", ports[1]),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cert-file"), "stderr: {err}");
}
