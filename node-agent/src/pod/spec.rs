//! The CRI configurations of a pod: its sandbox (metadata, hostname, log directory, DNS, host ports,
//! namespaces, cgroup parent, labels) and each container (image, command and args with `$(VAR)`
//! expanded, env, working dir, mounts, log path, resources, security context, labels and annotations
//! that let a restarted agent recognise it).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use k8s_cri::v1::{
    Capability, ContainerConfig, ContainerMetadata, DnsConfig, Int64Value, KeyValue,
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, Mount, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, PortMapping, Protocol,
};
use k8s_openapi::api::core::v1::{Container, Pod, SeccompProfile};

use super::env;
use super::resources;
use super::security::{self, SeccompSettings};
use super::volumes::HostPaths;
use crate::cri::{image_spec, labels};
use crate::error::{Error, Result};

/// The pod's log directory: `<log_root>/<ns>_<name>_<uid>`.
pub fn log_dir(log_root: &Path, pod: &Pod) -> PathBuf {
    log_root.join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    ))
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    l.insert(
        labels::POD_NAME.into(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    l.insert(
        labels::POD_NAMESPACE.into(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    l.insert(
        labels::POD_UID.into(),
        pod.metadata.uid.clone().unwrap_or_default(),
    );
    l.insert(labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into());
    l
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The sandbox configuration of `pod` (attempt `attempt`).
pub fn sandbox(
    pod: &Pod,
    attempt: u32,
    log_root: &Path,
    dns: &DnsSettings,
    seccomp: &SeccompSettings,
) -> PodSandboxConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let hostname = if host_network(pod) {
        String::new()
    } else {
        spec.hostname
            .clone()
            .unwrap_or_else(|| name.chars().take(63).collect())
    };
    let ports = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => Protocol::Udp as i32,
                Some("SCTP") => Protocol::Sctp as i32,
                _ => Protocol::Tcp as i32,
            },
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let ns_mode = |host: Option<bool>| {
        if host.unwrap_or(false) {
            NamespaceMode::Node as i32
        } else {
            NamespaceMode::Pod as i32
        }
    };
    let sc = spec.security_context.clone().unwrap_or_default();
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname,
        log_directory: log_dir(log_root, pod).display().to_string(),
        dns_config: dns.config(pod),
        port_mappings: ports,
        labels: pod_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: resources::cgroup_parent(pod),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: ns_mode(spec.host_network),
                    pid: if spec.host_pid.unwrap_or(false) {
                        NamespaceMode::Node as i32
                    } else if spec.share_process_namespace.unwrap_or(false) {
                        NamespaceMode::Pod as i32
                    } else {
                        NamespaceMode::Container as i32
                    },
                    ipc: ns_mode(spec.host_ipc),
                    ..Default::default()
                }),
                run_as_user: sc.run_as_user.map(|v| Int64Value { value: v }),
                run_as_group: sc.run_as_group.map(|v| Int64Value { value: v }),
                supplemental_groups: security::supplemental_groups(pod),
                seccomp: Some(seccomp.sandbox_profile(pod)),
                ..Default::default()
            }),
            sysctls: sc
                .sysctls
                .iter()
                .flatten()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect(),
            ..Default::default()
        }),
        windows: None,
    }
}

/// Cluster DNS as the pods of this node see it.
#[derive(Debug, Clone, Default)]
pub struct DnsSettings {
    /// The cluster DNS Service's IP (`--cluster-dns`); none = the host's resolver.
    pub cluster_dns: Vec<String>,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
}

