//! The root-ca-certificate-publisher: a `kube-root-ca.crt` ConfigMap holding the cluster CA (`ca.crt`) in
//! every active namespace, put back if it is changed or deleted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
/// Its one key.
pub const KEY: &str = "ca.crt";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "root-ca-certificate-publisher",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let namespaces = ctx.shared::<Namespace>();
    let maps = ctx.shared::<ConfigMap>();
    let controller = Controller::for_shared_stream(namespaces.subscribe(), namespaces.store())
        .watches_shared_stream(maps.subscribe(), |cm: Arc<ConfigMap>| {
            (cm.name_any() == NAME)
                .then(|| cm.namespace().map(|ns| ObjectRef::<Namespace>::new(&ns)))
                .flatten()
        });
    runner::run("root-ca-certificate-publisher", controller, ctx, reconcile)
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    let Some(ca) = ctx.root_ca.clone() else {
        return Ok(Action::await_change());
    };
    let name = ns.name_any();
    if ns.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let want: BTreeMap<String, String> = [(KEY.to_string(), ca)].into();
    let api = ctx.api::<ConfigMap>(&name);
    let cached = ctx
        .store::<ConfigMap>()
        .get(&ObjectRef::new(NAME).within(&name));
    let result = match cached {
        Some(cm) if cm.data.as_ref() == Some(&want) => return Ok(Action::await_change()),
        Some(cm) => {
            let mut cm = (*cm).clone();
            cm.data = Some(want);
            cm.binary_data = None;
            api.replace(NAME, &PostParams::default(), &cm)
                .await
                .map(|_| ())
        }
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    namespace: Some(name.clone()),
                    ..Default::default()
                },
                data: Some(want),
                ..Default::default()
            };
            api.create(&PostParams::default(), &cm).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(Action::await_change()),
        // A stale cache: the watch brings the current object and a new pass.
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Action::requeue(Duration::from_secs(30))),
        Err(e) => Err(e.into()),
    }
}
