//! OpenAPI documents generated from the types keel serves (`k8s-openapi`'s JSON schemas):
//! `/openapi/v3` (index), `/openapi/v3/<api|apis/group>/<version>` (one document per group-version, named by
//! the uppercase hex SHA-512 of its body, as kube-apiserver does) and `/openapi/v2` (JSON, or gnostic's
//! protobuf messages, see [`gnostic`]).
//!
//! kubectl reads these for `explain` (schemas found by `x-kubernetes-group-version-kind`), to decide
//! whether the server validates fields (`fieldValidation` among the operations' parameters) and, for what
//! the server cannot validate (a `kind: List` of objects), to validate on the client against `/openapi/v2`.

pub mod documents;
pub mod gnostic;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{json, Map, Value};

use super::crd::registry::Registry;
use super::resource::{self, ResourceDef, BUILTIN};

pub use documents::{Document, V2};

fn add_schema(gen: &mut SchemaGenerator, def: &ResourceDef) -> Option<String> {
    if def.custom.is_some() {
        gen.subschema_for::<ObjectMeta>();
        let group: Vec<&str> = def.group.split('.').rev().collect();
        return Some(format!("{}.{}.{}", group.join("."), def.version, def.kind));
    }
    super::types::with_builtin_type!(def.group, def.version, def.kind, T => {
        gen.subschema_for::<T>();
        Some(<T as schemars::JsonSchema>::schema_name().to_string())
    }, _ => None)
}

/// Publishes `x-kubernetes-int-or-string` nodes with their two alternatives, as upstream does, so clients
/// (kubectl explain) see an IntOrString rather than an untyped object.
fn int_or_string_alternatives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("x-kubernetes-int-or-string") == Some(&json!(true)) && !m.contains_key("anyOf")
            {
                m.insert(
                    "anyOf".into(),
                    json!([{"type": "integer"}, {"type": "string"}]),
                );
            }
            for child in m.values_mut() {
                int_or_string_alternatives(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(int_or_string_alternatives),
        _ => {}
    }
}

/// A custom resource's schema as a document component: its CRD's `openAPIV3Schema` with `apiVersion`,
/// `kind` and `metadata` (a reference to ObjectMeta) filled in, as upstream publishes it.
fn custom_schema(def: &ResourceDef, prefix: &str) -> Value {
    let schema = def
        .custom
        .as_ref()
        .and_then(|c| c.schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok());
    let mut s = match schema {
        Some(Value::Object(m)) => Value::Object(m),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    int_or_string_alternatives(&mut s);
    add_type_and_object_meta(&mut s, prefix);
    s
}

/// `type: object` and the `apiVersion`, `kind` and `metadata` properties every custom resource has.
fn add_type_and_object_meta(s: &mut Value, prefix: &str) {
    s["type"] = json!("object");
    let meta_name = <ObjectMeta as schemars::JsonSchema>::schema_name().to_string();
    if !s.get("properties").is_some_and(Value::is_object) {
        s["properties"] = json!({});
    }
    s["properties"]["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values."});
    s["properties"]["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. In CamelCase."});
    s["properties"]["metadata"] = json!({"$ref": format!("{prefix}{meta_name}"), "description": "Standard object's metadata."});
}

fn param(v3: bool, name: &str, description: &str) -> Value {
    if v3 {
        json!({"name": name, "in": "query", "description": description, "schema": {"type": "string"}, "uniqueItems": true})
    } else {
        json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true})
    }
}

/// Swagger 2.0 path parameters of a path's `{name}` and `{namespace}`, declared on the path item as
/// upstream does.
fn path_params(path: &str) -> Value {
    let mut out = Vec::new();
    for (name, what) in [
        ("name", "name of the object"),
        ("namespace", "namespace of the object"),
    ] {
        if path.contains(&format!("{{{name}}}")) {
            out.push(json!({"name": name, "in": "path", "description": what, "required": true, "type": "string", "uniqueItems": true}));
        }
    }
    Value::Array(out)
}

