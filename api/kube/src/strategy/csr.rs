//! CertificateSigningRequests (`certificates.k8s.io/v1`, upstream's `pkg/registry/certificates`): the
//! spec never changes after create; `/status` writes the certificate and the signer's conditions but not
//! the approval; `/approval` writes the `Approved`/`Denied` conditions only. The requester and the
//! kubelet-serving signer are `crate::csr`'s.

use serde_json::{json, Value};

use super::{Strategy, Subresource};
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct CertificateSigningRequest;

const APPROVAL: [&str; 2] = ["Approved", "Denied"];

fn conditions(obj: &Value) -> Vec<Value> {
    crate::object::path(obj, "status.conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn is_approval(c: &Value) -> bool {
    c.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| APPROVAL.contains(&t))
}

fn keep_spec(old: &Value, new: &mut Value) {
    if let Some(m) = new.as_object_mut() {
        m.insert("spec".into(), old.get("spec").cloned().unwrap_or(json!({})));
    }
}

impl Strategy for CertificateSigningRequest {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        crate::csr::validate(obj)
    }

    fn prepare_for_update(&self, _def: &ResourceDef, old: &Value, new: &mut Value) {
        keep_spec(old, new);
        super::keep_status(old, new);
    }

    fn revalidates_on_update(&self) -> bool {
        false
    }

    fn subresource(&self, name: &str) -> Option<&'static dyn Subresource> {
        match name {
            "status" => Some(&Status),
            "approval" => Some(&Approval),
            _ => None,
        }
    }
}

/// `/status`: the certificate and the signer's conditions; approval conditions stay as stored.
struct Status;

impl Subresource for Status {
    fn prepare_for_update(&self, _def: &ResourceDef, old: &Value, new: Value) -> Value {
        let mut out = old.clone();
        let mut status = new.get("status").cloned().unwrap_or(json!({}));
        let mut kept: Vec<Value> = conditions(old).into_iter().filter(is_approval).collect();
        kept.extend(conditions(&new).into_iter().filter(|c| !is_approval(c)));
        if let Some(m) = status.as_object_mut() {
            m.insert("conditions".into(), json!(kept));
        }
        super::set_status(&mut out, status);
        out
    }

    fn validate_update(&self, _def: &ResourceDef, _old: &Value, _new: &Value) -> Vec<Cause> {
        Vec::new()
    }
}

/// `/approval`: the `Approved` and `Denied` conditions; the certificate stays as stored.
struct Approval;

impl Subresource for Approval {
    fn prepare_for_update(&self, _def: &ResourceDef, old: &Value, new: Value) -> Value {
        let mut out = old.clone();
        let mut status = old.get("status").cloned().unwrap_or(json!({}));
        let mut kept: Vec<Value> = conditions(&new).into_iter().filter(is_approval).collect();
        kept.extend(conditions(old).into_iter().filter(|c| !is_approval(c)));
        if let Some(m) = status.as_object_mut() {
            m.insert("conditions".into(), json!(kept));
        }
        super::set_status(&mut out, status);
        out
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let approved = crate::csr::has_condition(new, "Approved");
        let denied = crate::csr::has_condition(new, "Denied");
        let mut causes = Vec::new();
        if approved && denied {
            causes.push(Cause::invalid(
                "status.conditions",
                &json!("Approved"),
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        for kind in APPROVAL {
            if crate::csr::has_condition(old, kind) && !crate::csr::has_condition(new, kind) {
                causes.push(Cause::forbidden(
                    "status.conditions",
                    &format!("updates may not remove a condition of type \"{kind}\""),
                ));
            }
        }
        causes
    }
}
