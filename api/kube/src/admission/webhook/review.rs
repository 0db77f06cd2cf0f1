//! AdmissionReview: the request a webhook receives and the checks its answer must pass, with upstream's
//! texts for an answer that breaks them.

use base64::Engine;
use serde_json::{json, Value};

use super::hook::{Hook, Phase};
use crate::admission::request::Request;
use crate::resource::ResourceDef;

/// The AdmissionReview versions this server speaks, in the order it prefers them.
const KNOWN: &[&str] = &["v1", "v1beta1"];

/// The review version the webhook takes: the first of its list this server knows.
pub fn version(hook: &Hook) -> Option<&'static str> {
    hook.spec
        .admission_review_versions
        .iter()
        .find_map(|v| KNOWN.iter().copied().find(|k| k == v))
}

fn gvk(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "kind": def.kind})
}

fn gvr(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "resource": def.plural})
}

/// The review sent for `req`, with the objects already in `matched`'s version.
pub fn request(
    uid: &str,
    review_version: &str,
    req: &Request<'_>,
    matched: &ResourceDef,
    name: &str,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Vec<u8> {
    let options = match req.operation {
        crate::admission::request::Operation::Create => Some("CreateOptions"),
        crate::admission::request::Operation::Update => Some("UpdateOptions"),
        crate::admission::request::Operation::Delete => Some("DeleteOptions"),
        // As upstream: a connection's options travel as its object, and `options` is null.
        crate::admission::request::Operation::Connect => None,
    };
    let mut r = json!({
        "uid": uid,
        "kind": gvk(matched),
        "resource": gvr(matched),
        "requestKind": gvk(req.requested),
        "requestResource": gvr(req.requested),
        "name": name,
        "operation": req.operation.as_str(),
        "userInfo": {"username": req.identity.user, "groups": req.identity.groups},
        "object": object,
        "oldObject": old,
        "dryRun": req.dry_run,
        "options": options.map(|o| json!({"kind": o, "apiVersion": "meta.k8s.io/v1"})),
    });
    if let Some(ns) = req.namespace {
        r["namespace"] = json!(ns);
    }
    if let Some(sub) = req.subresource {
        r["subResource"] = json!(sub);
        r["requestSubResource"] = json!(sub);
    }
    let review = json!({
        "apiVersion": format!("admission.k8s.io/{review_version}"),
        "kind": "AdmissionReview",
        "request": r,
    });
    serde_json::to_vec(&review).unwrap_or_default()
}

/// What a webhook answered, once checked.
#[derive(Debug, Default)]
pub struct Answer {
    /// Whether it lets the request through.
    pub allowed: bool,
    /// The Status it refused with.
    pub status: Option<Value>,
    /// A JSON Patch to apply (mutating webhooks only).
    pub patch: Option<json_patch::Patch>,
    /// Warnings for the client.
    pub warnings: Vec<String>,
    /// Annotations for the request's audit event (the caller prefixes them with the webhook's name).
    pub audit_annotations: Vec<(String, String)>,
}

/// Checks the answer against the request (`received invalid webhook response: …` texts) and decodes it.
pub fn answer(
    body: &[u8],
    uid: &str,
    review_version: &str,
    phase: Phase,
) -> Result<Answer, String> {
    let invalid = |m: String| format!("received invalid webhook response: {m}");
    let v: Value = serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?;
    let resp = v
        .get("response")
        .filter(|r| !r.is_null())
        .ok_or_else(|| invalid("webhook response was absent".into()))?;
    let strict = review_version == "v1";
    if strict {
        let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
            return Err(invalid(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
            )));
        }
        let got = resp.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(invalid(format!(
                "expected response.uid={uid:?}, got {got:?}"
            )));
        }
    }
    let patch = resp
        .get("patch")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let patch_type = resp.get("patchType").and_then(Value::as_str);
    let patch = match phase {
        Phase::Validating if strict && patch.is_some() => {
            return Err(invalid(
                "validating webhook may not return response.patch".into(),
            ))
        }
        Phase::Validating if strict && patch_type.is_some() => {
            return Err(invalid(
                "validating webhook may not return response.patchType".into(),
            ))
        }
        Phase::Validating => None,
        Phase::Mutating => match (patch, patch_type) {
            (None, None) => None,
            (Some(_), None) if strict => {
                return Err(invalid(
                    "webhook returned response.patch but not response.patchType".into(),
                ))
            }
            (None, Some(_)) if strict => {
                return Err(invalid(
                    "webhook returned response.patchType but not response.patch".into(),
                ))
            }
            (None, Some(_)) => None,
            (Some(p), t) => {
                if let Some(t) = t.filter(|t| *t != "JSONPatch") {
                    return Err(format!("unsupported patch type {t:?}"));
                }
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(p)
                    .map_err(|e| invalid(e.to_string()))?;
                Some(serde_json::from_slice(&raw).map_err(|e| e.to_string())?)
            }
        },
    };
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .filter(|w| !w.is_empty() && !w.chars().any(char::is_control))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let audit_annotations = resp
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    Ok(Answer {
        audit_annotations,
        allowed: resp
            .get("allowed")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        status: resp.get("status").filter(|s| !s.is_null()).cloned(),
        patch,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_as_upstream_checks_them() {
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "warnings": ["careful"]}});
        let a = answer(
            &serde_json::to_vec(&ok).unwrap_or_default(),
            "u1",
            "v1",
            Phase::Validating,
        );
        assert!(matches!(a, Ok(Answer { allowed: true, .. })), "{a:?}");
        let e = answer(
            &serde_json::to_vec(&ok).unwrap_or_default(),
            "u2",
            "v1",
            Phase::Validating,
        );
        assert_eq!(
            e.err().as_deref(),
            Some("received invalid webhook response: expected response.uid=\"u2\", got \"u1\"")
        );
        let patched = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "patch": "W10="}});
        let e = answer(
            &serde_json::to_vec(&patched).unwrap_or_default(),
            "u1",
            "v1",
            Phase::Mutating,
        );
        assert_eq!(
            e.err().as_deref(),
            Some("received invalid webhook response: webhook returned response.patch but not response.patchType")
        );
    }
}
