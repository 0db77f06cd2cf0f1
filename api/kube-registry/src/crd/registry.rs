//! The run-time table of served resources: the built-ins plus one definition per served version of every
//! stored CRD. It is rebuilt from the store whenever a watch on the CRD prefix reports a change, so a CRD
//! written through any member is served by every member; definitions are `Arc`s, dropped with the CRD.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use tracing::{debug, info, warn};

use super::{Custom, CRD_PREFIX};
use crate::object;
use crate::resource::{self, Printer, ResourceDef, BUILTIN};
use crate::storage::{prefix_end, Storage, WatchBatch};

/// One consistent view of the served custom resources.
#[derive(Debug, Default)]
pub struct Served {
    /// One definition per served version of every CRD, in CRD name order.
    pub defs: Vec<Arc<ResourceDef>>,
    /// The store revision this view was read at (changes whenever a CRD does).
    pub revision: i64,
    /// What a layer above derives from this view and keeps with it until a CRD changes (the
    /// OpenAPI documents, built on first request); typed by that layer, so the registry does not
    /// depend on it.
    pub derived: OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

/// The served resources of one member.
#[derive(Debug, Default)]
pub struct Registry {
    served: RwLock<Arc<Served>>,
}

/// Orders Kubernetes versions as upstream does: GA before beta before alpha, higher numbers first, then
/// anything else alphabetically.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(v: &str) -> (u8, i64, i64, String) {
        let parse = |rest: &str| -> Option<(i64, u8, i64)> {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let major: i64 = digits.parse().ok()?;
            let tail = &rest[digits.len()..];
            if tail.is_empty() {
                return Some((major, 0, 0));
            }
            for (word, rank) in [("beta", 1u8), ("alpha", 2u8)] {
                if let Some(n) = tail.strip_prefix(word) {
                    if let Ok(minor) = n.parse::<i64>() {
                        return Some((major, rank, minor));
                    }
                }
            }
            None
        };
        match v.strip_prefix('v').and_then(parse) {
            Some((major, rank, minor)) => (rank, -major, -minor, String::new()),
            None => (3, 0, 0, v.to_string()),
        }
    }
    key(a).cmp(&key(b))
}

/// The served definitions of one CRD object (none when it cannot be read as a CRD).
pub fn defs_of(crd: &CustomResourceDefinition) -> Vec<Arc<ResourceDef>> {
    let spec = &crd.spec;
    let names = &spec.names;
    let Some(storage_version) = spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
    else {
        return Vec::new();
    };
    let terminating = crd.metadata.deletion_timestamp.is_some();
    let name = crd.metadata.name.clone().unwrap_or_default();
    let singular = names
        .singular
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| names.kind.to_lowercase());
    let mut out = Vec::new();
    for v in spec.versions.iter().filter(|v| v.served) {
        let subs = v.subresources.as_ref();
        let custom = Custom {
            crd_name: name.clone(),
            crd_uid: crd.metadata.uid.clone().unwrap_or_default(),
            crd_generation: crd.metadata.generation.unwrap_or(0),
            storage_version: storage_version.clone(),
            schema: v.schema.as_ref().and_then(|s| s.open_api_v3_schema.clone()),
            columns: v.additional_printer_columns.clone().unwrap_or_default(),
            scale: subs.and_then(|s| s.scale.clone()),
            list_kind: names
                .list_kind
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("{}List", names.kind)),
            terminating,
            selectable: v
                .selectable_fields
                .iter()
                .flatten()
                .map(|f| f.json_path.trim_start_matches('.').to_string())
                .collect(),
            conversion_webhook: spec
                .conversion
                .as_ref()
                .filter(|c| c.strategy == "Webhook")
                .and_then(|c| c.webhook.clone()),
        };
        let status = subs.is_some_and(|s| s.status.is_some());
        out.push(Arc::new(ResourceDef {
            group: Cow::Owned(spec.group.clone()),
            version: Cow::Owned(v.name.clone()),
            kind: Cow::Owned(names.kind.clone()),
            plural: Cow::Owned(names.plural.clone()),
            singular: Cow::Owned(singular.clone()),
            namespaced: spec.scope == "Namespaced",
            short_names: names
                .short_names
                .iter()
                .flatten()
                .map(|s| Cow::Owned(s.clone()))
                .collect(),
            categories: names
                .categories
                .iter()
                .flatten()
                .map(|s| Cow::Owned(s.clone()))
                .collect(),
            status,
            scale: custom.scale.is_some(),
            storage: Cow::Owned(format!("{}/{}", spec.group, names.plural)),
            printer: Printer::Custom,
            fields: &[],
            create_on_update: false,
            tracks_generation: true,
            custom: Some(Arc::new(custom)),
        }));
    }
    out
}

