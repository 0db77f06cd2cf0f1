//! PersistentVolumes and PersistentVolumeClaims (core/v1), with upstream 1.32's defaults, validation
//! (`ValidatePersistentVolume`, `ValidatePersistentVolumeClaimSpec`) and update rules: a volume's
//! source, mode and node affinity are fixed once set; a claim's spec is fixed except its storage
//! request once Bound, a class given to a claim that had none, and a `volumeName` set once. A volume's
//! status keeps `lastPhaseTransitionTime` as the phase changes. Both answer a DELETE with the object.

use keel_client_kit::quantity::Quantity;
use serde_json::{json, Value};

use super::{Status, Strategy, Subresource};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::names::{self, NameRule};

pub(super) struct PersistentVolume;
pub(super) struct PersistentVolumeClaim;

/// The access modes, sorted as upstream lists them in its message.
pub(super) const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const RECLAIM_POLICIES: &[&str] = &["Delete", "Recycle", "Retain"];
const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];
/// The volume sources, in the order upstream checks them (the first one set is the source).
const SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];
/// Sources that take mount options (the legacy annotation is refused for the others).
const MOUNTABLE_WITH_OPTIONS: &[&str] = &[
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "nfs",
    "rbd",
    "quobyte",
    "iscsi",
    "cinder",
    "cephfs",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
];
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const MOUNT_OPTIONS: &str = "volume.beta.kubernetes.io/mount-options";
const BETA_CLASS_WARNING: &str =
    "deprecated since v1.8; use \"storageClassName\" attribute instead";
const CLAIM_SPEC_IMMUTABLE: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

use super::{list_at as list, str_at as s};

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    path(obj, "metadata.annotations").and_then(|a| a.get(key))
}

