//! Mutual TLS between members (etcd's `--peer-cert-file`, `--peer-key-file`,
//! `--peer-trusted-ca-file`, `--peer-client-cert-auth`): a 3-member cluster on `https://` peer URLs
//! replicates a write; a 4th member whose certificate another CA signed is added with `etcdctl member
//! add` but never gets the data and the failed handshakes are logged; a TLS client without a peer
//! certificate of the cluster's CA and a plaintext client are refused by the peer port.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use keel_testkit::poll::until_ok as wait;
use keel_testkit::{etcdctl, free_port, require_etcd_tools, run_bounded, Process};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

/// Writes `<prefix>ca.crt` and, for each name, `<prefix><name>.crt`/`.key`: a peer certificate for
/// 127.0.0.1 with serverAuth and clientAuth, as etcd's peer certificates are.
fn make_pki(dir: &Path, prefix: &str, names: &[&str]) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{prefix}peer-ca"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    std::fs::write(
        dir.join(format!("{prefix}ca.crt")),
        ca.self_signed(&ca_key).unwrap().pem(),
    )
    .unwrap();
    let issuer = Issuer::new(ca, ca_key);
    for name in names {
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, *name);
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let k = KeyPair::generate().unwrap();
        let c = p.signed_by(&k, &issuer).unwrap();
        std::fs::write(dir.join(format!("{prefix}{name}.crt")), c.pem()).unwrap();
        std::fs::write(dir.join(format!("{prefix}{name}.key")), k.serialize_pem()).unwrap();
    }
}

struct Member {
    name: String,
    client: String,
    peer: String,
    proc: Option<Process>,
}

impl Member {
    fn new(name: &str) -> Member {
        Member {
            name: name.into(),
            client: format!("http://127.0.0.1:{}", free_port()),
            peer: format!("https://127.0.0.1:{}", free_port()),
            proc: None,
        }
    }

    /// Starts the member with the peer certificate `<prefix><name>.crt` and trusting `<prefix>ca.crt`.
    fn start(&mut self, dir: &Path, prefix: &str, cluster: &str, state: &str) {
        let p = |f: String| dir.join(f).to_string_lossy().into_owned();
        let mut c = Command::new(KEEL);
        c.args(["server", "--name", &self.name, "--kube-listen", ""])
            .arg("--data-dir")
            .arg(dir.join(&self.name))
            .args(["--listen-client-urls", &self.client])
            .args(["--advertise-client-urls", &self.client])
            .args(["--listen-peer-urls", &self.peer])
            .args(["--initial-advertise-peer-urls", &self.peer])
            .args(["--initial-cluster", cluster])
            .args(["--initial-cluster-state", state])
            .args(["--peer-cert-file", &p(format!("{prefix}{}.crt", self.name))])
            .args(["--peer-key-file", &p(format!("{prefix}{}.key", self.name))])
            .args(["--peer-trusted-ca-file", &p(format!("{prefix}ca.crt"))])
            .arg("--peer-client-cert-auth")
            .args(["--log-level", "info"])
            .args(["--disable-snapshots"]);
        self.proc = Some(Process::spawn(&mut c, None));
    }

    fn endpoint(&self) -> &str {
        self.client.trim_start_matches("http://")
    }

    fn peer_addr(&self) -> &str {
        self.peer.trim_start_matches("https://")
    }

    fn log(&self) -> String {
        self.proc
            .as_ref()
            .map(|p| format!("{}{}", p.stdout(), p.stderr()))
            .unwrap_or_default()
    }
}

