//! The systems under test: real etcd and keel clusters started as separate processes on
//! loopback, with their data in directories on the same disk.

pub(crate) mod etcd;
pub(crate) mod keel;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::Client;

use crate::error::{BenchError, Result};

/// Which server a cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// keel's `keel server`.
    Keel,
    /// Real etcd 3.4.
    Etcd,
}

impl Kind {
    /// Short lowercase name, used in tables and directory names.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Keel => "keel",
            Kind::Etcd => "etcd",
        }
    }
}

/// Where the two server binaries are.
#[derive(Clone, Debug)]
pub(crate) struct Binaries {
    /// `keel` (normally `target/release/keel`).
    pub keel: PathBuf,
    /// `etcd` 3.4 (normally `/usr/bin/etcd`).
    pub etcd: PathBuf,
}

impl Binaries {
    /// Checks that both binaries exist, with a hint on how to get each.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.keel.is_file() {
            return Err(BenchError::MissingBinary {
                what: "keel",
                path: self.keel.clone(),
                hint: "build it with `cargo build --release -p keel` or pass --keel PATH",
            });
        }
        if !self.etcd.is_file() {
            return Err(BenchError::MissingBinary {
                what: "etcd",
                path: self.etcd.clone(),
                hint: "install etcd 3.4 with scripts/setup.sh or pass --etcd PATH",
            });
        }
        Ok(())
    }
}

/// One member's ports and paths.
struct Member {
    name: String,
    client_url: String,
    /// `https://127.0.0.1:<port>` when the Kubernetes API is served.
    kube_url: Option<String>,
    peer_url: String,
    data_dir: PathBuf,
    log: PathBuf,
}

/// A running cluster; its processes are killed when it is dropped.
pub(crate) struct Cluster {
    /// What it runs.
    pub kind: Kind,
    /// One client URL per member.
    pub urls: Vec<String>,
    members: Vec<Member>,
    /// `--initial-cluster`, the same for every member.
    initial: String,
    binary: PathBuf,
    /// Flags added to every member's command line.
    extra: Vec<String>,
    children: Vec<Child>,
}

/// Whether keel members also serve the Kubernetes API (and run the controllers on the leader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// The etcd API alone, as the etcd it is compared with.
    EtcdOnly,
    /// The Kubernetes API too, on a port of its own per member.
    Kube,
}

impl Cluster {
    /// Starts `members` members of `kind` with data under `root`, and waits until every
    /// member answers a write.
    pub(crate) async fn start(
        kind: Kind,
        members: usize,
        root: &Path,
        bins: &Binaries,
    ) -> Result<Self> {
        Self::start_with(kind, members, root, bins, Api::EtcdOnly).await
    }

    /// Like [`Cluster::start`], keel members serving `api`.
    pub(crate) async fn start_with(
        kind: Kind,
        members: usize,
        root: &Path,
        bins: &Binaries,
        api: Api,
    ) -> Result<Self> {
        Self::start_with_args(kind, members, root, bins, api, &[]).await
    }