impl DnsSettings {
    /// The pod's DNS config under its dnsPolicy: ClusterFirst (the default) uses the cluster DNS with
    /// the namespace's search path and ndots:5 when one is configured, otherwise, like Default, the host's.
    pub fn config(&self, pod: &Pod) -> Option<DnsConfig> {
        let spec = pod.spec.as_ref()?;
        let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
        let cluster = match policy {
            "ClusterFirst" => !host_network(pod),
            "ClusterFirstWithHostNet" => true,
            _ => false,
        };
        let mut cfg = if cluster && !self.cluster_dns.is_empty() {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let d = &self.domain;
            DnsConfig {
                servers: self.cluster_dns.clone(),
                searches: vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()],
                options: vec!["ndots:5".into()],
            }
        } else if policy == "None" {
            DnsConfig::default()
        } else {
            return spec.dns_config.as_ref().map(|c| DnsConfig {
                servers: c.nameservers.clone().unwrap_or_default(),
                searches: c.searches.clone().unwrap_or_default(),
                options: vec![],
            });
        };
        if let Some(c) = &spec.dns_config {
            cfg.servers
                .extend(c.nameservers.clone().unwrap_or_default());
            cfg.searches.extend(c.searches.clone().unwrap_or_default());
            for o in c.options.iter().flatten() {
                cfg.options.push(match &o.value {
                    Some(v) => format!("{}:{v}", o.name.clone().unwrap_or_default()),
                    None => o.name.clone().unwrap_or_default(),
                });
            }
        }
        Some(cfg)
    }
}

/// A hash of the container's spec, to notice that it changed.
pub fn container_hash(c: &Container) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(c).unwrap_or_default().hash(&mut h);
    format!("{:x}", h.finish())
}

/// What building one container needs besides the pod.
pub struct ContainerInputs<'a> {
    /// The container.
    pub container: &'a Container,
    /// `init` or `regular`.
    pub kind: &'a str,
    /// Its restart count (the CRI attempt).
    pub restart_count: u32,
    /// The environment, resolved.
    pub env: Vec<(String, String)>,
    /// The pod's volumes on the host.
    pub volumes: &'a HostPaths,
    /// The pod's `/etc/hosts`.
    pub hosts_file: Option<PathBuf>,
    /// The host file the container's termination message goes to.
    pub termination_log: Option<PathBuf>,
    /// How seccomp profiles are chosen on this node.
    pub seccomp: &'a SeccompSettings,
}

/// Where in the container its termination message is written (`/dev/termination-log` by default).
pub fn termination_message_path(c: &Container) -> String {
    c.termination_message_path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/dev/termination-log".into())
}