fn operations(
    def: &ResourceDef,
    schema_ref: &str,
    list_ref: &str,
    v3: bool,
) -> Vec<(String, Value)> {
    let base = if def.group.is_empty() {
        format!("/api/{}", def.version)
    } else {
        format!("/apis/{}/{}", def.group, def.version)
    };
    let coll = if def.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", def.plural)
    } else {
        format!("{base}/{}", def.plural)
    };
    let gvk = json!({"group": def.group, "version": def.version, "kind": def.kind});
    let (body, ok) = if v3 {
        (
            json!({"content": {"application/json": {"schema": {"$ref": schema_ref}}}, "required": true}),
            json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}}),
        )
    } else {
        (
            json!({"name": "body", "in": "body", "required": true, "schema": {"$ref": schema_ref}}),
            json!({"200": {"description": "OK", "schema": {"$ref": schema_ref}}}),
        )
    };
    let write_params = [
        param(
            v3,
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        param(
            v3,
            "fieldManager",
            "A name associated with the actor or entity that is making these changes.",
        ),
        param(
            v3,
            "fieldValidation",
            "How the server treats unknown or duplicate fields: Ignore, Warn or Strict.",
        ),
    ];
    let list_ok = if v3 {
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": list_ref}}}}})
    } else {
        json!({"200": {"description": "OK", "schema": {"$ref": list_ref}}})
    };
    let op = |action: &str, verb: &str| {
        let mut o = json!({
            "operationId": format!("{verb}{}", def.kind),
            "responses": if action == "list" { &list_ok } else { &ok },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if matches!(action, "post" | "put" | "patch") {
            if v3 {
                o["parameters"] = json!(write_params);
                o["requestBody"] = body.clone();
            } else {
                let mut params = vec![body.clone()];
                params.extend(write_params.iter().cloned());
                o["parameters"] = Value::Array(params);
            }
        }
        o
    };
    let mut out = vec![
        (
            coll.clone(),
            json!({"get": op("list", "list"), "post": op("post", "create"), "delete": op("deletecollection", "deleteCollection")}),
        ),
        (
            format!("{coll}/{{name}}"),
            json!({"get": op("get", "read"), "put": op("put", "replace"), "patch": op("patch", "patch"), "delete": op("delete", "delete")}),
        ),
    ];
    if def.status {
        out.push((format!("{coll}/{{name}}/status"), json!({"get": op("get", "readStatus"), "put": op("put", "replaceStatus"), "patch": op("patch", "patchStatus")})));
    }
    if !v3 {
        for (path, item) in &mut out {
            let params = path_params(path);
            if params.as_array().is_some_and(|a| !a.is_empty()) {
                item["parameters"] = params;
            }
        }
    }
    out
}

/// Schemas of every served kind, as OpenAPI v3 components or v2 definitions.
fn schemas(v3: bool, defs: &[Arc<ResourceDef>]) -> (Map<String, Value>, Vec<(String, Value)>) {
    let settings = if v3 {
        SchemaSettings::openapi3()
    } else {
        let mut s = SchemaSettings::draft07();
        s.definitions_path = "#/definitions/".into();
        s
    };
    let mut gen = settings.into_generator();
    let mut names = Vec::new();
    for def in defs {
        if let Some(n) = add_schema(&mut gen, def) {
            names.push((n, def));
        }
    }
    gen.subschema_for::<ListMeta>();
    let mut definitions = gen.take_definitions(true);
    add_merge_metadata(&mut definitions);
    if !v3 {
        for s in definitions.values_mut() {
            v2_compatible(s);
        }
        // Upstream publishes arbitrary JSON (a CRD schema's `default`, `enum`, `example`) untyped, so a
        // client does not take a scalar there for a wrong type.
        if let Some(s) = definitions
            .get_mut("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON")
            .and_then(Value::as_object_mut)
        {
            s.remove("type");
        }
    }
    let prefix = if v3 {
        "#/components/schemas/"
    } else {
        "#/definitions/"
    };
    let mut paths = Vec::new();
    for (name, def) in names {
        if def.custom.is_some() {
            let s = if v3 {
                custom_schema(def, prefix)
            } else {
                custom_schema_v2(def, prefix)
            };
            definitions.insert(name.clone(), s);
        }
        if let Some(s) = definitions.get_mut(&name).and_then(Value::as_object_mut) {
            let gvk = json!([{"group": def.group, "version": def.version, "kind": def.kind}]);
            s.insert("x-kubernetes-group-version-kind".into(), gvk);
        }
        let list_kind = def.list_kind();
        // `<package>.<Kind>` names its list `<package>.<ListKind>`, built-ins and custom resources alike.
        let list_name = match name.strip_suffix(def.kind.as_ref()) {
            Some(package) => format!("{package}{list_kind}"),
            None => format!("{name}List"),
        };
        definitions.insert(
            list_name.clone(),
            list_schema(def, &list_kind, &format!("{prefix}{name}"), prefix),
        );
        paths.extend(operations(
            def,
            &format!("{prefix}{name}"),
            &format!("{prefix}{list_name}"),
            v3,
        ));
    }
    (definitions, paths)
}

/// The schema of a kind's list, as upstream publishes every `<Kind>List`: `items` (required) of the kind,
/// `metadata` a ListMeta, `apiVersion` and `kind`, and the list's group-version-kind.
fn list_schema(def: &ResourceDef, list_kind: &str, item_ref: &str, prefix: &str) -> Value {
    let list_meta = <ListMeta as schemars::JsonSchema>::schema_name().to_string();
    json!({
        "description": format!("{list_kind} is a list of {}", def.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "The versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "The REST resource this object represents, in CamelCase."},
            "metadata": {"$ref": format!("{prefix}{list_meta}"), "description": "Standard list metadata."},
            "items": {"type": "array", "items": {"$ref": item_ref}, "description": format!("List of {}.", def.plural)},
        },
        "x-kubernetes-group-version-kind": [{"group": def.group, "version": def.version, "kind": list_kind}],
    })
}

/// The schema positions below a schema: properties, items, additionalProperties, allOf.
fn sub_schemas(m: &mut Map<String, Value>) -> Vec<&mut Value> {
    let mut out = Vec::new();
    for (k, v) in m.iter_mut() {
        match (k.as_str(), v) {
            ("properties", Value::Object(props)) => out.extend(props.values_mut()),
            ("items" | "allOf", Value::Array(a)) => out.extend(a.iter_mut()),
            ("items" | "additionalProperties", v @ Value::Object(_)) => out.push(v),
            _ => {}
        }
    }
    out
}

/// Makes a generated schema Swagger 2.0, as upstream's v2 is: a lone `allOf: [{$ref}]` (how the generator
/// adds a description to a reference) becomes the `$ref` itself, and the OpenAPI 3 keywords Swagger 2.0 lacks
/// are dropped. kubectl's v2 reader treats anything under an `allOf` as untyped, so without this it would not
/// see unknown fields below `metadata` or `spec`.
fn v2_compatible(s: &mut Value) {
    let Value::Object(m) = s else {
        return;
    };
    for k in ["oneOf", "anyOf", "not", "nullable"] {
        m.remove(k);
    }
    let lone_ref = match m.get("allOf") {
        Some(Value::Array(a)) if a.len() == 1 => a[0]
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.get("$ref"))
            .cloned(),
        _ => None,
    };
    if let Some(r) = lone_ref {
        if !m.contains_key("type") && !m.contains_key("properties") {
            m.remove("allOf");
            m.insert("$ref".into(), r);
        }
    }
    for child in sub_schemas(m) {
        v2_compatible(child);
    }
}

/// What upstream does to a CRD's structural schema for v2: no junctors, nullable values untyped (and
/// without properties or items), no properties or items where unknown fields are kept, no `type: array`
/// without items, and nullable properties not required.
fn structural_v2(s: &mut Value) {
    let Value::Object(m) = s else {
        return;
    };
    for k in ["allOf", "oneOf", "anyOf", "not"] {
        m.remove(k);
    }
    if m.remove("nullable") == Some(json!(true)) {
        for k in ["type", "properties", "items"] {
            m.remove(k);
        }
    }
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        m.remove("properties");
        m.remove("items");
    }
    if m.get("type") == Some(&json!("array")) && !m.contains_key("items") {
        m.remove("type");
    }
    let nullable: Vec<String> = m
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter(|(_, v)| v.get("nullable") == Some(&json!(true)))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let nullable_values = m
        .get("additionalProperties")
        .and_then(|a| a.get("nullable"))
        == Some(&json!(true));
    if nullable_values {
        m.remove("required");
    } else if let Some(Value::Array(req)) = m.get_mut("required") {
        req.retain(|r| !r.as_str().is_some_and(|r| nullable.iter().any(|n| n == r)));
        if req.is_empty() {
            m.remove("required");
        }
    }
    for child in sub_schemas(m) {
        structural_v2(child);
    }
}

