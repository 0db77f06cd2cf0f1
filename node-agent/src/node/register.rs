//! Registration: the Node object this agent stands for, created at start or adopted when it exists
//! (a restarted agent, or an operator who pre-created it), as the kubelet's registerWithAPIServer does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tracing::info;

use crate::error::{Error, Result};

/// What the agent says about its node besides the machine's facts.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The Node's name.
    pub name: String,
    /// The address other nodes and the API server reach this node at.
    pub internal_ip: String,
    /// The pod CIDR given on the command line (the Node's `spec.podCIDR` wins when set).
    pub pod_cidr: Option<String>,
    /// Extra labels (`--node-labels`).
    pub labels: BTreeMap<String, String>,
    /// Taints to register with (`--register-with-taints`).
    pub taints: Vec<Taint>,
    /// The port the agent's API listens on.
    pub port: i32,
}

/// The labels the kubelet always sets.
pub fn standard_labels(cfg: &NodeConfig) -> BTreeMap<String, String> {
    let arch = crate::image::oci::oci_arch().to_string();
    let mut l = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), cfg.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), arch.clone()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), arch),
    ]);
    l.extend(cfg.labels.clone());
    l
}

/// The Node object to create.
pub fn initial_node(cfg: &NodeConfig) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(cfg.name.clone()),
            labels: Some(standard_labels(cfg)),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: cfg.pod_cidr.clone(),
            pod_cidrs: cfg.pod_cidr.clone().map(|c| vec![c]),
            taints: (!cfg.taints.is_empty()).then(|| cfg.taints.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// Creates the Node, or adopts the existing one (its standard labels brought up to date); returns it.
pub async fn register(client: &Client, cfg: &NodeConfig) -> Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes
        .create(&PostParams::default(), &initial_node(cfg))
        .await
    {
        Ok(n) => {
            info!(node = %cfg.name, "node registered");
            Ok(n)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = json!({"metadata": {"labels": standard_labels(cfg)}});
            let n = nodes
                .patch(&cfg.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::kube(format!("adopting node {}", cfg.name), e))?;
            info!(node = %cfg.name, "existing node adopted");
            Ok(n)
        }
        Err(e) => Err(Error::kube(format!("registering node {}", cfg.name), e)),
    }
}

/// The node's pod CIDR: `spec.podCIDR` when the cluster set one, else the configured one.
pub fn pod_cidr(node: &Node, cfg: &NodeConfig) -> Option<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidr.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| cfg.pod_cidr.clone())
}

/// Waits up to `limit` for the cluster (the node IPAM controller) to give Node `name` a
/// `spec.podCIDR`; None when it does not.
pub async fn wait_for_pod_cidr(
    client: &Client,
    name: &str,
    limit: std::time::Duration,
) -> Option<String> {
    let api: Api<Node> = Api::all(client.clone());
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Ok(n) = api.get(name).await {
            if let Some(c) = n.spec.and_then(|s| s.pod_cidr).filter(|c| !c.is_empty()) {
                info!(cidr = %c, "pod CIDR assigned by the cluster");
                return Some(c);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    None
}
