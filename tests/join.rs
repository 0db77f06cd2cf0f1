//! A 3-member cluster built only with `keel server --init` and `--join` tokens, with the real etcdctl and
//! kubectl: tokens pin the cluster CA, a member joins through any member, a half-joined member is cleaned
//! up by the next join, bad tokens (wrong secret, revoked, expired, the agent kind, another CA) are refused
//! with a clear message and leave nothing behind, and an agent token yields a node identity.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use keel_testkit::poll::until_ok as wait;
use keel_testkit::{
    etcdctl, etcdctl_with, free_port, require_etcd_tools, run_bounded, CtlOutput, Process,
};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

struct Member {
    name: String,
    client: String,
    peer: String,
    kube: String,
    dir: PathBuf,
    proc: Option<Process>,
}

impl Member {
    fn new(root: &Path, name: &str) -> Member {
        Member {
            name: name.into(),
            // https://: a member made with --init or --join gets its peer and etcd certificates
            // from the cluster CA (explicit http:// URLs would mean plaintext, as in etcd).
            client: format!("https://127.0.0.1:{}", free_port()),
            peer: format!("https://127.0.0.1:{}", free_port()),
            kube: format!("https://127.0.0.1:{}", free_port()),
            dir: root.join(name),
            proc: None,
        }
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(KEEL);
        c.args(["server", "--name", &self.name, "--data-dir"])
            .arg(&self.dir)
            .args(["--listen-client-urls", &self.client])
            .args(["--advertise-client-urls", &self.client])
            .args(["--listen-peer-urls", &self.peer])
            .args(["--kube-listen", &self.kube])
            .args(["--log-level", "info"])
            .args(extra);
        c
    }

    fn start(&mut self, extra: &[&str]) {
        self.proc = Some(Process::spawn(&mut self.command(extra), None));
    }

    /// The member's TLS file `name` (`<data-dir>/tls/`).
    fn tls(&self, name: &str) -> String {
        self.dir
            .join("tls")
            .join(name)
            .to_string_lossy()
            .into_owned()
    }

    /// etcdctl against this member's client port with its CA and etcd client certificate.
    fn ctl(&self, args: &[&str]) -> CtlOutput {
        let global = [
            "--command-timeout=5s".to_string(),
            "--dial-timeout=2s".to_string(),
            format!("--cacert={}", self.tls("ca.crt")),
            format!("--cert={}", self.tls("etcd-client.crt")),
            format!("--key={}", self.tls("etcd-client.key")),
        ];
        let global: Vec<&str> = global.iter().map(String::as_str).collect();
        etcdctl_with(&self.client, args, None, &global)
    }

    fn log(&self) -> String {
        self.proc
            .as_ref()
            .map(|p| format!("{}{}", p.stdout(), p.stderr()))
            .unwrap_or_default()
    }
}

