//! Fuzzing of what a Kubernetes client sends: request bodies (JSON, YAML, protobuf), patches of
//! every type, server-side apply configurations, label and field selectors. Each target feeds
//! mutated inputs through the decoder and then through the checks a create or patch runs next.
//! A smoke pass by default; `KEEL_FUZZ_SECONDS=600 cargo test -p keel-kube-api --test fuzz --
//! --test-threads 1` is a campaign (docs/fuzzing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::Arc;

use keel_fuzz::{Target, Verdict};
use keel_kube_api::apply::managed::{self, ApplyOptions, Owner};
use keel_kube_api::apply::shape::Shape;
use keel_kube_api::handler::write::{apply_patch, check_type};
use keel_kube_api::protobuf::schema::{self, FieldType};
use keel_kube_api::resource::{self, ResourceDef};
use keel_kube_api::selector::{FieldSelector, LabelSelector};
use keel_kube_api::validation::{prune, validate};
use keel_kube_api::{body, encode, protobuf, storage, strategy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

#[global_allocator]
static ALLOC: keel_fuzz::CappedAlloc = keel_fuzz::CappedAlloc;

/// The kinds objects are checked as when their body names none the server knows.
const DEFS: &[(&str, &str, &str)] = &[
    ("", "v1", "pods"),
    ("apps", "v1", "deployments"),
    ("", "v1", "configmaps"),
    ("", "v1", "services"),
    ("", "v1", "secrets"),
    ("", "v1", "namespaces"),
    ("batch", "v1", "jobs"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("", "v1", "nodes"),
    ("apps", "v1", "statefulsets"),
];

fn def(i: usize) -> Arc<ResourceDef> {
    let (g, v, p) = DEFS[i % DEFS.len()];
    resource::find(g, v, p).unwrap_or_else(|| panic!("no resource {g}/{v} {p}"))
}

/// The served kind an object names, if any.
fn def_of(v: &Value) -> Option<Arc<ResourceDef>> {
    let av = v.get("apiVersion")?.as_str()?;
    let kind = v.get("kind")?.as_str()?;
    let group = av.rsplit_once('/').map_or("", |(g, _)| g);
    resource::by_kind(group, kind)
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web", "tier": "fe"},
                     "annotations": {"a.example.com/x": "y"}, "finalizers": ["f/x"],
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1", "controller": true}]},
        "spec": {"containers": [
            {"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}],
             "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "0.1"}},
             "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "side", "image": "busybox", "command": ["sh", "-c", "sleep 1"]}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"disk": "ssd"}, "restartPolicy": "Always", "terminationGracePeriodSeconds": 30}
    })
}

fn seeds_json() -> Vec<Value> {
    vec![
        pod(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]},
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod()["spec"].clone()}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
               "data": {"a": "b", "c.txt": "line\n"}, "binaryData": {"bin": "AAEC"}, "immutable": false}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
               "spec": {"type": "NodePort", "selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080, "protocol": "TCP"},
                                  {"port": 443, "targetPort": 8443}]}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque",
               "data": {"password": "cGFzcw=="}, "stringData": {"user": "admin"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1",
               "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"backoffLimit": 2, "completions": 3, "parallelism": 1,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r", "namespace": "default"},
               "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"], "resourceNames": ["a"]}]}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "spec": {"podCIDR": "10.244.0.0/24", "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
               "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2025-01-01T00:00:00Z"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "m", "managedFields": [
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "time": "2025-01-01T00:00:00Z",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}}]},
               "spec": {"containers": [{"name": "app", "image": "x"}]}}),
    ]
}

const JSON_DICT: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\u0000",
    "\\ud800",
    "null",
    "true",
    "false",
    "-0",
    "1e999",
    "18446744073709551616",
    "-9223372036854775809",
    "0.0000001",
    "\"metadata\":",
    "\"spec\":",
    "\"apiVersion\":\"v1\"",
    "\"kind\":\"Pod\"",
    "\"name\":",
    "\"labels\":{",
    "\"containers\":[",
    "\"managedFields\":[",
    "\"fieldsV1\":{",
    "\"k:{\\\"name\\\":\\\"a\\\"}\":{}",
    "\"v:1\":{}",
    "\"f:spec\":{",
    "{\"a\":",
    "[[",
    "\"status\":{}",
    "\"resourceVersion\":\"1\"",
    "\"replicas\":-1",
];

