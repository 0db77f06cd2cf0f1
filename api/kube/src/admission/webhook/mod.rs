//! Admission webhooks (`MutatingAdmissionWebhook` and `ValidatingAdmissionWebhook`): the registered
//! webhooks a request reaches are called with an AdmissionReview over HTTPS. Mutating ones run one after
//! another after the built-in mutating plugins, in configuration-name order, each seeing the object the
//! previous patched, with one more round for `reinvocationPolicy: IfNeeded` webhooks whose object
//! changed after them. Validating ones run together after the built-in validating plugins, before
//! ResourceQuota; the first refusal to arrive is the answer. `failurePolicy` decides whether a webhook
//! that cannot be called refuses the request (500) or is passed over. Texts, codes and metrics are
//! upstream's.

pub mod call;
pub mod conversion;
pub mod hook;
pub mod matching;
pub mod metrics;
pub mod review;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tracing::{debug, warn};

use self::call::{CallError, TlsCache};
use self::hook::{Hook, Phase};
pub use super::request::{Operation, Request};
use crate::resource::ResourceDef;
use crate::status::ApiError;
use crate::storage::Storage;

/// The webhook dispatcher: TLS configurations by caBundle and the webhook metrics.
#[derive(Default)]
pub struct Webhooks {
    tls: TlsCache,
    /// `apiserver_admission_webhook_*`.
    pub metrics: metrics::WebhookMetrics,
}

/// How one call ended.
enum Outcome {
    /// Let through, with the answer (a patch, warnings).
    Allowed(review::Answer),
    /// Refused by the webhook, or a call failure under failurePolicy Fail.
    Refused(ApiError),
    /// Could not be called, and failurePolicy is Ignore.
    FailedOpen,
    /// Not called: a match condition is false (or failed under failurePolicy Ignore).
    NotCalled,
}

impl Webhooks {
    /// Runs the mutating webhooks `req` reaches on `obj`; returns their warnings.
    pub async fn mutate(
        &self,
        storage: &Storage,
        req: &Request<'_>,
        obj: &mut Value,
    ) -> Result<Vec<String>, ApiError> {
        if matching::exempt(req.stored) {
            return Ok(Vec::new());
        }
        let hooks = hook::load(storage, Phase::Mutating);
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let ns_labels = namespace_labels(storage, req, Some(obj), &hooks).await?;
        let mut warnings = Vec::new();
        // The object each IfNeeded webhook last returned, to know whether a later change concerns it.
        let mut seen: Vec<(usize, Value)> = Vec::new();
        for (i, h) in hooks.iter().enumerate() {
            if self
                .reaches(h, req, Some(obj), ns_labels.as_ref())
                .is_none()
            {
                continue;
            }
            self.call_mutating(storage, (h, 0, i), req, obj, &mut warnings)
                .await?;
            if h.reinvoked_if_needed() {
                seen.push((i, obj.clone()));
            }
        }
        // One more round, at most: IfNeeded webhooks already called whose object changed since.
        for (i, after) in seen {
            if *obj == after {
                continue;
            }
            let h = &hooks[i];
            if self
                .reaches(h, req, Some(obj), ns_labels.as_ref())
                .is_some()
            {
                self.call_mutating(storage, (h, 1, i), req, obj, &mut warnings)
                    .await?;
            }
        }
        Ok(warnings)
    }