/// `etcdctl member list -w json` as (name, is learner).
fn members(via: &Member) -> Vec<(String, bool)> {
    let out = via.ctl(&["member", "list", "-w", "json"]);
    assert!(out.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("").to_string(),
                m["isLearner"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn keel(args: &[&str]) -> CtlOutput {
    let mut c = Command::new(KEEL);
    c.args(args);
    run_bounded(c, None, Duration::from_secs(60))
}

/// Tries to join a member with `token` and expects a refusal naming `why`; nothing may be left behind.
fn refused(root: &Path, join_url: &str, token: &str, why: &str, via: &Member) {
    let m = Member::new(root, "refused");
    let out = run_bounded(
        m.command(&["--join", join_url, "--token", token]),
        None,
        Duration::from_secs(60),
    );
    assert!(!out.success(), "a bad token was accepted");
    assert!(out.stderr.contains(why), "want {why:?} in: {}", out.stderr);
    assert!(
        !m.dir.exists(),
        "a refused join left {} behind",
        m.dir.display()
    );
    assert_eq!(
        members(via).len(),
        3,
        "a refused join changed the membership"
    );
}

/// The first member, started with `--init`, and the server and agent tokens it wrote.
fn init_member(root: &Path) -> (Member, String, String) {
    let mut m1 = Member::new(root, "m1");
    m1.start(&["--init"]);
    // A token file is whole once it holds a line (it is written in one go, but may be read mid-write).
    let read = |file: &str| {
        std::fs::read_to_string(m1.dir.join(file))
            .ok()
            .filter(|t| t.ends_with('\n'))
            .map(|t| t.trim().to_string())
    };
    wait("the init tokens", Duration::from_secs(60), || {
        match (read("server-token"), read("agent-token")) {
            (Some(_), Some(_)) => Ok(()),
            _ => Err(m1.log()),
        }
    });
    let (server, agent) = (read("server-token").unwrap(), read("agent-token").unwrap());
    (m1, server, agent)
}

#[test]
fn a_cluster_built_with_init_and_join_tokens() {
    require_etcd_tools();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (m1, server_token, agent_token) = init_member(root);
    assert!(server_token.starts_with("K10") && server_token.contains("::"));
    assert_ne!(server_token, agent_token);

    // The second member joins through the first.
    let mut m2 = Member::new(root, "m2");
    m2.start(&["--join", &m1.kube, "--token", &server_token]);
    wait("m2 a voting member", Duration::from_secs(60), || {
        let list = members(&m1);
        if list.len() == 2 && list.iter().all(|(n, l)| !n.is_empty() && !l) {
            Ok(())
        } else {
            Err(format!("{list:?}\n{}", m2.log()))
        }
    });

    // A join that stops half-way (the member is added, then never starts) ...
    let ghost = http_join(
        &m1.kube,
        &server_token,
        "ghost",
        &format!("http://127.0.0.1:{}", free_port()),
    );
    assert!(ghost.contains("initialCluster"), "{ghost}");
    assert_eq!(members(&m1).len(), 3);
    // ... does not block the next one, through any member: the half-joined member is removed.
    let mut m3 = Member::new(root, "m3");
    m3.start(&["--join", &m2.kube, "--token", &server_token]);
    wait(
        "m3 a voting member, the ghost gone",
        Duration::from_secs(60),
        || {
            let list = members(&m1);
            let names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
            if list.len() == 3 && names.contains(&"m3") && list.iter().all(|(_, l)| !l) {
                Ok(())
            } else {
                Err(format!("{list:?}\n{}", m3.log()))
            }
        },
    );

    // The cluster works through every member, and kubectl reaches the newest one.
    let put = m3.ctl(&["put", "/joined", "yes"]);
    assert!(put.success(), "{}", put.stderr);
    let got = m1.ctl(&["get", "/joined", "--print-value-only"]);
    assert_eq!(got.stdout.trim(), "yes");
    etcd_side_is_tls(root, &m1, &m3);

    // `keel certificate rotate` renews m1's peer and etcd certificates online too.
    let read = |p: String| std::fs::read_to_string(p).unwrap();
    let (peer_before, server_before) = (read(m1.tls("peer.crt")), read(m1.tls("etcd-server.crt")));
    let rot = keel(&[
        "certificate",
        "rotate",
        "--data-dir",
        m1.dir.to_str().unwrap(),
    ]);
    assert!(rot.success(), "rotate: {}{}", rot.stdout, rot.stderr);
    assert!(
        rot.stdout.contains("peer and etcd certificates renewed"),
        "{}",
        rot.stdout
    );
    assert_ne!(read(m1.tls("peer.crt")), peer_before);
    let server_now = read(m1.tls("etcd-server.crt"));
    assert_ne!(server_now, server_before);
    // New handshakes on the client port get the new certificate, without a restart.
    wait(
        "m1 serving its renewed etcd certificate",
        Duration::from_secs(20),
        || {
            let got = presented_cert(&m1, &m1.client);
            (got.as_deref() == Some(pem_der(&server_now).as_slice()))
                .then_some(())
                .ok_or_else(|| "still the old one".to_string())
        },
    );
    // And the peer port (the same certificate is m1's client certificate when it dials its peers).
    let peer_now = read(m1.tls("peer.crt"));
    wait(
        "m1 serving its renewed peer certificate",
        Duration::from_secs(20),
        || {
            let got = presented_cert(&m1, &m1.peer);
            (got.as_deref() == Some(pem_der(&peer_now).as_slice()))
                .then_some(())
                .ok_or_else(|| "still the old one".to_string())
        },
    );
    // New peer connections use the renewed peer certificate: m3 restarts, the others dial it again.
    m3.proc.as_mut().unwrap().kill();
    m3.start(&[]);
    wait(
        "a write through the restarted m3",
        Duration::from_secs(60),
        || {
            let put = m3.ctl(&["put", "/after-rotation", "yes"]);
            put.success().then_some(()).ok_or(put.stderr)
        },
    );
    let got = m1.ctl(&["get", "/after-rotation", "--print-value-only"]);
    assert_eq!(got.stdout.trim(), "yes", "{}", got.stderr);
    let kubeconfig = m3.dir.join("admin.kubeconfig");
    wait("kubectl against m3", Duration::from_secs(60), || {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(&kubeconfig).args([
            "get",
            "namespace",
            "kube-system",
            "-o",
            "name",
        ]);
        let out = run_bounded(c, None, Duration::from_secs(30));
        if out.stdout.trim() == "namespace/kube-system" {
            Ok(())
        } else {
            Err(out.stderr)
        }
    });

    // Tokens: listed, and every bad one refused with what is wrong.
    let d1 = m1.dir.to_str().unwrap();
    let list = keel(&["token", "list", "--data-dir", d1]);
    assert!(list.success(), "{}", list.stderr);
    assert!(
        list.stdout.contains("server") && list.stdout.contains("agent"),
        "{}",
        list.stdout
    );
    let (prefix, cred) = server_token.split_once("::").unwrap();
    let (id, _) = cred.split_once('.').unwrap();
    refused(
        root,
        &m1.kube,
        &format!("{prefix}::{id}.0000000000000000"),
        "wrong secret",
        &m1,
    );
    let revoked = keel(&["token", "create", "--data-dir", d1])
        .stdout
        .trim()
        .to_string();
    assert!(keel(&["token", "revoke", &revoked, "--data-dir", d1]).success());
    refused(
        root,
        &m1.kube,
        &revoked,
        "does not exist or was revoked",
        &m1,
    );
    let short = keel(&["token", "create", "--ttl", "1s", "--data-dir", d1]);
    assert!(short.success(), "{}", short.stderr);
    std::thread::sleep(Duration::from_secs(2));
    refused(root, &m1.kube, short.stdout.trim(), "expired at", &m1);
    refused(root, &m1.kube, &agent_token, "may not join servers", &m1);
    let other_ca = format!("K10{}::{cred}", "0".repeat(64));
    refused(
        root,
        &m1.kube,
        &other_ca,
        "another cluster, or someone in between",
        &m1,
    );

    // An agent token yields the node's own identity (the agent stops later, with no runtime to drive).
    let w1 = root.join("w1");
    let mut agent = Command::new(KEEL);
    agent
        .args([
            "agent",
            "--join",
            &m2.kube,
            "--token",
            &agent_token,
            "--node-name",
            "w1",
        ])
        .arg("--root-dir")
        .arg(&w1)
        .args([
            "--cri",
            &format!("unix://{}", root.join("no-such.sock").display()),
        ]);
    let mut agent = Process::spawn(&mut agent, None);
    let node_kubeconfig = w1.join("kubeconfig");
    wait("the agent's kubeconfig", Duration::from_secs(60), || {
        if node_kubeconfig.exists() {
            Ok(())
        } else {
            Err(format!("{}{}", agent.stdout(), agent.stderr()))
        }
    });
    agent.kill();
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig").arg(&node_kubeconfig).args([
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
    ]);
    let who = run_bounded(c, None, Duration::from_secs(30));
    assert!(who.success(), "{}", who.stderr);
    assert!(
        who.stdout.starts_with("system:node:w1 ") && who.stdout.contains("system:nodes"),
        "{}",
        who.stdout
    );
}

/// The etcd side of an --init/--join cluster is TLS: peer URLs are https, etcdctl works with the
/// files `keel etcdctl-env` names (snapshot save included) and is refused without them, and keel's own
/// etcd clients (`keel status`, `keel snapshot save`) find the data dir's files themselves.
fn etcd_side_is_tls(root: &Path, m1: &Member, m3: &Member) {
    let list = m1.ctl(&["member", "list", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let peers: Vec<&str> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["peerURLs"].as_array().unwrap().iter())
        .map(|u| u.as_str().unwrap())
        .collect();
    assert!(
        peers.len() >= 3 && peers.iter().all(|u| u.starts_with("https://")),
        "peer URLs: {peers:?}"
    );
    assert!(std::path::Path::new(&m3.tls("peer.crt")).exists());
    // One CA: the Kubernetes API's (stored by --init) signs the etcd side too; the file --init kept it
    // in before the store had it is gone.
    for m in [m1, m3] {
        assert_eq!(
            std::fs::read_to_string(m.dir.join("pki/ca.crt")).unwrap(),
            std::fs::read_to_string(m.tls("ca.crt")).unwrap(),
            "{}: two CAs",
            m.name
        );
    }
    assert!(!m1.dir.join("tls/init-pki.json").exists());
    // The version-skew check at start reached the other members' TLS client ports.
    assert!(
        m3.log().contains("member version checked"),
        "m3 did not check the others' versions over TLS: {}",
        m3.log()
    );

    // etcdctl with the environment `keel etcdctl-env` prints.
    let env = keel(&["etcdctl-env", "--data-dir", m3.dir.to_str().unwrap()]);
    assert!(env.success(), "{}", env.stderr);
    let vars: Vec<(String, String)> = env
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect();
    let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
    for want in [
        "ETCDCTL_API",
        "ETCDCTL_ENDPOINTS",
        "ETCDCTL_CACERT",
        "ETCDCTL_CERT",
        "ETCDCTL_KEY",
    ] {
        assert!(names.contains(&want), "{want} missing: {}", env.stdout);
    }
    let with_env = |args: &[&str]| {
        let mut c = Command::new("etcdctl");
        c.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(["--command-timeout=5s", "--dial-timeout=2s"])
            .args(args);
        run_bounded(c, None, Duration::from_secs(20))
    };
    let got = with_env(&["get", "/joined", "--print-value-only"]);
    assert_eq!(got.stdout.trim(), "yes", "etcdctl-env: {}", got.stderr);
    let snap = root.join("tls-snap.db");
    let save = with_env(&["snapshot", "save", snap.to_str().unwrap()]);
    assert!(save.success(), "snapshot save: {}", save.stderr);
    assert!(std::fs::metadata(&snap).unwrap().len() > 0);

    // Without certificates: refused (no CA to trust the server; with it, no client certificate).
    let plain = etcdctl(&m1.client, &["get", "/joined"], None);
    assert!(!plain.success(), "etcdctl without certificates was served");
    let ca_only = etcdctl_with(
        &m1.client,
        &["get", "/joined"],
        None,
        &[
            "--command-timeout=5s",
            "--dial-timeout=2s",
            &format!("--cacert={}", m1.tls("ca.crt")),
        ],
    );
    assert!(
        !ca_only.success(),
        "etcdctl without a client certificate was served"
    );
    let http = etcdctl(
        &m1.client.replace("https://", "http://"),
        &["get", "/joined"],
        None,
    );
    assert!(
        !http.success(),
        "plaintext was served on the TLS client port"
    );

    // keel's own etcd clients take the data dir's files.
    let d1 = m1.dir.to_str().unwrap();
    let status = keel(&["status", "--data-dir", d1]);
    assert!(status.success(), "keel status: {}", status.stderr);
    assert!(status.stdout.contains("m3"), "{}", status.stdout);
    let snap2 = root.join("keel-snap.db");
    let save = keel(&[
        "snapshot",
        "save",
        snap2.to_str().unwrap(),
        "--endpoints",
        &m1.client,
        "--data-dir",
        d1,
    ]);
    assert!(save.success(), "keel snapshot save: {}", save.stderr);
    let check = keel(&["certificate", "check", "--data-dir", d1]);
    assert!(
        check.stdout.contains("tls/peer.crt") && check.stdout.contains("tls/etcd-server.crt"),
        "{}",
        check.stdout
    );
}

/// The DER of the first certificate in `pem`.
fn pem_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// The certificate `m` presents to a new TLS connection on `url` (its client or peer URL; made with
/// its CA and etcd client certificate), as DER.
fn presented_cert(m: &Member, url: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(m.tls("ca.crt")).ok()?)
        .ok()?;
    let chain = vec![CertificateDer::from_pem_file(m.tls("etcd-client.crt")).ok()?];
    let key = PrivateKeyDer::from_pem_file(m.tls("etcd-client.key")).ok()?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).ok()?;
    let mut tcp = std::net::TcpStream::connect(url.trim_start_matches("https://")).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).ok()?;
    }
    Some(conn.peer_certificates()?.first()?.to_vec())
}

