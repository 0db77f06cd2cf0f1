//! `keel up` as a user runs it, whole: three members on loopback and the worker on the same machine,
//! driven with the real kubectl. From a pod, Service names resolve through the cluster DNS
//! (`http://web`, `web.<ns>.svc.cluster.local`, `kubernetes.default`, a forwarded name); from the
//! machine, a NodePort answers on the node's address; Ctrl-C (SIGTERM) removes what it made.
//!
//! The "machine" is a network namespace the test creates (testkit's `Net`), so `keel up`'s fixed
//! addresses, routes, bridge and nftables table never touch the host or another test; its only way
//! out is the link to the test process, where the DNS upstream runs. It enters only the network
//! namespace (`nsenter --net`): mounts and cgroups are the host's, as for a user. Needs root, as CI has.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use keel_testkit::agent::BUSYBOX;
use keel_testkit::containerd::in_netns;
use keel_testkit::keel_bin;
use keel_testkit::kubectl::{require_kubectl, run_kubectl, Run};
use keel_testkit::netns::Net;
use keel_testkit::process::{Capture, Process};

const WAIT: Duration = Duration::from_secs(120);
/// `keel up`'s worker node address (its pod bridge's gateway).
const NODE_IP: &str = "10.42.0.1";

/// `keel up` in node 0 of a `Net`; SIGTERM and a wait on drop (a failed step included), so it
/// removes its worker before the namespace goes.
struct Up {
    process: Process,
    net: Net,
    dir: tempfile::TempDir,
}

