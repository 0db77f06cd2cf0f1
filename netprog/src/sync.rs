//! The loop: one reflector each for Services, EndpointSlices, Nodes, and (for hostPorts and
//! NetworkPolicy) Pods,
//! Namespaces and NetworkPolicies; every change wakes the loop,
//! which waits a moment for the rest of a burst, renders the whole table and applies it in one
//! transaction when the text differs from what is in force. Nothing is written until all the
//! caches have synced (a half-listed cluster would delete good rules). A table `nft` refuses is
//! logged, counted, reported as a `SyncProxyRulesFailed` Event on the Node, and retried; the last good
//! table stays in force meanwhile.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use keel_client_kit::reflect::reflect;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::error::{Error, Result};
use crate::latency::ProgrammingLatency;
use crate::policy::{self, PolicyPod};
use crate::render::{self, Existing};
use crate::{build, nft, routes};

/// How netprog runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's name.
    pub node: String,
    /// The cluster's pod range.
    pub cluster_cidr: Ipv4Net,
    /// Where netprog keeps its little state (the sysctl values it replaced).
    pub state_dir: PathBuf,
    /// How long a change waits for the rest of its burst before the table is written.
    pub batch: Duration,
    /// The longest the loop goes without re-applying the whole table, changed or not (kube-proxy's
    /// full-sync period). A whole-table transaction costs seconds at thousands of Services, so this
    /// is long; a table someone removed is noticed sooner, by [`Options::check`].
    pub resync: Duration,
    /// How often the loop checks, cheaply (`nft list tables`), that the table is still there.
    pub check: Duration,
}

impl Options {
    /// Options with upstream-like timings.
    pub fn new(node: &str, cluster_cidr: Ipv4Net, state_dir: PathBuf) -> Options {
        Options {
            node: node.to_string(),
            cluster_cidr,
            state_dir,
            batch: Duration::from_millis(100),
            resync: Duration::from_secs(3600),
            check: Duration::from_secs(30),
        }
    }
}

/// What netprog has done, for metrics and diagnostics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Transactions applied.
    pub syncs: AtomicU64,
    /// Transactions `nft` refused or could not run.
    pub failures: AtomicU64,
    /// Duration of the last successful apply, in microseconds.
    pub last_apply_micros: AtomicU64,
    /// Service ports with endpoints in the table.
    pub services: AtomicU64,
    /// Endpoint chains in the table.
    pub endpoints: AtomicU64,
    /// Routes to other nodes' pod subnets in place.
    pub routes: AtomicU64,
    /// The size of the last applied script, in bytes.
    pub script_bytes: AtomicU64,
    /// This node's pods some NetworkPolicy isolates.
    pub isolated_pods: AtomicU64,
    /// The last failure, if the last sync failed.
    pub last_error: Mutex<Option<String>>,
    /// Network programming latency: EndpointSlice change to rules in force.
    pub programming: ProgrammingLatency,
}

