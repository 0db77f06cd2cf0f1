//! The Ingress proxy beside Debian's nginx: the same `wrk` load, through each, to the same pod.
//!
//! In a network namespace of its own (see [`super::netns`]) the child runs `keel up` (three members and
//! the worker with its built-in Ingress controller on the node address 10.42.0.1:80) and one backend
//! pod: Debian's nginx binary (with the libraries it links) answering a fixed body, an image the child
//! builds and imports. An Ingress routes `bench.test` to the pod's Service. Beside it the child starts
//! Debian's nginx on the host side as the peer proxy, on 10.42.0.1:8080, with `proxy_pass` to the same pod
//! over kept-alive upstream connections (as ingress-nginx configures it) and no access log. `wrk` then
//! drives each in turn (keel, nginx, nginx, keel, … so drift cancels), same threads, connections and
//! duration, and a direct run to the pod gives the ceiling. Per run: requests/s, p50/p99 from wrk's
//! latency distribution, the proxy's CPU per request (the agent's process for keel, the master and
//! workers for nginx) and any non-2xx answers or socket errors.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::netns;
use crate::error::{BenchError, Result};
use crate::target::cpu_us_of;
use keel_testkit::process::{Capture, Process};

/// `keel up`'s worker address and its Ingress port.
const NODE_IP: &str = "10.42.0.1";
/// Where the peer nginx listens.
const NGINX_PORT: u16 = 8080;
/// The Ingress host.
const HOST: &str = "bench.test";
/// The backend image's name.
const IMAGE: &str = "localhost/bench-nginx:1";
/// The body the backend answers (a small page).
const BODY: &str = "keel ingress benchmark: a small fixed page from the backend pod\n";
/// wrk's threads and connections.
const THREADS: usize = 2;
const CONNECTIONS: usize = 64;
/// How long the child may take in all.
const DEADLINE: Duration = Duration::from_secs(1800);
const RESULT: &str = "ingress-result";
const PROGRESS: &str = "ingress-progress";

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Netprog(format!("ingress: {what}: {e}"))
}

/// One wrk run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Run {
    /// `keel`, `nginx` or `direct`.
    pub target: String,
    /// Requests per second.
    pub rps: f64,
    /// Latency percentiles, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The proxy's CPU per request, µs (0 for direct).
    pub cpu_us_per_req: f64,
    /// Non-2xx/3xx answers and socket errors.
    pub bad: u64,
}

/// What the step measured.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    /// Seconds per run.
    pub secs: u64,
    /// Every run in order.
    pub runs: Vec<Run>,
    /// `wrk`'s and nginx's versions.
    pub versions: String,
}

/// Runs the step in a child in a fresh network namespace.
pub(crate) async fn run(
    keel: &Path,
    data: &Path,
    secs: u64,
    rounds: usize,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    for tool in ["wrk", "nginx", "ctr", "containerd"] {
        which(tool)?;
    }
    let args = vec![
        format!("--keel={}", keel.display()),
        format!("--ingress-data={}", data.display()),
        format!("--ingress-secs={secs}"),
        format!("--ingress-rounds={rounds}"),
    ];
    let prefixes = netns::Prefixes {
        progress: PROGRESS,
        result: RESULT,
    };
    let lines = netns::run_child("--ingress-child", &args, &prefixes, DEADLINE, progress).await?;
    let mut runs = Vec::new();
    for l in &lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let [_, target, rps, p50, p99, cpu, bad] = f[..] {
            let n = |s: &str| s.parse::<f64>().unwrap_or(0.0);
            runs.push(Run {
                target: target.to_string(),
                rps: n(rps),
                p50_ms: n(p50),
                p99_ms: n(p99),
                cpu_us_per_req: n(cpu),
                bad: bad.parse().unwrap_or(0),
            });
        }
    }
    if !runs.iter().any(|r| r.target == "keel") || !runs.iter().any(|r| r.target == "nginx") {
        return Err(err("child", "no result for keel or nginx"));
    }
    Ok(Figures {
        secs,
        runs,
        versions: versions().await,
    })
}

fn which(tool: &'static str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(BenchError::MissingBinary {
            what: tool,
            path: "PATH".into(),
            hint: "scripts/setup.sh installs it (Debian packages wrk, nginx-light, containerd)",
        })
    }
}