/// What a create does after decoding, without a store: type checks, pruning, typed decoding,
/// metadata and kind checks, preparation, the response and storage encoders, managedFields.
fn after_decode(mut v: Value, raw_json: Option<&[u8]>, pick: usize) -> Verdict {
    let d = def_of(&v).unwrap_or_else(|| def(pick));
    let _ = managed::decode(&v);
    if let Some(raw) = raw_json {
        let _ = prune::duplicate_fields(raw);
    }
    if check_type(&d, &mut v).is_err() {
        return Verdict::Rejected;
    }
    let s = strategy::of(&d);
    let _ = s.prune_unknown(&d, &mut v);
    let _ = encode::to_vec(&v);
    if validate::shape(&d, &mut v).is_err() {
        return Verdict::Rejected;
    }
    s.prepare_for_create(&d, &mut v);
    let causes = keel_kube_api::strategy::validate_object(&d, &v);
    encode::as_stored(&d.api_version(), &d.kind, &mut v);
    let _ = encode::to_vec(&v);
    let _ = storage::encode(&v);
    if causes.is_empty() {
        Verdict::Accepted
    } else {
        Verdict::Rejected
    }
}

#[test]
fn fuzz_kube_json_body() {
    let seeds = seeds_json()
        .iter()
        .map(|v| serde_json::to_vec(v).unwrap())
        .collect::<Vec<_>>();
    Target::new("kube_json_body")
        .seeds(seeds)
        .dict(JSON_DICT)
        .run(|b| match body::json(b) {
            Ok(v) if v.is_object() => after_decode(v, Some(b), b.len()),
            _ => Verdict::Rejected,
        })
        .assert_clean();
}

const YAML_DICT: &[&str] = &[
    "&a ",
    "*a",
    "<<: *a\n",
    "- ",
    ": ",
    "? ",
    "{",
    "}",
    "[",
    "]",
    "---\n",
    "...\n",
    "!!binary ",
    "!!str ",
    "!!int ",
    "!!float ",
    "!!map ",
    "!!seq ",
    "!custom ",
    "|\n  ",
    ">-\n  ",
    "\n  ",
    "\t",
    "#c\n",
    "~",
    "null",
    "yes",
    "0x1F",
    "0o17",
    ".inf",
    "-.nan",
    "1e400",
    "'",
    "\"\\x00\"",
    "%YAML 1.2\n",
    "a: &a [*a, *a, *a]\n",
    "b: &b [*a, *a, *a, *a]\n",
    "apiVersion: v1\n",
    "kind: Pod\n",
    "metadata:\n  name: x\n",
];

fn yaml_seeds() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = seeds_json()
        .iter()
        .map(|v| serde_yaml_ng::to_string(v).unwrap().into_bytes())
        .collect();
    s.push(
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: &m\n  name: cm\n  labels: {a: b}\ndata:\n  x: |\n    multi\n    line\n  y: >-\n    folded\n  z: *m\n"
            .to_vec(),
    );
    s.push(
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - &c {name: a, image: x}\n  - <<: *c\n    name: b\n"
            .to_vec(),
    );
    s.push(b"a: &a [1, 2, 3]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nd: [*c, *c, *c]\n".to_vec());
    s
}

