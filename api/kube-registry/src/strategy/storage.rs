//! The `storage.k8s.io/v1` kinds, with upstream 1.32's defaults, validation and immutable fields:
//! StorageClasses (provisioner, parameters, reclaim policy and binding mode fixed once made),
//! VolumeAttachments (spec fixed), CSIDrivers, CSINodes and CSIStorageCapacities.

use std::collections::HashSet;

use keel_client_kit::quantity::Quantity;
use serde_json::{json, Value};

use super::Strategy;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::names::{self, NameRule};

pub(super) struct StorageClass;
pub(super) struct VolumeAttachment;
pub(super) struct CsiDriver;
pub(super) struct CsiNode;
pub(super) struct CsiStorageCapacity;

const CLASS_RECLAIM: &[&str] = &["Delete", "Retain"];
const BINDING_MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
const LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];
const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETER_BYTES: usize = 262_144;

use super::{list_at as list, str_at as s};

/// A CSI driver's name: given, at most 63 bytes, a DNS subdomain once lowercased.
fn check_driver_name(field: &str, name: &str, causes: &mut Vec<Cause>) {
    if name.is_empty() {
        causes.push(Cause::required(field));
    } else if name.len() > 63 {
        causes.push(Cause::too_long(field, 63));
    } else if let Err(e) = names::check(NameRule::Subdomain, &name.to_lowercase()) {
        causes.push(Cause::invalid(field, &json!(name), &e));
    }
}

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if let Some(o) = obj.as_object_mut() {
        if o.get(key).is_none_or(Value::is_null) {
            o.insert(key.into(), value);
        }
    }
}

