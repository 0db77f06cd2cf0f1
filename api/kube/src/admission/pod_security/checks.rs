//! The Pod Security Standards' checks (pod-security-admission 1.32), each over a pod's metadata and spec as
//! JSON, with upstream's reasons and details. Baseline checks run first, then restricted ones, each group
//! in the order of its check ids (upstream's registry order).

use std::collections::BTreeSet;

use serde_json::Value;

/// A failed check: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

/// The Pod Security levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

type Check = fn(&Value, &Value) -> Option<Violation>;

/// Baseline checks, by id: appArmorProfile, capabilities_baseline, hostNamespaces, hostPathVolumes,
/// hostPorts, privileged, procMount, seLinuxOptions, seccompProfile_baseline, sysctls, windowsHostProcess.
const BASELINE: [(&str, Check); 11] = [
    ("appArmorProfile", app_armor),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("privileged", privileged),
    ("procMount", proc_mount),
    ("seLinuxOptions", se_linux),
    ("seccompProfile_baseline", seccomp_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
];

/// Restricted checks, by id, with the baseline check each one replaces.
const RESTRICTED: [(&str, Option<&str>, Check); 6] = [
    ("allowPrivilegeEscalation", None, allow_privilege_escalation),
    (
        "capabilities_restricted",
        Some("capabilities_baseline"),
        capabilities_restricted,
    ),
    (
        "restrictedVolumes",
        Some("hostPathVolumes"),
        restricted_volumes,
    ),
    ("runAsNonRoot", None, run_as_non_root),
    ("runAsUser", None, run_as_user),
    (
        "seccompProfile_restricted",
        Some("seccompProfile_baseline"),
        seccomp_restricted,
    ),
];

/// Every violation of `level` by a pod's `metadata` and `spec`, in upstream's order.
pub fn evaluate(level: Level, metadata: &Value, spec: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let overridden: Vec<&str> = if level == Level::Restricted {
        RESTRICTED.iter().filter_map(|(_, o, _)| *o).collect()
    } else {
        Vec::new()
    };
    for (id, check) in BASELINE {
        if !overridden.contains(&id) {
            out.extend(check(metadata, spec));
        }
    }
    if level == Level::Restricted {
        for (_, _, check) in RESTRICTED {
            out.extend(check(metadata, spec));
        }
    }
    out
}

/// Upstream's `ForbiddenDetail` of all violations: `reason (detail), reason (detail)`.
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

fn plural(singular: &'static str, plural: &'static str, n: usize) -> &'static str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// Init, regular and ephemeral containers, in that order.
fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| spec.get(*f).and_then(Value::as_array).into_iter().flatten())
        .collect()
}

fn name(c: &Value) -> String {
    c.get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn sc<'a>(v: &'a Value, field: &str) -> Option<&'a Value> {
    v.get("securityContext")
        .and_then(|s| s.get(field))
        .filter(|x| !x.is_null())
}

fn pod_sc<'a>(spec: &'a Value, field: &str) -> Option<&'a Value> {
    sc(spec, field)
}

fn is_windows(spec: &Value) -> bool {
    spec.get("os")
        .and_then(|o| o.get("name"))
        .and_then(Value::as_str)
        == Some("windows")
}

fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quote(names)
    )
}

fn violation(reason: &str, detail: String) -> Option<Violation> {
    Some(Violation {
        reason: reason.to_string(),
        detail,
    })
}

fn privileged(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| sc(c, "privileged").and_then(Value::as_bool) == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn host_namespaces(_: &Value, spec: &Value) -> Option<Violation> {
    let set: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(f, _)| spec.get(*f).and_then(Value::as_bool) == Some(true))
    .map(|(_, t)| t)
    .collect();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

fn volumes(spec: &Value) -> Vec<&Value> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect()
}

fn host_path_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = volumes(spec)
        .into_iter()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    )
}

