//! The namespace controller: a namespace with a deletionTimestamp has its content deleted, reports how
//! that goes in its conditions, and once empty has the `kubernetes` finalizer removed through
//! `/finalize`, after which the API server removes it.

pub mod conditions;
pub mod content;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::ResourceExt;
use serde_json::json;
use tracing::{debug, info};

use crate::backoff::Backoff;
use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// The finalizer the namespace controller owns.
pub const FINALIZER: &str = "kubernetes";
/// The longest wait before looking at remaining content again.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "namespace",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let namespaces = ctx.shared::<Namespace>();
    let controller = Controller::for_shared_stream(namespaces.subscribe(), namespaces.store());
    runner::run("namespace", controller, ctx, reconcile)
}

/// Consecutive passes that left content behind, per namespace (the requeue back-off).
fn remaining() -> &'static Backoff {
    static REMAINING: OnceLock<Backoff> = OnceLock::new();
    REMAINING.get_or_init(Backoff::default)
}

fn ours(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    let name = ns.name_any();
    if ns.metadata.deletion_timestamp.is_none() || !ours(&ns) {
        remaining().succeeded(&name);
        return Ok(Action::await_change());
    }
    let pass = content::delete_all(&ctx.client, &name).await;
    let mut problems: Vec<(&str, String)> = Vec::new();
    if !pass.discovery_errors.is_empty() {
        problems.push((
            conditions::DISCOVERY_FAILURE,
            format!(
                "Discovery failed for some groups: {}",
                pass.discovery_errors.join(", ")
            ),
        ));
    }
    if !pass.delete_errors.is_empty() {
        problems.push((
            conditions::CONTENT_FAILURE,
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                pass.delete_errors.len(),
                pass.delete_errors.join(", ")
            ),
        ));
    }
    if !pass.remaining.is_empty() {
        let list: Vec<String> = pass
            .remaining
            .iter()
            .map(|(what, n)| format!("{what} has {n} resource instances"))
            .collect();
        problems.push((
            conditions::CONTENT_REMAINING,
            format!("Some resources are remaining: {}", list.join(", ")),
        ));
    }
    if !pass.finalizers.is_empty() {
        let list: Vec<String> = pass
            .finalizers
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        problems.push((
            conditions::FINALIZERS_REMAINING,
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                list.join(", ")
            ),
        ));
    }
    let api = ctx.api_all::<Namespace>();
    let old = ns
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let new = conditions::conditions(&problems, &old);
    if !conditions::same(&old, &new) {
        let patch = json!({"status": {"conditions": new}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if !pass.done() {
        let wait = (remaining().failed(&name) * 100).min(MAX_WAIT);
        debug!(namespace = %name, ?wait, remaining = ?pass.remaining, "namespace: content remains");
        return Ok(Action::requeue(wait));
    }
    remaining().succeeded(&name);
    // Empty: drop our finalizer from the namespace as it is now (a conflict retries the pass).
    let mut latest = match api.get(&name).await {
        Ok(n) => n,
        Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    };
    if latest.metadata.uid != ns.metadata.uid || !ours(&latest) {
        return Ok(Action::await_change());
    }
    if let Some(f) = latest.spec.as_mut().and_then(|s| s.finalizers.as_mut()) {
        f.retain(|x| x != FINALIZER);
    }
    match api
        .replace_subresource("finalize", &name, &PostParams::default(), &latest)
        .await
    {
        Ok(_) => {
            info!(namespace = %name, "namespace: content deleted; finalized");
            Ok(Action::await_change())
        }
        Err(e) if is_not_found(&e) => Ok(Action::await_change()),
        Err(e) if is_conflict(&e) => Ok(Action::requeue(Duration::from_millis(100))),
        Err(e) => Err(e.into()),
    }
}