    /// Calls one mutating webhook (`(hook, round, index)`: the round and its place among the
    /// configurations' webhooks name its audit annotation) and applies its patch.
    async fn call_mutating(
        &self,
        storage: &Storage,
        (h, round, index): (&Hook, usize, usize),
        req: &Request<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let annotate = |mutated: bool| {
            crate::audit::annotate(
                format!("mutation.webhook.admission.k8s.io/round_{round}_index_{index}"),
                json!({"configuration": h.configuration, "webhook": h.name(), "mutated": mutated})
                    .to_string(),
            )
        };
        let Some(matched) = matching::matched_def(h, req) else {
            return Ok(());
        };
        let object = (req.operation != Operation::Delete).then_some(&*obj);
        match self
            .call(storage, h, Phase::Mutating, req, matched, object)
            .await
        {
            Outcome::Refused(e) => Err(e),
            Outcome::FailedOpen | Outcome::NotCalled => Ok(()),
            Outcome::Allowed(answer) => {
                warnings.extend(answer.warnings);
                let Some(patch) = answer.patch.filter(|p| !p.0.is_empty()) else {
                    annotate(false);
                    return Ok(());
                };
                if req.operation == Operation::Delete {
                    return Err(ApiError::Internal(format!(
                        "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                        h.name()
                    )));
                }
                let mut versioned = in_version(obj.clone(), matched, req.stored);
                json_patch::patch(&mut versioned, &patch)
                    .map_err(|e| ApiError::Internal(e.to_string()))?;
                let before = obj.clone();
                *obj = back_to_stored(versioned, matched, req.stored);
                // What a webhook added is defaulted as a client's object is (a container it injects gets
                // its pull policy and termination message path), as upstream defaults the patched object.
                keel_kube_registry::strategy::of(req.stored).set_defaults(req.stored, obj);
                annotate(*obj != before);
                Ok(())
            }
        }
    }

    /// Runs the validating webhooks `req` reaches, together; returns their warnings or the first
    /// refusal to arrive. `obj` is None for a delete.
    pub async fn validate(
        &self,
        storage: &Storage,
        req: &Request<'_>,
        obj: Option<&Value>,
    ) -> Result<Vec<String>, ApiError> {
        if matching::exempt(req.stored) {
            return Ok(Vec::new());
        }
        let hooks = hook::load(storage, Phase::Validating);
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let ns_labels = namespace_labels(storage, req, obj, &hooks).await?;
        let calls: Vec<_> = hooks
            .iter()
            .filter_map(|h| {
                let matched = self.reaches(h, req, obj, ns_labels.as_ref())?;
                Some(self.call(storage, h, Phase::Validating, req, matched, obj))
            })
            .collect();
        let mut pending: futures::stream::FuturesUnordered<_> = calls.into_iter().collect();
        let mut warnings = Vec::new();
        use futures::StreamExt;
        while let Some(outcome) = pending.next().await {
            match outcome {
                Outcome::Refused(e) => return Err(e),
                Outcome::FailedOpen | Outcome::NotCalled => {}
                Outcome::Allowed(a) => warnings.extend(a.warnings),
            }
        }
        Ok(warnings)
    }