impl Strategy for StorageClass {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        set_default(obj, "reclaimPolicy", json!("Delete"));
        set_default(obj, "volumeBindingMode", json!("Immediate"));
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        match s(obj, "provisioner").unwrap_or("") {
            "" => causes.push(Cause::required("provisioner")),
            p => {
                if let Err(e) = names::check_qualified_name(&p.to_lowercase()) {
                    causes.push(Cause::invalid("provisioner", &json!(p), &e));
                }
            }
        }
        if let Some(params) = obj.get("parameters").and_then(Value::as_object) {
            if params.len() > MAX_PARAMETERS {
                causes.push(Cause::too_long("parameters", MAX_PARAMETERS));
            } else {
                let mut total = 0;
                for (k, v) in params {
                    if k.is_empty() {
                        causes.push(Cause::invalid(
                            "parameters",
                            &json!(""),
                            "field can not be empty.",
                        ));
                    }
                    total += k.len() + v.as_str().map_or(0, str::len);
                }
                if total > MAX_PARAMETER_BYTES {
                    causes.push(Cause::too_long("parameters", MAX_PARAMETER_BYTES));
                }
            }
        }
        if let Some(p) = obj.get("reclaimPolicy").filter(|v| v.as_str() != Some("")) {
            if !p.as_str().is_some_and(|p| CLASS_RECLAIM.contains(&p)) {
                causes.push(Cause::not_supported("reclaimPolicy", p, CLASS_RECLAIM));
            }
        }
        match obj.get("volumeBindingMode").filter(|v| !v.is_null()) {
            None => causes.push(Cause::required("volumeBindingMode")),
            Some(m) if !m.as_str().is_some_and(|m| BINDING_MODES.contains(&m)) => {
                causes.push(Cause::not_supported("volumeBindingMode", m, BINDING_MODES))
            }
            Some(_) => {}
        }
        let mut terms_seen: Vec<&Value> = Vec::new();
        for (i, term) in list(obj, "allowedTopologies").iter().enumerate() {
            let at = format!("allowedTopologies[{i}].matchLabelExpressions");
            let mut keys = HashSet::new();
            for (k, e) in list(term, "matchLabelExpressions").iter().enumerate() {
                let f = format!("{at}[{k}]");
                let values = list(e, "values");
                if values.is_empty() {
                    causes.push(Cause::required(&format!("{f}.values")));
                }
                let mut seen = HashSet::new();
                for (n, v) in values.iter().enumerate() {
                    if !seen.insert(v.as_str().unwrap_or("")) {
                        causes.push(Cause::duplicate(&format!("{f}.values[{n}]"), v));
                    }
                }
                let key = s(e, "key").unwrap_or("");
                if let Err(m) = names::check_qualified_name(key) {
                    causes.push(Cause::invalid(&format!("{f}.key"), &json!(key), &m));
                }
                if !keys.insert(key) {
                    causes.push(Cause::duplicate(&format!("{f}.key"), &json!(key)));
                }
            }
            if terms_seen.contains(&term) {
                causes.push(Cause::duplicate(&at, &json!("")));
            }
            terms_seen.push(term);
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (field, what) in [
            ("parameters", "updates to parameters are forbidden."),
            ("provisioner", "updates to provisioner are forbidden."),
            ("reclaimPolicy", "updates to reclaimPolicy are forbidden."),
        ] {
            let norm = |o: &Value| {
                o.get(field)
                    .filter(|v| !v.is_null() && v.as_object().is_none_or(|m| !m.is_empty()))
                    .cloned()
            };
            if norm(old) != norm(new) {
                causes.push(Cause::forbidden(field, what));
            }
        }
        if old.get("volumeBindingMode") != new.get("volumeBindingMode") {
            causes.push(Cause::invalid(
                "volumeBindingMode",
                new.get("volumeBindingMode").unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
        causes
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

impl Strategy for VolumeAttachment {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        check_driver_name(
            "spec.attacher",
            s(obj, "spec.attacher").unwrap_or(""),
            &mut causes,
        );
        let pv = path(obj, "spec.source.persistentVolumeName").filter(|v| !v.is_null());
        let inline = path(obj, "spec.source.inlineVolumeSpec").filter(|v| !v.is_null());
        const ONE: &str = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
        match (pv, inline) {
            (None, None) => causes.push(Cause::required_because("spec.source", ONE)),
            (Some(_), Some(_)) => causes.push(Cause::forbidden("spec.source", ONE)),
            (Some(name), None) => match name.as_str().unwrap_or("") {
                "" => causes.push(Cause::required_because(
                    "spec.source.persistentVolumeName",
                    "must specify non empty persistentVolumeName",
                )),
                n => {
                    if let Err(e) = names::check(NameRule::Subdomain, n) {
                        causes.push(Cause::invalid("spec.source.persistentVolumeName", name, &e));
                    }
                }
            },
            (None, Some(spec)) => {
                if spec.get("csi").is_none_or(Value::is_null) {
                    causes.push(Cause::required_because(
                        "spec.source.inlineVolumeSpec.csi",
                        "has to be specified in the context of inline volumes",
                    ));
                }
            }
        }
        let node = s(obj, "spec.nodeName").unwrap_or("");
        if let Err(e) = names::check(NameRule::Subdomain, node) {
            causes.push(Cause::invalid("spec.nodeName", &json!(node), &e));
        }
        for which in ["attachError", "detachError"] {
            if s(obj, &format!("status.{which}.message")).is_some_and(|m| m.len() > 1024) {
                causes.push(Cause::too_long(
                    &format!("status.{which}.message"),
                    MAX_PARAMETER_BYTES,
                ));
            }
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        if old.get("spec") != new.get("spec") {
            return vec![Cause::invalid(
                "spec",
                &json!(new.get("spec").map(Value::to_string).unwrap_or_default()),
                "field is immutable",
            )];
        }
        Vec::new()
    }
}

impl Strategy for CsiDriver {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec") else {
            return;
        };
        set_default(spec, "attachRequired", json!(true));
        set_default(spec, "podInfoOnMount", json!(false));
        set_default(spec, "storageCapacity", json!(false));
        set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
        set_default(spec, "requiresRepublish", json!(false));
        set_default(spec, "seLinuxMount", json!(false));
        if spec
            .get("volumeLifecycleModes")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            if let Some(o) = spec.as_object_mut() {
                o.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
            }
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (field, at) in [
            ("attachRequired", "spec.attachedRequired"),
            ("podInfoOnMount", "spec.podInfoOnMount"),
            ("storageCapacity", "spec.storageCapacity"),
            ("seLinuxMount", "spec.seLinuxMount"),
        ] {
            if path(obj, &format!("spec.{field}")).is_none_or(Value::is_null) {
                causes.push(Cause::required(at));
            }
        }
        if let Some(p) = path(obj, "spec.fsGroupPolicy").filter(|v| !v.is_null()) {
            if !p.as_str().is_some_and(|p| FS_GROUP_POLICIES.contains(&p)) {
                causes.push(Cause::not_supported(
                    "spec.fsGroupPolicy",
                    p,
                    FS_GROUP_POLICIES,
                ));
            }
        }
        let mut audiences = HashSet::new();
        for (i, t) in list(obj, "spec.tokenRequests").iter().enumerate() {
            let at = format!("spec.tokenRequests[{i}]");
            let a = s(t, "audience").unwrap_or("");
            if !audiences.insert(a) {
                causes.push(Cause::duplicate(&format!("{at}.audience"), &json!(a)));
            }
            if let Some(e) = t.get("expirationSeconds").and_then(Value::as_i64) {
                if e < 600 {
                    causes.push(Cause::invalid(
                        &format!("{at}.expirationSeconds"),
                        &json!(e),
                        "may not specify a duration less than 10 minutes",
                    ));
                } else if e > 1 << 32 {
                    causes.push(Cause::invalid(
                        &format!("{at}.expirationSeconds"),
                        &json!(e),
                        "may not specify a duration larger than 2^32 seconds",
                    ));
                }
            }
        }
        for m in list(obj, "spec.volumeLifecycleModes") {
            if !m.as_str().is_some_and(|m| LIFECYCLE_MODES.contains(&m)) {
                causes.push(Cause::not_supported(
                    "spec.volumeLifecycleModes",
                    m,
                    LIFECYCLE_MODES,
                ));
            }
        }
        causes
    }

    fn prepare_for_update(&self, _def: &ResourceDef, old: &Value, new: &mut Value) {
        if old.get("spec") != new.get("spec") {
            super::bump_generation(old, new);
        }
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (field, at) in [
            ("spec.attachRequired", "spec.attachedRequired"),
            ("spec.volumeLifecycleModes", "spec.volumeLifecycleModes"),
        ] {
            if path(old, field) != path(new, field) {
                causes.push(Cause::invalid(
                    at,
                    path(new, field).unwrap_or(&Value::Null),
                    "field is immutable",
                ));
            }
        }
        causes
    }
}

impl Strategy for CsiNode {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let mut names_seen = HashSet::new();
        for (i, d) in list(obj, "spec.drivers").iter().enumerate() {
            let at = format!("spec.drivers[{i}]");
            let name = s(d, "name").unwrap_or("");
            check_driver_name(&format!("{at}.name"), name, &mut causes);
            if !names_seen.insert(name) {
                causes.push(Cause::duplicate(&format!("{at}.name"), &json!(name)));
            }
            match s(d, "nodeID").unwrap_or("") {
                "" => causes.push(Cause::required(&format!("{at}.nodeID"))),
                id if id.len() > 256 => causes.push(Cause::invalid(
                    &format!("{at}.nodeID"),
                    &json!(id),
                    "must be 256 characters or less",
                )),
                _ => {}
            }
            if let Some(c) = path(d, "allocatable.count").and_then(Value::as_i64) {
                if c < 0 {
                    causes.push(Cause::invalid(
                        &format!("{at}.allocatable.count"),
                        &json!(c),
                        "must be greater than or equal to 0",
                    ));
                }
            }
            let mut keys = HashSet::new();
            for k in list(d, "topologyKeys") {
                let key = k.as_str().unwrap_or("");
                if key.is_empty() {
                    causes.push(Cause::required(&at));
                } else if !keys.insert(key) {
                    causes.push(Cause::duplicate(&at, k));
                } else if let Err(e) = names::check_qualified_name(key) {
                    causes.push(Cause::invalid(&at, k, &e));
                }
            }
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        for d in list(new, "spec.drivers") {
            let before = list(old, "spec.drivers")
                .iter()
                .find(|o| o.get("name") == d.get("name"));
            if before.is_some_and(|b| b != d) {
                causes.push(Cause::invalid(
                    "spec.drivers",
                    &json!(d.to_string()),
                    "field is immutable",
                ));
            }
        }
        causes
    }
}

impl Strategy for CsiStorageCapacity {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let class = s(obj, "storageClassName").unwrap_or("");
        if let Err(e) = names::check(NameRule::Subdomain, class) {
            causes.push(Cause::invalid("storageClassName", &json!(class), &e));
        }
        if let Some(c) = obj.get("capacity").filter(|v| !v.is_null()) {
            if c.as_str()
                .and_then(Quantity::parse)
                .is_none_or(|q| q.is_negative())
            {
                causes.push(Cause::invalid(
                    "capacity",
                    c,
                    "must be greater than or equal to 0",
                ));
            }
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        for field in ["nodeTopology", "storageClassName"] {
            if old.get(field) != new.get(field) {
                causes.push(Cause::invalid(
                    field,
                    new.get(field).unwrap_or(&Value::Null),
                    "field is immutable",
                ));
            }
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn classes_keep_their_provisioner_and_binding_mode() {
        let d = resource::find("storage.k8s.io", "v1", "storageclasses").expect("served");
        let mut sc = json!({"metadata": {"name": "fast"}, "provisioner": "keel.io/local-path"});
        StorageClass.set_defaults(&d, &mut sc);
        assert_eq!(
            (sc["reclaimPolicy"].clone(), sc["volumeBindingMode"].clone()),
            (json!("Delete"), json!("Immediate"))
        );
        assert!(super::super::validate_object(&d, &sc).is_empty());
        let mut changed = sc.clone();
        changed["provisioner"] = json!("other.io/x");
        changed["volumeBindingMode"] = json!("WaitForFirstConsumer");
        changed["allowVolumeExpansion"] = json!(true);
        let causes = StorageClass.validate_update(&d, &sc, &changed);
        let msgs: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "Forbidden: updates to provisioner are forbidden.",
                "Invalid value: \"WaitForFirstConsumer\": field is immutable"
            ]
        );
        let bad = json!({"metadata": {"name": "x"}, "provisioner": "", "reclaimPolicy": "Recycle",
            "volumeBindingMode": "Later"});
        let causes = super::super::validate_object(&d, &bad);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["provisioner", "reclaimPolicy", "volumeBindingMode"]
        );
    }

    #[test]
    fn drivers_get_upstreams_defaults() {
        let d = resource::find("storage.k8s.io", "v1", "csidrivers").expect("served");
        let mut drv = json!({"metadata": {"name": "x.csi.io"}, "spec": {}});
        CsiDriver.set_defaults(&d, &mut drv);
        assert_eq!(drv["spec"]["attachRequired"], json!(true));
        assert_eq!(drv["spec"]["volumeLifecycleModes"], json!(["Persistent"]));
        assert!(super::super::validate_object(&d, &drv).is_empty());
    }
}
