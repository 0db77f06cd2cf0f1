//! A leader's `coordination.k8s.io` Lease (`kube-system/kube-controller-manager`, `kube-system/kube-scheduler`),
//! as client-go's leader election keeps it: holderIdentity, leaseDurationSeconds 15, renewed every 2 s, leaseTransitions counted.
//!
//! In `keel server` Raft already chose the leader, so the Lease is taken at once ([`Mode::Follow`]); out of
//! process (`keel controllers`, `keel scheduler`) the Lease *is* the election ([`Mode::Elect`]), judged by the local clock
//! since this candidate last saw it change, so no clock sync is needed.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;
use tracing::{debug, info};

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// How long a Lease holds (upstream's default).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews and a candidate retries.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// A holder that could not renew for this long stops leading.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// How the Lease is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Leadership is decided elsewhere (Raft); take the Lease whoever holds it.
    Follow,
    /// The Lease decides: take it only when it is free, ours, or expired.
    Elect,
}

/// One leader Lease and what this candidate has seen of it.
pub struct LeaderLease {
    api: Api<Lease>,
    name: String,
    holder: String,
    mode: Mode,
    observed: Option<(String, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl LeaderLease {
    /// The Lease `kube-system/<name>` held as `holder`.
    pub fn new(client: Client, name: &str, holder: &str, mode: Mode) -> Self {
        LeaderLease {
            api: Api::namespaced(client, "kube-system"),
            name: name.to_string(),
            holder: holder.to_string(),
            mode,
            observed: None,
        }
    }

    /// Takes or renews the Lease; returns whether this candidate holds it now.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let secs = i32::try_from(LEASE_DURATION.as_secs()).unwrap_or(15);
        let current = match self.api.get(&self.name).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some("kube-system".into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.holder.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(now()),
                        renew_time: Some(now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await?;
                info!(lease = %self.name, holder = %self.holder, "took the leader Lease");
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let spec = current.spec.clone().unwrap_or_default();
        let held_by = spec.holder_identity.clone().unwrap_or_default();
        let record = format!(
            "{held_by}/{}",
            current
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default()
        );
        let changed = self
            .observed
            .as_ref()
            .map(|(r, _)| r != &record)
            .unwrap_or(true);
        if changed {
            self.observed = Some((record, Instant::now()));
        }
        let ours = held_by == self.holder;
        if self.mode == Mode::Elect && !ours && !held_by.is_empty() {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(LEASE_DURATION, Duration::from_secs);
            let seen = self.observed.as_ref().map(|(_, at)| at.elapsed());
            if seen.is_some_and(|s| s < duration) {
                return Ok(false);
            }
        }
        let mut lease = current;
        let mut next = spec;
        if !ours {
            next.acquire_time = Some(now());
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0).saturating_add(1));
            next.holder_identity = Some(self.holder.clone());
        }
        next.lease_duration_seconds = Some(secs);
        next.renew_time = Some(now());
        lease.spec = Some(next);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        if !ours {
            info!(lease = %self.name, holder = %self.holder, from = %held_by, "took the leader Lease");
        }
        Ok(true)
    }

    /// Writes an empty holder so the next candidate need not wait (client-go's ReleaseOnCancel).
    pub async fn release(&mut self) {
        if let Ok(mut lease) = self.api.get(&self.name).await {
            let mut spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.holder.as_str()) {
                return;
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            lease.spec = Some(spec);
            let _ = self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await;
        }
    }
}

/// Keeps the Lease renewed while this member leads (Raft decides; the Lease only tells tools who it is).
pub async fn hold(mut lease: LeaderLease) {
    loop {
        if let Err(e) = lease.try_acquire_or_renew().await {
            debug!(error = %e, lease = %lease.name, "renewing the leader Lease failed; retrying");
        }
        tokio::time::sleep(RETRY_PERIOD).await;
    }
}

/// Client-go-style election on the Lease: the returned flag is true while this candidate holds it. A
/// holder that cannot renew within [`RENEW_DEADLINE`] lets go.
pub fn elect(client: Client, name: &str, holder: &str) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    let mut lease = LeaderLease::new(client, name, holder, Mode::Elect);
    tokio::spawn(async move {
        let mut last_renew: Option<Instant> = None;
        loop {
            match lease.try_acquire_or_renew().await {
                Ok(true) => {
                    last_renew = Some(Instant::now());
                    tx.send_if_modified(|v| !std::mem::replace(v, true));
                }
                Ok(false) => {
                    last_renew = None;
                    tx.send_if_modified(|v| std::mem::replace(v, false));
                }
                Err(e) => {
                    debug!(error = %e, "leader election request failed");
                    if last_renew.is_none_or(|t| t.elapsed() > RENEW_DEADLINE) {
                        tx.send_if_modified(|v| std::mem::replace(v, false));
                    }
                }
            }
            if tx.is_closed() {
                lease.release().await;
                return;
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    });
    rx
}