/// A rustls client for the peer port trusting `ca`, presenting `cert`/`key` when given.
fn tls_client(dir: &Path, ca: &str, cert: Option<(&str, &str)>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join(ca)).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match cert {
        Some((c, k)) => {
            let chain: Vec<_> = CertificateDer::pem_file_iter(dir.join(c))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(dir.join(k)).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// Opens TLS to `addr`, sends the HTTP/2 preface and an empty SETTINGS frame, and returns how many
/// bytes the server answers with (its SETTINGS) or the error that ended the connection.
fn h2_hello(addr: &str, config: Arc<rustls::ClientConfig>) -> Result<usize, String> {
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .map_err(|e| e.to_string())?;
    tls.flush().map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    match tls.read(&mut buf) {
        Ok(0) => Err("closed".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn peers_with_mutual_tls_replicate_and_a_foreign_ca_is_refused() {
    require_etcd_tools();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_pki(dir, "", &["m1", "m2", "m3"]);
    make_pki(dir, "other-", &["m4"]);
    let mut ms: Vec<Member> = ["m1", "m2", "m3"].iter().map(|n| Member::new(n)).collect();
    let cluster = ms
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer))
        .collect::<Vec<_>>()
        .join(",");
    for m in &mut ms {
        m.start(dir, "", &cluster, "new");
    }
    wait("a leader over TLS peers", Duration::from_secs(60), || {
        let out = etcdctl(ms[0].endpoint(), &["put", "k", "over-tls"], None);
        out.success().then_some(()).ok_or(out.stderr)
    });
    // The write reached the other members through the TLS transport.
    for m in &ms[1..] {
        wait(
            "the write on another member",
            Duration::from_secs(20),
            || {
                let out = etcdctl(
                    m.endpoint(),
                    &["get", "k", "--print-value-only", "--consistency=s"],
                    None,
                );
                (out.stdout.trim() == "over-tls")
                    .then_some(())
                    .ok_or(format!("{}: {:?} {}", m.name, out.stdout, out.stderr))
            },
        );
    }
    // A linearizable read through a follower goes to the leader over TLS as well.
    let out = etcdctl(ms[2].endpoint(), &["get", "k", "--print-value-only"], None);
    assert_eq!(out.stdout.trim(), "over-tls", "{}", out.stderr);
    let list = etcdctl(ms[0].endpoint(), &["member", "list"], None);
    assert_eq!(
        list.stdout.matches("https://127.0.0.1:").count(),
        3,
        "peer URLs: {}",
        list.stdout
    );

    // A 4th member with a certificate from another CA.
    let mut m4 = Member::new("m4");
    let add = etcdctl(
        ms[0].endpoint(),
        &["member", "add", "m4", &format!("--peer-urls={}", m4.peer)],
        None,
    );
    assert!(add.success(), "member add: {}", add.stderr);
    let cluster4 = format!("{cluster},m4={}", m4.peer);
    m4.start(dir, "other-", &cluster4, "existing");
    wait(
        "the leader refusing m4's certificate",
        Duration::from_secs(30),
        || {
            let logs: String = ms.iter().map(Member::log).collect();
            (logs.contains("TLS handshake with peer failed") && logs.contains(m4.peer_addr()))
                .then_some(())
                .ok_or("no refusal logged yet".to_string())
        },
    );
    wait(
        "m4 refusing the cluster's connections",
        Duration::from_secs(30),
        || {
            m4.log()
                .contains("TLS handshake on the peer port failed")
                .then_some(())
                .ok_or(m4.log())
        },
    );
    // Writes go on with three of four voters, and m4 never gets them nor publishes itself.
    let out = etcdctl(ms[1].endpoint(), &["put", "k2", "after-m4"], None);
    assert!(out.success(), "put with m4 refused: {}", out.stderr);
    std::thread::sleep(Duration::from_secs(3));
    let out = etcdctl(
        m4.endpoint(),
        &["get", "k", "--print-value-only", "--consistency=s"],
        None,
    );
    assert_ne!(out.stdout.trim(), "over-tls", "m4 got the data");
    let list = etcdctl(ms[0].endpoint(), &["member", "list", "-w", "json"], None);
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let started_m4 = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"].as_str() == Some("m4"));
    assert!(!started_m4, "m4 published itself: {}", list.stdout);
    // Added as a learner (promoted once caught up), it never catches up, so it never votes.
    let m4_entry = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            m["peerURLs"]
                .as_array()
                .is_some_and(|u| u.iter().any(|u| u.as_str() == Some(m4.peer.as_str())))
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        m4_entry["isLearner"].as_bool(),
        Some(true),
        "m4 became a voter: {}",
        list.stdout
    );

    // The peer port itself: a client certificate of the cluster's CA gets HTTP/2 answered; one from
    // another CA, or none, is refused at the handshake; plaintext gets no HTTP answer.
    let addr = ms[0].peer_addr();
    let good = h2_hello(addr, tls_client(dir, "ca.crt", Some(("m2.crt", "m2.key"))));
    assert!(good.is_ok(), "a member's certificate was refused: {good:?}");
    let foreign = h2_hello(
        addr,
        tls_client(dir, "ca.crt", Some(("other-m4.crt", "other-m4.key"))),
    );
    assert!(foreign.is_err(), "another CA's certificate was accepted");
    let anonymous = h2_hello(addr, tls_client(dir, "ca.crt", None));
    assert!(
        anonymous.is_err(),
        "a client without certificate was accepted"
    );
    let mut plain = TcpStream::connect(addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf);
    assert!(
        !buf.starts_with(b"HTTP/"),
        "plaintext was answered on the TLS peer port: {:?}",
        String::from_utf8_lossy(&buf)
    );
    wait(
        "the refused handshakes in m1's log",
        Duration::from_secs(10),
        || {
            let n = ms[0]
                .log()
                .matches("TLS handshake on the peer port failed")
                .count();
            (n >= 3).then_some(()).ok_or(format!("{n} refusals logged"))
        },
    );
}

#[test]
fn https_peer_url_without_certificate_is_a_startup_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Command::new(KEEL);
    c.args(["server", "--kube-listen", ""])
        .arg("--data-dir")
        .arg(tmp.path().join("m"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{}", free_port()),
        ])
        .args([
            "--listen-peer-urls",
            &format!("https://127.0.0.1:{}", free_port()),
        ]);
    let out = run_bounded(c, None, Duration::from_secs(30));
    assert!(!out.success());
    assert!(
        out.stderr.contains("--peer-cert-file"),
        "stderr: {}",
        out.stderr
    );
}
