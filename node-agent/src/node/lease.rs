//! The node's heartbeat: `kube-node-lease/<node>` (leaseDurationSeconds 40) renewed every 10 s, owned
//! by the Node so it goes with it; on errors retried with back-off from 200 ms to 7 s, as the kubelet's
//! lease controller does. The node lifecycle controller marks the node Unknown when renewals stop.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::Client;
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// The namespace of node Leases.
pub const NAMESPACE: &str = "kube-node-lease";
/// How long a renewal holds.
pub const DURATION_SECONDS: i32 = 40;
/// How often the agent renews (a quarter of the duration).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);

fn lease_for(node: &Node, name: &str) -> Lease {
    let owner = node.metadata.uid.clone().map(|uid| OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.to_string(),
        uid,
        ..Default::default()
    });
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.into()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(DURATION_SECONDS),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    }
}

/// Renews (or creates) the Lease once.
pub async fn renew(client: &Client, node: &Node, name: &str) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let what = || format!("renewing lease {NAMESPACE}/{name}");
    match leases
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(what(), e))?
    {
        Some(mut l) => {
            let spec = l.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(name.to_string());
            spec.lease_duration_seconds = Some(DURATION_SECONDS);
            spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
            leases
                .replace(name, &PostParams::default(), &l)
                .await
                .map_err(|e| Error::kube(what(), e))?;
        }
        None => {
            leases
                .create(&PostParams::default(), &lease_for(node, name))
                .await
                .map_err(|e| Error::kube(what(), e))?;
        }
    }
    Ok(())
}

/// Renews the Lease every [`RENEW_INTERVAL`] for ever.
pub async fn run(client: Client, node: Node, name: String) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match renew(&client, &node, &name).await {
            Ok(()) => {
                debug!(node = %name, "node lease renewed");
                backoff = Duration::from_millis(200);
                tokio::time::sleep(RENEW_INTERVAL).await;
            }
            Err(e) => {
                warn!(node = %name, error = %e, "node lease not renewed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(7));
            }
        }
    }
}
