//! The TokenRequest API: `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token` (`kubectl create
//! token`, and the agent for projected tokens) answers a signed token for the service account, optionally
//! bound to a Pod, Secret or Node that must exist (with the uid the request names).

use serde_json::{json, Map, Value};

use super::key::SigningKey;
use super::token::{self, Ref};
use super::ISSUER;
use crate::object;
use crate::status::{ApiError, Cause, Target};
use crate::storage::Storage;

const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 1 << 32;
const DEFAULT_SECONDS: i64 = 3600;

fn invalid(sa: &str, field: &str, value: Value, why: &str) -> ApiError {
    ApiError::Invalid {
        target: Target::new("authentication.k8s.io", "TokenRequest", sa),
        causes: vec![Cause::invalid(field, &value, why)],
    }
}

async fn read(storage: &Storage, key: &str) -> Result<Option<Value>, ApiError> {
    Ok(storage.get(key, true).await?.map(|s| s.object))
}

/// Answers one token request for service account `name` in `ns`.
pub(crate) async fn answer(
    storage: &Storage,
    key: &SigningKey,
    ns: &str,
    name: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    crate::body::expect_kind(body, "TokenRequest")?;
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::BadRequest("spec.expirationSeconds must be an integer".into())
        })?,
    };
    if seconds < MIN_SECONDS {
        return Err(invalid(
            name,
            "spec.expirationSeconds",
            json!(seconds),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if seconds > MAX_SECONDS {
        return Err(invalid(
            name,
            "spec.expirationSeconds",
            json!(seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(ISSUER.to_string());
    }
    let sa = read(storage, &format!("/registry/serviceaccounts/{ns}/{name}"))
        .await?
        .ok_or_else(|| ApiError::NotFound(Target::new("", "serviceaccounts", name)))?;
    let sa_ref = Ref {
        name: name.to_string(),
        uid: object::uid(&sa).to_string(),
    };
    let (mut pod, mut secret, mut node) = (None, None, None);
    let bound = spec.get("boundObjectRef").filter(|b| !b.is_null());
    if let Some(b) = bound {
        let s = |f: &str| b.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let (kind, obj_name, uid) = (s("kind"), s("name"), s("uid"));
        let (plural, key) = match kind.as_str() {
            "Pod" => ("pods", format!("/registry/pods/{ns}/{obj_name}")),
            "Secret" => ("secrets", format!("/registry/secrets/{ns}/{obj_name}")),
            "Node" => ("nodes", format!("/registry/minions/{obj_name}")),
            other => {
                return Err(invalid(
                    name,
                    "spec.boundObjectRef.kind",
                    json!(other),
                    "supported values: \"Pod\", \"Secret\", \"Node\"",
                ))
            }
        };
        let obj = read(storage, &key)
            .await?
            .ok_or_else(|| ApiError::NotFound(Target::new("", plural, &obj_name)))?;
        let found = object::uid(&obj).to_string();
        if !uid.is_empty() && uid != found {
            return Err(ApiError::Conflict {
                target: Target::new("", &kind, &obj_name),
                detail: format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            });
        }
        let r = Ref {
            name: obj_name.clone(),
            uid: found,
        };
        match kind.as_str() {
            "Pod" => {
                // A pod-bound token also names the pod's node, as upstream's does.
                if let Some(n) = object::path(&obj, "spec.nodeName").and_then(Value::as_str) {
                    if let Some(nobj) = read(storage, &format!("/registry/minions/{n}")).await? {
                        node = Some(Ref {
                            name: n.to_string(),
                            uid: object::uid(&nobj).to_string(),
                        });
                    }
                }
                pod = Some(r);
            }
            "Secret" => secret = Some(r),
            _ => node = Some(r),
        }
    }
    let now = jiff::Timestamp::now().as_second();
    let claims = token::claims(
        ns,
        sa_ref,
        audiences.clone(),
        now,
        seconds,
        pod,
        secret,
        node,
    );
    let signed = token::sign(key, &claims).map_err(|e| ApiError::Internal(e.to_string()))?;
    let expires = jiff::Timestamp::from_second(claims.exp)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let mut out_spec = Map::new();
    out_spec.insert("audiences".into(), json!(audiences));
    out_spec.insert("expirationSeconds".into(), json!(seconds));
    out_spec.insert(
        "boundObjectRef".into(),
        bound.cloned().unwrap_or(Value::Null),
    );
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": Value::Object(out_spec),
        "status": {"token": signed, "expirationTimestamp": expires},
    }))
}
