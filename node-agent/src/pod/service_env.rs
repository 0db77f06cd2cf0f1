//! The Service environment variables the kubelet gives every container: for each Service of the pod's
//! namespace with a cluster IP (when `enableServiceLinks` is not false), and always for `kubernetes` in
//! `default`, `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT[_<PORT NAME>]` and the Docker-link style
//! `<NAME>_PORT…` variables. In-cluster clients (client-go's in-cluster config) find the API this way.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use kube::Client;

use crate::error::{Error, Result};

/// The namespace and name of the API server's own Service.
const MASTER: (&str, &str) = ("default", "kubernetes");

/// A variable name from a Service or port name: upper case, `-` as `_`.
fn env_name(s: &str) -> String {
    s.to_ascii_uppercase().replace('-', "_")
}

/// Whether the Service has a cluster IP the variables can point at (not headless, not unset).
fn has_cluster_ip(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// The variables of `services` (each wins over a same-named one earlier in the list is not needed:
/// callers pass one Service per name).
pub fn variables(services: &[Service]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for s in services.iter().filter(|s| has_cluster_ip(s)) {
        let name = env_name(s.metadata.name.as_deref().unwrap_or_default());
        let spec = s.spec.as_ref();
        let ip = spec.and_then(|s| s.cluster_ip.clone()).unwrap_or_default();
        let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or(&[]);
        out.insert(format!("{name}_SERVICE_HOST"), ip.clone());
        let Some(first) = ports.first() else {
            continue;
        };
        out.insert(format!("{name}_SERVICE_PORT"), first.port.to_string());
        let host_port = |port: i32| {
            if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            }
        };
        for (i, p) in ports.iter().enumerate() {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.insert(
                    format!("{name}_SERVICE_PORT_{}", env_name(pn)),
                    p.port.to_string(),
                );
            }
            let proto = p.protocol.as_deref().unwrap_or("TCP");
            let lower = proto.to_ascii_lowercase();
            let url = format!("{lower}://{}", host_port(p.port));
            if i == 0 {
                out.insert(format!("{name}_PORT"), url.clone());
            }
            let prefix = format!("{name}_PORT_{}_{}", p.port, proto.to_ascii_uppercase());
            out.insert(format!("{prefix}_PROTO"), lower);
            out.insert(format!("{prefix}_PORT"), p.port.to_string());
            out.insert(format!("{prefix}_ADDR"), ip.clone());
            out.insert(prefix, url);
        }
    }
    out
}

/// Reads the Services `pod` gets variables for and returns the variables.
pub async fn for_pod(client: &Client, pod: &Pod) -> Result<BTreeMap<String, String>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut by_name: BTreeMap<String, Service> = BTreeMap::new();
    let master: Api<Service> = Api::namespaced(client.clone(), MASTER.0);
    if let Some(s) = master
        .get_opt(MASTER.1)
        .await
        .map_err(|e| Error::kube(format!("service {}/{}", MASTER.0, MASTER.1), e))?
    {
        by_name.insert(MASTER.1.to_string(), s);
    }
    if links {
        let api: Api<Service> = Api::namespaced(client.clone(), &ns);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("services of {ns}"), e))?;
        // The pod's own namespace wins over the API server's Service of the same name.
        for s in list.items {
            by_name.insert(s.metadata.name.clone().unwrap_or_default(), s);
        }
    }
    let services: Vec<Service> = by_name.into_values().collect();
    Ok(variables(&services))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variables_as_the_kubelet_writes_them() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "my-web"},
            "spec": {"clusterIP": "10.96.0.20", "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "dns-udp", "port": 53, "protocol": "UDP"}]}
        }))
        .unwrap();
        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}
        }))
        .unwrap();
        let v = variables(&[svc, headless]);
        let want = [
            ("MY_WEB_SERVICE_HOST", "10.96.0.20"),
            ("MY_WEB_SERVICE_PORT", "80"),
            ("MY_WEB_SERVICE_PORT_HTTP", "80"),
            ("MY_WEB_SERVICE_PORT_DNS_UDP", "53"),
            ("MY_WEB_PORT", "tcp://10.96.0.20:80"),
            ("MY_WEB_PORT_80_TCP", "tcp://10.96.0.20:80"),
            ("MY_WEB_PORT_80_TCP_PROTO", "tcp"),
            ("MY_WEB_PORT_80_TCP_PORT", "80"),
            ("MY_WEB_PORT_80_TCP_ADDR", "10.96.0.20"),
            ("MY_WEB_PORT_53_UDP", "udp://10.96.0.20:53"),
            ("MY_WEB_PORT_53_UDP_PROTO", "udp"),
            ("MY_WEB_PORT_53_UDP_PORT", "53"),
            ("MY_WEB_PORT_53_UDP_ADDR", "10.96.0.20"),
        ];
        assert_eq!(v.len(), want.len(), "{v:?}");
        for (k, val) in want {
            assert_eq!(v.get(k).map(String::as_str), Some(val), "{k}");
        }
    }
}