#[test]
fn fuzz_kube_yaml_body() {
    Target::new("kube_yaml_body")
        .seeds(yaml_seeds())
        .dict(YAML_DICT)
        .run(|b| match body::yaml(b) {
            Ok(v) if v.is_object() => after_decode(v, None, b.len()),
            _ => Verdict::Rejected,
        })
        .assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Protobuf: a schema-driven generator makes valid messages of every kind to start from.

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(tag: u32, wt: u8, out: &mut Vec<u8>) {
    put_varint(u64::from(tag) << 3 | u64::from(wt), out);
}

fn put_bytes(tag: u32, b: &[u8], out: &mut Vec<u8>) {
    put_key(tag, 2, out);
    put_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

const STRINGS: &[&str] = &[
    "",
    "a",
    "web",
    "default",
    "100m",
    "1.5Gi",
    "2025-01-01T00:00:00Z",
    "TCP",
    "Always",
    "app",
    "nginx:1.27",
    "10.0.0.1",
    "k:{\"name\":\"a\"}",
    "{\"f:a\":{}}",
    "true",
    "-1",
];

fn gen_value(ty: &FieldType, tag: u32, depth: usize, rng: &mut StdRng, out: &mut Vec<u8>) {
    match ty {
        FieldType::String => {
            let s = STRINGS[rng.gen_range(0..STRINGS.len())];
            put_bytes(tag, s.as_bytes(), out);
        }
        FieldType::Bytes => {
            let b: Vec<u8> = (0..rng.gen_range(0..8)).map(|_| rng.gen()).collect();
            put_bytes(tag, &b, out);
        }
        FieldType::Bool => {
            put_key(tag, 0, out);
            put_varint(rng.gen_range(0..2), out);
        }
        FieldType::Int32 | FieldType::Int64 => {
            put_key(tag, 0, out);
            let v: i64 = match rng.gen_range(0..4) {
                0 => 0,
                1 => -1,
                2 => 1_735_689_600,
                _ => rng.gen_range(0..100_000),
            };
            put_varint(v as u64, out);
        }
        FieldType::Double => {
            put_key(tag, 1, out);
            out.extend_from_slice(&rng.gen::<f64>().to_le_bytes());
        }
        FieldType::Float => {
            put_key(tag, 5, out);
            out.extend_from_slice(&rng.gen::<f32>().to_le_bytes());
        }
        FieldType::Message(name) => {
            let inner = gen_message(name, depth + 1, rng);
            put_bytes(tag, &inner, out);
        }
        FieldType::Map(vt) => {
            let mut entry = Vec::new();
            put_bytes(
                1,
                STRINGS[rng.gen_range(1..STRINGS.len())].as_bytes(),
                &mut entry,
            );
            gen_value(vt, 2, depth, rng, &mut entry);
            put_bytes(tag, &entry, out);
        }
    }
}

fn gen_message(name: &str, depth: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut out = Vec::new();
    let Some(m) = schema::messages().get(name) else {
        return out;
    };
    if depth > 7 {
        return out;
    }
    let mut tags: Vec<_> = m.fields.keys().copied().collect();
    tags.sort_unstable();
    for tag in tags {
        let f = &m.fields[&tag];
        if !rng.gen_ratio(2, 3) {
            continue;
        }
        let n = if f.repeated || matches!(f.ty, FieldType::Map(_)) {
            rng.gen_range(1..3)
        } else {
            1
        };
        for _ in 0..n {
            gen_value(&f.ty, tag, depth, rng, &mut out);
        }
    }
    out
}

/// Every message name, in a fixed order (the first input byte picks one).
fn message_names() -> Vec<String> {
    let mut names: Vec<String> = schema::messages().keys().cloned().collect();
    names.sort();
    names
}

fn pick_name(names: &[String], b: &[u8]) -> usize {
    match b {
        [x, y, ..] => (usize::from(*x) << 8 | usize::from(*y)) % names.len(),
        _ => 0,
    }
}

#[test]
fn fuzz_kube_protobuf_message() {
    let names = message_names();
    let mut rng = StdRng::seed_from_u64(7);
    let mut seeds = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut s = vec![(i >> 8) as u8, i as u8];
        s.extend(gen_message(name, 0, &mut rng));
        seeds.push(s);
    }
    Target::new("kube_protobuf_message")
        .seeds(seeds)
        .run(|b| {
            let name = &names[pick_name(&names, b)];
            let rest = b.get(2..).unwrap_or_default();
            match protobuf::decode::decode(name, rest) {
                Ok(v) => {
                    let _ = encode::to_vec(&v);
                    Verdict::Accepted
                }
                Err(_) => Verdict::Rejected,
            }
        })
        .assert_clean();
}

/// A protobuf request body: `k8s\0` + runtime.Unknown{typeMeta{apiVersion, kind}, raw}.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = Vec::new();
    put_bytes(1, api_version.as_bytes(), &mut tm);
    put_bytes(2, kind.as_bytes(), &mut tm);
    let mut out = protobuf::MAGIC.to_vec();
    put_bytes(1, &tm, &mut out);
    put_bytes(2, raw, &mut out);
    out
}

#[test]
fn fuzz_kube_protobuf_body() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut seeds = Vec::new();
    for i in 0..DEFS.len() {
        let d = def(i);
        let av = d.api_version();
        let Some(name) = schema::message_for(&av, &d.kind) else {
            continue;
        };
        for _ in 0..4 {
            seeds.push(envelope(&av, &d.kind, &gen_message(&name, 0, &mut rng)));
        }
    }
    Target::new("kube_protobuf_body")
        .seeds(seeds)
        .dict([
            "k8s\0",
            "v1",
            "Pod",
            "apps/v1",
            "Deployment",
            "\x0a",
            "\x12",
            "\x1a",
        ])
        .run(|b| match protobuf::decode_body(b) {
            Ok(v) if v.is_object() => after_decode(v, None, b.len()),
            _ => Verdict::Rejected,
        })
        .assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Patches: the first input byte picks the patch type and the object patched.

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

