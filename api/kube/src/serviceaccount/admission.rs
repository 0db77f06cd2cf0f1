//! The ServiceAccount admission plugin on pod create: a pod without `serviceAccountName` gets `default`,
//! a pod naming no `imagePullSecrets` gets its service account's, and unless the pod or its service
//! account turns automounting off, every container gets the projected
//! `kube-api-access-<suffix>` volume (a bound token, the cluster CA and the namespace) at
//! `/var/run/secrets/kubernetes.io/serviceaccount`, as upstream mounts it.
//!
//! Upstream refuses a pod whose service account does not exist yet; keel admits it (the token request
//! then fails on the node until the account exists), so a pod created right after its namespace does not
//! race the service-account controller.

use rand::Rng;
use serde_json::{json, Value};

use crate::object;
use crate::storage::Storage;

/// Where the token, CA and namespace appear in containers.
pub(crate) const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The volume name prefix.
pub(crate) const VOLUME_PREFIX: &str = "kube-api-access-";
/// Upstream's token lifetime for the projected volume (an hour and seven seconds, which marks it as the
/// default volume's token).
pub(crate) const EXPIRATION_SECONDS: i64 = 3607;

const SUFFIX_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Mutates a pod being created.
pub(crate) async fn admit_create(storage: &Storage, pod: &mut Value) {
    if object::path(pod, "metadata.annotations")
        .and_then(|a| a.get("kubernetes.io/config.mirror"))
        .is_some()
    {
        return;
    }
    let ns = object::namespace(pod).to_string();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let sa_name = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            spec.insert("serviceAccountName".into(), json!("default"));
            // v1 keeps the deprecated alias in step (see `validation::defaults`).
            spec.insert("serviceAccount".into(), json!("default"));
            "default".to_string()
        }
    };
    let sa = storage
        .get(&format!("/registry/serviceaccounts/{ns}/{sa_name}"), false)
        .await
        .ok()
        .flatten()
        .map(|s| s.object);
    // A pod that names no pull secrets gets its service account's, as upstream's plugin gives them.
    let has_own = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_own {
        let inherited: Vec<Value> = sa
            .as_ref()
            .and_then(|s| s.get("imagePullSecrets"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("name").and_then(Value::as_str))
            .map(|n| json!({"name": n}))
            .collect();
        if !inherited.is_empty() {
            spec.insert("imagePullSecrets".into(), Value::Array(inherited));
        }
    }
    let automount = match spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
    {
        Some(b) => b,
        None => sa.as_ref().is_none_or(|sa| {
            sa.get("automountServiceAccountToken")
                .and_then(Value::as_bool)
                != Some(false)
        }),
    };
    if !automount {
        return;
    }
    let containers = ["initContainers", "containers"];
    let mounted = containers.iter().any(|f| {
        spec.get(*f).and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("volumeMounts")
                    .and_then(Value::as_array)
                    .is_some_and(|ms| {
                        ms.iter()
                            .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH))
                    })
            })
        })
    });
    if mounted {
        return;
    }
    let mut rng = rand::thread_rng();
    let suffix: String = (0..5)
        .map(|_| SUFFIX_CHARS[rng.gen_range(0..SUFFIX_CHARS.len())] as char)
        .collect();
    let name = format!("{VOLUME_PREFIX}{suffix}");
    let volume = json!({
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ],
            "defaultMode": 420
        }
    });
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(vs) => vs.push(volume),
        None => {
            spec.insert("volumes".into(), json!([volume]));
        }
    }
    let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
    for f in containers {
        if let Some(cs) = spec.get_mut(f).and_then(Value::as_array_mut) {
            for c in cs {
                let Some(c) = c.as_object_mut() else { continue };
                match c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                    Some(ms) => ms.push(mount.clone()),
                    None => {
                        c.insert("volumeMounts".into(), json!([mount.clone()]));
                    }
                }
            }
        }
    }
}
