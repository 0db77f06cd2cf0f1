//! A hollow node's heartbeat, written as the kubelet's lease controller writes it: a PUT of the Lease
//! as last written (its resourceVersion remembered, nothing else), one GET only when that is unknown
//! or stale, a create (owned by the Node) when there is none.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;

use crate::error::{Error, Result};
use crate::node::lease::{DURATION_SECONDS, NAMESPACE};

/// The Lease of node `name` (uid `node_uid`) renewed now, at `resource_version` when given.
fn lease(name: &str, node_uid: Option<&str>, resource_version: Option<String>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.into()),
            resource_version,
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.to_string(),
                    uid: uid.to_string(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(DURATION_SECONDS),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    }
}

/// Renews node `name`'s Lease, starting from the resourceVersion last written (None: unknown);
/// returns the new one.
pub async fn renew(
    client: &Client,
    name: &str,
    node_uid: Option<&str>,
    resource_version: Option<String>,
) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let what = || format!("renewing lease {NAMESPACE}/{name}");
    let rv = match resource_version {
        Some(rv) => Some(rv),
        None => leases
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(what(), e))?
            .and_then(|l| l.metadata.resource_version),
    };
    let written = match rv {
        None => {
            leases
                .create(&PostParams::default(), &lease(name, node_uid, None))
                .await
        }
        Some(rv) => {
            match leases
                .replace(
                    name,
                    &PostParams::default(),
                    &lease(name, node_uid, Some(rv)),
                )
                .await
            {
                // Someone else wrote it since (or it went and came back): read it once and try again.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    match leases
                        .get_opt(name)
                        .await
                        .map_err(|e| Error::kube(what(), e))?
                    {
                        Some(l) => {
                            let l = lease(name, node_uid, l.metadata.resource_version);
                            leases.replace(name, &PostParams::default(), &l).await
                        }
                        None => {
                            leases
                                .create(&PostParams::default(), &lease(name, node_uid, None))
                                .await
                        }
                    }
                }
                other => other,
            }
        }
    };
    let l = written.map_err(|e| Error::kube(what(), e))?;
    Ok(l.metadata.resource_version)
}
