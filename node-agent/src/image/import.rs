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

/// The image names an archive carries: `io.containerd.image.name` of its `index.json` manifests (OCI
/// layout, what `keel images` writes) or the `RepoTags` of its `manifest.json` (`docker save`), the
/// latter normalized as containerd names them (`nginx:1` → `docker.io/library/nginx:1`).
pub fn archive_names(archive: &Path) -> Result<Vec<String>> {
    let file = std::fs::File::open(archive).map_err(|e| Error::io(archive, e))?;
    let mut tar = tar::Archive::new(file);
    let mut names = Vec::new();
    for entry in tar.entries().map_err(|e| Error::io(archive, e))? {
        let mut entry = entry.map_err(|e| Error::io(archive, e))?;
        let path = entry
            .path()
            .map(|p| p.to_string_lossy().trim_start_matches("./").to_string())
            .unwrap_or_default();
        if path != "index.json" && path != "manifest.json" {
            continue;
        }
        // Both files are small; a huge one is not an image archive's.
        if entry.size() > 1 << 20 {
            continue;
        }
        let mut text = String::new();
        if std::io::Read::read_to_string(&mut entry, &mut text).is_err() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if path == "index.json" {
            for m in v["manifests"].as_array().into_iter().flatten() {
                if let Some(n) = m["annotations"]["io.containerd.image.name"].as_str() {
                    names.push(n.to_string());
                }
            }
        } else {
            for m in v.as_array().into_iter().flatten() {
                for t in m["RepoTags"].as_array().into_iter().flatten() {
                    if let Some(t) = t.as_str() {
                        names.push(normalize(t));
                    }
                }
            }
        }
    }
    Ok(names)
}

/// A Docker-style short name as containerd stores it.
fn normalize(name: &str) -> String {
    let first = name.split('/').next().unwrap_or_default();
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    }
}

#[cfg(test)]
mod names_tests {
    use super::*;

    #[test]
    fn short_names_are_normalized_as_containerd_does() {
        assert_eq!(normalize("nginx:1"), "docker.io/library/nginx:1");
        assert_eq!(normalize("me/app:2"), "docker.io/me/app:2");
        assert_eq!(
            normalize("localhost/busybox:latest"),
            "localhost/busybox:latest"
        );
        assert_eq!(
            normalize("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(normalize("host:5000/app:1"), "host:5000/app:1");
    }

    #[test]
    fn names_of_an_archive_keel_writes() {
        let dir = tempfile::tempdir().unwrap();
        let def = crate::image::oci::pause_def(Path::new("/bin/busybox"));
        let out = dir.path().join("pause.tar");
        crate::image::oci::write_archive(&def, &out).unwrap();
        assert_eq!(
            archive_names(&out).unwrap(),
            [crate::image::oci::PAUSE_IMAGE]
        );
    }
}