/// `kubectl` with `kubeconfig`; stdout when it succeeds.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> Option<String> {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig").arg(kubeconfig).args(args);
    let out = run_bounded(c, None, Duration::from_secs(30));
    out.success().then_some(out.stdout)
}

#[test]
fn a_joined_agent_keeps_working_when_the_member_it_joined_through_dies() {
    require_etcd_tools();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (m1, server_token, agent_token) = init_member(root);
    let mut m2 = Member::new(root, "m2");
    m2.start(&["--join", &m1.kube, "--token", &server_token]);
    let mut m3 = Member::new(root, "m3");
    m3.start(&["--join", &m1.kube, "--token", &server_token]);
    wait("three voting members", Duration::from_secs(90), || {
        let list = members(&m1);
        if list.len() == 3 && list.iter().all(|(n, l)| !n.is_empty() && !l) {
            Ok(())
        } else {
            Err(format!("{list:?}\nm2:\n{}\nm3:\n{}", m2.log(), m3.log()))
        }
    });
    let admin = m1.dir.join("admin.kubeconfig");
    wait(
        "every member's API published",
        Duration::from_secs(60),
        || {
            let out = kubectl(&admin, &["get", "--raw", "/v1-keel/apiservers"]).unwrap_or_default();
            if out.matches("https://").count() == 3 {
                Ok(())
            } else {
                Err(out)
            }
        },
    );

    // A hollow node (the agent without containers) joined through m2, its own identity.
    let agent_root = root.join("edge");
    let mut agent = Command::new(KEEL);
    agent
        .args([
            "agent",
            "--join",
            &m2.kube,
            "--token",
            &agent_token,
            "--node-name",
            "edge-0",
        ])
        .args([
            "--hollow",
            "1",
            "--hollow-prefix",
            "edge",
            "--log-level",
            "info",
        ])
        .arg("--root-dir")
        .arg(&agent_root);
    let agent = Process::spawn(&mut agent, None);
    let renew = || {
        kubectl(
            &admin,
            &[
                "get",
                "lease",
                "-n",
                "kube-node-lease",
                "edge-0",
                "-o",
                "jsonpath={.spec.renewTime}",
            ],
        )
    };
    wait("the node's lease", Duration::from_secs(60), || {
        renew()
            .filter(|t| !t.is_empty())
            .map(|_| ())
            .ok_or_else(|| format!("{}{}", agent.stdout(), agent.stderr()))
    });
    let before = renew().unwrap();

    // The member it joined through dies; the agent's balancer moves to another and the lease goes on.
    m2.proc.as_mut().unwrap().kill();
    wait(
        "the lease renewed after m2 died",
        Duration::from_secs(90),
        || match renew() {
            Some(t) if t != before => Ok(()),
            other => Err(format!("{other:?}\n{}", agent.stderr())),
        },
    );
    let node = kubectl(
        &admin,
        &[
            "get",
            "node",
            "edge-0",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    );
    assert_eq!(node.as_deref(), Some("True"));
    assert!(
        agent.stderr().contains("API server failover")
            || agent.stdout().contains("API server failover"),
        "{}{}",
        agent.stdout(),
        agent.stderr()
    );
}

/// A server join request sent by hand (what `keel server --join` sends), without starting the member.
fn http_join(url: &str, token: &str, name: &str, peer: &str) -> String {
    let cred = token.split_once("::").unwrap().1;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.accept_invalid_certs = true;
        let client = kube::Client::try_from(config).unwrap();
        let body = serde_json::json!({"token": cred, "role": "server", "name": name, "peerUrls": [peer], "version": env!("CARGO_PKG_VERSION")});
        let req = http::Request::post("/v1-keel/join")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        client.request_text(req).await.unwrap()
    })
}