/// A `subPathExpr` with its `$(VAR)` references replaced from the container's environment (`$$`
/// escapes a `$`); a reference to a variable that is missing or empty fails, as the kubelet's does.
pub fn expand_sub_path(expr: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::new();
    let mut missing: Vec<String> = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match vars.get(name).filter(|v| !v.is_empty()) {
                Some(v) => out.push_str(v),
                None => {
                    if !missing.iter().any(|m| m == name) {
                        missing.push(name.to_string());
                    }
                }
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if !missing.is_empty() {
        missing.sort();
        return Err(Error::Config(format!(
            "missing value for {}",
            missing.join(", ")
        )));
    }
    Ok(out)
}

/// The host directory of a volume's `subPath`: made (with the volume root's mode) when missing, and
/// refused when it leaves the volume, through `..` or through a symlink a container planted.
fn sub_path(root: &std::path::Path, sp: &str, volume: &str, container: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if sp.starts_with('/') {
        return Err(Error::Config(format!(
            "error SubPath `{sp}` must not be an absolute path"
        )));
    }
    if sp.split('/').any(|x| x == "..") {
        return Err(Error::Config(format!(
            "unable to provision SubPath `{sp}`: must not contain '..'"
        )));
    }
    let p = root.join(sp);
    let failed = |what: &str| {
        Error::Config(format!(
            "failed to {what} subPath directory for volumeMount {volume:?} of container {container:?}"
        ))
    };
    if std::fs::symlink_metadata(&p).is_err() {
        std::fs::create_dir_all(&p).map_err(|_| failed("create"))?;
        if let Ok(m) = std::fs::metadata(root) {
            let _ = std::fs::set_permissions(
                &p,
                std::fs::Permissions::from_mode(m.permissions().mode() & 0o7777),
            );
        }
    }
    let (Ok(real_root), Ok(real)) = (root.canonicalize(), p.canonicalize()) else {
        return Err(failed("prepare"));
    };
    if !real.starts_with(&real_root) {
        return Err(failed("prepare"));
    }
    Ok(real)
}

/// The container configuration.
pub fn container(pod: &Pod, i: ContainerInputs<'_>) -> Result<ContainerConfig> {
    let c = i.container;
    let vars: BTreeMap<String, String> = i.env.iter().cloned().collect();
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let vol = i.volumes.get(&m.name).ok_or_else(|| {
            Error::Config(format!(
                "cannot find volume {:?} to mount into container {:?}",
                m.name, c.name
            ))
        })?;
        let sub = match (&m.sub_path, &m.sub_path_expr) {
            (Some(sp), _) if !sp.is_empty() => Some(sp.clone()),
            (_, Some(expr)) if !expr.is_empty() => Some(expand_sub_path(expr, &vars)?),
            _ => None,
        };
        let host = match sub {
            Some(sp) => sub_path(&vol.path, &sp, &m.name, &c.name)?,
            None => vol.path.clone(),
        };
        mounts.push(Mount {
            container_path: m.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: vol.read_only || m.read_only.unwrap_or(false),
            ..Default::default()
        });
    }
    let has_mount = |mounts: &Vec<Mount>, p: &str| mounts.iter().any(|m| m.container_path == p);
    if let Some(h) = &i.hosts_file {
        if !has_mount(&mounts, "/etc/hosts") && !host_network(pod) {
            mounts.push(Mount {
                container_path: "/etc/hosts".into(),
                host_path: h.display().to_string(),
                ..Default::default()
            });
        }
    }
    if let Some(t) = &i.termination_log {
        let path = termination_message_path(c);
        if !has_mount(&mounts, &path) {
            mounts.push(Mount {
                container_path: path,
                host_path: t.display().to_string(),
                ..Default::default()
            });
        }
    }
    let sc = c.security_context.clone().unwrap_or_default();
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let caps = sc.capabilities.clone().unwrap_or_default();
    // A privileged container runs unconfined, whatever profile it names (as the kubelet does).
    let seccomp = if sc.privileged.unwrap_or(false) {
        i.seccomp.profile(Some(&SeccompProfile {
            type_: "Unconfined".into(),
            localhost_profile: None,
        }))?
    } else {
        i.seccomp
            .profile(sc.seccomp_profile.as_ref().or(security::pod_seccomp(pod)))?
    };
    let labels_map: HashMap<String, String> = HashMap::from([
        (
            labels::POD_NAME.to_string(),
            pod.metadata.name.clone().unwrap_or_default(),
        ),
        (
            labels::POD_NAMESPACE.to_string(),
            pod.metadata.namespace.clone().unwrap_or_default(),
        ),
        (
            labels::POD_UID.to_string(),
            pod.metadata.uid.clone().unwrap_or_default(),
        ),
        (labels::CONTAINER_NAME.to_string(), c.name.clone()),
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_VALUE.to_string(),
        ),
    ]);
    let grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    let annotations = HashMap::from([
        (
            labels::RESTART_COUNT.to_string(),
            i.restart_count.to_string(),
        ),
        (labels::CONTAINER_HASH.to_string(), container_hash(c)),
        (labels::GRACE_PERIOD.to_string(), grace.to_string()),
        (labels::CONTAINER_TYPE.to_string(), i.kind.to_string()),
        (
            labels::TERMINATION_MESSAGE_PATH.to_string(),
            termination_message_path(c),
        ),
        (
            labels::TERMINATION_MESSAGE_POLICY.to_string(),
            c.termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".into()),
        ),
    ]);
    let expand = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|s| env::expand(s, &vars)).collect()
    };
    Ok(ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: c.name.clone(),
            attempt: i.restart_count,
        }),
        image: Some(image_spec(c.image.as_deref().unwrap_or_default())),
        command: expand(&c.command),
        args: expand(&c.args),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: i
            .env
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        mounts,
        labels: labels_map,
        annotations,
        log_path: format!("{}/{}.log", c.name, i.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: Some(resources::linux(c)),
            security_context: Some(LinuxContainerSecurityContext {
                capabilities: Some(Capability {
                    add_capabilities: caps.add.clone().unwrap_or_default(),
                    drop_capabilities: caps.drop.clone().unwrap_or_default(),
                    ..Default::default()
                }),
                privileged: sc.privileged.unwrap_or(false),
                run_as_user: sc
                    .run_as_user
                    .or(psc.run_as_user)
                    .map(|v| Int64Value { value: v }),
                run_as_group: sc
                    .run_as_group
                    .or(psc.run_as_group)
                    .map(|v| Int64Value { value: v }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: security::supplemental_groups(pod),
                seccomp: Some(seccomp),
                no_new_privs: sc.allow_privilege_escalation == Some(false),
                namespace_options: Some(NamespaceOption {
                    network: if host_network(pod) {
                        NamespaceMode::Node as i32
                    } else {
                        NamespaceMode::Pod as i32
                    },
                    pid: if pod.spec.as_ref().and_then(|s| s.host_pid).unwrap_or(false) {
                        NamespaceMode::Node as i32
                    } else if pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.share_process_namespace)
                        .unwrap_or(false)
                    {
                        NamespaceMode::Pod as i32
                    } else {
                        NamespaceMode::Container as i32
                    },
                    ipc: if pod.spec.as_ref().and_then(|s| s.host_ipc).unwrap_or(false) {
                        NamespaceMode::Node as i32
                    } else {
                        NamespaceMode::Pod as i32
                    },
                    ..Default::default()
                }),
                masked_paths: if sc.privileged.unwrap_or(false) {
                    vec![]
                } else {
                    default_masked()
                },
                readonly_paths: if sc.privileged.unwrap_or(false) {
                    vec![]
                } else {
                    default_readonly()
                },
                ..Default::default()
            }),
        }),
        windows: None,
        cdi_devices: vec![],
        devices: vec![],
    })
}