/// A custom resource's v2 definition, as upstream builds it: without a schema, or when its root keeps
/// unknown fields, only `type: object` (kubectl would refuse every field not listed); otherwise the schema
/// made v2-compatible, with `apiVersion`, `kind` and `metadata`.
fn custom_schema_v2(def: &ResourceDef, prefix: &str) -> Value {
    let schema = def
        .custom
        .as_ref()
        .and_then(|c| c.schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok());
    let mut s = match schema {
        Some(Value::Object(m))
            if m.get("x-kubernetes-preserve-unknown-fields") != Some(&json!(true)) =>
        {
            Value::Object(m)
        }
        _ => return json!({"type": "object"}),
    };
    structural_v2(&mut s);
    add_type_and_object_meta(&mut s, prefix);
    s
}

/// Adds the strategic-merge and list-type extensions of every property the schema table knows, so kubectl
/// computes its patches with the same merge keys the server merges with.
fn add_merge_metadata(definitions: &mut Map<String, Value>) {
    let table = super::protobuf::schema::messages();
    for (name, schema) in definitions.iter_mut() {
        let Some(msg) = name.strip_prefix("io.k8s.").and_then(|m| table.get(m)) else {
            continue;
        };
        let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        for (prop, p) in props.iter_mut() {
            let (Some(field), Some(p)) = (msg.by_json(prop), p.as_object_mut()) else {
                continue;
            };
            if let Some(k) = &field.patch_merge_key {
                p.insert("x-kubernetes-patch-merge-key".into(), json!(k));
            }
            if !field.patch_strategy.is_empty() {
                p.insert(
                    "x-kubernetes-patch-strategy".into(),
                    json!(field.patch_strategy.join(",")),
                );
            }
            if let Some(t) = &field.list_type {
                p.insert("x-kubernetes-list-type".into(), json!(t));
            }
            if !field.list_map_keys.is_empty() {
                p.insert(
                    "x-kubernetes-list-map-keys".into(),
                    json!(field.list_map_keys),
                );
            }
        }
    }
}

