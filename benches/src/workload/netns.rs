//! Steps that touch nftables or routes run in a child of the benchmark started with `unshare -n`: a
//! fresh network namespace with an empty ruleset, which disappears when its last process exits, also
//! when the child fails or is killed. The child refuses to run if its namespace is the parent's or
//! its ruleset is not empty, so the host's network is never touched.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::error::{BenchError, Result};

fn netns_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Netprog(format!("{what}: {e}"))
}

/// Whether this process runs as root (needed to create a namespace and load rules).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// This process's network namespace, as `/proc/self/ns/net` names it.
pub(crate) fn own_netns() -> Result<String> {
    std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .map_err(|source| BenchError::Io {
            what: "read /proc/self/ns/net".into(),
            source,
        })
}

/// What a child prints: progress lines and result lines, each after its prefix.
pub(crate) struct Prefixes {
    /// Prefix of a progress line (shown to the user as it comes).
    pub progress: &'static str,
    /// Prefix of a result line (returned whole).
    pub result: &'static str,
}

/// Runs this binary again as `unshare -n <self> <flag> <this namespace> <args…>`, shows its progress
/// lines and returns its result lines once it has exited successfully; kills it after `deadline`.
pub(crate) async fn run_child(
    flag: &str,
    args: &[String],
    prefixes: &Prefixes,
    deadline: Duration,
    progress: &dyn Fn(String),
) -> Result<Vec<String>> {
    if !is_root() {
        return Err(netns_error(
            "needs root",
            "the step creates a network namespace (unshare -n) and loads nftables rules in it; run it as root, as CI does",
        ));
    }
    let exe = std::env::current_exe().map_err(|source| BenchError::Io {
        what: "locate this binary".into(),
        source,
    })?;
    let mut child = Command::new("unshare")
        .arg("-n")
        .arg(&exe)
        .args([flag, &own_netns()?])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // Dropped on error or timeout: the child dies and its namespace with it.
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BenchError::Spawn {
            what: format!("unshare -n {} {flag}", exe.display()),
            source,
        })?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| netns_error("child", "no stdout"))?;
    let collect = async {
        let mut lines = BufReader::new(stdout).lines();
        let mut out = Vec::new();
        while let Some(line) = lines
            .next_line()
            .await
            .map_err(|e| netns_error("child output", e))?
        {
            if let Some(msg) = line.strip_prefix(prefixes.progress) {
                progress(msg.trim().to_string());
            } else if line.starts_with(prefixes.result) {
                out.push(line);
            }
        }
        let status = child.wait().await.map_err(|e| netns_error("child", e))?;
        if !status.success() {
            return Err(netns_error(
                "child",
                format!("{status} (its error is printed above)"),
            ));
        }
        Ok(out)
    };
    match tokio::time::timeout(deadline, collect).await {
        Ok(r) => r,
        Err(_) => Err(netns_error(
            "child",
            format!("not done after {} s; killed", deadline.as_secs()),
        )),
    }
}

/// The child's first step: dies with its parent, and checks that it is alone in a fresh namespace
/// (not `parent_netns`, empty ruleset).
pub(crate) async fn enter(parent_netns: &str) -> Result<()> {
    // Stop if the benchmark dies (SIGKILL included); the namespace goes with this process.
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of the calling process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let mine = own_netns()?;
    if mine == parent_netns {
        return Err(netns_error(
            "refusing to run",
            format!("this process is in the parent's network namespace ({mine}), not a fresh one"),
        ));
    }
    let ruleset = Command::new("nft")
        .args(["list", "ruleset"])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| BenchError::Spawn {
            what: "nft list ruleset".into(),
            source,
        })?;
    if !ruleset.status.success() || !ruleset.stdout.iter().all(u8::is_ascii_whitespace) {
        return Err(netns_error(
            "refusing to run",
            format!(
                "the namespace's ruleset is not empty or unreadable: {}{}",
                String::from_utf8_lossy(&ruleset.stdout),
                String::from_utf8_lossy(&ruleset.stderr)
            ),
        ));
    }
    Ok(())
}