impl Registry {
    /// The current view.
    pub fn served(&self) -> Arc<Served> {
        match self.served.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replaces the view with one built from these CRD objects.
    pub fn load(&self, crds: &[Value], revision: i64) {
        let mut defs: Vec<Arc<ResourceDef>> = Vec::new();
        for raw in crds {
            match serde_json::from_value::<CustomResourceDefinition>(raw.clone()) {
                Ok(crd) => {
                    for d in defs_of(&crd) {
                        // A built-in or an earlier CRD keeps a contested name (upstream: NamesAccepted=False).
                        let taken = resource::find(&d.group, &d.version, &d.plural).is_some()
                            || defs.iter().any(|o| {
                                o.group == d.group && o.version == d.version && o.plural == d.plural
                            });
                        if !taken {
                            defs.push(d);
                        }
                    }
                }
                Err(e) => warn!(crd = object::name(raw), error = %e, "stored CRD is unreadable"),
            }
        }
        let fresh = Arc::new(Served {
            defs,
            revision,
            ..Default::default()
        });
        match self.served.write() {
            Ok(mut g) => *g = fresh,
            Err(p) => *p.into_inner() = fresh,
        }
    }

    /// Every served resource: built-ins first, then custom resources.
    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        let mut out: Vec<Arc<ResourceDef>> = BUILTIN.to_vec();
        out.extend(self.served().defs.iter().cloned());
        out
    }

    /// The resource served at `/<prefix>/<group>/<version>/<plural>`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        resource::find(group, version, plural).or_else(|| {
            self.served()
                .defs
                .iter()
                .find(|r| r.group == group && r.version == version && r.plural == plural)
                .cloned()
        })
    }

    /// The resources of one group-version.
    pub fn of_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceDef>> {
        let mut out = resource::of_group_version(group, version);
        out.extend(
            self.served()
                .defs
                .iter()
                .filter(|r| r.group == group && r.version == version)
                .cloned(),
        );
        out
    }

    /// Every named group with its versions, preferred version first; built-in groups first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = resource::groups()
            .into_iter()
            .map(|g| {
                let vs = resource::versions(g).into_iter().map(String::from);
                (g.to_string(), vs.collect())
            })
            .collect();
        for d in self.served().defs.iter() {
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    if !vs.iter().any(|v| *v == d.version) {
                        vs.push(d.version.to_string());
                    }
                }
                None => out.push((d.group.to_string(), vec![d.version.to_string()])),
            }
        }
        for (_, vs) in out.iter_mut() {
            vs.sort_by(|a, b| version_order(a, b));
        }
        out
    }

    /// Reads every CRD from this member's store and rebuilds the view.
    pub fn reload(&self, storage: &Storage) -> Result<i64, crate::status::ApiError> {
        let end = prefix_end(CRD_PREFIX.as_bytes());
        let page = storage.range(CRD_PREFIX.as_bytes(), &end, 0, 0)?;
        let crds: Vec<Value> = page.items.into_iter().map(|(_, s)| s.object).collect();
        let before = self.served().defs.len();
        self.load(&crds, page.revision);
        let after = self.served().defs.len();
        if before != after {
            info!(served = after, "custom resources changed");
        }
        Ok(page.revision)
    }
}