fn hash(body: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA512, body);
    d.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

fn build_v3(defs: &[Arc<ResourceDef>]) -> Document {
    let (components, paths) = schemas(true, defs);
    let paths: Map<String, Value> = paths.into_iter().collect();
    let doc = json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": super::version::KUBE_GIT_VERSION},
        "paths": paths,
        "components": {"schemas": components},
    });
    let body = serde_json::to_vec(&doc).unwrap_or_default();
    Document {
        hash: hash(&body),
        body: Bytes::from(body),
    }
}

/// `(group, version)` of a path under `/openapi/v3/` (`api/v1`, `apis/<group>/<version>`).
fn parse_gv(gv: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = gv.split('/').collect();
    match parts.as_slice() {
        ["api", v] => Some(("", v)),
        ["apis", g, v] => Some((g, v)),
        _ => None,
    }
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `api/v1`, `apis/apps/v1`, ...: every served group-version's path under `/openapi/v3/`.
pub fn group_versions(reg: &Registry) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in reg.all() {
        let gv = gv_path(&r.group, &r.version);
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out
}

/// The built-in group-versions' documents, built once.
fn builtin_v3() -> &'static BTreeMap<String, Document> {
    static DOCS: OnceLock<BTreeMap<String, Document>> = OnceLock::new();
    DOCS.get_or_init(|| {
        let mut gvs: Vec<(String, String)> = Vec::new();
        for r in BUILTIN.iter() {
            let gv = (r.group.to_string(), r.version.to_string());
            if !gvs.contains(&gv) {
                gvs.push(gv);
            }
        }
        gvs.into_iter()
            .map(|(g, v)| {
                let doc = build_v3(&resource::of_group_version(&g, &v));
                (gv_path(&g, &v), doc)
            })
            .collect()
    })
}

/// The v3 document of one group-version path (`apis/apps/v1`), if served. Group-versions with custom
/// resources are built from the registry's current view and kept with it until a CRD changes.
pub fn v3_document(reg: &Registry, gv: &str) -> Option<Document> {
    let (group, version) = parse_gv(gv)?;
    let served = reg.served();
    if !served
        .defs
        .iter()
        .any(|d| d.group == group && d.version == version)
    {
        return builtin_v3().get(gv).cloned();
    }
    let Some(derived) = derived(&served) else {
        return Some(build_v3(&reg.of_group_version(group, version)));
    };
    let mut cache = match derived.v3.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if let Some(d) = cache.get(gv) {
        return Some(d.clone());
    }
    let doc = build_v3(&reg.of_group_version(group, version));
    cache.insert(gv.to_string(), doc.clone());
    Some(doc)
}