/// Quorum lost in a two-member cluster built with tokens: `keel recover` on the first, then the second,
/// restarted with its old data and its old flags, is told a recovery left it out and joins the recovered
/// cluster again by itself (its old data directory kept aside), and serves what was written.
#[test]
fn a_member_left_out_by_a_recovery_joins_again_by_itself() {
    require_etcd_tools();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (mut m1, server_token, _) = init_member(root);
    let mut m2 = Member::new(root, "m2");
    let m1_api = m1.kube.clone();
    let m2_flags = ["--join", &m1_api, "--token", &server_token];
    m2.start(&m2_flags);
    let voters = |via: &Member, n: usize| {
        let list = members(via);
        if list.len() == n
            && list
                .iter()
                .all(|(name, learner)| !name.is_empty() && !learner)
        {
            Ok(())
        } else {
            Err(format!("{list:?}"))
        }
    };
    wait("m2 a voting member", Duration::from_secs(60), || {
        voters(&m1, 2).map_err(|e| format!("{e}\n{}", m2.log()))
    });
    let put = m1.ctl(&["put", "/rejoin/k", "before"]);
    assert!(put.success(), "{}", put.stderr);
    // Quorum lost: m2 dies, m1 is stopped and recovered alone.
    m2.proc.as_mut().unwrap().kill();
    m1.proc.as_mut().unwrap().stop(Duration::from_secs(10));
    let rec = keel(&["recover", "--data-dir", m1.dir.to_str().unwrap()]);
    assert!(rec.success(), "keel recover: {}{}", rec.stdout, rec.stderr);
    m1.start(&["--init"]);
    wait("m1 serving alone", Duration::from_secs(60), || {
        let out = m1.ctl(&["get", "/rejoin/k", "--print-value-only"]);
        (out.success() && out.stdout.trim() == "before")
            .then_some(())
            .ok_or_else(|| format!("{}{}", out.stderr, m1.log()))
    });

    // m2 comes back as it was: refused, it joins again as a new member.
    m2.start(&m2_flags);
    wait("m2 joined again", Duration::from_secs(90), || {
        voters(&m1, 2).map_err(|e| format!("{e}\n{}", m2.log()))
    });
    assert!(
        m2.log()
            .contains("a quorum-loss recovery left this member out"),
        "{}",
        m2.log()
    );
    wait(
        "m2 serving the recovered data",
        Duration::from_secs(60),
        || {
            let out = m2.ctl(&["get", "/rejoin/k", "--print-value-only"]);
            (out.success() && out.stdout.trim() == "before")
                .then_some(())
                .ok_or(out.stderr)
        },
    );
    let aside: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("m2.left-out-"))
        .collect();
    assert_eq!(aside.len(), 1, "the old data directory kept aside");
    // Writes need both members again.
    let put = m2.ctl(&["put", "/rejoin/k", "after"]);
    assert!(put.success(), "{}", put.stderr);
}