impl Up {
    fn start(extra: &[std::ffi::OsString]) -> Up {
        let net = Net::new(&Net::unique_run_id(), 1);
        let dir = tempfile::tempdir().unwrap();
        let upstream = keel_testkit::upstream::start(net.root_ip());
        let mut cmd = in_netns(Some(net.ns(0)), keel_bin!());
        cmd.arg("up")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg(format!("--dns-upstream={upstream}"))
            .args(extra);
        let process = Process::start(&mut cmd, Capture::Log(dir.path().join("up.log")), None)
            .expect("start keel up");
        let mut up = Up { process, net, dir };
        let deadline = Instant::now() + Duration::from_secs(300);
        while !up.output().contains("serving in") {
            if up.process.has_exited() || Instant::now() > deadline {
                panic!("keel up did not come up:\n{}", up.output());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        up
    }

    fn output(&self) -> String {
        self.process.stdout()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A command run inside the machine's namespace.
    fn inside(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        in_netns(Some(self.net.ns(0)), program)
    }

    fn kubectl_run(&self, args: &[&str]) -> Run {
        self.kubectl_with(args, None)
    }

    /// kubectl inside the machine with the admin kubeconfig, `stdin` as its input.
    fn kubectl_with(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut cmd = self.inside("kubectl");
        cmd.args(args)
            .env(
                "KUBECONFIG",
                self.data().join("m1").join("admin.kubeconfig"),
            )
            .env("HOME", self.dir.path())
            .env("KUBECACHEDIR", self.dir.path().join("kube-cache"));
        run_kubectl(cmd, stdin.map(str::as_bytes), WAIT)
    }

    fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> String {
        self.ok(args, self.kubectl_with(args, Some(stdin)))
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.ok(args, self.kubectl_run(args))
    }

    /// `r`'s output, or the test's failure with kubectl's error.
    fn ok(&self, args: &[&str], r: Run) -> String {
        if !r.ok {
            self.fail(format!("kubectl {args:?}: {}", r.stderr));
        }
        r.stdout
    }

    /// Waits for `check` (every 250 ms, up to [`WAIT`]).
    fn wait_for(&self, what: &str, mut check: impl FnMut() -> Option<String>) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = check() {
                return v;
            }
            if Instant::now() > deadline {
                self.fail(format!("timed out waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn fail(&self, msg: String) -> ! {
        let agent = std::fs::read_to_string(self.data().join("worker").join("agent.log"))
            .unwrap_or_default();
        let tail: Vec<&str> = agent.lines().rev().take(40).collect();
        let pods = self
            .kubectl_run(&["get", "pods", "-A", "-o", "wide"])
            .stdout;
        let events = self
            .kubectl_run(&[
                "get",
                "events",
                "-A",
                "--sort-by=.metadata.creationTimestamp",
            ])
            .stdout;
        panic!(
            "{msg}\n--- keel up:\n{}\n--- pods:\n{pods}\n--- events:\n{events}\n--- agent.log (last lines, newest first):\n{}",
            self.output(),
            tail.join("\n")
        );
    }

    /// SIGTERM, then waits for `keel up` to remove everything; its exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        match self.process.stop(Duration::from_secs(180)) {
            Some((st, false)) => st,
            Some((_, true)) => panic!("keel up needed SIGKILL:\n{}", self.output()),
            None => panic!("keel up was already reaped:\n{}", self.output()),
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.process.stop(Duration::from_secs(180));
    }
}

/// What `ip <args>` prints inside the namespace.
fn ip_inside(up: &Up, args: &[&str]) -> String {
    let out = up.inside("ip").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The mounts under `dir`.
fn mounted_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&dir))
        .map(str::to_string)
        .collect()
}

/// `cmd` run in the `client` pod of `ns` (`kubectl exec`).
fn in_client(up: &Up, ns: &str, cmd: &[&str]) -> Run {
    let mut args = vec!["exec", "-n", ns, "client", "--"];
    args.extend_from_slice(cmd);
    up.kubectl_run(&args)
}

/// Ready endpoints of `svc`'s EndpointSlices.
fn ready_endpoints(up: &Up, ns: &str, svc: &str) -> usize {
    let out = up.kubectl(&[
        "get",
        "endpointslices",
        "-n",
        ns,
        "-l",
        &format!("kubernetes.io/service-name={svc}"),
        "-o",
        "jsonpath={range .items[*].endpoints[*]}{.conditions.ready}{\"\\n\"}{end}",
    ]);
    out.lines().filter(|l| l.trim() == "true").count()
}

/// `rate` GET requests per second for `secs` seconds to `addr` with `Host: host`, each on a connection
/// of its own (run inside the machine's namespace); how many got each status (0: no answer).
fn load(addr: &str, host: &str, rate: u64, secs: u64) -> std::collections::BTreeMap<u16, usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
        let mut tasks = Vec::new();
        for _ in 0..rate * secs {
            tick.tick().await;
            let (addr, host) = (addr.to_string(), host.to_string());
            tasks.push(tokio::spawn(async move {
                let attempt = async {
                    let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
                    let req =
                        format!("GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
                    s.write_all(req.as_bytes()).await.ok()?;
                    let mut buf = Vec::new();
                    s.read_to_end(&mut buf).await.ok()?;
                    let head = String::from_utf8_lossy(&buf);
                    head.split_whitespace().nth(1)?.parse::<u16>().ok()
                };
                tokio::time::timeout(Duration::from_secs(10), attempt)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(0)
            }));
        }
        let mut codes = std::collections::BTreeMap::new();
        for t in tasks {
            *codes.entry(t.await.unwrap_or(0)).or_insert(0) += 1;
        }
        codes
    })
}

/// A WebSocket echo server on `ip` (a free port) for the rest of the test; its address.
fn start_echo(ip: std::net::IpAddr) -> std::net::SocketAddr {
    use futures::{SinkExt, StreamExt};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                        return;
                    };
                    while let Some(Ok(msg)) = ws.next().await {
                        if msg.is_text() && ws.send(msg).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    });
    addr
}

/// Sends `text` over a WebSocket to `addr` with `Host: host` and returns what comes back.
fn websocket_echo(addr: &str, host: &str, text: &str) -> Result<String, String> {
    use futures::{SinkExt, StreamExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{host}/"), tcp)
            .await
            .map_err(|e| e.to_string())?;
        ws.send(tokio_tungstenite::tungstenite::Message::text(text))
            .await
            .map_err(|e| e.to_string())?;
        let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .map_err(|_| "no echo within 5 s".to_string())?;
        match reply {
            Some(Ok(m)) => m
                .into_text()
                .map(|t| t.to_string())
                .map_err(|e| e.to_string()),
            other => Err(format!("{other:?}")),
        }
    })
}