/// The `/openapi/v3` index.
pub fn v3_index(reg: &Registry) -> Value {
    let paths: Map<String, Value> = group_versions(reg)
        .into_iter()
        .filter_map(|gv| {
            let d = v3_document(reg, &gv)?;
            let url = json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", d.hash)});
            Some((gv, url))
        })
        .collect();
    json!({"paths": paths})
}

fn build_v2(defs: &[Arc<ResourceDef>]) -> V2 {
    let (definitions, paths) = schemas(false, defs);
    let paths: Map<String, Value> = paths.into_iter().collect();
    let doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": super::version::KUBE_GIT_VERSION},
        "paths": paths,
        "definitions": definitions,
    });
    let body = serde_json::to_vec(&doc).unwrap_or_default();
    V2 {
        hash: hash(&body),
        json: Bytes::from(body),
        protobuf: Bytes::from(gnostic::encode(&doc)),
    }
}

/// The `/openapi/v2` document: built once for the built-ins, and once per change of CRDs.
pub fn v2(reg: &Registry) -> V2 {
    static BUILTIN_DOC: OnceLock<V2> = OnceLock::new();
    let served = reg.served();
    if served.defs.is_empty() {
        return BUILTIN_DOC.get_or_init(|| build_v2(&BUILTIN)).clone();
    }
    match derived(&served) {
        Some(d) => d.v2.get_or_init(|| build_v2(&reg.all())).clone(),
        None => build_v2(&reg.all()),
    }
}

/// The documents kept with one view of the served resources.
#[derive(Default)]
struct Derived {
    /// v3 documents of group-versions with custom resources.
    v3: std::sync::Mutex<std::collections::BTreeMap<String, Document>>,
    v2: OnceLock<V2>,
}

