//! The EndpointSlice controller: for every Service with a selector, the pods it selects as slices of at
//! most 100 endpoints per address family and port set, labelled for the Service and owned by it.

pub mod pods;
pub mod reconciler;
pub mod tracker;
pub mod trigger;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;
use reconciler::Group;
use tracker::Tracker;
use trigger::TriggerTimes;

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming who manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Endpoints per slice (upstream's `--max-endpoints-per-slice` default).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// The node label giving an endpoint its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "endpointslice",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let services = ctx.shared::<Service>();
    let pods = ctx.shared::<Pod>();
    let slices = ctx.shared::<EndpointSlice>();
    let nodes = ctx.shared::<Node>();
    let (svc_store, slice_store) = (services.store(), slices.store());
    let (node_svcs, node_pods) = (services.store(), pods.store());
    let controller = Controller::for_shared_stream(services.subscribe(), services.store())
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| {
            let mut refs = pods::services_of(&pod, &svc_store);
            refs.extend(services_listing(&pod, &slice_store));
            refs
        })
        .watches_shared_stream(slices.subscribe(), |s: Arc<EndpointSlice>| {
            managed_service(&s)
        })
        // A node's zone is its endpoints' zone.
        .watches_shared_stream(nodes.subscribe(), move |n: Arc<Node>| {
            services_on(&n.name_any(), &node_pods, &node_svcs)
        });
    let tracker = Arc::new(Tracker::default());
    let triggers = Arc::new(TriggerTimes::default());
    let forget = triggers.clone();
    let work = runner::run("endpointslice", controller, ctx, move |svc, ctx| {
        reconcile(svc, ctx, tracker.clone(), triggers.clone())
    });
    let cleanup = cleanup(ctx.clone(), services.subscribe(), services.store(), forget);
    futures::future::join(work, cleanup).map(|_| ()).boxed()
}

/// The Service a managed slice belongs to.
fn managed_service(s: &EndpointSlice) -> Option<ObjectRef<Service>> {
    let labels = s.labels();
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let svc = labels.get(SERVICE_NAME_LABEL)?;
    Some(ObjectRef::new(svc).within(&s.namespace()?))
}

/// The Services whose slices list `pod` (its labels may no longer match them).
fn services_listing(pod: &Pod, slices: &Store<EndpointSlice>) -> Vec<ObjectRef<Service>> {
    let (ns, name) = (pod.namespace(), pod.name_any());
    slices
        .state()
        .into_iter()
        .filter(|s| s.namespace() == ns)
        .filter(|s| {
            s.endpoints.iter().any(|e| {
                e.target_ref
                    .as_ref()
                    .is_some_and(|r| r.name.as_deref() == Some(name.as_str()))
            })
        })
        .filter_map(|s| managed_service(&s))
        .collect()
}

/// The Services selecting pods bound to `node`.
fn services_on(
    node: &str,
    pods: &Store<Pod>,
    services: &Store<Service>,
) -> Vec<ObjectRef<Service>> {
    let mut refs: Vec<ObjectRef<Service>> = pods
        .state()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .flat_map(|p| pods::services_of(p, services))
        .collect();
    refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    refs.dedup();
    refs
}

/// The managed slices of Service `ns/name` in the cache.
fn managed_slices(store: &Store<EndpointSlice>, ns: &str, name: &str) -> Vec<Arc<EndpointSlice>> {
    store
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns))
        .filter(|s| managed_service(s).is_some_and(|r| r.name == name))
        .collect()
}

/// Deletes the managed slices of Services that were deleted (the controller never sees a deleted
/// Service, and the garbage collector may not run).
async fn cleanup(
    ctx: Arc<Context>,
    mut touched: futures::channel::mpsc::UnboundedReceiver<Arc<Service>>,
    services: Store<Service>,
    triggers: Arc<TriggerTimes>,
) {
    while let Some(svc) = touched.next().await {
        if services.get(&ObjectRef::from_obj(svc.as_ref())).is_some() {
            continue;
        }
        let Some(ns) = svc.namespace() else { continue };
        triggers.forget(&format!("{ns}/{}", svc.name_any()));
        let selector = format!(
            "{SERVICE_NAME_LABEL}={},{MANAGED_BY_LABEL}={MANAGED_BY}",
            svc.name_any()
        );
        let api = ctx.api::<EndpointSlice>(&ns);
        if let Err(e) = api
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&selector),
            )
            .await
        {
            debug!(service = %svc.name_any(), error = %e, "deleting the slices of a deleted Service");
        }
    }
}

/// The labels every slice of `svc` carries.
fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = pods::copied_labels(svc);
    labels.insert(SERVICE_NAME_LABEL.into(), svc.name_any());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert("service.kubernetes.io/headless".into(), String::new());
    }
    labels
}

