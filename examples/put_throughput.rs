//! A rough side-by-side put-throughput loop: starts a real etcd 3.4 and a `keel server`
//! (single member each, loopback, data in temp dirs, fsync on commit for both), drives each
//! with 1, 16 and 64 concurrent clients writing 256-byte values for a few seconds, and prints
//! puts per second and the keel/etcd ratio. The full benchmark suite lives in `benches/`.
//!
//! Run: `cargo run --release --example put_throughput [seconds-per-step]`, or
//! `... put_throughput --endpoint URL CLIENTS SECONDS` to load one running server.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::Client;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(kind: &str, dir: &std::path::Path) -> (Proc, String) {
    let (c, p) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{c}");
    let peer = format!("http://127.0.0.1:{p}");
    let mut cmd = if kind == "etcd" {
        let mut cmd = Command::new("/usr/bin/etcd");
        cmd.args(["--name", "b", "--data-dir"]).arg(dir);
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
        cmd.args(["--initial-cluster", &format!("b={peer}")]);
        cmd
    } else {
        let exe = std::env::current_exe().expect("own path");
        let keel = exe
            .parent()
            .and_then(|d| d.parent())
            .map(|d| d.join("keel"))
            .expect("target dir");
        let mut cmd = Command::new(keel);
        cmd.args(["server", "--name", "b", "--data-dir"]).arg(dir);
        cmd.args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
            "--listen-peer-urls",
            &peer,
        ]);
        cmd
    };
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server");
    (Proc(child), url)
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

async fn run(url: &str, clients: usize, secs: u64) -> f64 {
    let end = Instant::now() + Duration::from_secs(secs);
    let value = vec![b'v'; 256];
    let mut tasks = Vec::new();
    for w in 0..clients {
        let url = url.to_string();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = ready(&url).await;
            let mut n = 0u64;
            while Instant::now() < end {
                if c.put(format!("k{w}/{n:08}"), value.clone(), None)
                    .await
                    .is_ok()
                {
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
        let url = args.get(2).expect("--endpoint URL CLIENTS SECONDS");
        let clients = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
        let secs = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(5);
        println!(
            "{url}: {:.0} put/s with {clients} clients",
            run(url, clients, secs).await
        );
        return;
    }
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let tmp = tempfile::tempdir().expect("tempdir");
    println!(
        "{:>8} {:>12} {:>12} {:>8}",
        "clients", "keel put/s", "etcd put/s", "ratio"
    );
    for clients in [1usize, 16, 64] {
        let mut rates = Vec::new();
        for kind in ["keel", "etcd"] {
            let dir = tmp.path().join(format!("{kind}-{clients}"));
            let (_p, url) = start(kind, &dir);
            ready(&url).await;
            rates.push(run(&url, clients, secs).await);
        }
        println!(
            "{:>8} {:>12.0} {:>12.0} {:>8.2}",
            clients,
            rates[0],
            rates[1],
            rates[0] / rates[1]
        );
    }
}
