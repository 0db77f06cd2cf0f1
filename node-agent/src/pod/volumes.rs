//! A pod's volumes on this node, under `<root>/pods/<uid>/volumes/<plugin>/<name>`: emptyDir
//! directories (a tmpfs for `medium: Memory`), configMap, secret, downwardAPI and projected files
//! (service-account tokens included, see `token`) written from the API (atomically: a new tree is
//! written beside the old one and swapped in), hostPath directories taken as they are, and the
//! directories of the `local` and `hostPath` PersistentVolumes bound to the pod's claims (see
//! `claims`). Mounts then bind them into containers at each `volumeMounts[].mountPath`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, Volume,
};
use kube::api::Api;
use kube::Client;

use super::security;
use crate::error::{Error, Result};

/// One of a pod's volumes on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVolume {
    /// Where it is.
    pub path: PathBuf,
    /// Whether every mount of it is read-only (a claim used with `readOnly: true`).
    pub read_only: bool,
}

impl HostVolume {
    fn writable(path: PathBuf) -> Self {
        HostVolume {
            path,
            read_only: false,
        }
    }
}

/// Where each of a pod's volumes is on the host, by volume name.
pub type HostPaths = BTreeMap<String, HostVolume>;

/// The pod's directory under the agent's root.
pub fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    root.join("pods").join(uid)
}

fn plugin(v: &Volume) -> &'static str {
    if v.empty_dir.is_some() {
        "kubernetes.io~empty-dir"
    } else if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.downward_api.is_some() {
        "kubernetes.io~downward-api"
    } else {
        "kubernetes.io~projected"
    }
}

fn safe_rel(p: &str) -> Result<&str> {
    if p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == "..") {
        return Err(Error::Config(format!("invalid volume item path {p:?}")));
    }
    Ok(p)
}

/// Files of a key→bytes map, through `items` when given.
fn select(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    what: &str,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>, i32)>> {
    match items {
        None => Ok(data
            .iter()
            .map(|(k, v)| (k.clone(), v.clone(), default_mode))
            .collect()),
        Some(items) => {
            let mut out = Vec::new();
            for it in items {
                match data.get(&it.key) {
                    Some(v) => out.push((
                        safe_rel(&it.path)?.to_string(),
                        v.clone(),
                        it.mode.unwrap_or(default_mode),
                    )),
                    None if optional => {}
                    None => {
                        return Err(Error::Config(format!(
                            "configmap references non-existent config key: {} ({what})",
                            it.key
                        )))
                    }
                }
            }
            Ok(out)
        }
    }
}

/// Where a volume's files come from.
#[derive(Clone, Copy)]
enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    fn word(self) -> &'static str {
        match self {
            Source::ConfigMap => "configmap",
            Source::Secret => "secret",
        }
    }

    /// The object's keys and values; None when it does not exist.
    async fn data(
        self,
        client: &Client,
        ns: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>> {
        let what = || format!("{} {ns}/{name}", self.word());
        Ok(match self {
            Source::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                api.get_opt(name)
                    .await
                    .map_err(|e| Error::kube(what(), e))?
                    .map(|cm| {
                        let mut data: BTreeMap<String, Vec<u8>> = cm
                            .data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.into_bytes()))
                            .collect();
                        data.extend(
                            cm.binary_data
                                .unwrap_or_default()
                                .into_iter()
                                .map(|(k, v)| (k, v.0)),
                        );
                        data
                    })
            }
            Source::Secret => {
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                api.get_opt(name)
                    .await
                    .map_err(|e| Error::kube(what(), e))?
                    .map(|s| {
                        s.data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect()
                    })
            }
        })
    }
}

/// The files of a configMap or secret volume (or projection).
async fn object_files(
    client: &Client,
    source: Source,
    ns: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    mode: i32,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>, i32)>> {
    match source.data(client, ns, name).await? {
        Some(data) => select(&data, items, mode, name, optional),
        None if optional => Ok(vec![]),
        None => Err(Error::Config(format!(
            "{} \"{name}\" not found",
            source.word()
        ))),
    }
}

fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    mode: i32,
) -> Result<Vec<(String, Vec<u8>, i32)>> {
    let mut out = Vec::new();
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            match f.field_path.as_str() {
                "metadata.labels" | "metadata.annotations" => {
                    let m = if f.field_path == "metadata.labels" {
                        pod.metadata.labels.clone()
                    } else {
                        pod.metadata.annotations.clone()
                    };
                    // One `key="value"` line per entry in key order, no newline after the last, as
                    // the kubelet writes them.
                    m.unwrap_or_default()
                        .iter()
                        .map(|(k, v)| format!("{k}={v:?}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                }
                path => super::env::field(pod, path)?,
            }
        } else if let Some(r) = &it.resource_field_ref {
            let c = pod
                .spec
                .as_ref()
                .and_then(|s| {
                    s.containers
                        .iter()
                        .find(|c| Some(&c.name) == r.container_name.as_ref())
                })
                .ok_or_else(|| {
                    Error::Config(format!(
                        "resourceFieldRef names no container: {:?}",
                        r.container_name
                    ))
                })?;
            super::resources::field(c, r, 0, 0)?
        } else {
            String::new()
        };
        out.push((
            safe_rel(&it.path)?.to_string(),
            value.into_bytes(),
            it.mode.unwrap_or(mode),
        ));
    }
    Ok(out)
}

/// Writes `files` as the whole content of `dir`: into a fresh directory, then swapped in.
fn write_tree(dir: &Path, files: &[(String, Vec<u8>, i32)]) -> Result<()> {
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fresh = parent.join(format!(".{name}.new"));
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir_all(&fresh).map_err(|e| Error::io(&fresh, e))?;
    for (rel, data, mode) in files {
        let p = fresh.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
        }
        std::fs::write(&p, data).map_err(|e| Error::io(&p, e))?;
        let mode = u32::try_from(*mode).unwrap_or(0o644) & 0o7777;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(&p, e))?;
    }
    // Containers bind-mount `dir` itself, so its content is replaced in place, not the directory.
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let p = e.map_err(|e| Error::io(dir, e))?.path();
        let r = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(|e| Error::io(&p, e))?;
    }
    for e in std::fs::read_dir(&fresh).map_err(|e| Error::io(&fresh, e))? {
        let e = e.map_err(|e| Error::io(&fresh, e))?;
        let to = dir.join(e.file_name());
        std::fs::rename(e.path(), &to).map_err(|e| Error::io(&to, e))?;
    }
    std::fs::remove_dir_all(&fresh).map_err(|e| Error::io(&fresh, e))?;
    Ok(())
}

