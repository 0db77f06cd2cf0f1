//! Loading image archives into containerd. CRI has no import call, so the agent runs containerd's own
//! `ctr images import` against the same socket, in the `k8s.io` namespace the CRI plugin reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::info;

use crate::error::{Error, Result};

/// The containerd namespace the CRI plugin serves.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The `*.tar` files of `dir`, sorted.
pub fn archives(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for e in entries {
        let path = e.map_err(|e| Error::io(dir, e))?.path();
        if path.extension().is_some_and(|x| x == "tar") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Imports one archive with `ctr --address SOCKET -n k8s.io images import`.
pub async fn import(socket: &Path, archive: &Path) -> Result<()> {
    let mut cmd = tokio::process::Command::new("ctr");
    cmd.arg("--address")
        .arg(socket)
        .args(["-n", CRI_NAMESPACE, "images", "import", "--platform"])
        .arg(format!("linux/{}", super::oci::oci_arch()))
        .arg(archive)
        .kill_on_drop(true);
    let line = format!(
        "ctr --address {} -n {CRI_NAMESPACE} images import {}",
        socket.display(),
        archive.display()
    );
    let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .map_err(|_| Error::Command {
            command: line.clone(),
            message: "timed out after 300 s".into(),
        })?
        .map_err(|e| Error::Command {
            command: line.clone(),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: line,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    info!(archive = %archive.display(), "image archive imported");
    Ok(())
}

/// Imports every archive of `dir`.
pub async fn import_dir(socket: &Path, dir: &Path) -> Result<usize> {
    let all = archives(dir)?;
    for a in &all {
        import(socket, a).await?;
    }
    Ok(all.len())
}