/// The access modes: at least one (`empty` is the Required cause's detail), each known, and
/// ReadWriteOncePod alone.
pub(super) fn check_access_modes(
    spec: &Value,
    at: &str,
    empty: Option<&str>,
    causes: &mut Vec<Cause>,
) {
    let field = format!("{at}.accessModes");
    let modes = list(spec, "accessModes");
    if modes.is_empty() {
        causes.push(match empty {
            Some(d) => Cause::required_because(&field, d),
            None => Cause::required(&field),
        });
    }
    let mut rwop = false;
    let mut others = false;
    for m in modes {
        match m.as_str() {
            Some("ReadWriteOncePod") => rwop = true,
            Some(x) if ACCESS_MODES.contains(&x) => others = true,
            _ => causes.push(Cause::not_supported(&field, m, ACCESS_MODES)),
        }
    }
    if rwop && others {
        causes.push(Cause::forbidden(
            &field,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

/// A quantity that must parse and be positive.
fn check_positive_quantity(field: &str, v: &Value, causes: &mut Vec<Cause>) {
    let text = v
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string());
    match Quantity::parse(&text) {
        None => causes.push(Cause::invalid(
            field,
            v,
            "must be a valid resource quantity",
        )),
        Some(q) if q.is_negative() || q.is_zero() => causes.push(Cause::invalid(
            field,
            &json!(text),
            "must be greater than zero",
        )),
        Some(_) => {}
    }
}

/// One selector requirement's operator and values at `f`; `Gt` and `Lt` only in node selectors.
pub(super) fn check_requirement(r: &Value, f: &str, node: bool, causes: &mut Vec<Cause>) {
    let values = list(r, "values");
    let op = s(r, "operator").unwrap_or("");
    match op {
        "In" | "NotIn" if values.is_empty() => causes.push(Cause::required_because(
            &format!("{f}.values"),
            "must be specified when `operator` is 'In' or 'NotIn'",
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(Cause::forbidden(
            &format!("{f}.values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        "Gt" | "Lt" if node && values.len() != 1 => causes.push(Cause::required_because(
            &format!("{f}.values"),
            "must be specified single value when `operator` is 'Lt' or 'Gt'",
        )),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
        "Gt" | "Lt" if node => {}
        _ => causes.push(Cause::invalid(
            &format!("{f}.operator"),
            &json!(op),
            "not a valid selector operator",
        )),
    }
}

/// A node selector's terms (a volume's node affinity): operators, values and keys as upstream checks.
fn check_node_selector(sel: &Value, at: &str, causes: &mut Vec<Cause>) {
    let terms_at = format!("{at}.nodeSelectorTerms");
    let terms = list(sel, "nodeSelectorTerms");
    if terms.is_empty() {
        causes.push(Cause::required_because(
            &terms_at,
            "must have at least one node selector term",
        ));
    }
    for (i, t) in terms.iter().enumerate() {
        for (j, r) in list(t, "matchExpressions").iter().enumerate() {
            let f = format!("{terms_at}[{i}].matchExpressions[{j}]");
            check_requirement(r, &f, true, causes);
            let key = s(r, "key").unwrap_or("");
            if let Err(e) = names::check_qualified_name(key) {
                causes.push(Cause::invalid(&format!("{f}.key"), &json!(key), &e));
            }
        }
        for (j, r) in list(t, "matchFields").iter().enumerate() {
            let f = format!("{terms_at}[{i}].matchFields[{j}]");
            let op = s(r, "operator").unwrap_or("");
            match op {
                "In" | "NotIn" if list(r, "values").len() != 1 => causes.push(Cause::required_because(
                    &format!("{f}.values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )),
                "In" | "NotIn" => {}
                _ => causes.push(Cause::invalid(
                    &format!("{f}.operator"),
                    &json!(op),
                    "not a valid selector operator",
                )),
            }
            let key = s(r, "key").unwrap_or("");
            if key != "metadata.name" {
                causes.push(Cause::invalid(
                    &format!("{f}.key"),
                    &json!(key),
                    "not a valid field selector key",
                ));
            }
        }
    }
}

/// A path that may not walk up (`..` as one of its elements).
fn check_no_dot_dot(field: &str, p: &str, causes: &mut Vec<Cause>) {
    if p.split('/').any(|e| e == "..") {
        causes.push(Cause::invalid(field, &json!(p), "must not contain '..'"));
    }
}

fn check_class_name(field: &str, v: Option<&str>, causes: &mut Vec<Cause>) {
    if let Some(c) = v.filter(|c| !c.is_empty()) {
        if let Err(e) = names::check(NameRule::Subdomain, c) {
            causes.push(Cause::invalid(field, &json!(c), &e));
        }
    }
}

fn check_volume_mode(field: &str, spec: &Value, causes: &mut Vec<Cause>) {
    if let Some(m) = spec.get("volumeMode").filter(|v| !v.is_null()) {
        if !m.as_str().is_some_and(|m| VOLUME_MODES.contains(&m)) {
            causes.push(Cause::not_supported(field, m, VOLUME_MODES));
        }
    }
}

/// The one source of a volume: which it is, after checking it.
fn check_source(spec: &Value, causes: &mut Vec<Cause>) -> Option<&'static str> {
    let mut found: Option<&'static str> = None;
    for name in SOURCES {
        if spec.get(*name).is_none_or(Value::is_null) {
            continue;
        }
        if found.is_some() && *name != "flexVolume" {
            causes.push(Cause::forbidden(
                &format!("spec.{name}"),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        found = found.or(Some(name));
        let src = &spec[*name];
        let at = format!("spec.{name}");
        match *name {
            "hostPath" => match s(src, "path").filter(|p| !p.is_empty()) {
                None => causes.push(Cause::required(&format!("{at}.path"))),
                Some(p) => {
                    check_no_dot_dot(&format!("{at}.path"), p, causes);
                    if let Some(t) = src.get("type").filter(|v| !v.is_null()) {
                        if !t.as_str().is_some_and(|t| HOST_PATH_TYPES.contains(&t)) {
                            causes.push(Cause::not_supported(
                                &format!("{at}.type"),
                                t,
                                HOST_PATH_TYPES,
                            ));
                        }
                    }
                }
            },
            "local" => {
                match s(src, "path").filter(|p| !p.is_empty()) {
                    None => causes.push(Cause::required(&format!("{at}.path"))),
                    Some(p) => check_no_dot_dot(&format!("{at}.path"), p, causes),
                }
                if spec.get("nodeAffinity").is_none_or(Value::is_null) {
                    causes.push(Cause::required_because(
                        "spec.nodeAffinity",
                        "Local volume requires node affinity",
                    ));
                }
            }
            "nfs" => {
                if s(src, "server").is_none_or(str::is_empty) {
                    causes.push(Cause::required(&format!("{at}.server")));
                }
                let p = s(src, "path").unwrap_or("");
                if p.is_empty() {
                    causes.push(Cause::required(&format!("{at}.path")));
                }
                if !p.starts_with('/') {
                    causes.push(Cause::invalid(
                        &format!("{at}.path"),
                        &json!(p),
                        "must be an absolute path",
                    ));
                }
            }
            "csi" => {
                let driver = s(src, "driver").unwrap_or("");
                if driver.is_empty() {
                    causes.push(Cause::required(&format!("{at}.driver")));
                } else if driver.len() > 63 {
                    causes.push(Cause::too_long(&format!("{at}.driver"), 63));
                } else if let Err(e) = names::check(NameRule::Subdomain, &driver.to_lowercase()) {
                    causes.push(Cause::invalid(&format!("{at}.driver"), &json!(driver), &e));
                }
                if s(src, "volumeHandle").is_none_or(str::is_empty) {
                    causes.push(Cause::required(&format!("{at}.volumeHandle")));
                }
            }
            _ => {}
        }
    }
    if found.is_none() {
        causes.push(Cause::required_because(
            "spec",
            "must specify a volume type",
        ));
    }
    found
}

/// The source of a stored volume (the first one set), for the immutability check.
fn source_of(obj: &Value) -> Vec<(&'static str, Value)> {
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    SOURCES
        .iter()
        .filter_map(|n| {
            spec.get(*n)
                .filter(|v| !v.is_null())
                .map(|v| (*n, v.clone()))
        })
        .collect()
}

/// A short account of what differs between two values, for the messages that end with a diff.
fn diff(old: &Value, new: &Value, at: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff(
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    &format!("{at}.{k}"),
                    out,
                );
            }
        }
        _ if old != new => {
            out.push(format!("  - {at}: {old}"));
            out.push(format!("  + {at}: {new}"));
        }
        _ => {}
    }
}

fn with_diff(text: &str, old: &Value, new: &Value, at: &str) -> String {
    let mut lines = Vec::new();
    diff(old, new, at, &mut lines);
    format!("{text}\n{}", lines.join("\n"))
}

impl Strategy for PersistentVolume {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if spec
            .get("persistentVolumeReclaimPolicy")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            spec.insert("persistentVolumeReclaimPolicy".into(), json!("Retain"));
        }
        if spec.get("volumeMode").is_none_or(Value::is_null) {
            spec.insert("volumeMode".into(), json!("Filesystem"));
        }
        if let Some(h) = spec.get_mut("hostPath").and_then(Value::as_object_mut) {
            h.entry("type").or_insert(json!(""));
        }
    }

    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        super::set_status(
            obj,
            json!({"phase": "Pending", "lastPhaseTransitionTime": object::now_rfc3339()}),
        );
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = obj.get("spec").cloned().unwrap_or(json!({}));
        check_access_modes(&spec, "spec", None, &mut causes);
        match spec.get("capacity").and_then(Value::as_object) {
            None => causes.push(Cause::required("spec.capacity")),
            Some(c) if c.is_empty() => causes.push(Cause::required("spec.capacity")),
            Some(c) => {
                if c.len() != 1 || !c.contains_key("storage") {
                    let printed = format!(
                        "core.ResourceList{{{}}}",
                        c.iter()
                            .map(|(k, v)| format!("{k:?}:{v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    causes.push(Cause {
                        reason: "FieldValueNotSupported",
                        message: format!(
                            "Unsupported value: {printed}: supported values: \"storage\""
                        ),
                        field: "spec.capacity".into(),
                    });
                }
                for (k, v) in c {
                    check_positive_quantity(&format!("spec.capacity[{k}]"), v, &mut causes);
                }
            }
        }
        if let Some(p) = spec
            .get("persistentVolumeReclaimPolicy")
            .filter(|v| v.as_str() != Some(""))
        {
            if !p.as_str().is_some_and(|p| RECLAIM_POLICIES.contains(&p)) {
                causes.push(Cause::not_supported(
                    "spec.persistentVolumeReclaimPolicy",
                    p,
                    RECLAIM_POLICIES,
                ));
            }
        }
        if let Some(a) = spec.get("nodeAffinity").filter(|v| !v.is_null()) {
            match a.get("required").filter(|v| !v.is_null()) {
                None => causes.push(Cause::required_because(
                    "spec.nodeAffinity.required",
                    "must specify required node constraints",
                )),
                Some(r) => check_node_selector(r, "spec.nodeAffinity.required", &mut causes),
            }
        }
        let source = check_source(&spec, &mut causes);
        if source == Some("hostPath")
            && s(&spec, "persistentVolumeReclaimPolicy") == Some("Recycle")
            && s(&spec, "hostPath.path").is_some_and(|p| p.trim_end_matches('/').is_empty())
        {
            causes.push(Cause::forbidden(
                "spec.persistentVolumeReclaimPolicy",
                "may not be 'recycle' for a hostPath mount of '/'",
            ));
        }
        check_class_name(
            "spec.storageClassName",
            s(&spec, "storageClassName"),
            &mut causes,
        );
        check_volume_mode("spec.volumeMode", &spec, &mut causes);
        if annotation(obj, MOUNT_OPTIONS).is_some()
            && source.is_some_and(|src| !MOUNTABLE_WITH_OPTIONS.contains(&src))
        {
            causes.push(Cause::forbidden(
                &format!("metadata.annotations[{MOUNT_OPTIONS}]"),
                "may not specify mount options for this volume type",
            ));
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let (mut a, b) = (source_of(old), source_of(new));
        // Adding the expansion secret to a CSI volume is the one allowed change of a source.
        if let (Some((_, csi_old)), Some((_, csi_new))) = (
            a.iter_mut().find(|(n, _)| *n == "csi"),
            b.iter().find(|(n, _)| *n == "csi"),
        ) {
            if csi_old.get("controllerExpandSecretRef").is_none() {
                if let (Some(o), Some(r)) = (
                    csi_old.as_object_mut(),
                    csi_new.get("controllerExpandSecretRef"),
                ) {
                    o.insert("controllerExpandSecretRef".into(), r.clone());
                }
            }
        }
        if a != b {
            let to_obj = |l: &[(&str, Value)]| {
                Value::Object(l.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
            };
            causes.push(Cause::forbidden(
                "spec.persistentvolumesource",
                &with_diff(
                    "spec.persistentvolumesource is immutable after creation",
                    &to_obj(&a),
                    &to_obj(&b),
                    "spec",
                ),
            ));
        }
        let mode = |o: &Value| path(o, "spec.volumeMode").cloned().unwrap_or(Value::Null);
        if mode(old) != mode(new) {
            causes.push(Cause::invalid(
                "volumeMode",
                &mode(new),
                "field is immutable",
            ));
        }
        let affinity = |o: &Value| {
            path(o, "spec.nodeAffinity")
                .cloned()
                .filter(|v| !v.is_null())
        };
        if let Some(before) = affinity(old) {
            if affinity(new).as_ref() != Some(&before) {
                causes.push(Cause::invalid(
                    "nodeAffinity",
                    &json!(affinity(new).map(|v| v.to_string()).unwrap_or_default()),
                    "field is immutable, except for updating from beta label to GA",
                ));
            }
        }
        causes
    }

    fn warnings_on_create(&self, _def: &ResourceDef, obj: &Value) -> Vec<String> {
        let mut out = Vec::new();
        if annotation(obj, BETA_CLASS).is_some() {
            out.push(format!(
                "metadata.annotations[{BETA_CLASS}]: {BETA_CLASS_WARNING}"
            ));
        }
        if s(obj, "spec.persistentVolumeReclaimPolicy") == Some("Recycle") {
            out.push("spec.persistentVolumeReclaimPolicy: The Recycle reclaim policy is deprecated. Instead, the recommended approach is to use dynamic provisioning.".into());
        }
        out
    }

    fn subresource(&self, name: &str) -> Option<&'static dyn Subresource> {
        match name {
            "status" => Some(&VolumeStatus),
            _ => None,
        }
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

/// A volume's `/status`: the phase's transition time moves with the phase unless the writer sets it.
struct VolumeStatus;

impl Subresource for VolumeStatus {
    fn prepare_for_update(&self, def: &ResourceDef, old: &Value, new: Value) -> Value {
        let mut out = Status.prepare_for_update(def, old, new);
        let before = path(old, "status.phase").cloned();
        let after = path(&out, "status.phase").cloned();
        let old_time = path(old, "status.lastPhaseTransitionTime").cloned();
        let sent = path(&out, "status.lastPhaseTransitionTime").cloned();
        let time = if before == after {
            sent.filter(|t| !t.is_null()).or(old_time)
        } else if sent.as_ref().is_none_or(Value::is_null) || sent == old_time {
            Some(json!(object::now_rfc3339()))
        } else {
            sent
        };
        if let (Some(t), Some(st)) = (time, out.get_mut("status").and_then(Value::as_object_mut)) {
            st.insert("lastPhaseTransitionTime".into(), t);
        }
        out
    }

    fn validate_update(&self, _def: &ResourceDef, _old: &Value, _new: &Value) -> Vec<Cause> {
        Vec::new()
    }
}

/// Upstream's NormalizeDataSources: `dataSource` and `dataSourceRef` say the same thing; a
/// `dataSource` of a kind that cannot populate a claim is dropped.
fn normalize_data_sources(spec: &mut serde_json::Map<String, Value>) {
    let ds = spec.get("dataSource").filter(|v| !v.is_null()).cloned();
    let dsr = spec.get("dataSourceRef").filter(|v| !v.is_null()).cloned();
    if dsr.is_none() {
        if let Some(d) = &ds {
            let group = s(d, "apiGroup").unwrap_or("");
            let kind = s(d, "kind").unwrap_or("");
            let known = (group.is_empty() && kind == "PersistentVolumeClaim")
                || (group == "snapshot.storage.k8s.io" && kind == "VolumeSnapshot");
            if !known {
                spec.remove("dataSource");
                return;
            }
            spec.insert("dataSourceRef".into(), d.clone());
        }
    } else if let (None, Some(r)) = (&ds, &dsr) {
        if r.get("namespace")
            .is_none_or(|n| n.as_str().is_none_or(str::is_empty))
        {
            let mut copy = r.clone();
            if let Some(o) = copy.as_object_mut() {
                o.remove("namespace");
            }
            spec.insert("dataSource".into(), copy);
        }
    }
}

fn check_data_source(d: &Value, at: &str, causes: &mut Vec<Cause>) {
    if s(d, "name").is_none_or(str::is_empty) {
        causes.push(Cause::required(&format!("{at}.name")));
    }
    let kind = s(d, "kind").unwrap_or("");
    if kind.is_empty() {
        causes.push(Cause::required(&format!("{at}.kind")));
    }
    let group = s(d, "apiGroup").unwrap_or("");
    if group.is_empty() && !kind.is_empty() && kind != "PersistentVolumeClaim" {
        causes.push(Cause::invalid(
            at,
            &json!(kind),
            "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
        ));
    }
    if !group.is_empty() {
        if let Err(e) = names::check(NameRule::Subdomain, group) {
            causes.push(Cause::invalid(&format!("{at}.apiGroup"), &json!(group), &e));
        }
    }
}

/// A claim spec's checks (also those of StatefulSet and ephemeral volume claim templates).
pub(super) fn check_claim_spec(spec: &Value, at: &str, causes: &mut Vec<Cause>) {
    check_access_modes(spec, at, Some("at least 1 access mode is required"), causes);
    if let Some(sel) = spec.get("selector").filter(|v| !v.is_null()) {
        for (i, e) in list(sel, "matchExpressions").iter().enumerate() {
            let f = format!("{at}.selector.matchExpressions[{i}]");
            check_requirement(e, &f, false, causes);
        }
    }
    let storage_at = format!("{at}.resources[storage]");
    match path(spec, "resources.requests.storage") {
        None => causes.push(Cause::required(&storage_at)),
        Some(q) => check_positive_quantity(&storage_at, q, causes),
    }
    check_class_name(
        &format!("{at}.storageClassName"),
        s(spec, "storageClassName"),
        causes,
    );
    check_volume_mode(&format!("{at}.volumeMode"), spec, causes);
    let ds = spec.get("dataSource").filter(|v| !v.is_null());
    let dsr = spec.get("dataSourceRef").filter(|v| !v.is_null());
    if let Some(d) = ds {
        check_data_source(d, &format!("{at}.dataSource"), causes);
    }
    if let Some(d) = dsr {
        check_data_source(d, &format!("{at}.dataSourceRef"), causes);
    }
    if let (Some(d), Some(r)) = (ds, dsr) {
        let spec_field = format!("{at}.dataSource");
        if r.get("namespace")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
        {
            causes.push(Cause::invalid(
                at,
                &json!(spec_field),
                "may not be specified when dataSourceRef.namespace is specified",
            ));
        } else if ["apiGroup", "kind", "name"]
            .iter()
            .any(|k| d.get(*k) != r.get(*k))
        {
            causes.push(Cause::invalid(
                at,
                &json!(spec_field),
                "must match dataSourceRef",
            ));
        }
    }
}

impl Strategy for PersistentVolumeClaim {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            if spec.get("volumeMode").is_none_or(Value::is_null) {
                spec.insert("volumeMode".into(), json!("Filesystem"));
            }
            normalize_data_sources(spec);
        }
    }

    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        super::set_status(obj, json!({"phase": "Pending"}));
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            // VolumeAttributesClass is a beta API that 1.32 serves only behind its gate, off by default.
            spec.remove("volumeAttributesClassName");
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = obj.get("spec").cloned().unwrap_or(json!({}));
        check_claim_spec(&spec, "spec", &mut causes);
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let mut a = old.get("spec").cloned().unwrap_or(json!({}));
        let mut b = new.get("spec").cloned().unwrap_or(json!({}));
        let bound = s(old, "status.phase") == Some("Bound");
        // A volume name may be set once.
        if s(&a, "volumeName").is_none_or(str::is_empty) {
            if let (Some(x), Some(v)) = (a.as_object_mut(), b.get("volumeName")) {
                x.insert("volumeName".into(), v.clone());
            }
        }
        // A claim without a class may be given one (the retroactive default class); the beta
        // annotation may become `storageClassName`.
        let old_annotation = annotation(old, BETA_CLASS).cloned();
        let new_annotation = annotation(new, BETA_CLASS).cloned();
        if old_annotation != new_annotation && old_annotation.is_some() {
            causes.push(Cause::invalid(
                &format!("metadata.annotations[{BETA_CLASS}]"),
                new_annotation.as_ref().unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
        let old_class = a.get("storageClassName").filter(|v| !v.is_null()).cloned();
        if old_class.is_none() {
            let new_class = b.get("storageClassName").cloned();
            let fits = old_annotation.is_none() || old_annotation == new_class;
            if let (true, Some(x), Some(v)) = (fits, a.as_object_mut(), new_class) {
                x.insert("storageClassName".into(), v);
            }
        }
        if bound {
            if let (Some(x), Some(q)) = (
                a.pointer_mut("/resources"),
                b.pointer("/resources/requests/storage"),
            ) {
                if let Some(r) = x.as_object_mut() {
                    let req = r.entry("requests").or_insert(json!({}));
                    if let Some(req) = req.as_object_mut() {
                        req.insert("storage".into(), q.clone());
                    }
                }
            }
        }
        let mode = |o: &Value| path(o, "spec.volumeMode").cloned().unwrap_or(Value::Null);
        if mode(old) != mode(new) {
            causes.push(Cause::invalid(
                "volumeMode",
                &mode(new),
                "field is immutable",
            ));
        }
        if let (Some(x), Some(y)) = (a.as_object_mut(), b.as_object_mut()) {
            x.remove("volumeMode");
            y.remove("volumeMode");
        }
        if a != b {
            causes.push(Cause::forbidden(
                "spec",
                &with_diff(CLAIM_SPEC_IMMUTABLE, &a, &b, "spec"),
            ));
        }
        let quantity =
            |o: &Value, p: &str| path(o, p).and_then(Value::as_str).and_then(Quantity::parse);
        if let (Some(before), Some(after)) = (
            quantity(old, "spec.resources.requests.storage"),
            quantity(new, "spec.resources.requests.storage"),
        ) {
            if after.milli() < before.milli() {
                let capacity = quantity(old, "status.capacity.storage");
                if capacity.is_none_or(|c| after.milli() <= c.milli()) {
                    causes.push(Cause::forbidden(
                        "spec.resources.requests.storage",
                        "field can not be less than status.capacity",
                    ));
                }
            }
        }
        causes
    }

    fn warnings_on_create(&self, _def: &ResourceDef, obj: &Value) -> Vec<String> {
        let mut out = Vec::new();
        if annotation(obj, BETA_CLASS).is_some() {
            out.push(format!(
                "metadata.annotations[{BETA_CLASS}]: {BETA_CLASS_WARNING}"
            ));
        }
        for kind in ["requests", "limits"] {
            if let Some(q) =
                path(obj, &format!("spec.resources.{kind}.storage")).and_then(Value::as_str)
            {
                if Quantity::parse(q).is_some_and(|q| !q.is_whole()) {
                    out.push(format!(
                        "spec.resources.{kind}[storage]: fractional byte value \"{q}\" is invalid, must be an integer"
                    ));
                }
            }
        }
        out
    }

    fn subresource(&self, name: &str) -> Option<&'static dyn Subresource> {
        match name {
            "status" => Some(&ClaimStatus),
            _ => None,
        }
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

/// A claim's `/status`: its capacity may not be negative; the spec is not checked again.
struct ClaimStatus;

impl Subresource for ClaimStatus {
    fn prepare_for_update(&self, def: &ResourceDef, old: &Value, new: Value) -> Value {
        Status.prepare_for_update(def, old, new)
    }

    fn validate_update(&self, _def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if list(new, "spec.accessModes").is_empty() {
            causes.push(Cause::required("Spec.accessModes"));
        }
        if let Some(c) = path(new, "status.capacity").and_then(Value::as_object) {
            for (k, v) in c {
                let text = v.as_str().unwrap_or("");
                if Quantity::parse(text).is_none_or(|q| q.is_negative()) {
                    causes.push(Cause::invalid(
                        &format!("status.capacity[{k}]"),
                        v,
                        "must be a valid resource quantity",
                    ));
                }
            }
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn def(plural: &str) -> std::sync::Arc<ResourceDef> {
        resource::find("", "v1", plural).expect("served")
    }

    fn fields(causes: &[Cause]) -> Vec<(&str, &str)> {
        causes
            .iter()
            .map(|c| (c.field.as_str(), c.message.as_str()))
            .collect()
    }

    #[test]
    fn a_bad_claim_gets_upstreams_causes() {
        let d = def("persistentvolumeclaims");
        let claim = json!({"metadata": {"name": "c", "namespace": "a"},
            "spec": {"accessModes": ["ReadWriteSometimes"], "resources": {"requests": {"storage": "0"}}}});
        let causes = super::super::validate_object(&d, &claim);
        assert_eq!(
            fields(&causes),
            [
                ("spec.accessModes", "Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""),
                ("spec.resources[storage]", "Invalid value: \"0\": must be greater than zero"),
            ]
        );
        let empty = json!({"metadata": {"name": "c", "namespace": "a"}, "spec": {}});
        let causes = super::super::validate_object(&d, &empty);
        assert_eq!(
            fields(&causes),
            [
                (
                    "spec.accessModes",
                    "Required value: at least 1 access mode is required"
                ),
                ("spec.resources[storage]", "Required value"),
            ]
        );
    }

    #[test]
    fn a_claim_spec_is_fixed_but_a_class_may_be_given_once() {
        let d = def("persistentvolumeclaims");
        let old = json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}});
        let mut new = old.clone();
        new["spec"]["storageClassName"] = json!("local-path");
        new["spec"]["volumeName"] = json!("pv1");
        assert!(PersistentVolumeClaim
            .validate_update(&d, &old, &new)
            .is_empty());
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        let c = PersistentVolumeClaim.validate_update(&d, &old, &grown);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].message
                .starts_with(&format!("Forbidden: {CLAIM_SPEC_IMMUTABLE}\n")),
            "{}",
            c[0].message
        );
        let mut bound = old.clone();
        bound["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
        let mut bigger = bound.clone();
        bigger["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(PersistentVolumeClaim
            .validate_update(&d, &bound, &bigger)
            .is_empty());
        let mut smaller = bound.clone();
        smaller["spec"]["resources"]["requests"]["storage"] = json!("512Mi");
        assert_eq!(
            fields(&PersistentVolumeClaim.validate_update(&d, &bound, &smaller)),
            [(
                "spec.resources.requests.storage",
                "Forbidden: field can not be less than status.capacity"
            )]
        );
    }

    #[test]
    fn a_volume_needs_one_source_and_local_ones_a_node() {
        let d = def("persistentvolumes");
        let pv = json!({"metadata": {"name": "v"}, "spec": {"capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce", "ReadWriteOncePod"], "local": {"path": "/a/../b"}}});
        assert_eq!(
            fields(&super::super::validate_object(&d, &pv)),
            [
                (
                    "spec.accessModes",
                    "Forbidden: may not use ReadWriteOncePod with other access modes"
                ),
                (
                    "spec.local.path",
                    "Invalid value: \"/a/../b\": must not contain '..'"
                ),
                (
                    "spec.nodeAffinity",
                    "Required value: Local volume requires node affinity"
                ),
            ]
        );
        let none = json!({"metadata": {"name": "v"}, "spec": {"capacity": {"storage": "1Gi", "cpu": "1"},
            "accessModes": ["ReadWriteOnce"]}});
        let causes = super::super::validate_object(&d, &none);
        let f = fields(&causes);
        assert_eq!(f[0].0, "spec.capacity");
        assert!(
            f[0].1.starts_with("Unsupported value: core.ResourceList{"),
            "{}",
            f[0].1
        );
        assert_eq!(
            f.last(),
            Some(&("spec", "Required value: must specify a volume type"))
        );
        let two = json!({"metadata": {"name": "v"}, "spec": {"capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/x"}, "nfs": {"server": "s", "path": "/p"}}});
        assert_eq!(
            fields(&super::super::validate_object(&d, &two)),
            [(
                "spec.nfs",
                "Forbidden: may not specify more than 1 volume type"
            )]
        );
    }

    #[test]
    fn a_volume_phase_change_moves_its_transition_time() {
        let d = def("persistentvolumes");
        let old = json!({"metadata": {"name": "v"}, "status": {"phase": "Pending", "lastPhaseTransitionTime": "2026-01-01T00:00:00Z"}});
        let same =
            VolumeStatus.prepare_for_update(&d, &old, json!({"status": {"phase": "Pending"}}));
        assert_eq!(
            same["status"]["lastPhaseTransitionTime"],
            json!("2026-01-01T00:00:00Z")
        );
        let moved = VolumeStatus.prepare_for_update(
            &d,
            &old,
            json!({"status": {"phase": "Bound",
            "lastPhaseTransitionTime": "2026-01-01T00:00:00Z"}}),
        );
        assert_ne!(
            moved["status"]["lastPhaseTransitionTime"],
            json!("2026-01-01T00:00:00Z")
        );
    }
}