/// The site registry of the mirror check: Debian's `docker-registry` on 127.0.0.1 inside the machine,
/// TLS with the test's own CA and basic auth, and the `registries.yaml` that mirrors `docker.io` to it.
struct SiteRegistry {
    dir: tempfile::TempDir,
}

const REGISTRY: &str = "127.0.0.1:5443";
const REGISTRY_USER: &str = "site";
const REGISTRY_PASSWORD: &str = "s3cret";

impl SiteRegistry {
    fn prepare() -> SiteRegistry {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "site-registry-ca");
        std::fs::write(d.join("ca.pem"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(d.join("registry.crt"), cert.pem()).unwrap();
        std::fs::write(d.join("registry.key"), key.serialize_pem()).unwrap();
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", REGISTRY_USER, REGISTRY_PASSWORD])
            .output()
            .expect("htpasswd (apache2-utils)");
        assert!(htpasswd.status.success(), "htpasswd failed");
        std::fs::write(d.join("htpasswd"), &htpasswd.stdout).unwrap();
        let p = |f: &str| d.join(f).display().to_string();
        std::fs::write(
            d.join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {REGISTRY}\n  tls:\n    certificate: {}\n    key: {}\n\
                 auth:\n  htpasswd:\n    realm: site\n    path: {}\n",
                p("data"),
                p("registry.crt"),
                p("registry.key"),
                p("htpasswd")
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("registries.yaml"),
            format!(
                "mirrors:\n  docker.io:\n    endpoint: [\"https://{REGISTRY}\"]\n\
                 configs:\n  \"{REGISTRY}\":\n    auth:\n      username: {REGISTRY_USER}\n      password: {REGISTRY_PASSWORD}\n    \
                 tls:\n      ca_file: {}\n",
                p("ca.pem")
            ),
        )
        .unwrap();
        SiteRegistry { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `keel up`'s flag.
    fn flag(&self) -> std::ffi::OsString {
        let mut f = std::ffi::OsString::from("--registries=");
        f.push(self.file("registries.yaml"));
        f
    }

    fn start(&self, up: &Up) -> Process {
        let mut cmd = up.inside("docker-registry");
        cmd.arg("serve").arg(self.file("config.yml"));
        Process::start(&mut cmd, Capture::Log(self.file("registry.log")), None)
            .expect("start docker-registry")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.file("registry.log")).unwrap_or_default()
    }

    /// Pushes a busybox image serving `body` with httpd on port 80 as `repo:tag`, with keel's own
    /// push client (from inside the machine).
    fn push_web_image(&self, up: &Up, repo: &str, tag: &str, body: &str) -> Result<String, String> {
        let mut def = keel_node_agent::image::oci::busybox_def(Path::new(
            keel_node_agent::image::oci::BUSYBOX,
        ))
        .unwrap();
        def.name = format!("docker.io/{repo}:{tag}");
        def.cmd = ["httpd", "-f", "-p", "80", "-h", "/www"]
            .map(String::from)
            .to_vec();
        def.dirs.push(("www".into(), 0o755));
        def.texts.push(("www/index.html".into(), body.into()));
        let built = keel_node_agent::image::oci::build(&def).unwrap();
        let ca = self.file("ca.pem");
        let (repo, tag) = (repo.to_string(), tag.to_string());
        up.net.run_inside(0, move || {
            use keel_node_agent::image::push::{Destination, Pusher};
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let dest = Destination::parse(&format!("https://{REGISTRY}"), false).unwrap();
                let creds = Some((REGISTRY_USER.to_string(), REGISTRY_PASSWORD.to_string()));
                let mut p = Pusher::new(dest, creds, Some(&ca)).map_err(|e| e.to_string())?;
                p.push(&repo, &tag, &built).await.map_err(|e| e.to_string())
            })
        })
    }
}

/// The worker's Node name.
fn node_name(up: &Up) -> String {
    up.kubectl(&["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"])
}