fn default_masked() -> Vec<String> {
    [
        "/proc/acpi",
        "/proc/kcore",
        "/proc/keys",
        "/proc/latency_stats",
        "/proc/timer_list",
        "/proc/timer_stats",
        "/proc/sched_debug",
        "/proc/scsi",
        "/sys/firmware",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn default_readonly() -> Vec<String> {
    [
        "/proc/asound",
        "/proc/bus",
        "/proc/fs",
        "/proc/irq",
        "/proc/sys",
        "/proc/sysrq-trigger",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The pod's `/etc/hosts`: localhost, and the pod's own name at its IP.
pub fn hosts_file(pod: &Pod, ip: &str) -> String {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let host = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or(name);
    let mut s = String::from("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if !ip.is_empty() {
        s.push_str(&format!("{ip}\t{host}\n"));
    }
    for a in pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.clone())
        .unwrap_or_default()
    {
        if !a.ip.is_empty() {
            s.push_str(&format!(
                "{}\t{}\n",
                a.ip,
                a.hostnames.unwrap_or_default().join("\t")
            ));
        }
    }
    s
}

#[cfg(test)]
mod sub_path_tests {
    use super::*;

    #[test]
    fn sub_path_expressions_expand_from_the_environment() {
        let vars: BTreeMap<String, String> = [
            ("POD".to_string(), "web-0".to_string()),
            ("E".to_string(), String::new()),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            expand_sub_path("logs/$(POD)/x$$y", &vars).unwrap(),
            "logs/web-0/x$y"
        );
        let e = expand_sub_path("$(NOPE)/$(E)/$(A)", &vars).unwrap_err();
        assert_eq!(e.to_string(), "missing value for A, E, NOPE");
    }

    #[test]
    fn sub_paths_stay_inside_their_volume() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("vol");
        std::fs::create_dir(&root).unwrap();
        let made = sub_path(&root, "a/b", "data", "c").unwrap();
        assert!(made.is_dir() && made.ends_with("a/b"));
        std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
        let e = sub_path(&root, "escape", "data", "c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to prepare subPath directory for volumeMount \"data\" of container \"c\""
        );
        assert!(sub_path(&root, "/abs", "data", "c").is_err());
        assert!(sub_path(&root, "x/../..", "data", "c").is_err());
    }
}