/// This view's documents (None only if another layer claimed the view's slot first).
fn derived(served: &crate::crd::registry::Served) -> Option<&Derived> {
    served
        .derived
        .get_or_init(|| Arc::new(Derived::default()))
        .downcast_ref::<Derived>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_document_has_deployment_with_gvk_and_field_validation() {
        let reg = Registry::default();
        let apps = v3_document(&reg, "apis/apps/v1").expect("apps/v1");
        let v: Value = serde_json::from_slice(&apps.body).expect("json");
        let d = &v["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            d["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        assert!(
            v["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]
                ["replicas"]
                .is_object()
        );
        let post = &v["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["post"];
        assert!(post["parameters"]
            .as_array()
            .expect("params")
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
        assert_eq!(apps.hash.len(), 128);
        let containers =
            &v["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert!(v3_index(&reg)["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .expect("url")
            .contains("?hash="));
    }
    fn named<'a>(list: &'a [gnostic::NamedSchema], name: &str) -> &'a gnostic::Schema {
        list.iter()
            .find(|n| n.name == name)
            .and_then(|n| n.value.as_ref())
            .unwrap_or_else(|| panic!("no {name}"))
    }

    fn extension(ext: &[gnostic::NamedAny], name: &str) -> Value {
        let yaml = ext
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.as_ref())
            .map(|v| v.yaml.clone())
            .unwrap_or_else(|| panic!("no {name}"));
        serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{name}: {e}: {yaml}"))
    }

    #[test]
    fn v2_protobuf_decodes_with_gvks_references_and_field_validation() {
        use prost::Message;
        let doc = v2(&Registry::default());
        assert_eq!(doc.hash, hash(&doc.json));
        let pb = gnostic::Document::decode(doc.protobuf.as_ref()).expect("protobuf");
        assert_eq!(pb.swagger, "2.0");
        let defs = pb.definitions.expect("definitions").additional_properties;
        let json: Value = serde_json::from_slice(&doc.json).expect("json");
        assert_eq!(
            defs.len(),
            json["definitions"].as_object().map_or(0, Map::len)
        );

        let deploy = named(&defs, "io.k8s.api.apps.v1.Deployment");
        assert_eq!(
            extension(&deploy.vendor_extension, "x-kubernetes-group-version-kind"),
            json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
        );
        let props = &deploy
            .properties
            .as_ref()
            .expect("properties")
            .additional_properties;
        // A described reference is a plain `$ref`, not an `allOf`, so clients look into the referenced type.
        assert_eq!(
            named(props, "spec").r#ref,
            "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
        );
        assert!(named(props, "spec").all_of.is_empty());
        // Every served kind has its list, referenced by the list operation.
        let pod_list = named(&defs, "io.k8s.api.core.v1.PodList");
        assert_eq!(
            extension(
                &pod_list.vendor_extension,
                "x-kubernetes-group-version-kind"
            ),
            json!([{"group": "", "kind": "PodList", "version": "v1"}])
        );
        let list_props = &pod_list
            .properties
            .as_ref()
            .expect("properties")
            .additional_properties;
        assert_eq!(
            named(list_props, "items")
                .items
                .as_ref()
                .map(|i| i.schema[0].r#ref.clone()),
            Some("#/definitions/io.k8s.api.core.v1.Pod".to_string())
        );
        assert_eq!(
            named(list_props, "metadata").r#ref,
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
        );
        assert_eq!(pod_list.required, vec!["items".to_string()]);
        assert_eq!(
            json["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"]["responses"]["200"]
                ["schema"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodList"
        );
        assert!(json["definitions"]["io.k8s.api.apps.v1.DeploymentList"].is_object());
        let pod_spec = named(&defs, "io.k8s.api.core.v1.PodSpec");
        let containers = named(
            &pod_spec
                .properties
                .as_ref()
                .expect("properties")
                .additional_properties,
            "containers",
        );
        assert_eq!(
            containers.r#type.as_ref().map(|t| t.value.clone()),
            Some(vec!["array".to_string()])
        );
        assert_eq!(
            containers.items.as_ref().map(|i| i.schema[0].r#ref.clone()),
            Some("#/definitions/io.k8s.api.core.v1.Container".to_string())
        );
        assert_eq!(
            extension(&containers.vendor_extension, "x-kubernetes-patch-merge-key"),
            json!("name")
        );
        let labels = named(
            &named(&defs, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
                .properties
                .as_ref()
                .expect("properties")
                .additional_properties,
            "labels",
        );
        assert!(matches!(
            labels.additional_properties.as_ref().and_then(|a| a.oneof.as_ref()),
            Some(gnostic::additional_properties_item::Oneof::Schema(s))
                if s.r#type.as_ref().is_some_and(|t| t.value == ["string"])
        ));

        // kubectl's fallback check for server-side field validation: the patch operation of the kind's
        // path, found by its GVK, has a `fieldValidation` query parameter.
        let paths = pb.paths.expect("paths").path;
        let item = paths
            .iter()
            .find(|p| p.name == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            .and_then(|p| p.value.as_ref())
            .expect("deployment path");
        let patch = item.patch.as_ref().expect("patch");
        assert_eq!(
            extension(&patch.vendor_extension, "x-kubernetes-group-version-kind"),
            json!({"group": "apps", "kind": "Deployment", "version": "v1"})
        );
        let query: Vec<&str> = patch
            .parameters
            .iter()
            .filter_map(|p| match &p.oneof {
                Some(gnostic::parameters_item::Oneof::Parameter(gnostic::Parameter {
                    oneof: Some(gnostic::parameter::Oneof::NonBodyParameter(n)),
                })) => match &n.oneof {
                    Some(gnostic::non_body_parameter::Oneof::QueryParameterSubSchema(q)) => {
                        Some(q.name.as_str())
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(query, ["dryRun", "fieldManager", "fieldValidation"]);
        assert!(matches!(
            patch.parameters.first().and_then(|p| p.oneof.as_ref()),
            Some(gnostic::parameters_item::Oneof::Parameter(gnostic::Parameter {
                oneof: Some(gnostic::parameter::Oneof::BodyParameter(b)),
            })) if b.schema.as_ref().is_some_and(|s| s.r#ref.ends_with("apps.v1.Deployment"))
        ));
        assert_eq!(
            item.parameters.len(),
            2,
            "name and namespace path parameters"
        );
    }

    #[test]
    fn crd_schemas_lose_for_v2_what_upstream_drops() {
        let mut s = json!({
            "type": "object",
            "required": ["a", "n"],
            "properties": {
                "a": {"type": "string", "anyOf": [{"pattern": "x"}]},
                "n": {"type": "object", "nullable": true, "properties": {"x": {"type": "string"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"y": {"type": "string"}}},
                "list": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                         "items": {"type": "string"}},
            },
        });
        structural_v2(&mut s);
        assert_eq!(
            s,
            json!({
                "type": "object",
                "required": ["a"],
                "properties": {
                    "a": {"type": "string"},
                    "n": {},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "list": {"x-kubernetes-preserve-unknown-fields": true},
                },
            })
        );
    }
}