    /// The version the webhook is called in, if its selectors and rules take the request.
    fn reaches<'a>(
        &self,
        h: &Hook,
        req: &Request<'a>,
        obj: Option<&Value>,
        ns_labels: Option<&BTreeMap<String, String>>,
    ) -> Option<&'a ResourceDef> {
        if !matching::namespace_selected(h, ns_labels) {
            return None;
        }
        if !matching::object_selected(h, obj, req.old) {
            return None;
        }
        matching::matched_def(h, req)
    }

    /// One call, with its metrics, its dry-run rule and failurePolicy applied.
    async fn call(
        &self,
        storage: &Storage,
        h: &Hook,
        phase: Phase,
        req: &Request<'_>,
        matched: &ResourceDef,
        object: Option<&Value>,
    ) -> Outcome {
        let started = Instant::now();
        let op = req.operation.as_str();
        let record = |rejected: bool, code: u16| {
            self.metrics
                .observe(h.name(), phase, op, rejected, code, started.elapsed());
        };
        if req.dry_run {
            match h.spec.side_effects.as_str() {
                "None" | "NoneOnDryRun" => {}
                _ => {
                    record(true, 0);
                    self.metrics
                        .rejected(h.name(), phase, op, "apiserver_internal_error", 0);
                    return Outcome::Refused(ApiError::BadRequest(format!(
                        "admission webhook {:?} does not support dry run",
                        h.name()
                    )));
                }
            }
        }
        let conditions = h.spec.match_conditions.as_deref().unwrap_or(&[]);
        if !conditions.is_empty() {
            let old = req.old;
            match super::cel_env::match_conditions(conditions, req, matched, object, old) {
                Ok(true) => {}
                // A condition that is false: the webhook is not called at all.
                Ok(false) => return Outcome::NotCalled,
                Err(why) if h.fails_open() => {
                    debug!(webhook = h.name(), error = %why, "match condition failed; webhook skipped");
                    return Outcome::NotCalled;
                }
                Err(why) => {
                    return Outcome::Refused(ApiError::Forbidden {
                        target: crate::status::Target::new(
                            &req.requested.group,
                            &req.requested.plural,
                            req.name,
                        ),
                        message: format!("{} {why}", forbidden_prefix(req)),
                    })
                }
            }
        }
        let Some(version) = review::version(h) else {
            return self.failed(
                h,
                phase,
                op,
                started,
                "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)"
                    .into(),
                0,
            );
        };
        let uid = crate::object::new_uid();
        // A connection's options are their own kind, not the resource's.
        let versioned = object.map(|o| match req.operation {
            Operation::Connect => o.clone(),
            _ => in_version(o.clone(), matched, req.stored),
        });
        let old = req.old.map(|o| in_version(o.clone(), matched, req.stored));
        let body = review::request(
            &uid,
            version,
            req,
            matched,
            req.name,
            versioned.as_ref(),
            old.as_ref(),
        );
        let timeout = Duration::from_secs(h.timeout_seconds());
        let cc = &h.spec.client_config;
        let raw = match call::post(&self.tls, storage, cc, timeout, body).await {
            Ok(b) => b,
            Err(CallError::Transport(t)) => {
                return self.failed(
                    h,
                    phase,
                    op,
                    started,
                    format!("failed to call webhook: {t}"),
                    0,
                )
            }
            Err(CallError::Status { code, text }) => {
                return self.failed(
                    h,
                    phase,
                    op,
                    started,
                    format!("failed to call webhook: {text}"),
                    code,
                )
            }
        };
        let answer = match review::answer(&raw, &uid, version, phase) {
            Ok(a) => a,
            Err(e) => return self.failed(h, phase, op, started, e, 0),
        };
        // Upstream keys a webhook's audit annotations by its name; a key that is not a qualified name
        // is dropped.
        for (k, v) in &answer.audit_annotations {
            let key = format!("{}/{k}", h.name());
            if keel_kube_registry::validation::names::check_qualified_name(&key).is_ok() {
                crate::audit::annotate(key, v.clone());
            }
        }
        if answer.allowed {
            record(false, 200);
            return Outcome::Allowed(answer);
        }
        let refusal = denial(h.name(), answer.status.as_ref());
        let code = match &refusal {
            ApiError::Refused { code, .. } => *code,
            _ => 400,
        };
        record(true, code);
        self.metrics.rejected(h.name(), phase, op, "no_error", code);
        Outcome::Refused(refusal)
    }

    /// A call that failed: passed over under failurePolicy Ignore, else a 500 with upstream's text.
    fn failed(
        &self,
        h: &Hook,
        phase: Phase,
        op: &str,
        started: Instant,
        reason: String,
        code: u16,
    ) -> Outcome {
        let text = format!("failed calling webhook {:?}: {reason}", h.name());
        self.metrics
            .observe(h.name(), phase, op, true, code, started.elapsed());
        if h.fails_open() {
            warn!(webhook = h.name(), error = %text, "Failed calling webhook, failing open");
            self.metrics.failed_open(h.name(), phase);
            return Outcome::FailedOpen;
        }
        warn!(webhook = h.name(), error = %text, "Failed calling webhook, failing closed");
        self.metrics
            .rejected(h.name(), phase, op, "calling_webhook_error", code);
        Outcome::Refused(ApiError::Internal(format!(
            "Internal error occurred: {text}"
        )))
    }
}