    /// Like [`Cluster::start_with`], every member also given `extra` flags.
    pub(crate) async fn start_with_args(
        kind: Kind,
        members: usize,
        root: &Path,
        bins: &Binaries,
        api: Api,
        extra: &[&str],
    ) -> Result<Self> {
        let dir = root.join(format!("{}-{members}m", kind.name()));
        let mut plan = Vec::new();
        for i in 0..members {
            plan.push(Member {
                name: format!("m{i}"),
                client_url: format!("http://127.0.0.1:{}", keel_testkit::free_port()),
                kube_url: match api {
                    Api::Kube => Some(format!("https://127.0.0.1:{}", keel_testkit::free_port())),
                    Api::EtcdOnly => None,
                },
                peer_url: format!("http://127.0.0.1:{}", keel_testkit::free_port()),
                data_dir: dir.join(format!("m{i}")),
                log: dir.join(format!("m{i}.log")),
            });
        }
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        let initial = plan
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            kind,
            urls: plan.iter().map(|m| m.client_url.clone()).collect(),
            members: plan,
            initial,
            binary: match kind {
                Kind::Keel => bins.keel.clone(),
                Kind::Etcd => bins.etcd.clone(),
            },
            extra: extra.iter().map(|s| s.to_string()).collect(),
            children: Vec::new(),
        };
        for i in 0..members {
            let child = cluster.spawn(i)?;
            cluster.children.push(child);
        }
        for i in 0..members {
            cluster.wait_ready(i).await?;
        }
        Ok(cluster)
    }

    /// Starts member `i`'s process (on a restart, with the data it left).
    fn spawn(&self, i: usize) -> Result<Child> {
        let m = &self.members[i];
        let mut cmd = match self.kind {
            Kind::Keel => keel::command(&self.binary, m.kube_url.as_deref()),
            Kind::Etcd => etcd::command(&self.binary),
        };
        // The flags both servers share (keel takes etcd's names on purpose). On a restart both
        // ignore the initial-cluster flags: the data directory already names the cluster.
        cmd.args(["--name", &m.name, "--data-dir"])
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &m.client_url])
            .args(["--advertise-client-urls", &m.client_url])
            .args(["--listen-peer-urls", &m.peer_url])
            .args(["--initial-advertise-peer-urls", &m.peer_url])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "bench"])
            .args(&self.extra);
        // Appended, so a restarted member's log follows its previous life's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|source| BenchError::Io {
                what: format!("open {}", m.log.display()),
                source,
            })?;
        let err = log.try_clone().map_err(|source| BenchError::Io {
            what: format!("open {}", m.log.display()),
            source,
        })?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|source| BenchError::Spawn {
                what: format!("{} member {}", self.kind.name(), m.name),
                source,
            })
    }

    /// Waits until member `i` accepts a write.
    pub(crate) async fn wait_ready(&self, i: usize) -> Result<()> {
        ready(self.kind, &self.urls[i], &self.members[i].log).await
    }

    /// Kills member `i` with SIGKILL (no shutdown of any kind) and reaps it.
    pub(crate) fn kill(&mut self, i: usize) -> Result<()> {
        let child = &mut self.children[i];
        child
            .kill()
            .and_then(|()| child.wait().map(drop))
            .map_err(|source| BenchError::Io {
                what: format!("kill {} member {}", self.kind.name(), self.members[i].name),
                source,
            })
    }

    /// Starts member `i` again on its data directory (after [`Cluster::kill`]).
    pub(crate) fn restart(&mut self, i: usize) -> Result<()> {
        self.children[i] = self.spawn(i)?;
        Ok(())
    }

    /// The index of the member that every member names as its leader, once they all agree
    /// (every member must be running; waits up to a minute).
    pub(crate) async fn leader(&self) -> Result<usize> {
        const LIMIT: Duration = Duration::from_secs(60);
        let deadline = Instant::now() + LIMIT;
        let mut last;
        loop {
            match self.statuses().await {
                Ok(s) => {
                    let leader = s[0].1;
                    let agreed = leader != 0 && s.iter().all(|&(_, l)| l == leader);
                    if let Some(i) = s
                        .iter()
                        .position(|&(id, _)| id == leader)
                        .filter(|_| agreed)
                    {
                        return Ok(i);
                    }
                    last = format!(
                        "members name leaders {:x?}",
                        s.iter().map(|&(_, l)| l).collect::<Vec<_>>()
                    );
                }
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(BenchError::NoProgress {
                    workload: "find the leader".into(),
                    kind: self.kind.name(),
                    errors: 0,
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// (member ID, leader ID) as every member reports them in `Maintenance.Status`.
    async fn statuses(&self) -> std::result::Result<Vec<(u64, u64)>, etcd_client::Error> {
        let mut out = Vec::with_capacity(self.urls.len());
        for url in &self.urls {
            let mut c = Client::connect([url], None).await?;
            let s = c.status().await?;
            out.push((s.header().map_or(0, |h| h.member_id()), s.leader()));
        }
        Ok(out)
    }

    /// Member `i`'s admin kubeconfig (written at its first start when the Kubernetes API is served).
    pub(crate) fn kubeconfig(&self, i: usize) -> PathBuf {
        self.members[i].data_dir.join("admin.kubeconfig")
    }

    /// Resident set size of member `i`, in bytes.
    pub(crate) fn rss_of(&self, i: usize) -> u64 {
        self.children.get(i).map_or(0, |c| rss_of(c.id()))
    }

    /// CPU time (user + system) member `i` has used so far, in microseconds.
    pub(crate) fn cpu_us_of(&self, i: usize) -> u64 {
        self.children.get(i).map_or(0, |c| cpu_us_of(c.id()))
    }

    /// Resident set size of every member, in bytes (VmRSS from /proc).
    pub(crate) fn rss(&self) -> Vec<u64> {
        self.children.iter().map(|c| rss_of(c.id())).collect()
    }

    /// CPU time (user + system) all members have used so far, in microseconds.
    pub(crate) fn cpu_us(&self) -> u64 {
        self.children.iter().map(|c| cpu_us_of(c.id())).sum()
    }

    /// Disk space used by every member's data directory, in bytes (allocated blocks, as `du`).
    pub(crate) fn disk(&self) -> Vec<u64> {
        self.members.iter().map(|m| du(&m.data_dir)).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until the member at `url` accepts a write.
async fn ready(kind: Kind, url: &str, log: &Path) -> Result<()> {
    const LIMIT: Duration = Duration::from_secs(60);
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(mut c) = Client::connect([url], None).await {
            if c.put("bench/ready", "1", None).await.is_ok() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(BenchError::NotReady {
                kind: kind.name(),
                url: url.to_string(),
                secs: LIMIT.as_secs(),
                log: log.display().to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU time this benchmark process (the load generator) has used, µs.
pub(crate) fn own_cpu_us() -> u64 {
    cpu_us_of(std::process::id())
}

pub(crate) fn cpu_us_of(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return 0;
    }
    ticks * 1_000_000 / hz as u64
}

fn du(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for e in entries.flatten() {
                total += du(&e.path());
            }
        }
    }
    total
}

/// A command for `binary` with nothing attached yet.
fn base(binary: &Path) -> Command {
    Command::new(binary)
}