async fn versions() -> String {
    let out = |cmd: &str, args: &[&str]| {
        let mut c = std::process::Command::new(cmd);
        c.args(args);
        c.output()
            .map(|o| {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                text.lines().next().unwrap_or_default().trim().to_string()
            })
            .unwrap_or_default()
    };
    let wrk = out("wrk", &["--version"]);
    let wrk = wrk.split(" [").next().unwrap_or(&wrk).to_string();
    format!("{}, {wrk}", out("nginx", &["-v"]))
}

fn say(msg: &str) {
    println!("{PROGRESS} {msg}");
}

/// The direct children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// `keel up` in the child's namespace; SIGTERM and a wait when dropped, so its worker is removed.
struct Up {
    process: Process,
}

impl Up {
    fn start(keel: &Path, dir: &Path) -> Result<Up> {
        let mut cmd = std::process::Command::new(keel);
        cmd.arg("up")
            .arg("--data-dir")
            .arg(dir.join("data"))
            // Nothing asks the resolver for outside names; this keeps it from naming the host's.
            .arg("--dns-upstream=127.0.0.1:53");
        let mut process = Process::start(&mut cmd, Capture::Log(dir.join("up.log")), None)
            .map_err(|source| BenchError::Spawn {
                what: format!("{} up", keel.display()),
                source,
            })?;
        let deadline = Instant::now() + Duration::from_secs(300);
        while !process.stdout().contains("serving in") {
            if Instant::now() > deadline || process.has_exited() {
                return Err(err("keel up did not come up", process.stdout()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(Up { process })
    }

    /// The `keel agent` process `keel up` started (where the Ingress controller runs).
    fn agent_pid(&self) -> Option<u32> {
        children(self.process.pid()?).into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    c.split(|b| *b == 0)
                        .nth(1)
                        .is_some_and(|arg| arg == b"agent")
                })
                .unwrap_or(false)
        })
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // SIGTERM: `keel up` removes its worker (pods, containerd, mounts) before it exits.
        self.process.stop(Duration::from_secs(180));
    }
}

/// The peer nginx; stopped (SIGTERM, then SIGKILL) when dropped.
struct Nginx {
    process: Process,
}

impl Nginx {
    fn start(dir: &Path, upstream: &str) -> Result<Nginx> {
        std::fs::create_dir_all(dir.join("logs")).map_err(|e| err("nginx dir", e))?;
        let conf = dir.join("nginx.conf");
        let text = format!(
            "worker_processes auto;\ndaemon off;\npid {pid};\nerror_log {log} warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n\
               fastcgi_temp_path {tmp}/fastcgi;\n  uwsgi_temp_path {tmp}/uwsgi;\n  scgi_temp_path {tmp}/scgi;\n\
               upstream backend {{ server {upstream}; keepalive 64; }}\n\
               server {{\n    listen {NODE_IP}:{NGINX_PORT} backlog=4096;\n    location / {{\n\
                   proxy_pass http://backend;\n      proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n\
                   proxy_set_header X-Forwarded-For $remote_addr;\n      proxy_set_header X-Forwarded-Proto $scheme;\n\
                   proxy_set_header X-Forwarded-Host $host;\n    }}\n  }}\n}}\n",
            pid = dir.join("nginx.pid").display(),
            log = dir.join("logs").join("error.log").display(),
            tmp = dir.display(),
        );
        std::fs::write(&conf, text).map_err(|e| err("nginx.conf", e))?;
        let mut cmd = std::process::Command::new("nginx");
        cmd.arg("-p").arg(dir).arg("-c").arg(&conf);
        let process = Process::start(&mut cmd, Capture::Log(dir.join("nginx.out")), None).map_err(
            |source| BenchError::Spawn {
                what: "nginx".into(),
                source,
            },
        )?;
        Ok(Nginx { process })
    }

    /// CPU of the master and its workers, µs.
    fn cpu_us(&self) -> u64 {
        let Some(master) = self.process.pid() else {
            return 0;
        };
        cpu_us_of(master) + children(master).into_iter().map(cpu_us_of).sum::<u64>()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(10));
    }
}

