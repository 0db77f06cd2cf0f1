//! The Endpoints controller: one legacy Endpoints object per Service with a selector, its pods' addresses
//! (ready ones in `addresses`, the rest in `notReadyAddresses`) grouped into subsets by resolved ports,
//! truncated at 1000 addresses.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use tracing::debug;

use crate::context::Context;
use crate::endpointslice::pods;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// Addresses an Endpoints object holds at most.
pub const MAX_CAPACITY: usize = 1000;
/// The annotation marking a truncated Endpoints object.
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// The annotation giving the time of the last change that triggered a write.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The label telling the mirroring controller these Endpoints already have slices.
pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "endpoints",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let services = ctx.shared::<Service>();
    let pods = ctx.shared::<Pod>();
    let endpoints = ctx.shared::<Endpoints>();
    let (svc_store, ep_store) = (services.store(), endpoints.store());
    let controller = Controller::for_shared_stream(services.subscribe(), services.store())
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| {
            let mut refs = pods::services_of(&pod, &svc_store);
            refs.extend(listing(&pod, &ep_store));
            refs
        })
        .watches_shared_stream(endpoints.subscribe(), |ep: Arc<Endpoints>| {
            Some(ObjectRef::<Service>::new(&ep.name_any()).within(&ep.namespace()?))
        });
    let work = runner::run("endpoints", controller, ctx, reconcile);
    let cleanup = cleanup(ctx.clone(), services.subscribe(), services.store());
    futures::future::join(work, cleanup).map(|_| ()).boxed()
}

/// The Services whose Endpoints list `pod`.
fn listing(pod: &Pod, store: &Store<Endpoints>) -> Vec<ObjectRef<Service>> {
    let (ns, name) = (pod.namespace(), pod.name_any());
    store
        .state()
        .into_iter()
        .filter(|e| e.namespace() == ns)
        .filter(|e| {
            e.subsets.iter().flatten().any(|s| {
                s.addresses
                    .iter()
                    .chain(s.not_ready_addresses.iter())
                    .flatten()
                    .any(|a| a.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some(&name))
            })
        })
        .filter_map(|e| Some(ObjectRef::new(&e.name_any()).within(&e.namespace()?)))
        .collect()
}

/// Deletes the Endpoints of deleted Services that had a selector (upstream deletes them on the
/// Service's deletion; Services without one keep what their users wrote).
async fn cleanup(
    ctx: Arc<Context>,
    mut touched: futures::channel::mpsc::UnboundedReceiver<Arc<Service>>,
    services: Store<Service>,
) {
    while let Some(svc) = touched.next().await {
        if pods::selector(&svc).is_none()
            || services.get(&ObjectRef::from_obj(svc.as_ref())).is_some()
        {
            continue;
        }
        let Some(ns) = svc.namespace() else { continue };
        let api = ctx.api::<Endpoints>(&ns);
        match api.delete(&svc.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                debug!(service = %svc.name_any(), error = %e, "deleting the Endpoints of a deleted Service")
            }
        }
    }
}

/// One subset being built: its ports, ready and not-ready addresses.
type Subset = (
    Vec<EndpointPort>,
    Vec<EndpointAddress>,
    Vec<EndpointAddress>,
);

