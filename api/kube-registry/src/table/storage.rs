//! Columns and cells of the storage kinds (PersistentVolumes, claims, `storage.k8s.io`), as upstream's
//! printers compute them.

use serde_json::{json, Value};

use super::column::{col, Column, AGE, NAME};
use crate::age::since;
use crate::object::path;
use crate::resource::Printer;

/// The annotation that marks the default StorageClass, and its older beta form.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta form of [`DEFAULT_CLASS`], still honoured.
pub const DEFAULT_CLASS_BETA: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The annotation that named a volume's or claim's class before `storageClassName`.
pub const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn s<'a>(o: &'a Value, p: &str) -> &'a str {
    path(o, p).and_then(Value::as_str).unwrap_or("")
}

fn b(o: &Value, p: &str, default: bool) -> bool {
    path(o, p).and_then(Value::as_bool).unwrap_or(default)
}

fn arr<'a>(o: &'a Value, p: &str) -> &'a [Value] {
    path(o, p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn age(o: &Value) -> Value {
    json!(since(path(o, "metadata.creationTimestamp")))
}

/// `<unset>` for a field that is absent.
fn or_unset(v: Option<&str>) -> Value {
    json!(v.unwrap_or("<unset>"))
}

/// Whether a StorageClass is marked as the default (either annotation, `"true"` exactly).
pub fn is_default_class(o: &Value) -> bool {
    [DEFAULT_CLASS, DEFAULT_CLASS_BETA].iter().any(|a| {
        o.pointer("/metadata/annotations")
            .and_then(|m| m.get(*a))
            .and_then(Value::as_str)
            == Some("true")
    })
}

/// A volume's or claim's class: the beta annotation wins over `spec.storageClassName`, as upstream reads it.
pub fn class_of(o: &Value) -> &str {
    match o
        .pointer("/metadata/annotations")
        .and_then(|m| m.get(BETA_CLASS))
        .and_then(Value::as_str)
    {
        Some(c) => c,
        None => s(o, "spec.storageClassName"),
    }
}

/// Access modes as `kubectl` abbreviates them, in upstream's fixed order, each once.
pub fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| has(m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// A phase, or `Terminating` once deletion has begun.
fn phase(o: &Value) -> Value {
    if path(o, "metadata.deletionTimestamp").is_some_and(|v| !v.is_null()) {
        json!("Terminating")
    } else {
        json!(s(o, "status.phase"))
    }
}

/// The columns of a storage printer.
pub fn columns(p: Printer) -> Vec<Column> {
    let vac = col(
        "VolumeAttributesClass",
        "string",
        0,
        "The name of the VolumeAttributesClass the volume uses.",
    );
    let mode = col(
        "VolumeMode",
        "string",
        1,
        "Whether the volume is a filesystem or a raw block device.",
    );
    let class = col(
        "StorageClass",
        "string",
        0,
        "The name of the StorageClass the volume belongs to.",
    );
    let modes = col(
        "Access Modes",
        "string",
        0,
        "The ways the volume can be mounted.",
    );
    let capacity = col("Capacity", "string", 0, "The volume's size.");
    match p {
        Printer::PersistentVolume => vec![
            NAME,
            capacity,
            modes,
            col(
                "Reclaim Policy",
                "string",
                0,
                "What happens to the volume when its claim is released.",
            ),
            col("Status", "string", 0, "The volume's phase."),
            col("Claim", "string", 0, "The claim bound to the volume."),
            class,
            vac,
            col("Reason", "string", 0, "Why the volume is in its phase."),
            AGE,
            mode,
        ],
        Printer::PersistentVolumeClaim => vec![
            NAME,
            col("Status", "string", 0, "The claim's phase."),
            col("Volume", "string", 0, "The volume bound to the claim."),
            capacity,
            modes,
            class,
            vac,
            AGE,
            mode,
        ],
        Printer::StorageClass => vec![
            NAME,
            col(
                "Provisioner",
                "string",
                0,
                "The driver that provisions volumes of the class.",
            ),
            col(
                "ReclaimPolicy",
                "string",
                0,
                "What happens to a provisioned volume when its claim is released.",
            ),
            col(
                "VolumeBindingMode",
                "string",
                0,
                "When claims of the class are bound and provisioned.",
            ),
            col(
                "AllowVolumeExpansion",
                "string",
                0,
                "Whether claims of the class may grow.",
            ),
            AGE,
        ],
        Printer::VolumeAttachment => vec![
            NAME,
            col(
                "Attacher",
                "string",
                0,
                "The driver that attaches the volume.",
            ),
            col("PV", "string", 0, "The PersistentVolume being attached."),
            col("Node", "string", 0, "The node the volume is attached to."),
            col("Attached", "boolean", 0, "Whether the attach succeeded."),
            AGE,
        ],
        Printer::CSIDriver => vec![
            NAME,
            col(
                "AttachRequired",
                "boolean",
                0,
                "Whether volumes of the driver need an attach step.",
            ),
            col(
                "PodInfoOnMount",
                "boolean",
                0,
                "Whether mounts are told about the pod.",
            ),
            col(
                "StorageCapacity",
                "boolean",
                0,
                "Whether the driver reports its capacity.",
            ),
            col(
                "TokenRequests",
                "string",
                0,
                "The audiences of the tokens passed to the driver.",
            ),
            col(
                "RequiresRepublish",
                "boolean",
                0,
                "Whether mounts are repeated periodically.",
            ),
            col(
                "Modes",
                "string",
                0,
                "The volume lifecycle modes the driver supports.",
            ),
            AGE,
        ],
        Printer::CSINode => vec![
            NAME,
            col("Drivers", "integer", 0, "How many drivers the node runs."),
            AGE,
        ],
        Printer::CSIStorageCapacity => vec![
            NAME,
            col(
                "StorageClassName",
                "string",
                0,
                "The StorageClass the capacity is for.",
            ),
            col("Capacity", "string", 0, "The capacity available."),
        ],
        _ => Vec::new(),
    }
}

/// The cells of one object for a storage printer.
pub fn cells(p: Printer, o: &Value) -> Vec<Value> {
    let name = json!(s(o, "metadata.name"));
    let mode = || or_unset(path(o, "spec.volumeMode").and_then(Value::as_str));
    let vac = || or_unset(path(o, "spec.volumeAttributesClassName").and_then(Value::as_str));
    match p {
        Printer::PersistentVolume => {
            let claim = match path(o, "spec.claimRef") {
                Some(r) if r.is_object() => {
                    format!("{}/{}", s(r, "namespace"), s(r, "name"))
                }
                _ => String::new(),
            };
            vec![
                name,
                json!(match s(o, "spec.capacity.storage") {
                    "" => "0",
                    c => c,
                }),
                json!(access_modes(arr(o, "spec.accessModes"))),
                json!(s(o, "spec.persistentVolumeReclaimPolicy")),
                phase(o),
                json!(claim),
                json!(class_of(o)),
                vac(),
                json!(s(o, "status.reason")),
                age(o),
                mode(),
            ]
        }
        Printer::PersistentVolumeClaim => {
            let volume = s(o, "spec.volumeName");
            let (capacity, modes) = if volume.is_empty() {
                (String::new(), String::new())
            } else {
                (
                    s(o, "status.capacity.storage").to_string(),
                    access_modes(arr(o, "status.accessModes")),
                )
            };
            vec![
                name,
                phase(o),
                json!(volume),
                json!(capacity),
                json!(modes),
                json!(class_of(o)),
                vac(),
                age(o),
                mode(),
            ]
        }
        Printer::StorageClass => {
            let mut shown = s(o, "metadata.name").to_string();
            if is_default_class(o) {
                shown.push_str(" (default)");
            }
            let reclaim = path(o, "reclaimPolicy")
                .and_then(Value::as_str)
                .unwrap_or("Delete");
            let binding = path(o, "volumeBindingMode")
                .and_then(Value::as_str)
                .unwrap_or("Immediate");
            vec![
                json!(shown),
                json!(s(o, "provisioner")),
                json!(reclaim),
                json!(binding),
                json!(b(o, "allowVolumeExpansion", false)),
                age(o),
            ]
        }
        Printer::VolumeAttachment => vec![
            name,
            json!(s(o, "spec.attacher")),
            json!(s(o, "spec.source.persistentVolumeName")),
            json!(s(o, "spec.nodeName")),
            json!(b(o, "status.attached", false)),
            age(o),
        ],
        Printer::CSIDriver => {
            let tokens = match path(o, "spec.tokenRequests").and_then(Value::as_array) {
                Some(list) => list
                    .iter()
                    .map(|t| s(t, "audience"))
                    .collect::<Vec<_>>()
                    .join(","),
                None => "<unset>".to_string(),
            };
            let modes: Vec<&str> = arr(o, "spec.volumeLifecycleModes")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let modes = if modes.is_empty() {
                "<none>".to_string()
            } else {
                modes.join(",")
            };
            vec![
                name,
                json!(b(o, "spec.attachRequired", true)),
                json!(b(o, "spec.podInfoOnMount", false)),
                json!(b(o, "spec.storageCapacity", false)),
                json!(tokens),
                json!(b(o, "spec.requiresRepublish", false)),
                json!(modes),
                age(o),
            ]
        }
        Printer::CSINode => vec![name, json!(arr(o, "spec.drivers").len()), age(o)],
        Printer::CSIStorageCapacity => vec![
            name,
            json!(s(o, "storageClassName")),
            or_unset(path(o, "capacity").and_then(Value::as_str)),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_show_capacity_only_once_bound() {
        let pending = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-path"}, "status": {"phase": "Pending"}});
        let c = cells(Printer::PersistentVolumeClaim, &pending);
        assert_eq!(c[1], json!("Pending"));
        assert_eq!(c[3], json!(""));
        assert_eq!(c[5], json!("local-path"));
        assert_eq!(c[6], json!("<unset>"));
        let bound = json!({"metadata": {"name": "data", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"volumeName": "pvc-1", "volumeMode": "Filesystem"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                       "accessModes": ["ReadWriteOncePod", "ReadWriteOnce", "ReadWriteOnce"]}});
        let c = cells(Printer::PersistentVolumeClaim, &bound);
        assert_eq!(c[1], json!("Terminating"));
        assert_eq!(c[3], json!("1Gi"));
        assert_eq!(c[4], json!("RWO,RWOP"));
        assert_eq!(c[8], json!("Filesystem"));
        assert_eq!(c.len(), columns(Printer::PersistentVolumeClaim).len());
    }

    #[test]
    fn default_class_is_named_so() {
        let sc = json!({"metadata": {"name": "local-path", "annotations": {DEFAULT_CLASS: "true"}},
            "provisioner": "keel.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        let c = cells(Printer::StorageClass, &sc);
        assert_eq!(c[0], json!("local-path (default)"));
        assert_eq!(c[2], json!("Delete"));
        assert_eq!(c[3], json!("WaitForFirstConsumer"));
        assert_eq!(c[4], json!(false));
        let pv = json!({"metadata": {"name": "v"}, "spec": {"claimRef": {"namespace": "a", "name": "b"},
            "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany"]}});
        let c = cells(Printer::PersistentVolume, &pv);
        assert_eq!(
            (c[1].clone(), c[2].clone(), c[5].clone()),
            (json!("5Gi"), json!("RWX"), json!("a/b"))
        );
        assert_eq!(c.len(), columns(Printer::PersistentVolume).len());
    }
}