fn host_ports(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let hp = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if hp != 0 {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(name(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            plural("uses", "use", bad.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn caps<'a>(c: &'a Value, field: &str) -> Vec<&'a str> {
    sc(c, "capabilities")
        .and_then(|k| k.get(field))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn capabilities_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut found = BTreeSet::new();
    for c in containers(spec) {
        let extra: Vec<&str> = caps(c, "add")
            .into_iter()
            .filter(|k| !BASELINE_CAPABILITIES.contains(k))
            .collect();
        if !extra.is_empty() {
            bad.push(name(c));
            found.extend(extra.into_iter().map(str::to_string));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let found: Vec<String> = found.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&found)
        ),
    )
}

fn capabilities_restricted(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut found = BTreeSet::new();
    for c in containers(spec) {
        if sc(c, "capabilities").is_none() {
            missing_drop.push(name(c));
            continue;
        }
        if !caps(c, "drop").contains(&"ALL") {
            missing_drop.push(name(c));
        }
        let extra: Vec<&str> = caps(c, "add")
            .into_iter()
            .filter(|k| *k != "NET_BIND_SERVICE")
            .collect();
        if !extra.is_empty() {
            adding.push(name(c));
            found.extend(extra.into_iter().map(str::to_string));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let found: Vec<String> = found.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&found)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// `pod`, `container "a"` ... joined with " and ", from a pod-level flag and the containers.
fn setters(pod: bool, bad: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !bad.is_empty() {
        out.push(containers_phrase(bad));
    }
    out
}

fn app_armor(metadata: &Value, spec: &Value) -> Option<Violation> {
    let allowed = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut values = BTreeSet::new();
    let mut pod_bad = false;
    if let Some(t) = pod_sc(spec, "appArmorProfile")
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
    {
        if !allowed(t) {
            pod_bad = true;
            values.insert(t.to_string());
        }
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(t) = sc(c, "appArmorProfile")
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
        {
            if !allowed(t) {
                bad.push(name(c));
                values.insert(t.to_string());
            }
        }
    }
    let mut who = setters(pod_bad, &bad);
    let mut list: Vec<String> = values.into_iter().collect();
    let mut annotations: Vec<String> = metadata
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("container.apparmor.security.beta.kubernetes.io/"))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or("");
            let ok = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!ok).then(|| format!("{k}={v:?}"))
        })
        .collect();
    if !annotations.is_empty() {
        annotations.sort();
        who.push(plural("annotation", "annotations", annotations.len()).to_string());
        list.extend(annotations);
    }
    if who.is_empty() {
        return None;
    }
    violation(
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            list.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            who.join(" and "),
            join_quote(&list)
        ),
    )
}

fn proc_mount(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut kinds = BTreeSet::new();
    for c in containers(spec) {
        if let Some(p) = sc(c, "procMount").and_then(Value::as_str) {
            if p != "Default" {
                bad.push(name(c));
                kinds.insert(p.to_string());
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    let kinds: Vec<String> = kinds.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&kinds)
        ),
    )
}

fn se_linux(_: &Value, spec: &Value) -> Option<Violation> {
    const TYPES: [&str; 5] = [
        "",
        "container_t",
        "container_init_t",
        "container_kvm_t",
        "container_engine_t",
    ];
    let mut types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |o: &Value| {
        let mut ok = true;
        let t = o.get("type").and_then(Value::as_str).unwrap_or("");
        if !TYPES.contains(&t) {
            ok = false;
            types.insert(t.to_string());
        }
        if o.get("user")
            .and_then(Value::as_str)
            .is_some_and(|u| !u.is_empty())
        {
            ok = false;
            user = true;
        }
        if o.get("role")
            .and_then(Value::as_str)
            .is_some_and(|r| !r.is_empty())
        {
            ok = false;
            role = true;
        }
        ok
    };
    let pod_bad = pod_sc(spec, "seLinuxOptions").is_some_and(|o| !valid(o));
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| sc(c, "seLinuxOptions").is_some_and(|o| !valid(o)))
        .map(name)
        .collect();
    let who = setters(pod_bad, &bad);
    if who.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        data.push(format!(
            "{} {}",
            plural("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            who.join(" and "),
            data.join("; ")
        ),
    )
}

fn seccomp_type(v: &Value) -> Option<&str> {
    sc(v, "seccompProfile")
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
}