/// The endpoints of `svc` grouped by family and resolved ports, from the pods in the cache.
fn groups(svc: &Service, selected: &[Arc<Pod>], nodes: &Store<Node>) -> Vec<Group> {
    let publish = pods::publish_not_ready(svc);
    let svc_ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut out: Vec<Group> = Vec::new();
    for fam in pods::families(svc) {
        for pod in selected {
            if !pods::eligible(pod, true) {
                continue;
            }
            let Some(ip) = pods::ip_of(pod, fam) else {
                continue;
            };
            let ports: Vec<EndpointPort> = svc_ports
                .iter()
                .filter_map(|sp| {
                    pods::target_port(pod, sp).map(|n| EndpointPort {
                        name: Some(sp.name.clone().unwrap_or_default()),
                        port: Some(n),
                        protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                        app_protocol: sp.app_protocol.clone(),
                    })
                })
                .collect();
            let serving = publish || crate::pod_state::is_ready(pod);
            let terminating = pods::terminating(pod);
            let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            let zone = node_name
                .as_ref()
                .and_then(|n| nodes.get(&ObjectRef::new(n)))
                .and_then(|n| n.labels().get(ZONE_LABEL).cloned());
            let endpoint = Endpoint {
                addresses: vec![ip],
                conditions: Some(EndpointConditions {
                    ready: Some(publish || (serving && !terminating)),
                    serving: Some(serving),
                    terminating: Some(terminating),
                }),
                hostname: pods::hostname(pod, svc),
                node_name,
                zone,
                target_ref: Some(pods::target_ref(pod)),
                ..Default::default()
            };
            match out.iter_mut().find(|g| g.family == fam && g.ports == ports) {
                Some(g) => g.endpoints.push(endpoint),
                None => out.push(Group {
                    family: fam.to_string(),
                    ports,
                    endpoints: vec![endpoint],
                }),
            }
        }
    }
    out
}

async fn reconcile(
    svc: Arc<Service>,
    ctx: Arc<Context>,
    tracker: Arc<Tracker>,
    triggers: Arc<TriggerTimes>,
) -> Result<Action> {
    if pods::selector(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        // Services without a selector keep the endpoints their users (or the API server) write.
        return Ok(Action::await_change());
    }
    let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
    let key = format!("{ns}/{name}");
    let existing = managed_slices(&ctx.store::<EndpointSlice>(), &ns, &name);
    if tracker.stale(&key, &existing) {
        debug!(service = %key, "slice cache behind this controller's writes; waiting");
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let template = EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(ns.clone()),
            labels: Some(slice_labels(&svc)),
            owner_references: Some(vec![pods::owner(&svc)]),
            ..Default::default()
        },
        address_type: String::new(),
        endpoints: Vec::new(),
        ports: None,
    };
    let selected = pods::selected(&svc, &ctx.store::<Pod>());
    let groups = groups(&svc, &selected, &ctx.store::<Node>());
    let trigger = triggers.compute(&key, &svc, &selected);
    let primary = pods::families(&svc).first().copied().unwrap_or("IPv4");
    let mut plan = reconciler::plan(
        groups,
        &existing,
        &template,
        MAX_ENDPOINTS_PER_SLICE,
        primary,
    );
    // Slices written now carry the change that caused the write; others keep what they had.
    for s in plan.update.iter_mut().chain(plan.create.iter_mut()) {
        let annotations = s.metadata.annotations.get_or_insert_with(BTreeMap::new);
        match trigger {
            Some(t) => {
                annotations.insert(trigger::LAST_CHANGE_TRIGGER_TIME.into(), trigger::format(t));
            }
            None => {
                annotations.remove(trigger::LAST_CHANGE_TRIGGER_TIME);
            }
        }
        if annotations.is_empty() {
            s.metadata.annotations = None;
        }
    }
    let api = ctx.api::<EndpointSlice>(&ns);
    let mut retry = false;
    for s in &plan.delete {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: s.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&s.name_any(), &dp).await {
            Ok(_) => tracker.deleted(&key, &s.name_any()),
            Err(e) if is_not_found(&e) => {}
            Err(e) if is_conflict(&e) => retry = true,
            Err(e) => return Err(e.into()),
        }
    }
    for s in &plan.update {
        match api.replace(&s.name_any(), &PostParams::default(), s).await {
            Ok(written) => tracker.wrote(&key, &written),
            Err(e) if is_conflict(&e) || is_not_found(&e) => retry = true,
            Err(e) => return Err(e.into()),
        }
    }
    for s in &plan.create {
        match api.create(&PostParams::default(), s).await {
            Ok(written) => tracker.wrote(&key, &written),
            // The namespace is terminating: nothing more to publish.
            Err(kube::Error::Api(st)) if st.code == 403 => {
                return Ok(Action::requeue(Duration::from_secs(30)))
            }
            Err(e) => return Err(e.into()),
        }
    }
    debug!(
        service = %key,
        created = plan.create.len(),
        updated = plan.update.len(),
        deleted = plan.delete.len(),
        "endpointslices synced"
    );
    if retry {
        // A stale cache: the watch brings the current slices; look again soon.
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    Ok(Action::await_change())
}
