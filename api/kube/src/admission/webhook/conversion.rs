//! CRD conversion webhooks: objects of a CustomResourceDefinition with `conversion.strategy: Webhook` are
//! sent in a `ConversionReview` to its webhook whenever they must be read or stored in another version,
//! over the same HTTPS client as admission webhooks. The answer is checked (its `uid`, `result`, one
//! converted object per object sent, each in the desired version and kind, its name, namespace and uid
//! unchanged); a failure reads as upstream's `conversion webhook for <gvk> failed: …`.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{ServiceReference, WebhookClientConfig};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookConversion;
use serde_json::{json, Value};

use super::call::{self, CallError};
use super::Webhooks;
use crate::status::ApiError;
use crate::storage::Storage;

/// How long one conversion call may take (upstream bounds it by the request only; keel by this).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The review versions this server sends, in the order it prefers them.
const KNOWN: &[&str] = &["v1", "v1beta1"];

/// The admission webhook client config shape of a CRD's conversion client config (the same fields).
fn client_config(w: &WebhookConversion) -> WebhookClientConfig {
    let cc = w.client_config.clone().unwrap_or_default();
    WebhookClientConfig {
        ca_bundle: cc.ca_bundle,
        url: cc.url,
        service: cc.service.map(|s| ServiceReference {
            name: s.name,
            namespace: s.namespace,
            path: s.path,
            port: s.port,
        }),
    }
}

/// `group/version, Kind=Kind`, as Go prints a GroupVersionKind.
fn gvk(obj: &Value) -> String {
    let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("");
    format!("{}, Kind={}", s("apiVersion"), s("kind"))
}

fn meta<'a>(o: &'a Value, k: &str) -> &'a str {
    o.pointer(&format!("/metadata/{k}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Webhooks {
    /// Converts `objects` (all of one CRD) to `desired` (`group/version`) through the CRD's webhook.
    pub async fn convert(
        &self,
        storage: &Storage,
        webhook: &WebhookConversion,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>, ApiError> {
        if objects.is_empty() {
            return Ok(objects);
        }
        let source = gvk(&objects[0]);
        let failed = |why: String| {
            ApiError::Internal(format!("conversion webhook for {source} failed: {why}"))
        };
        let Some(version) = webhook
            .conversion_review_versions
            .iter()
            .find_map(|v| KNOWN.iter().copied().find(|k| k == v))
        else {
            return Err(failed("no supported conversion review versions".into()));
        };
        let uid = crate::object::new_uid();
        let review = json!({
            "apiVersion": format!("apiextensions.k8s.io/{version}"),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
        });
        let body = serde_json::to_vec(&review).map_err(|e| failed(e.to_string()))?;
        let raw = match call::post(&self.tls, storage, &client_config(webhook), TIMEOUT, body).await
        {
            Ok(b) => b,
            Err(CallError::Transport(t)) => return Err(failed(t)),
            Err(CallError::Status { text, .. }) => return Err(failed(text)),
        };
        let answer: Value = serde_json::from_slice(&raw).map_err(|e| failed(e.to_string()))?;
        if version == "v1" {
            let (av, kind) = (
                answer
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                answer.get("kind").and_then(Value::as_str).unwrap_or(""),
            );
            if (av, kind) != ("apiextensions.k8s.io/v1", "ConversionReview") {
                return Err(failed(format!(
                    "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {av}, Kind={kind}"
                )));
            }
        }
        let Some(resp) = answer.get("response").filter(|r| !r.is_null()) else {
            return Err(failed("no response provided".into()));
        };
        let got = resp.get("uid").and_then(Value::as_str).unwrap_or("");
        if version == "v1" && got != uid {
            return Err(failed(format!(
                "expected response.uid={uid:?}, got {got:?}"
            )));
        }
        let status = resp
            .pointer("/result/status")
            .and_then(Value::as_str)
            .unwrap_or("");
        if status != "Success" {
            let message = resp
                .pointer("/result/message")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(failed(if message.is_empty() {
                format!("response.result.status was '{status}', not 'Success'")
            } else {
                message.to_string()
            }));
        }
        let converted = resp
            .get("convertedObjects")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if converted.len() != objects.len() {
            return Err(failed(format!(
                "returned {} objects, expected {}",
                converted.len(),
                objects.len()
            )));
        }
        let mut out = Vec::with_capacity(converted.len());
        for (i, (mut c, o)) in converted.into_iter().zip(objects).enumerate() {
            let av = c.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            if av != desired {
                return Err(failed(format!(
                    "invalid converted object at index {i}: invalid apiVersion {av:?}, expected {desired:?}"
                )));
            }
            if c.get("kind") != o.get("kind") {
                return Err(failed(format!(
                    "invalid converted object at index {i}: invalid kind {}, expected {}",
                    c.get("kind").unwrap_or(&Value::Null),
                    o.get("kind").unwrap_or(&Value::Null)
                )));
            }
            for k in ["name", "namespace", "uid"] {
                if meta(&c, k) != meta(&o, k) {
                    return Err(failed(format!(
                        "invalid converted object at index {i}: metadata.{k} may not be changed"
                    )));
                }
            }
            // As upstream: only labels and annotations of the metadata may change; the rest is the
            // original's.
            if let (Some(cm), Some(om)) = (c.get("metadata").cloned(), o.get("metadata")) {
                let mut kept = om.clone();
                if let Some(k) = kept.as_object_mut() {
                    for f in ["labels", "annotations"] {
                        match cm.get(f) {
                            Some(v) => k.insert(f.into(), v.clone()),
                            None => k.remove(f),
                        };
                    }
                }
                c["metadata"] = kept;
            }
            out.push(c);
        }
        Ok(out)
    }
}
