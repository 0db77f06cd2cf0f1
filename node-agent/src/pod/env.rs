//! A container's environment as the kubelet builds it: `envFrom` first (ConfigMaps and Secrets, with
//! their prefix), then `env` in order (`value` with `$(VAR)` references to earlier variables,
//! `valueFrom` fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef), then the Service variables
//! ([`super::service_env`]) the container does not set itself.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;
use kube::Client;

use crate::error::{Error, Result};

/// Expands `$(NAME)` from `vars`; `$$` is a literal `$`; an unknown reference stays as written.
pub fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    expand_with(s, |name| vars.get(name).map(String::as_str))
}

/// [`expand`] with the values from `lookup`.
fn expand_with<'a>(s: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = s[i + 2..].find(')') {
                    let name = &s[i + 2..i + 2 + end];
                    if let Some(v) = lookup(name) {
                        out.push_str(v);
                    } else {
                        out.push_str(&s[i..i + 3 + end]);
                    }
                    i += 3 + end;
                    continue;
                }
            }
        }
        let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// What a fieldRef path names in `pod`.
pub fn field(pod: &Pod, path: &str) -> Result<String> {
    let md = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let s = |v: Option<&String>| v.cloned().unwrap_or_default();
    if let Some(key) = path
        .strip_prefix("metadata.labels['")
        .and_then(|r| r.strip_suffix("']"))
    {
        return Ok(s(md.labels.as_ref().and_then(|l| l.get(key))));
    }
    if let Some(key) = path
        .strip_prefix("metadata.annotations['")
        .and_then(|r| r.strip_suffix("']"))
    {
        return Ok(s(md.annotations.as_ref().and_then(|l| l.get(key))));
    }
    Ok(match path {
        "metadata.name" => s(md.name.as_ref()),
        "metadata.namespace" => s(md.namespace.as_ref()),
        "metadata.uid" => s(md.uid.as_ref()),
        "spec.nodeName" => s(spec.and_then(|x| x.node_name.as_ref())),
        "spec.serviceAccountName" => s(spec.and_then(|x| x.service_account_name.as_ref())),
        "status.hostIP" => s(status.and_then(|x| x.host_ip.as_ref())),
        "status.podIP" => s(status.and_then(|x| x.pod_ip.as_ref())),
        "status.podIPs" => status
            .and_then(|x| x.pod_ips.as_ref())
            .map(|ips| {
                ips.iter()
                    .map(|i| i.ip.clone())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default(),
        "status.hostIPs" => status
            .and_then(|x| x.host_ips.as_ref())
            .map(|ips| {
                ips.iter()
                    .map(|i| i.ip.clone())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default(),
        other => {
            return Err(Error::Config(format!(
                "unsupported fieldRef path {other:?}"
            )))
        }
    })
}

/// The environment of `c` in `pod` (whose status already carries the pod and host IPs).
pub async fn build(
    client: &Client,
    pod: &Pod,
    c: &Container,
    node_cpus: u64,
    node_mem: u64,
) -> Result<Vec<(String, String)>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let services = super::service_env::for_pod(client, pod).await?;
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let optional = r.optional.unwrap_or(false);
            match cms
                .get_opt(&r.name)
                .await
                .map_err(|e| Error::kube(format!("configmap {ns}/{}", r.name), e))?
            {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        set(&mut vars, format!("{prefix}{k}"), v);
                    }
                }
                None if optional => {}
                None => return Err(Error::Config(format!("configmap \"{}\" not found", r.name))),
            }
        }
        if let Some(r) = &from.secret_ref {
            let optional = r.optional.unwrap_or(false);
            match secrets
                .get_opt(&r.name)
                .await
                .map_err(|e| Error::kube(format!("secret {ns}/{}", r.name), e))?
            {
                Some(sec) => {
                    for (k, v) in sec.data.unwrap_or_default() {
                        set(
                            &mut vars,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(Error::Config(format!("secret \"{}\" not found", r.name))),
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field(pod, &f.field_path)?
            } else if let Some(r) = &from.resource_field_ref {
                super::resources::field(c, r, node_cpus, node_mem)?
            } else if let Some(k) = &from.config_map_key_ref {
                let optional = k.optional.unwrap_or(false);
                let cm = cms
                    .get_opt(&k.name)
                    .await
                    .map_err(|e| Error::kube(format!("configmap {ns}/{}", k.name), e))?;
                match cm.and_then(|cm| cm.data.and_then(|d| d.get(&k.key).cloned())) {
                    Some(v) => v,
                    None if optional => continue,
                    None => {
                        return Err(Error::Config(format!(
                            "couldn't find key {} in ConfigMap {ns}/{}",
                            k.key, k.name
                        )))
                    }
                }
            } else if let Some(k) = &from.secret_key_ref {
                let optional = k.optional.unwrap_or(false);
                let sec = secrets
                    .get_opt(&k.name)
                    .await
                    .map_err(|e| Error::kube(format!("secret {ns}/{}", k.name), e))?;
                match sec.and_then(|s| s.data.and_then(|d| d.get(&k.key).cloned())) {
                    Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                    None if optional => continue,
                    None => {
                        return Err(Error::Config(format!(
                            "couldn't find key {} in Secret {ns}/{}",
                            k.key, k.name
                        )))
                    }
                }
            } else {
                String::new()
            }
        } else {
            // References reach the Service variables too; the container's own variables win.
            expand_with(e.value.as_deref().unwrap_or(""), |name| {
                vars.get(name)
                    .or_else(|| services.get(name))
                    .map(String::as_str)
            })
        };
        set(&mut vars, e.name.clone(), value);
    }
    let mut out: Vec<(String, String)> = order
        .into_iter()
        .filter_map(|k| vars.get(&k).map(|v| (k.clone(), v.clone())))
        .collect();
    // Service variables come last and never replace one the container sets.
    out.extend(services.into_iter().filter(|(k, _)| !vars.contains_key(k)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_references_as_the_kubelet_does() {
        let vars = BTreeMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
        assert_eq!(expand("é$(A", &vars), "é$(A");
    }
}
