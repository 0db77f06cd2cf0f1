//! The controller manager: which controllers run, and running them only while this process leads.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::context::Context;
use keel_client_kit::leading::{self, Leader};
use keel_client_kit::lease::Mode;

/// The Lease the controller manager's leader holds.
pub const LEASE_NAME: &str = "kube-controller-manager";

/// A controller: its upstream name and how to start it (it subscribes to informers when called and
/// runs when the returned future is polled).
pub struct ControllerDef {
    /// Upstream's name (`--controllers` uses it).
    pub name: &'static str,
    /// Builds the controller's loop.
    pub start: fn(&Arc<Context>) -> BoxFuture<'static, ()>,
}

/// Every controller keel has, in upstream's names.
pub fn all() -> Vec<ControllerDef> {
    crate::registry()
}

/// Which controllers to run, as upstream's `--controllers`: `*` for all, `name` to add, `-name` to drop.
#[derive(Debug, Clone)]
pub struct Selection(Vec<String>);

impl Default for Selection {
    fn default() -> Self {
        Selection(vec!["*".into()])
    }
}

impl Selection {
    /// Parses a comma-separated list, refusing names keel does not have.
    pub fn parse(list: &str) -> Result<Selection, String> {
        let known: Vec<&str> = all().iter().map(|c| c.name).collect();
        let items: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        for i in &items {
            let name = i.trim_start_matches('-');
            if name != "*" && !known.contains(&name) {
                return Err(format!(
                    "unknown controller {name:?}; known: {}",
                    known.join(", ")
                ));
            }
        }
        Ok(Selection(items))
    }

    /// Whether controller `name` is selected.
    pub fn enabled(&self, name: &str) -> bool {
        if self.0.iter().any(|i| i == &format!("-{name}")) {
            return false;
        }
        self.0.iter().any(|i| i == "*" || i == name)
    }
}

/// How the controller manager runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// This member's name: the leader Lease's holderIdentity and the Events' reportingInstance.
    pub holder: String,
    /// Which controllers run.
    pub selection: Selection,
    /// The cluster CA (PEM) published as `kube-root-ca.crt` in every namespace, when known.
    pub root_ca: Option<String>,
    /// How long a node may stay silent before its conditions turn Unknown (upstream's
    /// `--node-monitor-grace-period`, [`DEFAULT_NODE_MONITOR_GRACE_PERIOD`]).
    pub node_monitor_grace_period: Duration,
    /// How node-ipam cuts `--cluster-cidr` into `--node-cidr-mask-size` ranges; `None` with
    /// `--allocate-node-cidrs=false` (node-ipam does not run).
    pub node_cidrs: Option<crate::nodeipam::Allocator>,
    /// Whether ServiceLB writes the status of LoadBalancer Services (`--disable-servicelb` turns it off).
    pub servicelb: bool,
    /// The controllers' metric handles (registered by whoever serves `/metrics`).
    pub metrics: crate::metrics::Metrics,
}

impl Options {
    /// Options with upstream's defaults: every controller, a 50 s grace period, node ranges of /24 from
    /// 10.42.0.0/16, ServiceLB on.
    pub fn new(holder: impl Into<String>) -> Options {
        Options {
            holder: holder.into(),
            selection: Selection::default(),
            root_ca: None,
            node_monitor_grace_period: DEFAULT_NODE_MONITOR_GRACE_PERIOD,
            node_cidrs: Some(crate::nodeipam::Allocator::default()),
            servicelb: true,
            metrics: crate::metrics::Metrics::default(),
        }
    }

    /// Whether controller `name` runs: selected by `--controllers` and not turned off by its own flag.
    pub fn runs(&self, name: &str) -> bool {
        let off = match name {
            crate::nodeipam::NAME => self.node_cidrs.is_none(),
            crate::servicelb::NAME => !self.servicelb,
            _ => false,
        };
        !off && self.selection.enabled(name)
    }
}

/// Upstream's `--node-monitor-grace-period` default (50 s since 1.32).
pub const DEFAULT_NODE_MONITOR_GRACE_PERIOD: Duration = Duration::from_secs(50);

/// Runs the selected controllers until the returned future is dropped (dropping cancels in-flight
/// work safely: every write is conditional on what the controller read).
pub async fn run(client: Client, opts: Options) {
    let ctx = Context::with_options(client, &opts);
    let mut loops = Vec::new();
    for c in all() {
        if opts.runs(c.name) {
            loops.push((c.name, (c.start)(&ctx)));
        }
    }
    let informers = ctx.start_informers();
    info!(
        controllers = loops.len(),
        informers = informers.len(),
        "controllers started"
    );
    let _abort = AbortOnDrop(informers);
    let handles: Vec<_> = loops
        .into_iter()
        .map(|(name, f)| {
            tokio::spawn(async move {
                f.await;
                warn!(controller = name, "controller loop ended");
            })
        })
        .collect();
    let _abort_loops = AbortOnDrop(handles);
    std::future::pending::<()>().await;
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// Runs the controllers while `leading` is true (started when it turns true, cancelled when it turns
/// false), holding the leader Lease as `holder`, until `stop` fires. With [`Mode::Follow`] leadership
/// comes from outside (Raft) and the Lease is simply taken.
pub async fn run_while_leading(
    client: Client,
    opts: Options,
    leading: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    mode: Mode,
) {
    let holder = opts.holder.clone();
    let leader = Leader {
        client: client.clone(),
        what: "controllers",
        lease_name: LEASE_NAME,
        holder: &holder,
        mode,
    };
    leading::run_while_leading(leader, leading, stop, || run(client.clone(), opts.clone())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_turn_node_ipam_and_servicelb_off() {
        let mut o = Options::new("m");
        assert!(o.runs("node-ipam") && o.runs("servicelb") && o.runs("deployment"));
        o.node_cidrs = None;
        o.servicelb = false;
        assert!(!o.runs("node-ipam") && !o.runs("servicelb") && o.runs("deployment"));
        let o = Options {
            selection: Selection::parse("*,-servicelb").unwrap(),
            ..Options::new("m")
        };
        assert!(!o.runs("servicelb") && o.runs("node-ipam"));
    }
}
