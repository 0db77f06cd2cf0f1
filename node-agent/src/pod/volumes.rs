//! A pod's volumes on this node, under `<root>/pods/<uid>/volumes/<plugin>/<name>`: emptyDir
//! directories, configMap, secret, downwardAPI and projected files (service-account tokens included, see
//! `token`) written from the API (atomically:
//! a new tree is written beside the old one and swapped in), hostPath directories taken as they are.
//! Mounts then bind them into containers at each `volumeMounts[].mountPath`.

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

/// Where each of a pod's volumes is on the host, by volume name.
pub type HostPaths = BTreeMap<String, PathBuf>;

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
            let p = PathBuf::from(&h.path);
            match h.type_.as_deref() {
                Some("DirectoryOrCreate") => {
                    std::fs::create_dir_all(&p).map_err(|e| Error::io(&p, e))?;
                }
                Some("Directory") if !p.is_dir() => {
                    return Err(Error::Config(format!(
                        "hostPath type check failed: {} is not a directory",
                        h.path
                    )))
                }
                Some("File") if !p.is_file() => {
                    return Err(Error::Config(format!(
                        "hostPath type check failed: {} is not a file",
                        h.path
                    )))
                }
                _ => {}
            }
            out.insert(v.name.clone(), p);
            continue;
        }
        let dir = base.join(plugin(v)).join(&v.name);
        if v.empty_dir.is_some() {
            let fresh = !dir.exists();
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| Error::io(&dir, e))?;
            // Set up once, as the kubelet mounts it once: what the containers write stays theirs.
            if let (true, Some(g)) = (fresh, security::fs_group(pod)) {
                security::apply_fs_group(&dir, g, false)?;
            }
            out.insert(v.name.clone(), dir);
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
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
}

/// Removes the pod's directory (volumes, hosts file) once its containers are gone.
pub fn cleanup(root: &Path, uid: &str) {
    let dir = pod_dir(root, uid);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "pod directory not removed");
        }
    }
}
