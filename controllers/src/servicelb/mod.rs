//! ServiceLB, as k3s's (klipper) without its DaemonSet: every Service of `type: LoadBalancer` without a
//! `spec.loadBalancerClass` gets `status.loadBalancer.ingress`, one `{ip}` per address the Ready,
//! schedulable nodes offer (see [`addresses`]), written through `/status` whenever nodes come, go or
//! change. A Service that stops being a LoadBalancer has its ingress cleared; one with a class belongs
//! to another implementation and is left alone. Traffic to those addresses on the Service's ports is
//! netprog's (each node's agent); this controller only writes status.
//!
//! Events as k3s: `UpdatedLoadBalancer` when the addresses change, `UnAvailableLoadBalancer` (Warning)
//! when no node is left.

pub mod addresses;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::debug;

use crate::context::Context;
use crate::error::{is_not_found, Error, Result};
use crate::manager::ControllerDef;
use crate::runner;
use addresses::{current, handled, ingress, is_load_balancer, offered, up_to_date};

/// The name `--controllers` knows it by (k3s's `--disable servicelb`).
pub const NAME: &str = "servicelb";
/// The Events' reporting controller.
pub const COMPONENT: &str = "service-lb-controller";

/// Registration.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

/// What each node offered when last seen, so that a heartbeat that changes nothing a load balancer
/// lists wakes no Service. Only a filter on triggers: reconcile reads the caches.
#[derive(Default)]
struct Offers(Mutex<HashMap<String, Option<Vec<IpAddr>>>>);

impl Offers {
    /// Records what `node` offers now (nothing once deleted); whether that changed.
    fn changed(&self, node: &Node, nodes: &Store<Node>) -> bool {
        let now = match nodes.get(&ObjectRef::from_obj(node)) {
            Some(n) => offered(&n),
            None => None,
        };
        let Ok(mut seen) = self.0.lock() else {
            return true;
        };
        let before = if now.is_some() {
            seen.insert(node.name_any(), now.clone())
        } else {
            seen.remove(&node.name_any())
        };
        before.flatten() != now
    }
}

/// The Services ServiceLB answers for.
fn handled_services(services: &Store<Service>) -> Vec<ObjectRef<Service>> {
    services
        .state()
        .iter()
        .filter(|s| handled(s))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let services = ctx.shared::<Service>();
    let nodes = ctx.shared::<Node>();
    let slices = ctx.shared::<EndpointSlice>();
    let (by_node, by_slice) = (services.store(), services.store());
    let node_store = nodes.store();
    let offers = Offers::default();
    let controller = Controller::for_shared_stream(services.subscribe(), services.store())
        .watches_shared_stream(nodes.subscribe(), move |n: Arc<Node>| {
            if offers.changed(&n, &node_store) {
                handled_services(&by_node)
            } else {
                Vec::new()
            }
        })
        // Local Services list only the nodes running their ready endpoints.
        .watches_shared_stream(slices.subscribe(), move |s: Arc<EndpointSlice>| {
            let name = s.labels().get(addresses::SERVICE_NAME_LABEL)?.clone();
            let r = ObjectRef::<Service>::new(&name).within(&s.namespace()?);
            by_slice
                .get(&r)
                .filter(|svc| handled(svc) && addresses::local_traffic(svc))
                .map(|_| r)
        });
    runner::run(NAME, controller, ctx, reconcile)
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action> {
    if svc.metadata.deletion_timestamp.is_some() || addresses::class(&svc).is_some() {
        return Ok(Action::await_change());
    }
    let lb = is_load_balancer(&svc);
    let want: Vec<IpAddr> = if lb {
        // Compute only from listed caches: at start an empty one would clear every load balancer for a
        // moment (upstream's controllers wait for their caches to sync the same way).
        let nodes = ctx.store::<Node>();
        nodes
            .wait_until_ready()
            .await
            .map_err(|_| Error::CacheStopped("Node"))?;
        let slices = if addresses::local_traffic(&svc) {
            let slices = ctx.store::<EndpointSlice>();
            slices
                .wait_until_ready()
                .await
                .map_err(|_| Error::CacheStopped("EndpointSlice"))?;
            slices.state()
        } else {
            Vec::new()
        };
        ingress(&svc, &nodes.state(), &slices)
    } else {
        Vec::new()
    };
    if up_to_date(&svc, &want) {
        return Ok(Action::await_change());
    }
    let list: Vec<serde_json::Value> = want
        .iter()
        .map(|ip| json!({"ip": ip.to_string()}))
        .collect();
    let status = if list.is_empty() {
        json!({"status": {"loadBalancer": {"ingress": null}}})
    } else {
        json!({"status": {"loadBalancer": {"ingress": list}}})
    };
    let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
    match ctx
        .api::<Service>(&ns)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    }
    debug!(service = %format!("{ns}/{name}"), ingress = ?want, "load balancer status written");
    if lb {
        record(&ctx, &svc, &want).await;
    }
    Ok(Action::await_change())
}

/// k3s's Events for a changed load balancer.
async fn record(ctx: &Context, svc: &Service, want: &[IpAddr]) {
    let before: Vec<String> = current(svc)
        .into_iter()
        .filter_map(|(ip, h)| ip.or(h))
        .collect();
    let after: Vec<String> = want.iter().map(IpAddr::to_string).collect();
    let event = if after.is_empty() {
        Event {
            type_: EventType::Warning,
            reason: "UnAvailableLoadBalancer".into(),
            note: Some("There are no available nodes for LoadBalancer".into()),
            action: "UpdateLoadBalancer".into(),
            secondary: None,
        }
    } else {
        Event {
            type_: EventType::Normal,
            reason: "UpdatedLoadBalancer".into(),
            note: Some(format!(
                "Updated LoadBalancer with new IPs: [{}] -> [{}]",
                before.join(" "),
                after.join(" ")
            )),
            action: "UpdateLoadBalancer".into(),
            secondary: None,
        }
    };
    // A fresh recorder: these Events differ in their message, and a recorder would fold them into one series.
    if let Err(e) = ctx
        .recorder(COMPONENT)
        .publish(&event, &svc.object_ref(&()))
        .await
    {
        debug!(service = %svc.name_any(), error = %e, "recording a load balancer Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeStatus};
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event as WatchEvent;

    fn node(ready: &str, ip: &str, heartbeat: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                ..Default::default()
            },
            spec: None,
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    message: Some(heartbeat.into()),
                    ..Default::default()
                }]),
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_changes_to_what_a_node_offers_wake_services() {
        let (store, mut writer) = kube::runtime::reflector::store::<Node>();
        let offers = Offers::default();
        let seen = |n: Node, writer: &mut kube::runtime::reflector::store::Writer<Node>| {
            writer.apply_watcher_event(&WatchEvent::Apply(n.clone()));
            offers.changed(&n, &store)
        };
        assert!(seen(node("True", "192.0.2.1", "1"), &mut writer));
        // A heartbeat: same readiness, same address.
        assert!(!seen(node("True", "192.0.2.1", "2"), &mut writer));
        assert!(seen(node("True", "192.0.2.7", "3"), &mut writer));
        assert!(seen(node("False", "192.0.2.7", "4"), &mut writer));
        assert!(!seen(node("Unknown", "192.0.2.7", "5"), &mut writer));
        assert!(seen(node("True", "192.0.2.7", "6"), &mut writer));
        let gone = node("True", "192.0.2.7", "7");
        writer.apply_watcher_event(&WatchEvent::Delete(gone.clone()));
        assert!(offers.changed(&gone, &store));
        assert!(!offers.changed(&gone, &store));
    }
}