/// Runs netprog until the future is dropped. Removing the table on the way out is
/// [`cleanup`]'s job: a restarted agent finds its rules still in force.
pub async fn run(client: Client, opts: Options, stats: Arc<Stats>) -> Result<()> {
    routes::enable_forwarding(&opts.state_dir.join("sysctl-before.json"))?;
    let wake = Arc::new(Notify::new());
    let (services, s_driver) = reflect(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    );
    let (slices, e_driver) = reflect(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    );
    let (nodes, n_driver) = reflect(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    );
    let (pods, p_driver) = reflect(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    );
    let (namespaces, ns_driver) = reflect(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    );
    let (policies, np_driver) = reflect(
        Api::<NetworkPolicy>::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    );
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "kube-proxy".into(),
            instance: Some(opts.node.clone()),
        },
    );
    let node_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(opts.node.clone()),
        uid: Some(opts.node.clone()),
        ..ObjectReference::default()
    };
    let programme = async {
        for (store, what) in [
            (services.wait_until_ready().await.is_ok(), "services"),
            (slices.wait_until_ready().await.is_ok(), "endpointslices"),
            (nodes.wait_until_ready().await.is_ok(), "nodes"),
            (pods.wait_until_ready().await.is_ok(), "pods"),
            (namespaces.wait_until_ready().await.is_ok(), "namespaces"),
            (policies.wait_until_ready().await.is_ok(), "networkpolicies"),
        ] {
            if !store {
                return Err(Error::Watch {
                    what,
                    message: "the watch ended before its first list".into(),
                });
            }
        }
        info!(node = %opts.node, "netprog: caches synced; programming the node");
        let mut existing = nft::existing().await?;
        let mut applied: Option<String> = None;
        let mut last_apply = Instant::now();
        let mut failing = false;
        loop {
            let me = nodes.get(&reflector::ObjectRef::new(&opts.node));
            let node = build::node_view(&opts.node, me.as_deref(), opts.cluster_cidr);
            let all_services = services.state();
            let all_slices = slices.state();
            let mut state = build::proxy_state(
                node,
                all_services.iter().map(|s| s.as_ref()),
                all_slices.iter().map(|s| s.as_ref()),
            );
            state.host_ports =
                build::host_ports(&opts.node, pods.state().iter().map(|p| p.as_ref()));
            let all_pods: Vec<PolicyPod> = pods
                .state()
                .iter()
                .filter_map(|p| PolicyPod::from_pod(p))
                .collect();
            let all_namespaces = namespaces.state();
            let all_policies = policies.state();
            let isolation = policy::compile(
                &opts.node,
                &all_pods,
                all_namespaces.iter().map(|n| n.as_ref()),
                all_policies.iter().map(|p| p.as_ref()),
            );
            stats
                .isolated_pods
                .store(isolation.len() as u64, Ordering::Relaxed);
            let ruleset = render::render_with_policy(&state, &isolation, &existing);
            let stale = last_apply.elapsed() >= opts.resync
                || (applied.is_some() && !nft::table_exists().await.unwrap_or(true));
            if applied.as_deref() != Some(ruleset.text.as_str()) || stale || failing {
                let started = Instant::now();
                match nft::apply(&ruleset.text).await {
                    Ok(()) => {
                        let took = started.elapsed();
                        stats.syncs.fetch_add(1, Ordering::Relaxed);
                        stats
                            .last_apply_micros
                            .store(took.as_micros() as u64, Ordering::Relaxed);
                        stats
                            .services
                            .store(ruleset.services as u64, Ordering::Relaxed);
                        stats
                            .endpoints
                            .store(ruleset.endpoints as u64, Ordering::Relaxed);
                        stats
                            .script_bytes
                            .store(ruleset.text.len() as u64, Ordering::Relaxed);
                        if let Ok(mut e) = stats.last_error.lock() {
                            *e = None;
                        }
                        debug!(
                            services = ruleset.services,
                            endpoints = ruleset.endpoints,
                            micros = took.as_micros() as u64,
                            "table applied"
                        );
                        existing = Existing {
                            chains: ruleset.chains.clone(),
                            sets: ruleset.sets.clone(),
                        };
                        applied = Some(ruleset.text);
                        last_apply = Instant::now();
                        failing = false;
                    }
                    Err(e) => {
                        stats.failures.fetch_add(1, Ordering::Relaxed);
                        warn!(error = %e, "table not applied; the previous one stays in force");
                        if let Ok(mut last) = stats.last_error.lock() {
                            *last = Some(e.to_string());
                        }
                        if !failing {
                            let ev = Event {
                                type_: EventType::Warning,
                                reason: "SyncProxyRulesFailed".into(),
                                note: Some(truncate(&e.to_string(), 1024)),
                                action: "SyncProxyRules".into(),
                                secondary: None,
                            };
                            let _ = recorder.publish(&ev, &node_ref).await;
                        }
                        failing = true;
                        // Someone may have changed the table under us: read it again.
                        existing = nft::existing().await.unwrap_or_default();
                    }
                }
            }
            if !failing {
                // What the slices said is in force now (applied, or it changed nothing in the table).
                stats.programming.programmed(
                    all_slices.iter().map(|s| s.as_ref()),
                    std::time::SystemTime::now(),
                );
            }
            let all_nodes = nodes.state();
            let wanted = routes::wanted(all_nodes.iter().map(|n| n.as_ref()), &opts.node);
            match routes::sync(&wanted).await {
                Ok(n) => stats.routes.store(n as u64, Ordering::Relaxed),
                Err(e) => warn!(error = %e, "pod routes not synced"),
            }
            let wait = if failing {
                Duration::from_secs(5)
            } else {
                opts.check
            };
            let _ = tokio::time::timeout(wait, wake.notified()).await;
            // Let the rest of a burst arrive, so it becomes one transaction.
            tokio::time::sleep(opts.batch).await;
        }
    };
    tokio::select! {
        r = programme => r,
        _ = s_driver => Err(Error::Watch { what: "services", message: "stream ended".into() }),
        _ = e_driver => Err(Error::Watch { what: "endpointslices", message: "stream ended".into() }),
        _ = n_driver => Err(Error::Watch { what: "nodes", message: "stream ended".into() }),
        _ = p_driver => Err(Error::Watch { what: "pods", message: "stream ended".into() }),
        _ = ns_driver => Err(Error::Watch { what: "namespaces", message: "stream ended".into() }),
        _ = np_driver => Err(Error::Watch { what: "networkpolicies", message: "stream ended".into() }),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Removes what netprog installed: the table, the pod routes, and the host settings it changed.
pub async fn cleanup(state_dir: &std::path::Path) -> Result<()> {
    nft::remove().await?;
    let n = routes::remove_all().await?;
    routes::restore_forwarding(&state_dir.join("sysctl-before.json"))?;
    info!(
        routes = n,
        "netprog: table, routes and host settings removed"
    );
    Ok(())
}