/// `<resource> "<name>" is forbidden:` as upstream's Forbidden errors begin.
fn forbidden_prefix(req: &Request<'_>) -> String {
    let resource = if req.requested.group.is_empty() {
        req.requested.plural.to_string()
    } else {
        format!("{}.{}", req.requested.plural, req.requested.group)
    };
    if req.name.is_empty() {
        format!("{resource} is forbidden:")
    } else {
        format!("{resource} {:?} is forbidden:", req.name)
    }
}

/// Upstream's ToStatusErr: the webhook's Status, its code at least 400, its message prefixed.
pub fn denial(webhook: &str, status: Option<&Value>) -> ApiError {
    let s = |k: &str| {
        status
            .and_then(|st| st.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let by = format!("admission webhook {webhook:?} denied the request");
    let (message, reason) = (s("message"), s("reason"));
    let message = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    let code = status
        .and_then(|st| st.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    ApiError::Refused {
        code,
        reason,
        message,
        details: status
            .and_then(|st| st.get("details"))
            .filter(|d| !d.is_null())
            .cloned(),
    }
}

/// The labels of the request's namespace, when some webhook selects by them: a Namespace's own (new)
/// labels, none for other cluster-scoped objects, else the stored namespace's (NotFound when missing).
async fn namespace_labels(
    storage: &Storage,
    req: &Request<'_>,
    obj: Option<&Value>,
    hooks: &[Hook],
) -> Result<Option<BTreeMap<String, String>>, ApiError> {
    if !matching::needs_namespace(hooks) {
        return Ok(None);
    }
    let labels = |o: &Value| -> BTreeMap<String, String> {
        o.pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let is_namespace = req.stored.group.is_empty() && req.stored.plural == "namespaces";
    if is_namespace && req.subresource.is_none() {
        return Ok(obj.or(req.old).map(labels));
    }
    let Some(ns) = req.namespace.filter(|n| !n.is_empty()) else {
        return Ok(if is_namespace {
            req.old.map(labels)
        } else {
            None
        });
    };
    let key = format!("/registry/namespaces/{ns}");
    match storage.get(&key, false).await? {
        Some(st) => Ok(Some(labels(&st.object))),
        None => Err(ApiError::NotFound(crate::status::Target::new(
            "",
            "namespaces",
            ns,
        ))),
    }
}

/// The object in the version a webhook matched (`apiVersion` rewritten for another version).
fn in_version(obj: Value, matched: &ResourceDef, stored: &ResourceDef) -> Value {
    let mut obj = if matched.version == stored.version && matched.group == stored.group {
        obj
    } else {
        keel_kube_registry::convert::from_storage(matched, obj)
    };
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(matched.api_version()));
        m.insert("kind".into(), json!(matched.kind));
    }
    obj
}

/// A patched object back in the stored version.
fn back_to_stored(obj: Value, matched: &ResourceDef, stored: &ResourceDef) -> Value {
    if matched.version == stored.version && matched.group == stored.group {
        obj
    } else {
        keel_kube_registry::convert::to_storage(matched, obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_read_as_upstreams() {
        let e = denial(
            "deny.example.com",
            Some(&json!({"message": "no pods labelled evil", "code": 403})),
        );
        assert_eq!(
            e.to_string(),
            "admission webhook \"deny.example.com\" denied the request: no pods labelled evil"
        );
        assert_eq!(e.status()["code"], 403);
        let e = denial("deny.example.com", None);
        assert_eq!(
            e.to_string(),
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
        assert_eq!(e.status()["code"], 400);
        assert!(e.status().get("reason").is_none());
        let e = denial(
            "d.example.com",
            Some(&json!({"reason": "NotAllowed", "code": 200})),
        );
        assert_eq!(
            e.to_string(),
            "admission webhook \"d.example.com\" denied the request: NotAllowed"
        );
        assert_eq!(e.status()["code"], 400);
    }
}
