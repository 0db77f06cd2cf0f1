//! OCI image archives written from local files: one uncompressed layer, a config blob, a manifest blob,
//! each named by its sha256, and an `index.json` whose manifest carries the image's full name in
//! `io.containerd.image.name` (what `ctr images import` names the image) and its tag in
//! `org.opencontainers.image.ref.name`. The layout is written as a tar archive, the form `ctr` imports.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::{Error, Result};

/// Where Debian's `busybox-static` puts its binary.
pub const BUSYBOX: &str = "/bin/busybox";
/// The busybox image's name.
pub const BUSYBOX_IMAGE: &str = "localhost/busybox:latest";
/// The sandbox (pause) image's name.
pub const PAUSE_IMAGE: &str = "localhost/pause:3.10";

/// One image to write.
#[derive(Debug, Clone)]
pub struct ImageDef {
    /// Full name with tag (`localhost/busybox:latest`).
    pub name: String,
    /// The image's `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// The image's `Cmd`.
    pub cmd: Vec<String>,
    /// Files copied in: (path in the image, file on this machine, mode).
    pub files: Vec<(String, PathBuf, u32)>,
    /// Symbolic links: (path in the image, target).
    pub links: Vec<(String, String)>,
    /// Empty directories: (path, mode).
    pub dirs: Vec<(String, u32)>,
    /// Small text files: (path, content).
    pub texts: Vec<(String, String)>,
}

/// The OCI architecture name of this machine.
pub fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

fn base_dirs() -> Vec<(String, u32)> {
    [
        "bin", "dev", "etc", "proc", "sys", "root", "var", "var/run", "run", "usr", "usr/bin",
    ]
    .iter()
    .map(|d| (d.to_string(), 0o755))
    .chain([("tmp".to_string(), 0o1777)])
    .collect()
}

fn passwd_files() -> Vec<(String, String)> {
    vec![
        (
            "etc/passwd".into(),
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
                .into(),
        ),
        ("etc/group".into(), "root:x:0:\nnogroup:x:65534:\n".into()),
    ]
}

/// The busybox image: the static binary in `/bin` with a link per applet (sh, httpd, wget, nc, sleep…).
pub fn busybox_def(busybox: &Path) -> Result<ImageDef> {
    let out = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|e| Error::io(busybox, e))?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("{} --list", busybox.display()),
            message: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let links = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(|a| (format!("bin/{a}"), "busybox".to_string()))
        .collect();
    Ok(ImageDef {
        name: BUSYBOX_IMAGE.into(),
        entrypoint: vec![],
        cmd: vec!["sh".into()],
        files: vec![("bin/busybox".into(), busybox.to_path_buf(), 0o755)],
        links,
        dirs: base_dirs(),
        texts: passwd_files(),
    })
}

/// The sandbox image: busybox sleeping for ever as the pod's first process (the runtime stops a sandbox
/// with SIGKILL, so it needs no signal handling).
pub fn pause_def(busybox: &Path) -> ImageDef {
    ImageDef {
        name: PAUSE_IMAGE.into(),
        entrypoint: vec!["/bin/busybox".into(), "sleep".into(), "2147483647".into()],
        cmd: vec![],
        files: vec![("bin/busybox".into(), busybox.to_path_buf(), 0o755)],
        links: vec![],
        dirs: vec![
            ("bin".into(), 0o755),
            ("dev".into(), 0o755),
            ("proc".into(), 0o755),
            ("sys".into(), 0o755),
        ],
        texts: vec![],
    }
}

fn sha256_hex(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn header(size: u64, mode: u32, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    // A fixed time keeps the layer (and so the image id) the same from one build to the next.
    h.set_mtime(0);
    h
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(what, e)
}

/// The layer tarball of `def`.
fn layer(def: &ImageDef) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dirs = def.dirs.clone();
    dirs.sort();
    for (d, mode) in &dirs {
        let mut h = header(0, *mode, tar::EntryType::Directory);
        b.append_data(&mut h, format!("{d}/"), std::io::empty())
            .map_err(io_err(d))?;
    }
    for (path, src, mode) in &def.files {
        let data = std::fs::read(src).map_err(|e| Error::io(src, e))?;
        let mut h = header(data.len() as u64, *mode, tar::EntryType::Regular);
        b.append_data(&mut h, path, data.as_slice())
            .map_err(io_err(path))?;
    }
    for (path, text) in &def.texts {
        let mut h = header(text.len() as u64, 0o644, tar::EntryType::Regular);
        b.append_data(&mut h, path, text.as_bytes())
            .map_err(io_err(path))?;
    }
    for (path, target) in &def.links {
        let mut h = header(0, 0o777, tar::EntryType::Symlink);
        b.append_link(&mut h, path, target).map_err(io_err(path))?;
    }
    b.into_inner().map_err(io_err("layer"))
}

