//! A long write load against one keel member with auto-compaction on, to show that memory and disk stay flat
//! (not a CI test and not a benchmark: docs/benchmarks.md records its runs).
//!
//! It starts `keel server` in a temporary directory on loopback with
//! `--auto-compaction-mode periodic --auto-compaction-retention <R>`, then drives about `rate` puts per second over
//! `keys` keys (values of `value` random bytes, a new one per put) for `minutes`, and every 30 s prints one row: the
//! member's RSS (from /proc), its data directory on disk (blocks allocated, as `du`), its store's dbSize (Status),
//! the revision and the compaction revision.
//!
//! ```sh
//! cargo build --bin keel --example compaction_soak
//! target/debug/examples/compaction_soak --keel target/debug/keel --minutes 25
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;

struct Args {
    keel: PathBuf,
    minutes: u64,
    rate: u64,
    keys: u64,
    value: usize,
    retention: String,
    port: u16,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        keel: PathBuf::from("target/debug/keel"),
        minutes: 25,
        rate: 500,
        keys: 100,
        value: 1024,
        retention: "1m".into(),
        port: 23_990,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--keel" => a.keel = PathBuf::from(v),
            "--minutes" => a.minutes = num(&v)?,
            "--rate" => a.rate = num(&v)?,
            "--keys" => a.keys = num(&v)?,
            "--value" => a.value = num(&v)? as usize,
            "--retention" => a.retention = v,
            "--port" => a.port = num(&v)? as u16,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// Kills the member when the run ends, however it ends.
struct Member(Child);

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn du_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(md) if md.is_dir() => du_bytes(&e.path()),
            Ok(md) => md.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse_args()?;
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let client_url = format!("http://127.0.0.1:{}", a.port);
    let peer_url = format!("http://127.0.0.1:{}", a.port + 1);
    let log = std::fs::File::create(tmp.path().join("keel.log"))?;
    let child = Command::new(&a.keel)
        .args(["server", "--name", "soak", "--data-dir"])
        .arg(&data)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--auto-compaction-mode", "periodic"])
        .args(["--auto-compaction-retention", &a.retention])
        .args(["--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()?;
    let member = Member(child);
    let pid = member.0.id();

    let mut client = loop {
        if let Ok(mut c) = Client::connect([client_url.as_str()], None).await {
            if c.status().await.is_ok() {
                break c;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "keel {} pid {pid}: {} puts/s over {} keys of {} B, periodic retention {}, {} min",
        a.keel.display(),
        a.rate,
        a.keys,
        a.value,
        a.retention,
        a.minutes
    );
    println!("| t (min) | puts | RSS (MiB) | data dir on disk (MiB) | dbSize (MiB) | revision | compacted |");
    println!("|---|---|---|---|---|---|---|");

    let start = Instant::now();
    let end = start + Duration::from_secs(a.minutes * 60);
    let period = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let mut next_put = Instant::now();
    let mut next_sample = start;
    let mut puts = 0u64;
    let errors = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(32));
    let mut value = vec![0u8; a.value];
    loop {
        let now = Instant::now();
        if now >= next_sample {
            let st = client.status().await?;
            // HashKV reports the compaction revision (-1 before the first).
            let compacted = client.hash_kv(0).await?.compact_version();
            println!(
                "| {:.1} | {puts} | {:.1} | {:.1} | {:.1} | {} | {compacted} |",
                start.elapsed().as_secs_f64() / 60.0,
                rss_kib(pid) as f64 / 1024.0,
                mib(du_bytes(&data)),
                mib(st.db_size() as u64),
                st.header().map(|h| h.revision()).unwrap_or(0),
            );
            next_sample += Duration::from_secs(30);
            if now >= end {
                break;
            }
        }
        if now < next_put {
            tokio::time::sleep(next_put - now).await;
        }
        next_put += period;
        for b in value.iter_mut() {
            *b = rand::random();
        }
        let key = format!("k{}", puts % a.keys);
        // Puts run concurrently (a bounded number in flight) so the rate does not depend on
        // one put's latency.
        let permit = in_flight.clone().acquire_owned().await?;
        let mut c = client.clone();
        let v = value.clone();
        let errs = errors.clone();
        tokio::spawn(async move {
            if c.put(key, v, None).await.is_err() {
                errs.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
        puts += 1;
    }
    println!(
        "done: {puts} puts, {} errors",
        errors.load(Ordering::Relaxed)
    );
    drop(member);
    Ok(())
}