/// Keeps `registry` in step with the CRDs in the store until `stop` fires: a full reload at start and
/// after every change the watch reports (CRD changes are rare, so a reload is cheap and always right).
pub async fn run(
    registry: Arc<Registry>,
    storage: Storage,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let rev = match registry.reload(&storage) {
            Ok(r) => r,
            Err(e) => {
                debug!(error = %e, "reading CRDs failed; retrying");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        let watch = storage
            .watch(
                CRD_PREFIX.as_bytes(),
                &prefix_end(CRD_PREFIX.as_bytes()),
                rev + 1,
                false,
            )
            .await;
        let Ok(mut watch) = watch else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                batch = watch.next() => match batch {
                    WatchBatch::Events(_) => {
                        if let Err(e) = registry.reload(&storage) {
                            debug!(error = %e, "reloading CRDs failed");
                            break;
                        }
                    }
                    WatchBatch::Progress(_) => {}
                    WatchBatch::Compacted(_) | WatchBatch::Ended => break,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A CRD with a served beta, a served storage v1 with status and scale, and an unserved alpha.
    fn crd() -> Value {
        serde_json::from_str(include_str!("testdata/widgets.json")).expect("the fixture is JSON")
    }

    #[test]
    fn served_versions_become_definitions() {
        let r = Registry::default();
        r.load(&[crd()], 7);
        let d = r.find("example.com", "v1", "widgets").expect("v1 served");
        assert_eq!(d.key(Some("ns"), "a"), "/registry/example.com/widgets/ns/a");
        assert!(d.status && d.scale && d.tracks_generation);
        assert_eq!(d.singular, "widget");
        assert!(r.find("example.com", "v2alpha1", "widgets").is_none());
        let groups = r.groups();
        let (_, versions) = groups
            .iter()
            .find(|(g, _)| g == "example.com")
            .expect("group");
        assert_eq!(versions, &["v1", "v1beta1"]);
        r.load(&[], 8);
        assert!(r.find("example.com", "v1", "widgets").is_none());
    }

    #[test]
    fn openapi_shows_custom_resources() {
        use crate::openapi;
        let r = Registry::default();
        r.load(&[crd()], 7);
        let doc = openapi::v3_document(&r, "apis/example.com/v1").expect("v3 document");
        let v: Value = serde_json::from_slice(&doc.body).expect("json");
        let w = &v["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(w["x-kubernetes-group-version-kind"][0]["kind"], "Widget");
        assert!(w["properties"]["metadata"]["$ref"]
            .as_str()
            .is_some_and(|s| s.ends_with("ObjectMeta")));
        assert!(openapi::v3_index(&r)["paths"]["apis/example.com/v1"].is_object());
        let doc = openapi::v2(&r);
        let v2: Value = serde_json::from_slice(&doc.json).expect("v2 json");
        assert!(v2["definitions"]["com.example.v1.Widget"].is_object());
        let pb = <openapi::gnostic::Document as prost::Message>::decode(doc.protobuf.as_ref())
            .expect("v2 protobuf");
        let widget = pb
            .definitions
            .iter()
            .flat_map(|d| &d.additional_properties)
            .find(|d| d.name == "com.example.v1.Widget")
            .and_then(|d| d.value.as_ref())
            .expect("Widget in the protobuf document");
        let gvk = widget
            .vendor_extension
            .iter()
            .find(|e| e.name == "x-kubernetes-group-version-kind")
            .and_then(|e| e.value.as_ref())
            .map(|v| v.yaml.as_str());
        assert_eq!(
            gvk,
            Some("- group: example.com\n  kind: Widget\n  version: v1\n")
        );
        assert!(v2["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"].is_object());
        r.load(&[], 8);
        assert!(openapi::v3_document(&r, "apis/example.com/v1").is_none());
    }

    #[test]
    fn other_versions_convert_by_api_version_only() {
        use crate::convert;
        let r = Registry::default();
        r.load(&[crd()], 7);
        let beta = r.find("example.com", "v1beta1", "widgets").expect("beta");
        let stored = convert::to_storage(
            &beta,
            json!({"apiVersion": "example.com/v1beta1", "kind": "Widget", "spec": {"a": 1}}),
        );
        assert_eq!(
            stored["apiVersion"], "example.com/v1",
            "stored in the storage version"
        );
        let v1 = r.find("example.com", "v1", "widgets").expect("v1");
        assert_eq!(
            convert::from_storage(&v1, stored.clone())["apiVersion"],
            "example.com/v1"
        );
        let back = convert::from_storage(&beta, stored);
        assert_eq!(back["apiVersion"], "example.com/v1beta1");
        assert_eq!(back["spec"]["a"], 1);
    }

    #[test]
    fn versions_sort_as_upstream() {
        let mut v = vec!["v1alpha1", "foo", "v2", "v1beta2", "v1", "v1beta1", "v10"];
        v.sort_by(|a, b| version_order(a, b));
        assert_eq!(
            v,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn builtin_names_win() {
        let mut c = crd();
        c["spec"]["group"] = json!("apps");
        c["spec"]["names"]["plural"] = json!("deployments");
        let r = Registry::default();
        r.load(&[c], 1);
        assert!(r
            .find("apps", "v1", "deployments")
            .is_some_and(|d| d.custom.is_none()));
    }
}