/// The backend image: Debian's nginx and the libraries `ldd` names, with a config answering [`BODY`].
fn backend_image(archive: &Path) -> Result<()> {
    use keel_node_agent::image::oci::{write_archive, ImageDef};
    let ldd = std::process::Command::new("ldd")
        .arg("/usr/sbin/nginx")
        .output()
        .map_err(|e| err("ldd /usr/sbin/nginx", e))?;
    let mut files = vec![(
        "usr/sbin/nginx".to_string(),
        PathBuf::from("/usr/sbin/nginx"),
        0o755,
    )];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)".
        let path = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(p) = path {
            let real = std::fs::canonicalize(p).map_err(|e| err(p, e))?;
            files.push((p.trim_start_matches('/').to_string(), real, 0o755));
        }
    }
    let conf = format!(
        "user root root;\nworker_processes 1;\ndaemon off;\npid /tmp/nginx.pid;\nerror_log stderr warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  default_type text/plain;\n  keepalive_requests 1000000;\n\
           client_body_temp_path /tmp/body;\n  proxy_temp_path /tmp/proxy;\n  fastcgi_temp_path /tmp/fastcgi;\n\
           uwsgi_temp_path /tmp/uwsgi;\n  scgi_temp_path /tmp/scgi;\n\
           server {{ listen 80 backlog=4096; location / {{ return 200 {body:?}; }} }}\n}}\n",
        body = BODY
    );
    let mut dirs: Vec<(String, u32)> = [
        "etc",
        "etc/nginx",
        "tmp",
        "var",
        "var/lib",
        "var/lib/nginx",
        "var/log",
        "var/log/nginx",
        "usr",
        "usr/sbin",
        "lib",
        "lib64",
        "lib/x86_64-linux-gnu",
        "proc",
        "sys",
        "dev",
    ]
    .iter()
    .map(|d| (d.to_string(), 0o755))
    .collect();
    dirs.retain(|(d, _)| d != "tmp");
    dirs.push(("tmp".into(), 0o1777));
    let def = ImageDef {
        name: IMAGE.into(),
        entrypoint: vec!["/usr/sbin/nginx".into()],
        cmd: vec!["-c".into(), "/etc/nginx/nginx.conf".into()],
        files,
        links: vec![],
        dirs,
        texts: vec![
            ("etc/nginx/nginx.conf".into(), conf),
            (
                "etc/passwd".into(),
                "root:x:0:0:root:/root:/bin/sh\n".into(),
            ),
            ("etc/group".into(), "root:x:0:\n".into()),
        ],
    };
    write_archive(&def, archive).map_err(|e| err("backend image", e))?;
    Ok(())
}

