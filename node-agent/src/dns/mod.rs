//! The cluster DNS resolver every `keel agent` runs in place of CoreDNS.
//!
//! Model: two reflectors (Services and EndpointSlices, all namespaces) feed a [`RecordTable`],
//! rebuilt whole after each burst of changes and handed to the [`Resolver`] through a watch
//! channel. The resolver listens on the node's address over UDP and TCP ([`server`]), answers
//! names under the cluster domain from the table ([`records`]) and forwards the rest to the node's
//! own resolvers ([`upstream`]). [`publish`] makes it reachable as the `kube-system/kube-dns`
//! Service: netprog DNATs the Service IP to the endpoint on the pod's own node.
//!
//! - [`records`]: the record table and its pure lookup;
//! - [`server`]: the UDP and TCP listener and the per-packet resolver;
//! - [`upstream`]: forwarding, UDP then TCP, to the node's resolvers;
//! - [`publish`]: the kube-dns Service and this node's EndpointSlice;
//! - [`stats`]: the counters.
//!
//! Until both caches have synced, names under the domain get SERVFAIL (never an NXDOMAIN that
//! clients would cache for a Service that exists); forwarding works from the start.

pub mod publish;
pub mod records;
pub mod server;
pub mod stats;
pub mod upstream;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::Store;
use kube::Client;
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

pub use records::{Lookup, RecordTable, Zone};
pub use server::{serve, Listener, Resolver, Transport};
pub use stats::DnsStats;
pub use upstream::{parse_resolv_conf, Upstream, UPSTREAM_TIMEOUT};

use crate::error::{Error, Result};
use keel_client_kit::reflect::reflect_all;

/// How long a change waits for the rest of its burst before the table is rebuilt.
const BATCH: Duration = Duration::from_millis(20);

/// How the node's resolver runs.
#[derive(Debug, Clone)]
pub struct DnsOptions {
    /// Where to listen (UDP and TCP): the node's address, port 53.
    pub listen: SocketAddr,
    /// The cluster domain.
    pub domain: String,
    /// The node's own resolvers, for names outside the cluster domain.
    pub upstreams: Vec<SocketAddr>,
    /// This node's name (its EndpointSlice is `kube-dns-<node>`).
    pub node: String,
    /// The ClusterIP of the `kube-dns` Service.
    pub service_ip: Ipv4Addr,
}

impl DnsOptions {
    /// Options with the usual defaults: port 53 on `node_ip`, `cluster.local`, 10.96.0.10.
    pub fn new(node: &str, node_ip: std::net::IpAddr, upstreams: Vec<SocketAddr>) -> DnsOptions {
        DnsOptions {
            listen: SocketAddr::new(node_ip, 53),
            domain: "cluster.local".to_string(),
            upstreams,
            node: node.to_string(),
            service_ip: Ipv4Addr::new(10, 96, 0, 10),
        }
    }
}

/// Rebuilds the table from the caches after every burst of changes, once both have synced.
async fn keep_table(
    zone: Zone,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    wake: Arc<Notify>,
    table: watch::Sender<Arc<RecordTable>>,
) -> Result<()> {
    services
        .wait_until_ready()
        .await
        .map_err(|_| Error::WatchEnded("services"))?;
    slices
        .wait_until_ready()
        .await
        .map_err(|_| Error::WatchEnded("endpointslices"))?;
    let mut first = true;
    loop {
        let all_services = services.state();
        let all_slices = slices.state();
        // The SOA serial only has to grow; seconds since the epoch do (u32 lasts until 2106).
        let serial = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let built = RecordTable::build(
            zone.clone(),
            all_services.iter().map(|s| s.as_ref()),
            all_slices.iter().map(|s| s.as_ref()),
            serial,
        );
        if first {
            info!(services = built.services(), "cluster DNS records synced");
            first = false;
        } else {
            debug!(services = built.services(), "cluster DNS records rebuilt");
        }
        table.send_replace(Arc::new(built));
        wake.notified().await;
        // Let the rest of a burst arrive, so it costs one rebuild.
        tokio::time::sleep(BATCH).await;
    }
}

/// Runs the node's resolver until dropped: binds `opts.listen`, publishes the kube-dns Service and
/// this node's EndpointSlice, keeps the records current and answers queries. Fails when the
/// address cannot be bound or a watch ends.
pub async fn run(client: Client, opts: DnsOptions, stats: Arc<DnsStats>) -> Result<()> {
    let zone = Zone::new(&opts.domain)?;
    let listener = Listener::bind(opts.listen).await?;
    let local = listener.local_addr();
    // Forwarding to ourselves would loop until every query times out.
    let upstreams: Vec<SocketAddr> = opts
        .upstreams
        .iter()
        .copied()
        .filter(|u| *u != local && *u != opts.listen)
        .collect();
    if upstreams.is_empty() {
        warn!("no upstream resolvers: names outside the cluster domain will get SERVFAIL");
    }
    info!(%local, domain = %zone.apex(), ?upstreams, "cluster DNS listening");

    let (table_tx, table_rx) = watch::channel(Arc::new(RecordTable::unsynced(zone.clone())));
    let resolver = Arc::new(Resolver::new(
        table_rx,
        Upstream::new(upstreams, UPSTREAM_TIMEOUT),
        stats,
    ));
    let wake = Arc::new(Notify::new());
    let (services, s_driver) = reflect_all::<Service>(&client, &wake);
    let (slices, e_driver) = reflect_all::<EndpointSlice>(&client, &wake);
    let tables = keep_table(zone, services, slices, wake, table_tx);
    let published = publish::keep_published(client, opts.node.clone(), opts.service_ip, local);
    tokio::select! {
        () = listener.serve(resolver) => Ok(()),
        r = tables => r,
        () = s_driver => Err(Error::WatchEnded("services")),
        () = e_driver => Err(Error::WatchEnded("endpointslices")),
        () = published => Ok(()),
    }
}
