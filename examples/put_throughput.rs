//! A rough side-by-side loop: starts a real etcd 3.4 cluster and a keel cluster of the same
//! size (1 or 3 members, loopback, data in temp dirs, fsync on commit for both), drives each
//! with concurrent etcd-client clients spread over the members, and prints operations per
//! second and the keel/etcd ratio: puts of 256-byte values at 1, 16 and 64 clients, and
//! linearizable and serializable reads of one key at 16 clients. The benchmark suite proper
//! lives in `benches/`.
//!
//! Run: `cargo run --release --example put_throughput -- [--members 1|3] [seconds-per-step]`,
//! or `... -- --endpoint URL CLIENTS SECONDS` to put-load one running server.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn keel_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("keel"))
        .expect("target dir")
}

/// Starts an `n`-member cluster of `kind`; returns the processes and client URLs.
fn start(kind: &str, n: usize, dir: &std::path::Path) -> (Procs, Vec<String>) {
    let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, p))| format!("b{i}=http://127.0.0.1:{p}"))
        .collect();
    let initial = initial.join(",");
    let mut procs = Procs(Vec::new());
    let mut urls = Vec::new();
    for (i, (c, p)) in ports.iter().enumerate() {
        let url = format!("http://127.0.0.1:{c}");
        let peer = format!("http://127.0.0.1:{p}");
        let mut cmd = if kind == "etcd" {
            Command::new("/usr/bin/etcd")
        } else {
            let mut cmd = Command::new(keel_binary());
            cmd.arg("server");
            cmd
        };
        cmd.args(["--name", &format!("b{i}"), "--data-dir"])
            .arg(dir.join(format!("{kind}{i}")));
        cmd.args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ]);
        cmd.args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ]);
        cmd.args([
            "--initial-cluster",
            &initial,
            "--initial-cluster-state",
            "new",
        ]);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server");
        procs.0.push(child);
        urls.push(url);
    }
    (procs, urls)
}

async fn ready(url: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = Client::connect([url], None).await {
            if c.put("ready", "1", None).await.is_ok() {
                return c;
            }
        }
        assert!(Instant::now() < deadline, "{url} not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[derive(Clone, Copy)]
enum Op {
    Put,
    Get { serializable: bool },
}

async fn run(urls: &[String], op: Op, clients: usize, secs: u64) -> f64 {
    let end = Instant::now() + Duration::from_secs(secs);
    let value = vec![b'v'; 256];
    let mut tasks = Vec::new();
    for w in 0..clients {
        let url = urls[w % urls.len()].clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = ready(&url).await;
            let mut n = 0u64;
            while Instant::now() < end {
                let ok = match op {
                    Op::Put => c
                        .put(format!("k{w}/{n:08}"), value.clone(), None)
                        .await
                        .is_ok(),
                    Op::Get { serializable } => {
                        let opts = serializable.then(|| GetOptions::new().with_serializable());
                        c.get("ready", opts).await.is_ok()
                    }
                };
                if ok {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total as f64 / secs as f64
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--endpoint") {
        let url = args.get(2).expect("--endpoint URL CLIENTS SECONDS").clone();
        let clients = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
        let secs = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(5);
        let rate = run(std::slice::from_ref(&url), Op::Put, clients, secs).await;
        println!("{url}: {rate:.0} put/s with {clients} clients");
        return;
    }
    let mut members = 1;
    let mut secs = 5;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--members" {
            members = it.next().and_then(|s| s.parse().ok()).unwrap_or(1);
        } else if let Ok(s) = a.parse() {
            secs = s;
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    println!("{members}-member clusters, {secs} s per step, clients spread over all members");
    println!(
        "{:<28} {:>12} {:>12} {:>8}",
        "workload", "keel ops/s", "etcd ops/s", "ratio"
    );
    let steps: Vec<(String, Op, usize)> = vec![
        ("put 256 B, 1 client".into(), Op::Put, 1),
        ("put 256 B, 16 clients".into(), Op::Put, 16),
        ("put 256 B, 64 clients".into(), Op::Put, 64),
        (
            "get linearizable, 16 clients".into(),
            Op::Get {
                serializable: false,
            },
            16,
        ),
        (
            "get serializable, 16 clients".into(),
            Op::Get { serializable: true },
            16,
        ),
    ];
    for (i, (label, op, clients)) in steps.into_iter().enumerate() {
        let mut rates = Vec::new();
        for kind in ["keel", "etcd"] {
            let dir = tmp.path().join(format!("{kind}-{i}"));
            let (_p, urls) = start(kind, members, &dir);
            for u in &urls {
                ready(u).await;
            }
            rates.push(run(&urls, op, clients, secs).await);
        }
        println!(
            "{:<28} {:>12.0} {:>12.0} {:>8.2}",
            label,
            rates[0],
            rates[1],
            rates[0] / rates[1]
        );
    }
}