/// `GET /` with `host`; the status code (0 when there is no answer).
async fn status_of(addr: &str, host: &str) -> u16 {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        text.ends_with(BODY).then_some(code)
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

async fn wait_ok(addr: &str, host: &str, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while status_of(addr, host).await != 200 {
        if Instant::now() > deadline {
            return Err(err(what, format!("{addr} never answered 200 for {host}")));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// A latency as wrk prints it (`812.00us`, `1.23ms`, `2.01s`), ms.
fn wrk_ms(s: &str) -> Option<f64> {
    let (num, factor) = if let Some(n) = s.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * factor)
}

/// requests/s, p50 ms, p99 ms, non-2xx/3xx + socket errors, requests, from wrk's `--latency` output.
fn parse_wrk(out: &str) -> Option<(f64, f64, f64, u64, u64)> {
    let mut rps = None;
    let (mut p50, mut p99) = (None, None);
    let mut bad = 0;
    let mut requests = 0;
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => rps = v.parse().ok(),
            ["50%", v] => p50 = wrk_ms(v),
            ["99%", v] => p99 = wrk_ms(v),
            ["Non-2xx", "or", "3xx", "responses:", v] => bad += v.parse::<u64>().unwrap_or(0),
            [n, "requests", "in", ..] => requests = n.parse().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                bad += rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    Some((rps?, p50?, p99?, bad, requests))
}

/// One wrk run against `url`, timing `cpu` around it; the run's figures.
async fn wrk(target: &str, url: &str, secs: u64, cpu: &dyn Fn() -> u64) -> Result<Run> {
    let before = cpu();
    let out = Command::new("wrk")
        .args([
            &format!("-t{THREADS}"),
            &format!("-c{CONNECTIONS}"),
            &format!("-d{secs}s"),
            "--latency",
            "-H",
            &format!("Host: {HOST}"),
            url,
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| BenchError::Spawn {
            what: "wrk".into(),
            source,
        })?;
    let used = cpu().saturating_sub(before);
    let text = String::from_utf8_lossy(&out.stdout);
    let (rps, p50_ms, p99_ms, bad, requests) = parse_wrk(&text)
        .filter(|_| out.status.success())
        .ok_or_else(|| {
            err(
                "wrk",
                format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
            )
        })?;
    Ok(Run {
        target: target.into(),
        rps,
        p50_ms,
        p99_ms,
        cpu_us_per_req: if requests == 0 {
            0.0
        } else {
            used as f64 / requests as f64
        },
        bad,
    })
}

/// The child: everything in its own namespace; prints result lines.
pub(crate) async fn child(
    parent_netns: &str,
    keel: &Path,
    data: &Path,
    secs: u64,
    rounds: usize,
) -> Result<()> {
    netns::enter(parent_netns).await?;
    let (keel, data) = (keel.to_path_buf(), data.to_path_buf());
    let lo = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .map_err(|e| err("ip link set lo up", e))?;
    if !lo.success() {
        return Err(err("ip link set lo up", lo));
    }
    std::fs::create_dir_all(&data).map_err(|e| err("data dir", e))?;
    say("starting keel up (3 members and the worker)");
    let up = Up::start(&keel, &data)?;
    say("building and importing the backend image (Debian's nginx)");
    let archive = data.join("bench-nginx.tar");
    backend_image(&archive)?;
    let socket = data.join("data/worker/containerd/containerd.sock");
    let import = Command::new("ctr")
        .arg("-a")
        .arg(&socket)
        .args(["-n", "k8s.io", "images", "import", "--no-unpack"])
        .arg(&archive)
        .output()
        .await
        .map_err(|e| err("ctr images import", e))?;
    if !import.status.success() {
        return Err(err(
            "ctr images import",
            String::from_utf8_lossy(&import.stderr),
        ));
    }
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(data.join("data/m1/admin.kubeconfig"))
            .map_err(|e| err("kubeconfig", e))?,
        &Default::default(),
    )
    .await
    .map_err(|e| err("kubeconfig", e))?;
    let client = Client::try_from(config).map_err(|e| err("client", e))?;
    say("creating the backend Deployment, its Service and the Ingress");
    create(&client, backend_objects()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(180);
    let pod_ip = loop {
        let list = pods
            .list(&ListParams::default().labels("app=bench-backend"))
            .await
            .map_err(|e| err("list pods", e))?;
        let ready = list.items.iter().find_map(|p| {
            let st = p.status.as_ref()?;
            let ready = st
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then(|| st.pod_ip.clone()).flatten()
        });
        if let Some(ip) = ready {
            break ip;
        }
        if Instant::now() > deadline {
            return Err(err("backend pod", "not Ready after 180 s"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let keel_addr = format!("{NODE_IP}:80");
    let nginx_addr = format!("{NODE_IP}:{NGINX_PORT}");
    let direct_addr = format!("{pod_ip}:80");
    wait_ok(&direct_addr, HOST, "backend pod").await?;
    wait_ok(&keel_addr, HOST, "keel's ingress").await?;
    let nginx = Nginx::start(&data.join("nginx"), &direct_addr)?;
    wait_ok(&nginx_addr, HOST, "nginx").await?;
    let agent = up
        .agent_pid()
        .ok_or_else(|| err("keel up", "no keel agent child"))?;
    let keel_cpu = move || cpu_us_of(agent);
    let nginx_cpu = || nginx.cpu_us();
    let none = || 0;
    // Warm both (connection pools, caches) before measuring.
    say("warming up");
    wrk("keel", &format!("http://{keel_addr}/"), 1, &keel_cpu).await?;
    wrk("nginx", &format!("http://{nginx_addr}/"), 1, &nginx_cpu).await?;
    let emit = |r: &Run| {
        println!(
            "{RESULT} {} {:.1} {:.3} {:.3} {:.1} {}",
            r.target, r.rps, r.p50_ms, r.p99_ms, r.cpu_us_per_req, r.bad
        );
    };
    say(&format!("direct to the pod, {secs} s"));
    emit(&wrk("direct", &format!("http://{direct_addr}/"), secs, &none).await?);
    for round in 0..rounds {
        let keel_first = round % 2 == 0;
        for i in 0..2 {
            let is_keel = (i == 0) == keel_first;
            let (target, addr, cpu): (&str, &str, &dyn Fn() -> u64) = if is_keel {
                ("keel", &keel_addr, &keel_cpu)
            } else {
                ("nginx", &nginx_addr, &nginx_cpu)
            };
            say(&format!("round {}/{rounds}: {target}, {secs} s", round + 1));
            emit(&wrk(target, &format!("http://{addr}/"), secs, cpu).await?);
        }
    }
    drop(nginx);
    say("stopping keel up");
    drop(up);
    Ok(())
}

fn backend_objects() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (
            "deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "bench-backend"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bench-backend"}},
                "template": {"metadata": {"labels": {"app": "bench-backend"}},
                  "spec": {"terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "nginx", "image": IMAGE, "imagePullPolicy": "Never",
                      "ports": [{"containerPort": 80}],
                      "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1}}]}}}}),
        ),
        (
            "services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bench-backend"},
              "spec": {"selector": {"app": "bench-backend"}, "ports": [{"port": 80}]}}),
        ),
        (
            "ingresses",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
              "metadata": {"name": "bench"},
              "spec": {"rules": [{"host": HOST, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "bench-backend", "port": {"number": 80}}}}]}}]}}),
        ),
    ]
}