/// Makes every volume of `pod` ready on the host; returns where each one is.
pub async fn prepare(
    client: &Client,
    tokens: &crate::pod::token::TokenCache,
    root: &Path,
    pod: &Pod,
    node_memory: u64,
) -> Result<HostPaths> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let base = pod_dir(root, &uid).join("volumes");
    let mut out = HostPaths::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(h) = &v.host_path {
            check_host_path(&h.path, h.type_.as_deref())?;
            out.insert(v.name.clone(), HostVolume::writable(PathBuf::from(&h.path)));
            continue;
        }
        if let Some(found) = super::claims::resolve(client, pod, v).await {
            let cv = found.map_err(|e| {
                Error::Mount(format!(
                    "Unable to attach or mount volumes: unmounted volumes=[{n}], failed to process volumes=[{n}]: {e}",
                    n = v.name
                ))
            })?;
            if let Some(t) = &cv.host_path_type {
                check_host_path(&cv.path.to_string_lossy(), Some(t))?;
            } else if !cv.path.is_dir() {
                return Err(Error::Config(format!(
                    "volume {:?}: local path {} does not exist",
                    cv.pv,
                    cv.path.display()
                )));
            }
            if let (true, Some(g)) = (cv.owned_by_pod, security::fs_group(pod)) {
                if !security::fs_group_settled(pod, &cv.path, g) {
                    security::apply_fs_group(&cv.path, g, false)?;
                }
            }
            let read_only = v
                .persistent_volume_claim
                .as_ref()
                .and_then(|c| c.read_only)
                .unwrap_or(false);
            out.insert(
                v.name.clone(),
                HostVolume {
                    path: cv.path,
                    read_only,
                },
            );
            continue;
        }
        let dir = base.join(plugin(v)).join(&v.name);
        if let Some(e) = &v.empty_dir {
            let fresh = !dir.exists();
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            if e.medium.as_deref() == Some("Memory") && !is_mount_point(&dir) {
                let size = memory_volume_size(pod, e.size_limit.as_ref(), node_memory);
                mount_tmpfs(&dir, size)?;
            }
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| Error::io(&dir, e))?;
            // Set up once, as the kubelet mounts it once: what the containers write stays theirs.
            if let (true, Some(g)) = (fresh, security::fs_group(pod)) {
                security::apply_fs_group(&dir, g, false)?;
            }
            out.insert(v.name.clone(), HostVolume::writable(dir));
            continue;
        } else if let Some(cm) = &v.config_map {
            let mode = cm.default_mode.unwrap_or(0o644);
            let files = object_files(
                client,
                Source::ConfigMap,
                &ns,
                &cm.name,
                cm.items.as_ref(),
                mode,
                cm.optional.unwrap_or(false),
            )
            .await?;
            write_tree(&dir, &files)?;
        } else if let Some(s) = &v.secret {
            let mode = s.default_mode.unwrap_or(0o644);
            let name = s.secret_name.clone().unwrap_or_default();
            let files = object_files(
                client,
                Source::Secret,
                &ns,
                &name,
                s.items.as_ref(),
                mode,
                s.optional.unwrap_or(false),
            )
            .await?;
            write_tree(&dir, &files)?;
        } else if let Some(d) = &v.downward_api {
            let files = downward_files(
                pod,
                d.items.as_deref().unwrap_or(&[]),
                d.default_mode.unwrap_or(0o644),
            )?;
            write_tree(&dir, &files)?;
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(0o644);
            let mut files = Vec::new();
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    files.extend(
                        object_files(
                            client,
                            Source::ConfigMap,
                            &ns,
                            &cm.name,
                            cm.items.as_ref(),
                            mode,
                            cm.optional.unwrap_or(false),
                        )
                        .await?,
                    );
                }
                if let Some(s) = &src.secret {
                    files.extend(
                        object_files(
                            client,
                            Source::Secret,
                            &ns,
                            &s.name,
                            s.items.as_ref(),
                            mode,
                            s.optional.unwrap_or(false),
                        )
                        .await?,
                    );
                }
                if let Some(d) = &src.downward_api {
                    files.extend(downward_files(
                        pod,
                        d.items.as_deref().unwrap_or(&[]),
                        mode,
                    )?);
                }
                if let Some(sat) = &src.service_account_token {
                    let path = safe_rel(&sat.path)?.to_string();
                    let token = tokens.token(client, pod, sat).await?;
                    files.push((path, token.into_bytes(), mode));
                }
            }
            write_tree(&dir, &files)?;
        } else {
            return Err(Error::Config(format!(
                "volume {:?}: this volume type is not supported by keel's agent",
                v.name
            )));
        }
        // The files were just rewritten (by root), so they are given to fsGroup every time, read-only as
        // these volumes are; `fsGroupChangePolicy` cannot skip fresh files.
        if let Some(g) = security::fs_group(pod) {
            security::apply_fs_group(&dir, g, true)?;
        }
        out.insert(v.name.clone(), HostVolume::writable(dir));
    }
    Ok(out)
}

/// Checks a hostPath's `type` as the kubelet does (creating a `DirectoryOrCreate` directory or a
/// `FileOrCreate` file); an unset or empty type checks nothing.
fn check_host_path(path: &str, kind: Option<&str>) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if path.split('/').any(|e| e == "..") {
        return Err(Error::Config(format!(
            "invalid HostPath `{path}`: must not contain '..'"
        )));
    }
    let p = Path::new(path);
    let fail = |what: &str| {
        Err(Error::Config(format!(
            "hostPath type check failed: {path} is not {what}"
        )))
    };
    let meta = || std::fs::metadata(p).ok();
    match kind.unwrap_or("") {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if !p.exists() {
                std::fs::create_dir_all(p).map_err(|e| Error::io(p, e))?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| Error::io(p, e))?;
            }
            check_host_path(path, Some("Directory"))
        }
        "Directory" if !meta().is_some_and(|m| m.is_dir()) => fail("a directory"),
        "FileOrCreate" => {
            if !p.exists() {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(p)
                    .map_err(|e| Error::io(p, e))?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| Error::io(p, e))?;
            }
            check_host_path(path, Some("File"))
        }
        "File" if meta().is_none_or(|m| m.is_dir()) => fail("a file"),
        "Socket" if !meta().is_some_and(|m| m.file_type().is_socket()) => fail("a socket file"),
        "CharDevice" if !meta().is_some_and(|m| m.file_type().is_char_device()) => {
            fail("a character device")
        }
        "BlockDevice" if !meta().is_some_and(|m| m.file_type().is_block_device()) => {
            fail("a block device")
        }
        "Directory" | "File" | "Socket" | "CharDevice" | "BlockDevice" => Ok(()),
        other => Err(Error::Config(format!("{other} is an invalid volume type"))),
    }
}

