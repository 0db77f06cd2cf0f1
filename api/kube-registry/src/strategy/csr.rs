//! CertificateSigningRequests (`certificates.k8s.io/v1`, upstream's `pkg/registry/certificates`): the
//! spec never changes after create; `/status` writes the certificate and the signer's conditions but not
//! the approval; `/approval` writes the `Approved`/`Denied` conditions only. The checks of the request
//! itself are here; the requester and the kubelet-serving signer are the API server's `csr` module's.

use base64::Engine;
use rcgen::CertificateSigningRequestParams;
use serde_json::{json, Value};

use super::{Strategy, Subresource};
use crate::object;
use crate::resource::ResourceDef;
use crate::status::Cause;

/// Every usage the API accepts.
pub const KNOWN_USAGES: [&str; 20] = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
];
/// The parsed PEM request in `spec.request` (base64 of PEM).
pub fn parse_request(obj: &Value) -> Result<CertificateSigningRequestParams, String> {
    let b64 = object::path(obj, "spec.request")
        .and_then(Value::as_str)
        .unwrap_or("");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("not base64: {e}"))?;
    let pem = String::from_utf8(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        return Err("PEM block type must be CERTIFICATE REQUEST".to_string());
    }
    CertificateSigningRequestParams::from_pem(&pem).map_err(|e| e.to_string())
}

/// The create checks of a request (upstream's `ValidateCertificateSigningRequestCreate`, the parts keel
/// enforces): a parseable request, a signer name, known usages.
pub fn validate(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match object::path(obj, "spec.request").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::required("spec.request")),
        Some(r) => {
            if let Err(e) = parse_request(obj) {
                causes.push(Cause::invalid("spec.request", &json!(r), &e));
            }
        }
    }
    match object::path(obj, "spec.signerName").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::required("spec.signerName")),
        Some(s) if !s.contains('/') => causes.push(Cause::invalid(
            "spec.signerName",
            &json!(s),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )),
        Some(_) => {}
    }
    let usages = object::strings(object::path(obj, "spec.usages"));
    if usages.is_empty() {
        causes.push(Cause::required("spec.usages"));
    }
    for (i, u) in usages.iter().enumerate() {
        if !KNOWN_USAGES.contains(&u.as_str()) {
            causes.push(Cause::not_supported(
                &format!("spec.usages[{i}]"),
                &json!(u),
                &KNOWN_USAGES,
            ));
        }
    }
    causes
}

/// Whether a condition of `type` with status True is on the request.
pub fn has_condition(obj: &Value, kind: &str) -> bool {
    object::path(obj, "status.conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str).unwrap_or("True") == "True"
            })
        })
}

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
        validate(obj)
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
        let approved = has_condition(new, "Approved");
        let denied = has_condition(new, "Denied");
        let mut causes = Vec::new();
        if approved && denied {
            causes.push(Cause::invalid(
                "status.conditions",
                &json!("Approved"),
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        for kind in APPROVAL {
            if has_condition(old, kind) && !has_condition(new, kind) {
                causes.push(Cause::forbidden(
                    "status.conditions",
                    &format!("updates may not remove a condition of type \"{kind}\""),
                ));
            }
        }
        causes
    }
}