async fn create(client: &Client, objects: Vec<(&'static str, serde_json::Value)>) -> Result<()> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    for (plural, v) in objects {
        let api_version = v["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let obj: DynamicObject = serde_json::from_value(v).map_err(|e| err(plural, e))?;
        let mut last = None;
        for _ in 0..50 {
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => {
                    last = None;
                    break;
                }
                Err(e) => last = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if let Some(e) = last {
            return Err(err(&format!("create {plural}"), e));
        }
    }
    Ok(())
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The step's table: each target's mean over its runs, and keel's ratios to nginx.
pub(crate) fn text(f: &Figures) -> String {
    let of = |t: &'static str| f.runs.iter().filter(move |r| r.target == t);
    let row = |t: &'static str| {
        let n = of(t).count();
        (
            n,
            mean(of(t).map(|r| r.rps)),
            mean(of(t).map(|r| r.p50_ms)),
            mean(of(t).map(|r| r.p99_ms)),
            mean(of(t).map(|r| r.cpu_us_per_req)),
            of(t).map(|r| r.bad).sum::<u64>(),
        )
    };
    let mut out = format!(
        "ingress proxy beside nginx: wrk -t{THREADS} -c{CONNECTIONS} -d{}s --latency, Host {HOST}, one backend pod \
         (Debian's nginx answering {} bytes); {}; {} CPUs; mean of each target's runs, alternating order\n\
         | target | runs | requests/s | p50 ms | p99 ms | proxy CPU µs/request | non-2xx + socket errors |\n\
         |---|---|---|---|---|---|---|\n",
        f.secs,
        BODY.len(),
        f.versions,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    for (t, label) in [
        ("keel", "keel ingress (agent, 10.42.0.1:80)"),
        ("nginx", "nginx proxy_pass (10.42.0.1:8080)"),
        ("direct", "direct to the pod (no proxy)"),
    ] {
        let (n, rps, p50, p99, cpu, bad) = row(t);
        let cpu = if t == "direct" {
            "–".to_string()
        } else {
            format!("{cpu:.0}")
        };
        out.push_str(&format!(
            "| {label} | {n} | {rps:.0} | {p50:.2} | {p99:.2} | {cpu} | {bad} |\n"
        ));
    }
    let (_, krps, _, kp99, kcpu, _) = row("keel");
    let (_, nrps, _, np99, ncpu, _) = row("nginx");
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    out.push_str(&format!(
        "keel / nginx: requests/s {:.2}×, p99 {:.2}× (lower is better), CPU per request {:.2}× (lower is better)\n",
        ratio(krps, nrps),
        ratio(kp99, np99),
        ratio(kcpu, ncpu)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_output_is_read() {
        let out = "Running 2s test @ http://10.42.0.1:80/\n  2 threads and 64 connections\n\
          Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     2.10ms  500.00us  20.00ms   90.00%\n\
          Latency Distribution\n     50%  812.00us\n     75%    1.20ms\n     90%    2.00ms\n     99%    1.05s\n\
          40000 requests in 2.00s, 5.00MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\n\
          Non-2xx or 3xx responses: 4\nRequests/sec:  19999.50\nTransfer/sec:      2.50MB\n";
        let (rps, p50, p99, bad, n) = parse_wrk(out).unwrap();
        assert_eq!(rps, 19999.5);
        assert!((p50 - 0.812).abs() < 1e-9);
        assert!((p99 - 1050.0).abs() < 1e-9);
        assert_eq!((bad, n), (7, 40000));
        assert!(parse_wrk("no numbers").is_none());
    }
}
