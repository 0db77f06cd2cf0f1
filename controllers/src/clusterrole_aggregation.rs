//! The clusterrole-aggregation controller: a ClusterRole with an `aggregationRule` gets as its `rules` the
//! union of the rules of every other ClusterRole its `clusterRoleSelectors` pick, kept current as those
//! roles come, change their rules or labels, and go.
//!
//! The union follows upstream: selectors in their order, the roles each one picks in name order, each
//! rule once (the first time it is met), the aggregated role itself never among its sources.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use serde_json::json;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;
use crate::selector::matches;

/// Upstream's controller name.
pub const NAME: &str = "clusterrole-aggregation";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let roles = ctx.shared::<ClusterRole>();
    let store = roles.store();
    // Any ClusterRole that changes (rules, labels, created, deleted) may change any aggregate, and the
    // set of roles is small: every aggregating role gets a new pass, as upstream queues them all.
    let controller = Controller::for_shared_stream(roles.subscribe(), roles.store())
        .watches_shared_stream(roles.subscribe(), move |_changed: Arc<ClusterRole>| {
            aggregators(&store)
        });
    runner::run(NAME, controller, ctx, reconcile)
}

fn aggregators(store: &Store<ClusterRole>) -> Vec<ObjectRef<ClusterRole>> {
    store
        .state()
        .iter()
        .filter(|r| r.aggregation_rule.is_some())
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

async fn reconcile(role: Arc<ClusterRole>, ctx: Arc<Context>) -> Result<Action> {
    if role.aggregation_rule.is_none() || role.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let all = ctx.store::<ClusterRole>().state();
    let want = aggregate(&role, &all);
    let have: Vec<PolicyRule> = role.rules.iter().flatten().map(normalized).collect();
    if have == want {
        return Ok(Action::await_change());
    }
    // Only `rules` changes, and only over the version this pass read: a newer role brings a new pass.
    let patch = json!({
        "metadata": { "resourceVersion": role.resource_version() },
        "rules": want,
    });
    let result = ctx
        .api_all::<ClusterRole>()
        .patch(
            &role.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    match result {
        Ok(_) => Ok(Action::await_change()),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Action::requeue(Duration::from_secs(30))),
        Err(e) => Err(e.into()),
    }
}

/// The rules `role` should hold given every ClusterRole in `all`; empty if it does not aggregate.
pub fn aggregate(role: &ClusterRole, all: &[Arc<ClusterRole>]) -> Vec<PolicyRule> {
    let Some(rule) = &role.aggregation_rule else {
        return Vec::new();
    };
    let own = role.name_any();
    let mut out: Vec<PolicyRule> = Vec::new();
    for selector in rule.cluster_role_selectors.iter().flatten() {
        let mut picked: Vec<&ClusterRole> = all
            .iter()
            .map(Arc::as_ref)
            .filter(|r| r.name_any() != own && matches(selector, r.metadata.labels.as_ref()))
            .collect();
        picked.sort_by_key(|r| r.name_any());
        for r in picked.iter().flat_map(|r| r.rules.iter().flatten()) {
            let r = normalized(r);
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// `rule` with empty lists read as absent, as the API's semantic equality reads them.
fn normalized(rule: &PolicyRule) -> PolicyRule {
    let some = |v: &Option<Vec<String>>| v.clone().filter(|v| !v.is_empty());
    PolicyRule {
        api_groups: some(&rule.api_groups),
        resources: some(&rule.resources),
        resource_names: some(&rule.resource_names),
        non_resource_urls: some(&rule.non_resource_urls),
        verbs: rule.verbs.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::rbac::v1::AggregationRule;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    fn rule(resource: &str, verb: &str) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![resource.into()]),
            verbs: vec![verb.into()],
            ..Default::default()
        }
    }

    fn role(name: &str, labels: &[&str], rules: Vec<PolicyRule>) -> Arc<ClusterRole> {
        Arc::new(ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|l| (l.to_string(), "true".to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            rules: Some(rules),
            aggregation_rule: None,
        })
    }

    fn selecting(name: &str, keys: &[&str], labels: &[&str]) -> Arc<ClusterRole> {
        let mut r = (*role(name, labels, vec![rule("stale", "get")])).clone();
        r.aggregation_rule = Some(AggregationRule {
            cluster_role_selectors: Some(
                keys.iter()
                    .map(|k| LabelSelector {
                        match_labels: Some([(k.to_string(), "true".to_string())].into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
        Arc::new(r)
    }

    #[test]
    fn union_in_selector_then_name_order_without_duplicates() {
        let agg = selecting("monitoring", &["b", "a"], &["a"]);
        let all = vec![
            agg.clone(),
            role(
                "zeta",
                &["a"],
                vec![rule("pods", "get"), rule("nodes", "get")],
            ),
            role("alpha", &["a"], vec![rule("nodes", "get")]),
            role(
                "beta",
                &["b"],
                vec![rule("services", "list"), rule("pods", "get")],
            ),
            role("other", &[], vec![rule("secrets", "get")]),
        ];
        // Selector "b" first (beta), then "a" by name (alpha, zeta); the aggregate itself carries label
        // "a" but is never its own source.
        assert_eq!(
            aggregate(&agg, &all),
            vec![
                rule("services", "list"),
                rule("pods", "get"),
                rule("nodes", "get"),
            ]
        );
    }

    #[test]
    fn empty_lists_equal_absent_ones_and_nothing_picked_is_empty() {
        let mut with_empty = rule("pods", "get");
        with_empty.resource_names = Some(vec![]);
        assert_eq!(normalized(&with_empty), rule("pods", "get"));
        let agg = selecting("lonely", &["nobody"], &[]);
        assert!(aggregate(&agg, std::slice::from_ref(&agg)).is_empty());
        assert!(aggregate(&role("plain", &[], vec![]), &[]).is_empty());
    }
}