fn valid_seccomp(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

/// The explicit bad settings of seccomp (pod and containers), and the containers that set none.
fn seccomp_setters(spec: &Value) -> (Vec<String>, BTreeSet<String>, bool, Vec<String>) {
    let mut values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(t) = seccomp_type(spec) {
        if valid_seccomp(t) {
            pod_set = true;
        } else {
            pod_bad = true;
            values.insert(t.to_string());
        }
    }
    let mut bad = Vec::new();
    let mut unset = Vec::new();
    for c in containers(spec) {
        match seccomp_type(c) {
            Some(t) if !valid_seccomp(t) => {
                bad.push(name(c));
                values.insert(t.to_string());
            }
            Some(_) => {}
            None if !pod_set => unset.push(name(c)),
            None => {}
        }
    }
    (setters(pod_bad, &bad), values, pod_set, unset)
}

fn seccomp_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    let (who, values, _, _) = seccomp_setters(spec);
    if who.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            who.join(" and "),
            join_quote(&values)
        ),
    )
}

fn seccomp_restricted(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let (who, values, _, unset) = seccomp_setters(spec);
    if !who.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                who.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if unset.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&unset)
        ),
    )
}

const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

fn sysctls(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<&str> = pod_sc(spec, "sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(_: &Value, spec: &Value) -> Option<Violation> {
    let host = |v: &Value| {
        sc(v, "windowsOptions")
            .and_then(|w| w.get("hostProcess"))
            .and_then(Value::as_bool)
            == Some(true)
    };
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| host(c))
        .map(name)
        .collect();
    let who = setters(host(spec), &bad);
    if who.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            who.join(" and ")
        ),
    )
}

fn allow_privilege_escalation(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| sc(c, "allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

const RESTRICTED_VOLUME_OK: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
const VOLUME_TYPES: [&str; 21] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut kinds = BTreeSet::new();
    for v in volumes(spec) {
        let has = |f: &str| v.get(f).is_some_and(|x| !x.is_null());
        if RESTRICTED_VOLUME_OK.iter().any(|f| has(f)) {
            continue;
        }
        bad.push(name(v));
        kinds.insert(
            VOLUME_TYPES
                .iter()
                .find(|f| has(f))
                .copied()
                .unwrap_or("unknown")
                .to_string(),
        );
    }
    if bad.is_empty() {
        return None;
    }
    let kinds: Vec<String> = kinds.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad),
            plural("uses", "use", bad.len()),
            plural(
                "restricted volume type",
                "restricted volume types",
                kinds.len()
            ),
            join_quote(&kinds)
        ),
    )
}

fn run_as_non_root(_: &Value, spec: &Value) -> Option<Violation> {
    let mut pod_bad = false;
    let mut pod_ok = false;
    match pod_sc(spec, "runAsNonRoot").and_then(Value::as_bool) {
        Some(false) => pod_bad = true,
        Some(true) => pod_ok = true,
        None => {}
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match sc(c, "runAsNonRoot").and_then(Value::as_bool) {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_ok => implicit.push(name(c)),
            None => {}
        }
    }
    let who = setters(pod_bad, &explicit);
    if !who.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                who.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

fn run_as_user(_: &Value, spec: &Value) -> Option<Violation> {
    let zero = |v: &Value| sc(v, "runAsUser").and_then(Value::as_i64) == Some(0);
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| zero(c))
        .map(name)
        .collect();
    let who = setters(zero(spec), &bad);
    if who.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", who.join(" and ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_privileged_pod_against_each_level() {
        let spec = json!({"hostNetwork": true, "containers": [
            {"name": "a", "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}},
            {"name": "b", "ports": [{"containerPort": 80, "hostPort": 8080}]}
        ], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]});
        let meta = json!({});
        assert!(evaluate(Level::Privileged, &meta, &spec).is_empty());
        assert_eq!(
            describe(&evaluate(Level::Baseline, &meta, &spec)),
            "non-default capabilities (container \"a\" must not include \"NET_ADMIN\" in securityContext.capabilities.add), \
             host namespaces (hostNetwork=true), hostPath volumes (volume \"h\"), hostPort (container \"b\" uses hostPort 8080), \
             privileged (container \"a\" must not set securityContext.privileged=true)"
        );
        assert_eq!(
            describe(&evaluate(Level::Restricted, &meta, &json!({"containers": [{"name": "c"}]}))),
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        let good = json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [{"name": "t", "projected": {"sources": []}}]});
        assert!(evaluate(Level::Restricted, &meta, &good).is_empty());
    }
}
