//! APIServices (`apiregistration.k8s.io/v1`, kube-aggregator's registry): the name is
//! `<spec.version>.<spec.group>` (`v1.` for the core group); priorities are bounded; a Local APIService
//! (no `spec.service`) carries no TLS settings and is Available from its create on; a remote one names its
//! Service, whose port defaults to 443. Messages are upstream's, field by field.

use serde_json::{json, Value};

use super::{set_status, Strategy};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::names::{self, NameRule};

pub(super) struct ApiService;

fn text<'a>(obj: &'a Value, p: &str) -> &'a str {
    path(obj, p).and_then(Value::as_str).unwrap_or("")
}

fn int(obj: &Value, p: &str) -> i64 {
    path(obj, p).and_then(Value::as_i64).unwrap_or(0)
}

impl Strategy for ApiService {
    fn name_rule(&self) -> NameRule {
        // Upstream checks path-segment rules first, then the `version.group` form (in `validate`).
        NameRule::PathSegment
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        // v1's defaulting: a service reference without a port means 443.
        if let Some(svc) = obj.pointer_mut("/spec/service") {
            if let Some(m) = svc.as_object_mut() {
                m.entry("port").or_insert(json!(443));
            }
        }
    }

    /// Upstream's PrepareForCreate: a fresh status, in which a Local APIService is already Available.
    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        let local = path(obj, "spec.service").is_none_or(Value::is_null);
        let status = if local {
            json!({"conditions": [{"type": "Available", "status": "True",
                                   "lastTransitionTime": object::now_rfc3339(), "reason": "Local",
                                   "message": "Local APIServices are always available"}]})
        } else {
            json!({})
        };
        set_status(obj, status);
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let group = text(obj, "spec.group");
        let version = text(obj, "spec.version");
        let required = format!("{version}.{group}");
        let name = object::name(obj);
        if !name.is_empty() && names::check(NameRule::PathSegment, name).is_ok() && name != required
        {
            causes.push(Cause::invalid(
                "metadata.name",
                &json!(name),
                &format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
            ));
        }
        if group.is_empty() && version != "v1" {
            causes.push(Cause {
                reason: "FieldValueRequired",
                message:
                    "Required value: only v1 may have an empty group and it better be legacy kube"
                        .into(),
                field: "spec.group".into(),
            });
        }
        if !group.is_empty() {
            if let Err(msg) = names::check(NameRule::Subdomain, group) {
                causes.push(Cause::invalid("spec.group", &json!(group), &msg));
            }
        }
        if let Err(msg) = names::check(NameRule::Dns1035, version) {
            // Upstream reports an empty version with the DNS-1035 message too.
            causes.push(Cause::invalid("spec.version", &json!(version), &msg));
        }
        let gpm = int(obj, "spec.groupPriorityMinimum");
        if gpm <= 0 || gpm > 20000 {
            causes.push(Cause::invalid(
                "spec.groupPriorityMinimum",
                &json!(gpm),
                "must be positive and less than 20000",
            ));
        }
        let vp = int(obj, "spec.versionPriority");
        if vp <= 0 || vp > 1000 {
            causes.push(Cause::invalid(
                "spec.versionPriority",
                &json!(vp),
                "must be positive and less than 1000",
            ));
        }
        let ca_len = ca_bundle_len(obj);
        let insecure = path(obj, "spec.insecureSkipTLSVerify")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let service = path(obj, "spec.service").filter(|s| !s.is_null());
        let Some(service) = service else {
            if ca_len != 0 {
                causes.push(Cause::invalid(
                    "spec.caBundle",
                    &json!(format!("{ca_len} bytes")),
                    "local APIServices may not have a caBundle",
                ));
            }
            if insecure {
                causes.push(Cause::invalid(
                    "spec.insecureSkipTLSVerify",
                    &json!(true),
                    "local APIServices may not have insecureSkipTLSVerify",
                ));
            }
            return causes;
        };
        if text(service, "namespace").is_empty() {
            causes.push(Cause::required("spec.service.namespace"));
        }
        if text(service, "name").is_empty() {
            causes.push(Cause::required("spec.service.name"));
        }
        let port = service.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            causes.push(Cause::invalid(
                "spec.service.port",
                &json!(port),
                "port is not valid: must be between 1 and 65535, inclusive",
            ));
        }
        if insecure && ca_len > 0 {
            causes.push(Cause::invalid(
                "spec.insecureSkipTLSVerify",
                &json!(true),
                "may not be true if caBundle is present",
            ));
        }
        causes
    }
}

/// The decoded length of `spec.caBundle` (base64 in JSON, as Go writes a `[]byte`); an undecodable
/// value counts by its text, which is still "present".
pub fn ca_bundle_len(obj: &Value) -> usize {
    use base64::Engine;
    let b = text(obj, "spec.caBundle");
    base64::engine::general_purpose::STANDARD
        .decode(b)
        .map(|v| v.len())
        .unwrap_or(b.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn check(obj: Value) -> Vec<String> {
        let def = resource::find("apiregistration.k8s.io", "v1", "apiservices").expect("served");
        let mut obj = obj;
        ApiService.set_defaults(&def, &mut obj);
        ApiService
            .validate(&def, &obj)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn remote_and_local_rules() {
        let ok = json!({"metadata": {"name": "v1alpha1.example.com"},
            "spec": {"group": "example.com", "version": "v1alpha1", "groupPriorityMinimum": 100,
                     "versionPriority": 10, "service": {"namespace": "ns", "name": "svc"}}});
        assert!(check(ok).is_empty());
        let core = json!({"metadata": {"name": "v1."},
            "spec": {"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}});
        assert!(check(core).is_empty());
        let bad = json!({"metadata": {"name": "v1.other.com"},
            "spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 0,
                     "versionPriority": 1001, "insecureSkipTLSVerify": true, "caBundle": "YWJj",
                     "service": {"name": "", "port": 70000}}});
        assert_eq!(
            check(bad),
            vec![
                "metadata.name: Invalid value: \"v1.other.com\": must be `spec.version+\".\"+spec.group`: \"v1.example.com\"",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
                "spec.service.namespace: Required value",
                "spec.service.name: Required value",
                "spec.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ]
        );
        let local = json!({"metadata": {"name": "v2.example.com"},
            "spec": {"group": "example.com", "version": "v2", "groupPriorityMinimum": 1,
                     "versionPriority": 1, "caBundle": "YWJj"}});
        assert_eq!(
            check(local),
            vec!["spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle"]
        );
        let nogroup = json!({"metadata": {"name": "v2."},
            "spec": {"version": "v2", "groupPriorityMinimum": 1, "versionPriority": 1}});
        assert_eq!(
            check(nogroup),
            vec!["spec.group: Required value: only v1 may have an empty group and it better be legacy kube"]
        );
    }
}