/// An image's blobs: what an archive holds and what a registry push uploads.
#[derive(Debug, Clone)]
pub struct Built {
    /// The uncompressed layer tarball.
    pub layer: Vec<u8>,
    /// The image config.
    pub config: Vec<u8>,
    /// The OCI manifest.
    pub manifest: Vec<u8>,
}

/// A blob's digest (`sha256:…`).
pub fn digest(data: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(data))
}

/// The layer, config and manifest of `def`.
pub fn build(def: &ImageDef) -> Result<Built> {
    let layer = layer(def)?;
    let layer_digest = sha256_hex(&layer);
    let mut config = json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    });
    if !def.entrypoint.is_empty() {
        config["config"]["Entrypoint"] = json!(def.entrypoint);
    }
    if !def.cmd.is_empty() {
        config["config"]["Cmd"] = json!(def.cmd);
    }
    let config = serde_json::to_vec(&config).map_err(|e| Error::Config(e.to_string()))?;
    let config_digest = sha256_hex(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
    }))
    .map_err(|e| Error::Config(e.to_string()))?;
    Ok(Built {
        layer,
        config,
        manifest,
    })
}

/// Writes `def` as an OCI image archive to `out`; returns the manifest's digest.
pub fn write_archive(def: &ImageDef, out: &Path) -> Result<String> {
    let Built {
        layer,
        config,
        manifest,
    } = build(def)?;
    let layer_digest = sha256_hex(&layer);
    let config_digest = sha256_hex(&config);
    let manifest_digest = sha256_hex(&manifest);
    let tag = def
        .name
        .rsplit_once(':')
        .map(|(_, t)| t)
        .unwrap_or("latest");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": {"architecture": oci_arch(), "os": "linux"},
            "annotations": {
                "io.containerd.image.name": def.name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))
    .map_err(|e| Error::Config(e.to_string()))?;

    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], kind: tar::EntryType| -> Result<()> {
        let mode = if kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        };
        let mut h = header(data.len() as u64, mode, kind);
        b.append_data(&mut h, path, data).map_err(io_err(path))
    };
    add("blobs/", &[], tar::EntryType::Directory)?;
    add("blobs/sha256/", &[], tar::EntryType::Directory)?;
    add(
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        tar::EntryType::Regular,
    )?;
    add(
        &format!("blobs/sha256/{layer_digest}"),
        &layer,
        tar::EntryType::Regular,
    )?;
    add(
        &format!("blobs/sha256/{config_digest}"),
        &config,
        tar::EntryType::Regular,
    )?;
    add(
        &format!("blobs/sha256/{manifest_digest}"),
        &manifest,
        tar::EntryType::Regular,
    )?;
    add("index.json", &index, tar::EntryType::Regular)?;
    let archive = b.into_inner().map_err(io_err("archive"))?;
    let tmp = out.with_extension("tar.partial");
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(&archive).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, out).map_err(|e| Error::io(out, e))?;
    Ok(format!("sha256:{manifest_digest}"))
}

/// The built-in images: (archive file name, definition).
pub fn builtin(busybox: &Path) -> Result<Vec<(&'static str, ImageDef)>> {
    Ok(vec![
        ("busybox.tar", busybox_def(busybox)?),
        ("pause.tar", pause_def(busybox)),
    ])
}

/// Writes the busybox and pause archives into `dir` (`busybox.tar`, `pause.tar`); returns their paths.
pub fn write_builtin(dir: &Path, busybox: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut paths = Vec::new();
    for (file, def) in builtin(busybox)? {
        let path = dir.join(file);
        write_archive(&def, &path)?;
        paths.push(path);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_has_layout_and_named_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("hello");
        std::fs::write(&src, b"hi").unwrap();
        let def = ImageDef {
            name: "localhost/t:1".into(),
            entrypoint: vec!["/hello".into()],
            cmd: vec![],
            files: vec![("hello".into(), src, 0o755)],
            links: vec![("bin/hi".into(), "../hello".into())],
            dirs: vec![("bin".into(), 0o755)],
            texts: vec![],
        };
        let out = dir.path().join("t.tar");
        let digest = write_archive(&def, &out).unwrap();
        let mut a = tar::Archive::new(std::fs::File::open(&out).unwrap());
        let mut names = Vec::new();
        let mut index = String::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let p = e.path().unwrap().display().to_string();
            if p == "index.json" {
                std::io::Read::read_to_string(&mut e, &mut index).unwrap();
            } else if let Some(h) = p.strip_prefix("blobs/sha256/") {
                if !h.is_empty() {
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut e, &mut data).unwrap();
                    assert_eq!(sha256_hex(&data), h, "blob named by its digest");
                }
            }
            names.push(p);
        }
        assert!(names.contains(&"oci-layout".to_string()));
        let index: serde_json::Value = serde_json::from_str(&index).unwrap();
        assert_eq!(index["manifests"][0]["digest"], digest);
        assert_eq!(
            index["manifests"][0]["annotations"]["io.containerd.image.name"],
            "localhost/t:1"
        );
        assert_eq!(
            index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
            "1"
        );
    }
}