/// The subsets of `svc` from the pods in the cache, and whether they were truncated.
pub fn subsets(svc: &Service, pods: &Store<Pod>) -> (Vec<EndpointSubset>, bool) {
    let publish = pods::publish_not_ready(svc);
    let family = pods::families(svc).first().copied().unwrap_or("IPv4");
    let svc_ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    // Keyed by the ports' JSON so that pods resolving ports alike share a subset.
    let mut by_ports: BTreeMap<String, Subset> = BTreeMap::new();
    for pod in pods::selected(svc, pods) {
        if !pods::eligible(&pod, publish) {
            continue;
        }
        let Some(ip) = pods::ip_of(&pod, family) else {
            continue;
        };
        let ports: Vec<EndpointPort> = svc_ports
            .iter()
            .filter_map(|sp| {
                pods::target_port(&pod, sp).map(|n| EndpointPort {
                    name: sp.name.clone().filter(|n| !n.is_empty()),
                    port: n,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        // A Service with ports but none resolved for this pod: upstream leaves the pod out.
        if ports.is_empty() && !svc_ports.is_empty() {
            continue;
        }
        let address = EndpointAddress {
            ip,
            hostname: pods::hostname(&pod, svc),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(pods::target_ref(&pod)),
        };
        let key = serde_json::to_string(&ports).unwrap_or_default();
        let entry = by_ports
            .entry(key)
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if publish || crate::pod_state::is_ready(&pod) {
            entry.1.push(address);
        } else {
            entry.2.push(address);
        }
    }
    let mut out: Vec<EndpointSubset> = Vec::new();
    let mut left = MAX_CAPACITY;
    let total: usize = by_ports.values().map(|(_, r, n)| r.len() + n.len()).sum();
    // Ready addresses are kept before not-ready ones when truncating.
    let mut groups: Vec<_> = by_ports.into_values().collect();
    for (_, ready, _) in groups.iter_mut() {
        ready.sort_by(|a, b| a.ip.cmp(&b.ip));
        ready.truncate(left);
        left -= ready.len();
    }
    for (ports, ready, mut not_ready) in groups {
        not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
        not_ready.truncate(left);
        left -= not_ready.len();
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        out.push(EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then_some(ports),
        });
    }
    (out, total > MAX_CAPACITY)
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action> {
    if pods::selector(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
    let (subsets, truncated) = subsets(&svc, &ctx.store::<Pod>());
    let mut labels = pods::copied_labels(&svc);
    labels.insert(SKIP_MIRROR.into(), "true".into());
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert("service.kubernetes.io/headless".into(), String::new());
    }
    let cached = ctx
        .store::<Endpoints>()
        .get(&ObjectRef::new(&name).within(&ns));
    let mut annotations = cached
        .as_ref()
        .and_then(|e| e.metadata.annotations.clone())
        .unwrap_or_default();
    if truncated {
        annotations.insert(OVER_CAPACITY.into(), "truncated".into());
    } else {
        annotations.remove(OVER_CAPACITY);
    }
    let subsets = (!subsets.is_empty()).then_some(subsets);
    if let Some(old) = &cached {
        let same = old.subsets.clone().filter(|s| !s.is_empty()) == subsets
            && old.metadata.labels.clone().unwrap_or_default() == labels
            && old.metadata.annotations.clone().unwrap_or_default() == annotations;
        if same {
            return Ok(Action::await_change());
        }
    }
    annotations.insert(
        LAST_CHANGE_TRIGGER_TIME.into(),
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_string(),
    );
    let api = ctx.api::<Endpoints>(&ns);
    let result = match cached {
        Some(old) => {
            let mut ep = (*old).clone();
            ep.subsets = subsets;
            ep.metadata.labels = Some(labels);
            ep.metadata.annotations = Some(annotations);
            api.replace(&name, &PostParams::default(), &ep)
                .await
                .map(|_| ())
        }
        None => {
            let ep = Endpoints {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(labels),
                    annotations: Some(annotations),
                    ..Default::default()
                },
                subsets,
            };
            api.create(&PostParams::default(), &ep).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(Action::await_change()),
        // The cache was behind: the watch brings the current object and another pass.
        Err(e) if is_conflict(&e) || is_not_found(&e) => {
            Ok(Action::requeue(Duration::from_millis(500)))
        }
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Action::requeue(Duration::from_secs(30))),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodIP, PodStatus, ServicePort, ServiceSpec};
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event as WatchEvent;

    fn pod(i: usize, ready: bool) -> Pod {
        let ip = format!("10.1.{}.{}", i / 250, i % 250);
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("p{i}")),
                namespace: Some("ns".into()),
                labels: Some([("app".to_string(), "a".to_string())].into()),
                ..Default::default()
            },
            spec: Some(Default::default()),
            status: Some(PodStatus {
                pod_ips: Some(vec![PodIP { ip: ip.clone() }]),
                pod_ip: Some(ip),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn service() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("s".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_string(), "a".to_string())].into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn more_than_1000_addresses_are_truncated_keeping_ready_ones() {
        let (store, mut writer) = reflector::store();
        for i in 0..1100 {
            writer.apply_watcher_event(&WatchEvent::Apply(pod(i, i >= 100)));
        }
        let (subsets, truncated) = subsets(&service(), &store);
        assert!(truncated);
        let ready: usize = subsets
            .iter()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        let not_ready: usize = subsets
            .iter()
            .map(|s| s.not_ready_addresses.as_ref().map_or(0, Vec::len))
            .sum();
        assert_eq!((ready, not_ready), (1000, 0));
    }

    #[test]
    fn ready_and_not_ready_pods_share_a_subset() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&WatchEvent::Apply(pod(1, true)));
        writer.apply_watcher_event(&WatchEvent::Apply(pod(2, false)));
        let (subsets, truncated) = subsets(&service(), &store);
        assert!(!truncated);
        assert_eq!(subsets.len(), 1);
        assert_eq!(subsets[0].addresses.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            subsets[0].not_ready_addresses.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(subsets[0].ports.as_ref().map(|p| p[0].port), Some(80));
    }
}
