//! The pod-wide parts of a security context that the agent turns into runtime settings: the seccomp
//! profile of the sandbox and of each container, the supplemental groups (the pod's, plus `fsGroup`),
//! and the `fsGroup` ownership of the volumes the agent makes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_cri::v1::security_profile::ProfileType;
use k8s_cri::v1::SecurityProfile;
use k8s_openapi::api::core::v1::{Pod, SeccompProfile};

use crate::error::{Error, Result};

/// How seccomp profiles are chosen on this node.
#[derive(Debug, Clone, Default)]
pub struct SeccompSettings {
    /// Where `Localhost` profiles live (`<root-dir>/seccomp`, as the kubelet's).
    pub profile_root: PathBuf,
    /// The profile of a pod that names none: the runtime's default with `--seccomp-default`,
    /// otherwise unconfined (the kubelet's default).
    pub runtime_default: bool,
}

impl SeccompSettings {
    /// The CRI profile for `profile` (a container's, else its pod's), or the node's default.
    pub fn profile(&self, profile: Option<&SeccompProfile>) -> Result<SecurityProfile> {
        let Some(p) = profile else {
            return Ok(self.default_profile());
        };
        match p.type_.as_str() {
            "RuntimeDefault" => Ok(SecurityProfile {
                profile_type: ProfileType::RuntimeDefault as i32,
                localhost_ref: String::new(),
            }),
            "Unconfined" => Ok(SecurityProfile {
                profile_type: ProfileType::Unconfined as i32,
                localhost_ref: String::new(),
            }),
            "Localhost" => {
                let rel = p.localhost_profile.as_deref().unwrap_or_default();
                if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
                    return Err(Error::Config(format!(
                        "invalid seccomp localhostProfile {rel:?}: a relative path under the node's seccomp directory"
                    )));
                }
                let path = self.profile_root.join(rel);
                if !path.is_file() {
                    return Err(Error::Config(format!(
                        "seccomp profile {} not found on the node",
                        path.display()
                    )));
                }
                Ok(SecurityProfile {
                    profile_type: ProfileType::Localhost as i32,
                    localhost_ref: path.display().to_string(),
                })
            }
            other => Err(Error::Config(format!(
                "unknown seccomp profile type {other:?}"
            ))),
        }
    }

    fn default_profile(&self) -> SecurityProfile {
        SecurityProfile {
            profile_type: if self.runtime_default {
                ProfileType::RuntimeDefault as i32
            } else {
                ProfileType::Unconfined as i32
            },
            localhost_ref: String::new(),
        }
    }

    /// The sandbox's profile: the pod's, or the default when the pod's cannot be used (the container
    /// that uses it then fails with the reason).
    pub fn sandbox_profile(&self, pod: &Pod) -> SecurityProfile {
        self.profile(pod_seccomp(pod))
            .unwrap_or_else(|_| self.default_profile())
    }
}

/// The pod-level seccomp profile.
pub fn pod_seccomp(pod: &Pod) -> Option<&SeccompProfile> {
    pod.spec
        .as_ref()?
        .security_context
        .as_ref()?
        .seccomp_profile
        .as_ref()
}

/// The pod's `fsGroup`.
pub fn fs_group(pod: &Pod) -> Option<i64> {
    pod.spec.as_ref()?.security_context.as_ref()?.fs_group
}

/// The groups every process of the pod gets besides its primary one: `supplementalGroups` and then
/// `fsGroup`, without repeats.
pub fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let mut groups: Vec<i64> = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(g) = fs_group(pod) {
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups
}

/// Whether `fsGroupChangePolicy: OnRootMismatch` lets a volume's ownership be: its root already belongs
/// to the group, with group read, write and search and the set-group-id bit.
pub fn fs_group_settled(pod: &Pod, dir: &Path, gid: i64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group_change_policy.as_deref());
    if policy != Some("OnRootMismatch") {
        return false;
    }
    let Ok(meta) = std::fs::metadata(dir) else {
        return false;
    };
    let wanted = 0o070 | 0o2000;
    meta.is_dir() && i64::from(meta.gid()) == gid && meta.mode() & wanted == wanted
}

/// Gives everything under `dir` to group `gid` as the kubelet does for `fsGroup`: group read (and
/// write, unless `read_only`) on files, plus search and set-group-id on directories, so files made
/// later inherit the group. (`fsGroupChangePolicy` has nothing to skip here: the agent's volumes are
/// new or freshly written when this runs.)
pub fn apply_fs_group(dir: &Path, gid: i64, read_only: bool) -> Result<()> {
    let gid = u32::try_from(gid)
        .map_err(|_| Error::Config(format!("fsGroup {gid} is not a valid group id")))?;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).map_err(|e| Error::io(&p, e))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        std::os::unix::fs::lchown(&p, None, Some(gid)).map_err(|e| Error::io(&p, e))?;
        let mut mode = meta.permissions().mode() & 0o7777;
        mode |= if read_only { 0o040 } else { 0o060 };
        if meta.is_dir() {
            mode |= 0o2010;
            for e in std::fs::read_dir(&p).map_err(|e| Error::io(&p, e))? {
                stack.push(e.map_err(|e| Error::io(&p, e))?.path());
            }
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(&p, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn profile(t: &str, local: Option<&str>) -> SeccompProfile {
        SeccompProfile {
            type_: t.into(),
            localhost_profile: local.map(String::from),
        }
    }

    #[test]
    fn profiles_map_to_cri_and_localhost_stays_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("audit.json"), "{}").unwrap();
        let s = SeccompSettings {
            profile_root: dir.path().to_path_buf(),
            runtime_default: false,
        };
        assert_eq!(
            s.profile(None).unwrap().profile_type,
            ProfileType::Unconfined as i32
        );
        let s2 = SeccompSettings {
            runtime_default: true,
            ..s.clone()
        };
        assert_eq!(
            s2.profile(None).unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
        let rd = s.profile(Some(&profile("RuntimeDefault", None))).unwrap();
        assert_eq!(rd.profile_type, ProfileType::RuntimeDefault as i32);
        let local = s
            .profile(Some(&profile("Localhost", Some("audit.json"))))
            .unwrap();
        assert_eq!(
            local.localhost_ref,
            dir.path().join("audit.json").display().to_string()
        );
        for bad in ["../etc/passwd", "/etc/passwd", "", "missing.json"] {
            assert!(
                s.profile(Some(&profile("Localhost", Some(bad)))).is_err(),
                "{bad}"
            );
        }
        assert!(s.profile(Some(&profile("Strict", None))).is_err());
    }

    #[test]
    fn fs_group_reaches_every_file_and_directory() {
        let dir = tempfile::tempdir().unwrap();
        let v = dir.path().join("v");
        std::fs::create_dir_all(v.join("sub")).unwrap();
        std::fs::write(v.join("sub/f"), "x").unwrap();
        std::fs::set_permissions(v.join("sub/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        // Our own group: changing to it needs no privilege.
        let gid = std::fs::metadata(dir.path()).unwrap().gid();
        apply_fs_group(&v, i64::from(gid), false).unwrap();
        let f = std::fs::metadata(v.join("sub/f")).unwrap();
        assert_eq!(f.mode() & 0o7777, 0o660);
        let d = std::fs::metadata(v.join("sub")).unwrap();
        assert_eq!(d.mode() & 0o2070, 0o2070);
        assert_eq!(d.gid(), gid);
        assert!(apply_fs_group(&v, -1, false).is_err());
    }
}