#[test]
fn one_machine_resolves_services_and_serves_node_ports() {
    require_kubectl();
    let site = SiteRegistry::prepare();
    let mut up = Up::start(&[site.flag()]);
    let out = up.output();
    assert!(
        out.contains(&format!("Ready at {NODE_IP}"))
            && out.contains(&format!("curl http://{NODE_IP}:"))
            && out.contains(&format!("ingress: http://{NODE_IP}:80")),
        "keel up names the node's address and a curl line:\n{out}"
    );
    let node_ip = up.kubectl(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={.items[0].status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    assert_eq!(node_ip.trim(), NODE_IP);

    let ns = "walk";
    up.kubectl(&["create", "namespace", ns]);
    up.kubectl(&[
        "create",
        "deployment",
        "web",
        "-n",
        ns,
        "--image",
        BUSYBOX,
        "--replicas=2",
        "--",
        "httpd",
        "-f",
        "-p",
        "8080",
    ]);
    up.kubectl(&[
        "expose",
        "deployment",
        "web",
        "-n",
        ns,
        "--port=80",
        "--target-port=8080",
        "--type=NodePort",
    ]);
    up.kubectl(&[
        "run",
        "client",
        "-n",
        ns,
        "--image",
        BUSYBOX,
        "--restart=Never",
        "--",
        "sleep",
        "3600",
    ]);
    up.kubectl(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        ns,
        "--timeout=120s",
    ]);
    up.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/client",
        "-n",
        ns,
        "--timeout=120s",
    ]);

    // ClusterFirst: the pod's resolver is the cluster DNS, with upstream's search path.
    let conf = up.kubectl(&["exec", "-n", ns, "client", "--", "cat", "/etc/resolv.conf"]);
    assert!(conf.contains("nameserver 10.96.0.10"), "{conf}");
    assert!(
        conf.contains("search walk.svc.cluster.local svc.cluster.local cluster.local"),
        "{conf}"
    );

    // The Service by its short and its full name, answered by one of its pods (its hostname).
    for url in [
        "http://web/etc/hostname".to_string(),
        format!("http://web.{ns}.svc.cluster.local/etc/hostname"),
    ] {
        let fetch = format!("timeout 5 wget -q -O- {url}");
        let answer = up.wait_for(&format!("wget {url} from a pod"), || {
            let r = in_client(&up, ns, &["sh", "-c", &fetch]);
            (r.ok && r.stdout.trim().starts_with("web-")).then_some(r.stdout)
        });
        assert!(answer.trim().starts_with("web-"), "{answer}");
    }
    // `kubernetes.default` through the pod's resolver and search path. (busybox's own nslookup sends a
    // name with a dot as it is, without the search list, so it is asked the full name; `ping` resolves
    // as every program in the pod does.)
    let cluster_ip = up.kubectl(&[
        "get",
        "service",
        "kubernetes",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let cluster_ip = cluster_ip.trim();
    let r = in_client(
        &up,
        ns,
        &["ping", "-c", "1", "-W", "1", "kubernetes.default"],
    );
    assert!(
        r.stdout
            .contains(&format!("PING kubernetes.default ({cluster_ip})")),
        "{r:?}"
    );
    let r = in_client(
        &up,
        ns,
        &["nslookup", "kubernetes.default.svc.cluster.local"],
    );
    assert!(
        r.stdout.contains(&format!("Address: {cluster_ip}")),
        "{r:?}"
    );
    // A name outside the cluster goes to the upstream (the test's own resolver).
    let name = keel_testkit::upstream::NAME.trim_end_matches('.');
    let r = in_client(&up, ns, &["nslookup", name]);
    assert!(
        r.stdout
            .contains(&format!("Address: {}", keel_testkit::upstream::ADDR)),
        "{r:?}"
    );

    // From the machine itself: the NodePort on the node's address reaches the pods.
    let port = up.kubectl(&[
        "get",
        "service",
        "web",
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    let url = format!("http://{NODE_IP}:{}/etc/hostname", port.trim());
    let answer = up.wait_for(&format!("{url} from the machine"), || {
        let out = up
            .inside("timeout")
            .args(["5", "busybox", "wget", "-q", "-O-", &url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && text.trim().starts_with("web-")).then_some(text)
    });
    assert!(answer.trim().starts_with("web-"), "{answer}");

    // The built-in Ingress controller: two hosts and two paths, each request to the right Service
    // (told by the answering pod's name); another class's Ingress is left alone.
    // Both serve /who, /front/who and /back/who with their own name.
    let serve = "mkdir -p /www/front /www/back && for d in /www /www/front /www/back; do hostname > $d/who; done \
                 && httpd -f -p 8080 -h /www";
    for name in ["front", "back"] {
        up.kubectl(&[
            "create",
            "deployment",
            name,
            "-n",
            ns,
            "--image",
            BUSYBOX,
            "--",
            "sh",
            "-c",
            serve,
        ]);
        up.kubectl(&[
            "expose",
            "deployment",
            name,
            "-n",
            ns,
            "--port=80",
            "--target-port=8080",
        ]);
    }
    for name in ["front", "back"] {
        up.kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "-n",
            ns,
            "--timeout=120s",
        ]);
    }
    let classes = up.kubectl(&[
        "get",
        "ingressclass",
        "keel",
        "-o",
        "jsonpath={.spec.controller}",
    ]);
    assert_eq!(classes, "keel.io/ingress");
    up.kubectl(&[
        "create",
        "ingress",
        "site",
        "-n",
        ns,
        "--rule=a.test/*=front:80",
        "--rule=a.test/back*=back:80",
        "--rule=b.test/*=back:80",
    ]);
    up.kubectl(&[
        "create",
        "ingress",
        "elsewhere",
        "-n",
        ns,
        "--class=other",
        "--rule=c.test/*=front:80",
    ]);
    let fetch = |host: &str, path: &str| -> (bool, String) {
        let url = format!("http://{NODE_IP}{path}");
        let out = up
            .inside("timeout")
            .args([
                "5",
                "busybox",
                "wget",
                "-q",
                "-O-",
                "--header",
                &format!("Host: {host}"),
                &url,
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    };
    for (host, path, want) in [
        ("a.test", "/who", "front-"),
        ("a.test", "/back/who", "back-"),
        ("b.test", "/who", "back-"),
        ("b.test", "/front/who", "back-"),
    ] {
        up.wait_for(&format!("http://{host}{path} through the ingress"), || {
            let (ok, body) = fetch(host, path);
            (ok && body.starts_with(want)).then_some(body)
        });
    }
    assert!(
        !fetch("c.test", "/who").0,
        "another class's Ingress is not served"
    );
    assert!(!fetch("nowhere.test", "/who").0, "no rule: 404");
    let address = up.wait_for("the Ingress's address", || {
        let a = up.kubectl(&[
            "get",
            "ingress",
            "site",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.loadBalancer.ingress[*].ip}",
        ]);
        (a == NODE_IP).then_some(a)
    });
    assert_eq!(address, NODE_IP);
    let other = up.kubectl(&[
        "get",
        "ingress",
        "elsewhere",
        "-n",
        ns,
        "-o",
        "jsonpath={.status.loadBalancer}",
    ]);
    assert!(
        !other.contains(NODE_IP),
        "another class's Ingress gets no address: {other}"
    );
    let metrics = up.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", node_name(&up)),
    ]);
    assert!(
        metrics.contains(&format!("keel_agent_ingress_requests_total{{ingress=\"{ns}/site\",backend=\"{ns}/back:80\",code=\"200\"}}")),
        "{metrics}"
    );

    // A scale-down from 3 to 1 while a client sends 200 requests/s through the Ingress: no request lost.
    up.kubectl(&["scale", "deployment", "front", "-n", ns, "--replicas=3"]);
    up.kubectl(&[
        "rollout",
        "status",
        "deployment/front",
        "-n",
        ns,
        "--timeout=120s",
    ]);
    up.wait_for("3 ready endpoints of front", || {
        (ready_endpoints(&up, ns, "front") == 3).then_some(String::new())
    });
    let load = up
        .net
        .spawn_inside(0, || load(&format!("{NODE_IP}:80"), "a.test", 200, 8));
    std::thread::sleep(Duration::from_secs(2));
    up.kubectl(&["scale", "deployment", "front", "-n", ns, "--replicas=1"]);
    up.wait_for("1 ready endpoint of front", || {
        (ready_endpoints(&up, ns, "front") == 1).then_some(String::new())
    });
    let codes = load.join().unwrap();
    let sent: usize = codes.values().sum();
    assert!(sent >= 1500, "the load generator sent {sent}: {codes:?}");
    assert_eq!(
        codes.get(&200).copied(),
        Some(sent),
        "non-2xx answers during the scale-down: {codes:?}"
    );

    // A WebSocket echo through the Ingress, to a server the test runs (a Service without a selector).
    let echo = start_echo(up.net.root_ip());
    let manifests = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: echo, namespace: {ns}}}\n\
         spec: {{ports: [{{port: 80, targetPort: {port}}}]}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: echo-1, namespace: {ns}, labels: {{kubernetes.io/service-name: echo}}}}\n\
         addressType: IPv4\nports: [{{name: \"\", port: {port}, protocol: TCP}}]\n\
         endpoints: [{{addresses: [\"{ip}\"], conditions: {{ready: true}}}}]\n",
        port = echo.port(),
        ip = echo.ip()
    );
    up.kubectl_stdin(&["apply", "-f", "-"], &manifests);
    up.kubectl(&[
        "create",
        "ingress",
        "ws",
        "-n",
        ns,
        "--rule=ws.test/*=echo:80",
    ]);
    let echoed = up.wait_for("a WebSocket echo through the ingress", || {
        up.net
            .run_inside(0, || {
                websocket_echo(&format!("{NODE_IP}:80"), "ws.test", "hello through keel")
            })
            .ok()
    });
    assert_eq!(echoed, "hello through keel");

    // TLS from a Secret, chosen by SNI and verified against the test's own CA.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "up-test-ca");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["secure.test".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let files = up.dir.path();
    std::fs::write(files.join("ca.pem"), &ca_pem).unwrap();
    std::fs::write(files.join("tls.crt"), leaf.pem()).unwrap();
    std::fs::write(files.join("tls.key"), leaf_key.serialize_pem()).unwrap();
    let (crt, key) = (files.join("tls.crt"), files.join("tls.key"));
    up.kubectl(&[
        "create",
        "secret",
        "tls",
        "site-tls",
        "-n",
        ns,
        &format!("--cert={}", crt.display()),
        &format!("--key={}", key.display()),
    ]);
    up.kubectl(&[
        "create",
        "ingress",
        "secure",
        "-n",
        ns,
        "--rule=secure.test/*=back:80,tls=site-tls",
    ]);
    let cacert = files.join("ca.pem");
    let answer = up.wait_for("https://secure.test through the ingress", || {
        let out = up
            .inside("curl")
            .args(["-sS", "--max-time", "5", "--cacert"])
            .arg(&cacert)
            .args([
                "--resolve",
                &format!("secure.test:443:{NODE_IP}"),
                "https://secure.test/who",
            ])
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && body.starts_with("back-")).then_some(body)
    });
    assert!(answer.starts_with("back-"), "{answer}");

    // A site without the internet: docker.io and localhost mirrored to a registry the test runs
    // (TLS with its own CA, basic auth). `nginx:1.27` runs unchanged from the mirror, and keel's
    // built-in images pushed there with `keel images --push` (under `site/`) run as `site/busybox`.
    let registry = site.start(&up);
    let pushed = up.wait_for("an image pushed to the site registry", || {
        site.push_web_image(
            &up,
            "library/nginx",
            "1.27",
            "served from the site mirror\n",
        )
        .ok()
    });
    assert!(pushed.starts_with("sha256:"), "{pushed}");
    let push = up
        .inside(keel_bin!())
        .args([
            "images",
            "--push",
            &format!("{REGISTRY}/site"),
            "--username",
            REGISTRY_USER,
            "--ca-file",
        ])
        .arg(site.file("ca.pem"))
        .env("KEEL_REGISTRY_PASSWORD", REGISTRY_PASSWORD)
        .output()
        .unwrap();
    let pushed = String::from_utf8_lossy(&push.stdout).into_owned();
    assert!(
        push.status.success()
            && pushed.contains(&format!("{REGISTRY}/site/busybox:latest@sha256:")),
        "keel images --push: {pushed}{}",
        String::from_utf8_lossy(&push.stderr)
    );
    let mirrored = "mirrored";
    up.kubectl(&["create", "namespace", mirrored]);
    up.kubectl(&[
        "create",
        "deployment",
        "web",
        "-n",
        mirrored,
        "--image=nginx:1.27",
    ]);
    up.kubectl(&[
        "wait",
        "-n",
        mirrored,
        "--for=condition=Available",
        "deployment/web",
        "--timeout=120s",
    ]);
    let status = up.kubectl(&[
        "get",
        "pods",
        "-n",
        mirrored,
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].status.podIP} {.items[0].status.containerStatuses[0].image} {.items[0].status.containerStatuses[0].imageID}",
    ]);
    let fields: Vec<&str> = status.split_whitespace().collect();
    let [pod_ip, image, image_id] = fields[..] else {
        up.fail(format!("pod status: {status}"))
    };
    // The spec's name, unchanged; the ID names the pulled digest.
    assert_eq!(image, "nginx:1.27", "{status}");
    assert!(image_id.contains("sha256:"), "{status}");
    let page = up
        .inside("curl")
        .args(["-sS", "--max-time", "5", &format!("http://{pod_ip}/")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&page.stdout),
        "served from the site mirror\n"
    );
    up.kubectl_stdin(
        &["apply", "-n", mirrored, "-f", "-"],
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"builtin"},"spec":{
          "terminationGracePeriodSeconds":0,"containers":[{"name":"c",
          "image":"site/busybox:latest","command":["sleep","3600"]}]}}"#,
    );
    up.kubectl(&[
        "wait",
        "-n",
        mirrored,
        "--for=condition=Ready",
        "pod/builtin",
        "--timeout=120s",
    ]);
    let log = site.log();
    for request in [
        "/v2/library/nginx/manifests/1.27?ns=docker.io",
        "/v2/site/busybox/manifests/latest?ns=docker.io",
    ] {
        assert!(
            log.contains(request),
            "the mirror never served {request}:\n{log}"
        );
    }
    drop(registry);

    // The default StorageClass `local-path`: a claim is provisioned on the worker under its data.
    let classes = up.kubectl(&["get", "storageclass"]);
    assert!(classes.contains("local-path (default)"), "{classes}");
    up.kubectl_stdin(
        &["apply", "-n", ns, "-f", "-"],
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"keeper"}},"spec":{{
              "terminationGracePeriodSeconds":0,"containers":[{{"name":"c","image":"{BUSYBOX}",
              "command":["sh","-c","echo kept > /data/f; exec sleep 3600"],
              "volumeMounts":[{{"name":"data","mountPath":"/data"}}]}}],
              "volumes":[{{"name":"data","ephemeral":{{"volumeClaimTemplate":{{"spec":{{
                "accessModes":["ReadWriteOnce"],"resources":{{"requests":{{"storage":"8Mi"}}}}}}}}}}}}]}}}}"#
        ),
    );
    up.kubectl(&[
        "wait",
        "-n",
        ns,
        "--for=condition=Ready",
        "pod/keeper",
        "--timeout=120s",
    ]);
    let storage = up.data().join("worker").join("agent").join("storage");
    let dirs: Vec<PathBuf> = std::fs::read_dir(&storage)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        dirs.iter()
            .any(|d| std::fs::read_to_string(d.join("f")).is_ok_and(|s| s == "kept\n")),
        "the pod's file is in a local-path directory under {}: {dirs:?}",
        storage.display()
    );

    // Ctrl-C: the worker's pods, containerd, bridge, routes and table go with it.
    let status = up.stop();
    assert!(
        status.success(),
        "keel up exited {status}:\n{}",
        up.output()
    );
    let links = ip_inside(&up, &["-o", "link", "show"]);
    assert!(!links.contains(": keel"), "a keel bridge is left:\n{links}");
    let routes = ip_inside(&up, &["route", "show", "table", "all"]);
    assert!(
        !routes.contains("unreachable 10.42.") && !routes.contains("unreachable 10.96."),
        "{routes}"
    );
    let tables = up.inside("nft").args(["list", "tables"]).output().unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout).into_owned();
    // (`inet keelpart` is the test namespace's own, testkit's.)
    assert!(
        !tables.lines().any(|l| l.trim() == "table ip keel"),
        "{tables}"
    );
    let pids = Command::new("ip")
        .args(["netns", "pids", up.net.ns(0)])
        .output()
        .unwrap();
    let pids = String::from_utf8_lossy(&pids.stdout).into_owned();
    let mounts = mounted_under(&up.data());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    assert!(
        pids.trim().is_empty(),
        "processes left in the machine's namespace: {pids}"
    );
}