fn patch_seeds() -> Vec<Vec<u8>> {
    let docs: [(&str, usize); 12] = [
        (
            r#"[{"op":"add","path":"/metadata/labels/x","value":"y"},{"op":"remove","path":"/spec/containers/1"}]"#,
            0,
        ),
        (
            r#"[{"op":"replace","path":"/spec/containers/0/image","value":"b"},{"op":"test","path":"/kind","value":"Pod"}]"#,
            0,
        ),
        (
            r#"[{"op":"move","from":"/metadata/labels","path":"/metadata/annotations"},{"op":"copy","from":"/spec","path":"/status"}]"#,
            0,
        ),
        (
            r#"[{"op":"add","path":"/spec/containers/-","value":{"name":"z","image":"z"}},{"op":"add","path":"/a~1b~0c","value":1}]"#,
            0,
        ),
        (
            r#"{"metadata":{"labels":{"app":null,"new":"v"}},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
            1,
        ),
        (
            r#"{"spec":{"replicas":5,"template":{"spec":{"containers":null}}}}"#,
            1,
        ),
        (
            r#"{"spec":{"containers":[{"name":"app","image":"new"},{"$patch":"delete","name":"side"}]}}"#,
            2,
        ),
        (
            r#"{"spec":{"$setElementOrder/containers":[{"name":"side"},{"name":"app"}],"containers":[{"name":"app","env":[{"name":"A","$patch":"delete"}]}]}}"#,
            2,
        ),
        (
            r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["f/x"],"finalizers":["g"]},"spec":{"$retainKeys":["containers"]}}"#,
            2,
        ),
        (
            r#"{"spec":{"volumes":[{"name":"data","$retainKeys":["name","hostPath"],"hostPath":{"path":"/x"}}],"tolerations":[{"$patch":"replace"}]}}"#,
            2,
        ),
        (
            r#"{"$patch":"replace","metadata":{"name":"web-1"},"spec":{}}"#,
            2,
        ),
        (
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","ports":[{"containerPort":81}]}]}},"selector":{"$patch":"delete"}}}"#,
            5,
        ),
    ];
    docs.iter()
        .map(|(d, which)| {
            let mut v = vec![*which as u8];
            v.extend_from_slice(d.as_bytes());
            v
        })
        .collect()
}