/// The size of a memory-backed emptyDir: the smallest of the node's memory, the pod's memory limit
/// (when every container has one) and the volume's `sizeLimit`, as the kubelet sizes it.
fn memory_volume_size(
    pod: &Pod,
    size_limit: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    node_memory: u64,
) -> u64 {
    let mut size = node_memory;
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[]);
    let limits: Option<Vec<i64>> = containers
        .iter()
        .map(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("memory"))
                .and_then(|q| keel_client_kit::quantity::value(&q.0))
        })
        .collect();
    for candidate in [
        limits
            .filter(|l| !l.is_empty())
            .map(|l| l.iter().sum::<i64>()),
        size_limit.and_then(|q| keel_client_kit::quantity::value(&q.0)),
    ]
    .into_iter()
    .flatten()
    {
        if let Ok(c) = u64::try_from(candidate) {
            if c > 0 && c <= size {
                size = c;
            }
        }
    }
    size
}

/// Whether `dir` is a mount point (its device differs from its parent's).
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Some(Ok(b))) = (std::fs::metadata(dir), dir.parent().map(std::fs::metadata)) else {
        return false;
    };
    a.dev() != b.dev()
}

/// Mounts a tmpfs of `size` bytes on `dir`.
fn mount_tmpfs(dir: &Path, size: u64) -> Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let target = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::Config(format!("{} is not a valid path", dir.display())))?;
    let (source, fstype) = (c"tmpfs", c"tmpfs");
    let data =
        CString::new(format!("size={size}")).map_err(|_| Error::Config("tmpfs options".into()))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(Error::io(dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The mount points under `dir` (from `/proc/self/mountinfo`), deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ").replace("\\134", "\\")))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// Unmounts what the agent mounted under every pod directory of `root` (a node's teardown, when pods
/// were removed without the agent); returns how many mounts went.
pub fn unmount_pods(root: &Path) -> usize {
    let dir = root.join("pods");
    let n = mounts_under(&dir).len();
    unmount_all(&dir);
    n
}

/// Unmounts what the agent mounted under a pod's directory (memory-backed emptyDirs).
fn unmount_all(dir: &Path) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    for m in mounts_under(dir) {
        let Ok(target) = CString::new(m.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            tracing::warn!(mount = %m.display(), error = %std::io::Error::last_os_error(), "volume not unmounted");
        }
    }
}

/// Removes the pod's directory (volumes, hosts file) once its containers are gone.
pub fn cleanup(root: &Path, uid: &str) {
    let dir = pod_dir(root, uid);
    // A tmpfs is unmounted first: removing the tree must not stop at a busy mount point.
    unmount_all(&dir);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "pod directory not removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn host_path_types_are_checked_as_the_kubelet_does() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("made/here");
        let d = dir.to_string_lossy().into_owned();
        check_host_path(&d, Some("DirectoryOrCreate")).unwrap();
        assert!(dir.is_dir());
        let e = check_host_path(&d, Some("File")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("hostPath type check failed: {d} is not a file")
        );
        let f = t.path().join("f").to_string_lossy().into_owned();
        check_host_path(&f, Some("FileOrCreate")).unwrap();
        assert!(check_host_path(&f, Some("Socket")).is_err());
        assert!(check_host_path("/a/../b", None).is_err());
        assert_eq!(
            check_host_path(&f, Some("Pipe")).unwrap_err().to_string(),
            "Pipe is an invalid volume type"
        );
    }

    #[test]
    fn memory_volumes_take_the_smallest_bound() {
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"memory": "256Mi"}}},
            {"name": "b", "resources": {"limits": {"memory": "256Mi"}}}]}}))
        .unwrap();
        let q = |s: &str| k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.into());
        assert_eq!(memory_volume_size(&pod, None, 8 << 30), 512 << 20);
        assert_eq!(
            memory_volume_size(&pod, Some(&q("64Mi")), 8 << 30),
            64 << 20
        );
        assert_eq!(
            memory_volume_size(&pod, Some(&q("1Gi")), 8 << 30),
            512 << 20
        );
        let open: Pod =
            serde_json::from_value(json!({"spec": {"containers": [{"name": "a"}]}})).unwrap();
        assert_eq!(memory_volume_size(&open, None, 1 << 30), 1 << 30);
    }
}