#[test]
fn fuzz_kube_patch() {
    let objects = seeds_json();
    let mut dict: Vec<&str> = JSON_DICT.to_vec();
    dict.extend([
        "\"op\":\"add\"",
        "\"op\":\"remove\"",
        "\"op\":\"move\"",
        "\"from\":\"/",
        "\"path\":\"/",
        "/-",
        "~1",
        "~0",
        "~2",
        "/0",
        "/99999999999999999999",
        "\"$patch\":\"delete\"",
        "\"$patch\":\"replace\"",
        "\"$patch\":\"merge\"",
        "\"$retainKeys\":[",
        "\"$setElementOrder/containers\":[",
        "\"$deleteFromPrimitiveList/finalizers\":[",
        "{\"name\":\"app\"",
        "\"value\":",
    ]);
    Target::new("kube_patch")
        .seeds(patch_seeds())
        .dict(dict)
        .run(|b| {
            let Some((&sel, patch)) = b.split_first() else {
                return Verdict::Rejected;
            };
            let ct = PATCH_TYPES[usize::from(sel) % PATCH_TYPES.len()];
            // Patch types cycle fastest, then the object patched (index 0 is a Pod for each type).
            let obj = &objects[(usize::from(sel) / PATCH_TYPES.len()) % objects.len()];
            let Some(d) = def_of(obj) else {
                return Verdict::Rejected;
            };
            match apply_patch(ct, obj.clone(), patch, &d) {
                Ok(v) => {
                    let _ = encode::to_vec(&v);
                    after_decode(v, None, 0)
                }
                Err(_) => Verdict::Rejected,
            }
        })
        .assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Server-side apply: a YAML configuration applied over a live object that already has managed
// fields of two managers.

#[test]
fn fuzz_kube_apply_yaml() {
    let owner = |m: &str| Owner {
        manager: m.to_string(),
        api_version: "v1".into(),
        subresource: String::new(),
    };
    let opts = |force| ApplyOptions {
        force,
        has_status: true,
        allowed: None,
    };
    // Live objects with managedFields, made by the apply path itself.
    let mut lives = Vec::new();
    for v in seeds_json() {
        let (av, kind) = (
            v["apiVersion"].as_str().unwrap().to_string(),
            v["kind"].as_str().unwrap().to_string(),
        );
        let shape = Shape::of_kind(&av, &kind);
        let first = managed::apply(&json!({}), &v, shape, &owner("kubectl"), opts(false)).unwrap();
        let mut second = v.clone();
        second["metadata"]["labels"] = json!({"other": "x"});
        let live = managed::apply(&first, &second, shape, &owner("helm"), opts(true)).unwrap();
        lives.push(live);
    }
    Target::new("kube_apply_yaml")
        .seeds(yaml_seeds())
        .dict(YAML_DICT)
        .run(|b| {
            let Ok(config) = serde_yaml_ng::from_slice::<Value>(b) else {
                return Verdict::Rejected;
            };
            if !config.is_object() {
                return Verdict::Rejected;
            }
            let av = config
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("v1");
            let kind = config.get("kind").and_then(Value::as_str).unwrap_or("Pod");
            let shape = Shape::of_kind(av, kind);
            let live = &lives[b.len() % lives.len()];
            let force = b.len() % 2 == 0;
            let manager = if b.len() % 3 == 0 { "kubectl" } else { "other" };
            match managed::apply(live, &config, shape, &owner(manager), opts(force)) {
                Ok(merged) => {
                    let _ = managed::decode(&merged);
                    let _ = encode::to_vec(&merged);
                    Verdict::Accepted
                }
                Err(conflicts) => {
                    let _ = managed::conflict_message(&conflicts);
                    Verdict::Rejected
                }
            }
        })
        .assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Selectors: parsed from a query parameter, then matched against objects.

#[test]
fn fuzz_kube_label_selector() {
    let seeds = [
        "app=web",
        "app==web,tier!=be",
        "app in (web, api),!legacy",
        "tier notin (a,b),env",
        "a.b/c-d_e=x.y",
        "x>3,y<10",
        "!a,b",
        "",
        "app",
        "example.com/key in ()",
    ];
    let objects = seeds_json();
    Target::new("kube_label_selector")
        .seeds(seeds.iter().map(|s| s.as_bytes().to_vec()))
        .dict([
            "=", "==", "!=", "!", ",", " in ", " notin ", "(", ")", "<", ">", "/", ".", "-", "_",
            " ",
        ])
        .max_len(4096)
        .run(|b| {
            let Ok(s) = std::str::from_utf8(b) else {
                return Verdict::Rejected;
            };
            match LabelSelector::parse(s) {
                Ok(sel) => {
                    for o in &objects {
                        let _ = sel.matches(o["metadata"]["labels"].as_object());
                    }
                    let _ = LabelSelector::parse(&sel.to_query());
                    let _ = sel.is_empty();
                    Verdict::Accepted
                }
                Err(_) => Verdict::Rejected,
            }
        })
        .assert_clean();
}

#[test]
fn fuzz_kube_field_selector() {
    let seeds = [
        "metadata.name=web-1",
        "metadata.namespace!=kube-system,spec.nodeName=",
        "status.phase==Running",
        "spec.nodeName=n1,metadata.name=x",
        "involvedObject.kind=Pod",
        "type=Opaque",
        "spec.unknown=1",
        "",
        "metadata.name=a\\,b",
    ];
    let objects = seeds_json();
    Target::new("kube_field_selector")
        .seeds(seeds.iter().enumerate().map(|(i, s)| {
            let mut v = vec![i as u8];
            v.extend_from_slice(s.as_bytes());
            v
        }))
        .dict([
            "=",
            "==",
            "!=",
            ",",
            "\\",
            "metadata.",
            "spec.",
            "status.",
            "name",
            "namespace",
        ])
        .max_len(4096)
        .run(|b| {
            let Some((&sel, rest)) = b.split_first() else {
                return Verdict::Rejected;
            };
            let Ok(s) = std::str::from_utf8(rest) else {
                return Verdict::Rejected;
            };
            let d = def(usize::from(sel));
            match FieldSelector::parse(s, &d) {
                Ok(f) => {
                    for o in &objects {
                        let _ = f.matches(o);
                    }
                    let _ = f.exact_name();
                    Verdict::Accepted
                }
                Err(_) => Verdict::Rejected,
            }
        })
        .assert_clean();
}
