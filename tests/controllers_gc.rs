//! Garbage collection and namespace deletion on a 3-member cluster, through the real kubectl: the API
//! server's propagation policies (`kubectl delete --cascade=background|foreground|orphan`), the
//! garbage-collector controller acting on ownerReferences, and the namespace controller emptying and
//! finalizing a deleted namespace. One cluster is shared; each test keeps to its own namespace.
//! ConfigMaps are the owners and dependents (no other controller touches them).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

/// Creates ConfigMap `name` in `ns` owned by `owners` (name, uid, blockOwnerDeletion), with
/// `finalizers`; returns its uid.
fn configmap(
    c: &KubeCluster,
    ns: &str,
    name: &str,
    owners: &[(&str, &str, bool)],
    finalizers: &[&str],
) -> String {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(n, uid, block)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": n, "uid": uid,
                   "blockOwnerDeletion": block})
        })
        .collect();
    let mut meta = json!({"name": name, "namespace": ns});
    if !refs.is_empty() {
        meta["ownerReferences"] = json!(refs);
    }
    if !finalizers.is_empty() {
        meta["finalizers"] = json!(finalizers);
    }
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}),
    )
}

/// Creates `obj`; returns its uid (from the create: a dependent of a missing owner may be collected
/// at once).
fn create(c: &KubeCluster, obj: Value) -> String {
    create_on(c, 0, obj)
}

/// [`create`] through member `i`.
fn create_on(c: &KubeCluster, i: usize, obj: Value) -> String {
    let out = c.ok_stdin(
        i,
        &["create", "-f", "-", "-o", "json"],
        Some(&obj.to_string()),
    );
    let created: Value = serde_json::from_str(&out).unwrap();
    created["metadata"]["uid"].as_str().unwrap().to_string()
}

fn get(c: &KubeCluster, ns: &str, name: &str) -> Option<Value> {
    let r = c.kubectl(0, &["get", "configmap", "-n", ns, name, "-o", "json"]);
    if !r.ok {
        assert!(r.stderr.contains("NotFound"), "{}", r.stderr);
        return None;
    }
    Some(serde_json::from_str(&r.stdout).unwrap())
}

fn finalizers(v: &Value) -> Vec<String> {
    v["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().map(|f| f.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn release(c: &KubeCluster, ns: &str, name: &str) {
    c.ok(
        0,
        &[
            "patch",
            "configmap",
            "-n",
            ns,
            name,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
}

fn wait_gone(c: &KubeCluster, ns: &str, name: &str) -> Duration {
    let t = Instant::now();
    c.wait_until(&format!("configmap {ns}/{name} gone"), WAIT, || {
        get(c, ns, name).is_none()
    });
    t.elapsed()
}

#[test]
fn background_deletes_the_owner_at_once_then_its_dependents() {
    let c = cluster();
    let ns = "gc-bg";
    c.ok(0, &["create", "namespace", ns]);
    let owner = configmap(c, ns, "owner", &[], &[]);
    configmap(c, ns, "dep-a", &[("owner", &owner, true)], &[]);
    configmap(c, ns, "dep-b", &[("owner", &owner, false)], &[]);
    configmap(c, ns, "bystander", &[], &[]);
    c.ok(
        0,
        &[
            "delete",
            "configmap",
            "-n",
            ns,
            "owner",
            "--cascade=background",
            "--wait=false",
        ],
    );
    assert!(
        get(c, ns, "owner").is_none(),
        "a background delete removes the owner at once"
    );
    let a = wait_gone(c, ns, "dep-a");
    let b = wait_gone(c, ns, "dep-b");
    println!("background: dependents collected after {a:?} and {b:?}");
    assert!(get(c, ns, "bystander").is_some());
    // The default policy is Background too.
    let owner = configmap(c, ns, "owner2", &[], &[]);
    configmap(c, ns, "dep-c", &[("owner2", &owner, true)], &[]);
    c.ok(0, &["delete", "configmap", "-n", ns, "owner2"]);
    assert!(get(c, ns, "owner2").is_none());
    wait_gone(c, ns, "dep-c");
}

#[test]
fn foreground_keeps_the_owner_until_its_blocking_dependents_are_gone() {
    let c = cluster();
    let ns = "gc-fg";
    c.ok(0, &["create", "namespace", ns]);
    let owner = configmap(c, ns, "owner", &[], &[]);
    configmap(
        c,
        ns,
        "blocking",
        &[("owner", &owner, true)],
        &["example.com/hold"],
    );
    configmap(c, ns, "free", &[("owner", &owner, false)], &[]);
    c.ok(
        0,
        &[
            "delete",
            "configmap",
            "-n",
            ns,
            "owner",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    let o = get(c, ns, "owner").expect("a foreground delete keeps the owner");
    assert!(o["metadata"]["deletionTimestamp"].is_string(), "{o}");
    assert!(
        finalizers(&o).contains(&"foregroundDeletion".to_string()),
        "{o}"
    );
    // The collector deletes the dependents; the held one stays deleting, and so does the owner.
    wait_gone(c, ns, "free");
    c.wait_until("the blocking dependent is being deleted", WAIT, || {
        get(c, ns, "blocking").is_some_and(|b| b["metadata"]["deletionTimestamp"].is_string())
    });
    let o = get(c, ns, "owner").expect("the owner waits for its blocking dependent");
    assert!(
        finalizers(&o).contains(&"foregroundDeletion".to_string()),
        "{o}"
    );
    release(c, ns, "blocking");
    wait_gone(c, ns, "blocking");
    let t = wait_gone(c, ns, "owner");
    println!("foreground: owner gone {t:?} after its last blocking dependent");
}

#[test]
fn orphan_strips_the_owner_references_and_keeps_the_dependents() {
    let c = cluster();
    let ns = "gc-orphan";
    c.ok(0, &["create", "namespace", ns]);
    let owner = configmap(c, ns, "owner", &[], &[]);
    let other = configmap(c, ns, "other-owner", &[], &[]);
    configmap(c, ns, "dep", &[("owner", &owner, true)], &[]);
    configmap(
        c,
        ns,
        "dep-two-owners",
        &[("owner", &owner, true), ("other-owner", &other, true)],
        &[],
    );
    c.ok(
        0,
        &["delete", "configmap", "-n", ns, "owner", "--cascade=orphan"],
    );
    assert!(
        get(c, ns, "owner").is_none(),
        "kubectl waited for the owner to go"
    );
    let dep = get(c, ns, "dep").expect("an orphaned dependent stays");
    assert!(dep["metadata"]["ownerReferences"].is_null(), "{dep}");
    let two = get(c, ns, "dep-two-owners").expect("an orphaned dependent stays");
    let refs = two["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(refs.len(), 1, "{two}");
    assert_eq!(refs[0]["uid"], other.as_str(), "{two}");
}

#[test]
fn a_dependent_whose_owner_never_existed_is_collected() {
    let c = cluster();
    let ns = "gc-dangling";
    c.ok(0, &["create", "namespace", ns]);
    let owner = configmap(c, ns, "owner", &[], &[]);
    configmap(
        c,
        ns,
        "wrong-uid",
        &[("owner", "00000000-0000-0000-0000-000000000001", true)],
        &[],
    );
    configmap(
        c,
        ns,
        "no-such-owner",
        &[("nobody", "00000000-0000-0000-0000-000000000002", true)],
        &[],
    );
    configmap(c, ns, "right-uid", &[("owner", &owner, true)], &[]);
    // Two owners, one of them gone: only the dangling reference goes.
    configmap(
        c,
        ns,
        "half-owned",
        &[
            ("owner", &owner, true),
            ("nobody", "00000000-0000-0000-0000-000000000003", true),
        ],
        &[],
    );
    let a = wait_gone(c, ns, "wrong-uid");
    let b = wait_gone(c, ns, "no-such-owner");
    println!("dangling: collected after {a:?} and {b:?}");
    c.wait_until("the dangling reference removed", WAIT, || {
        get(c, ns, "half-owned")
            .is_some_and(|h| h["metadata"]["ownerReferences"].as_array().map(Vec::len) == Some(1))
    });
    assert!(
        get(c, ns, "right-uid").is_some(),
        "a dependent with its owner stays"
    );
}

#[test]
fn chains_cascade_in_the_background_and_in_the_foreground() {
    let c = cluster();
    let ns = "gc-chain";
    c.ok(0, &["create", "namespace", ns]);
    let a = configmap(c, ns, "a", &[], &[]);
    let b = configmap(c, ns, "b", &[("a", &a, true)], &[]);
    configmap(c, ns, "c", &[("b", &b, true)], &[]);
    c.ok(0, &["delete", "configmap", "-n", ns, "a"]);
    wait_gone(c, ns, "b");
    let t = wait_gone(c, ns, "c");
    println!("chain, background: grand-dependent gone after {t:?}");

    // Foreground: the middle object is deleted in the foreground too, so both wait for the held leaf.
    let a = configmap(c, ns, "fa", &[], &[]);
    let b = configmap(c, ns, "fb", &[("fa", &a, true)], &[]);
    configmap(c, ns, "fc", &[("fb", &b, true)], &["example.com/hold"]);
    c.ok(
        0,
        &[
            "delete",
            "configmap",
            "-n",
            ns,
            "fa",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    c.wait_until("the middle object deleting in the foreground", WAIT, || {
        get(c, ns, "fb").is_some_and(|m| finalizers(&m).contains(&"foregroundDeletion".to_string()))
    });
    c.wait_until("the leaf being deleted", WAIT, || {
        get(c, ns, "fc").is_some_and(|l| l["metadata"]["deletionTimestamp"].is_string())
    });
    assert!(get(c, ns, "fa").is_some(), "the owner waits for the chain");
    release(c, ns, "fc");
    wait_gone(c, ns, "fc");
    wait_gone(c, ns, "fb");
    let t = wait_gone(c, ns, "fa");
    println!("chain, foreground: owner gone {t:?} after the leaf was released");
}

/// A delete through the kube client with a raw DeleteOptions body; answers the object or Status.
async fn raw_delete(client: &kube::Client, ns: &str, name: &str, options: Value) -> Value {
    let req = http::Request::delete(format!("/api/v1/namespaces/{ns}/configmaps/{name}"))
        .header("content-type", "application/json")
        .body(options.to_string().into_bytes())
        .unwrap();
    client.request::<Value>(req).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_delete_follows_the_new_policy() {
    let c = cluster();
    let ns = "gc-repeat";
    c.ok(0, &["create", "namespace", ns]);
    // A held dependent keeps the owner's foreground deletion going while the policy is changed.
    let owner = configmap(c, ns, "owner", &[], &["example.com/hold"]);
    configmap(
        c,
        ns,
        "dep",
        &[("owner", &owner, true)],
        &["example.com/hold"],
    );
    c.ok(
        0,
        &[
            "delete",
            "configmap",
            "-n",
            ns,
            "owner",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    let o = get(c, ns, "owner").unwrap();
    assert_eq!(
        finalizers(&o),
        ["example.com/hold", "foregroundDeletion"],
        "{o}"
    );
    c.wait_until("the dependent being deleted", WAIT, || {
        get(c, ns, "dep").is_some_and(|d| d["metadata"]["deletionTimestamp"].is_string())
    });
    let client = c.client(0).await;
    let dry = |p: &str| json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"], "propagationPolicy": p});
    let o = raw_delete(&client, ns, "owner", dry("Orphan")).await;
    assert_eq!(finalizers(&o), ["example.com/hold", "orphan"], "{o}");
    let o = raw_delete(&client, ns, "owner", dry("Background")).await;
    assert_eq!(finalizers(&o), ["example.com/hold"], "{o}");
    // The legacy field: orphanDependents true is Orphan.
    let legacy = json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"], "orphanDependents": true});
    let o = raw_delete(&client, ns, "owner", legacy).await;
    assert_eq!(finalizers(&o), ["example.com/hold", "orphan"], "{o}");
    // Both at once is refused, as upstream.
    let both = json!({"orphanDependents": true, "propagationPolicy": "Foreground"}).to_string();
    let req = http::Request::delete(format!("/api/v1/namespaces/{ns}/configmaps/owner"))
        .header("content-type", "application/json")
        .body(both.into_bytes())
        .unwrap();
    let err = client.request::<Value>(req).await.unwrap_err();
    assert!(format!("{err}").contains("cannot be both set"), "{err}");
    // Dry runs changed nothing; a real Background delete drops foregroundDeletion.
    let o = get(c, ns, "owner").unwrap();
    assert_eq!(
        finalizers(&o),
        ["example.com/hold", "foregroundDeletion"],
        "{o}"
    );
    c.ok(
        0,
        &[
            "delete",
            "configmap",
            "-n",
            ns,
            "owner",
            "--cascade=background",
            "--wait=false",
        ],
    );
    let o = get(c, ns, "owner").unwrap();
    assert_eq!(finalizers(&o), ["example.com/hold"], "{o}");
    // A delete that leaves the object waiting answers 202 when asked with orphanDependents=false.
    let req = http::Request::delete(format!("/api/v1/namespaces/{ns}/configmaps/owner"))
        .header("content-type", "application/json")
        .body(json!({"orphanDependents": false}).to_string().into_bytes())
        .unwrap();
    let answer = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
    release(c, ns, "owner");
    release(c, ns, "dep");
    wait_gone(c, ns, "owner");
    wait_gone(c, ns, "dep");
}

/// The reasons and messages of the Events about `name` (any namespace).
fn events_about(c: &KubeCluster, name: &str) -> Vec<(String, String)> {
    let all: Value =
        serde_json::from_str(&c.ok(0, &["get", "events", "-A", "-o", "json"])).unwrap();
    all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn owners_are_cluster_scoped_or_in_the_dependents_namespace() {
    let c = cluster();
    let (ns, other) = ("gc-scope", "gc-scope-other");
    c.ok(0, &["create", "namespace", ns]);
    c.ok(0, &["create", "namespace", other]);
    // A cluster-scoped owner of a namespaced dependent.
    let role = create(
        c,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "gc-owner-role"}, "rules": []}),
    );
    let refs = json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "name": "gc-owner-role", "uid": role}]);
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "of-a-role", "namespace": ns, "ownerReferences": refs}}),
    );
    // A namespaced owner named from another namespace: absent there, so the dependent goes.
    let owner = configmap(c, ns, "owner", &[], &[]);
    configmap(c, other, "elsewhere", &[("owner", &owner, false)], &[]);
    let t = wait_gone(c, other, "elsewhere");
    println!("a dependent naming an owner of another namespace collected after {t:?}");
    c.wait_until("an OwnerRefInvalidNamespace event", WAIT, || {
        events_about(c, "elsewhere")
            .iter()
            .any(|(r, m)| r == "OwnerRefInvalidNamespace" && m.contains(&owner))
    });
    assert!(
        get(c, ns, "owner").is_some(),
        "the owner itself is untouched"
    );
    // A cluster-scoped dependent cannot have a namespaced owner: reported, never deleted.
    let cm_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner}]);
    create(
        c,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "gc-invalid-dependent", "ownerReferences": cm_ref}, "rules": []}),
    );
    c.wait_until("an OwnerRefInvalidNamespace event", WAIT, || {
        events_about(c, "gc-invalid-dependent")
            .iter()
            .any(|(r, _)| r == "OwnerRefInvalidNamespace")
    });
    assert!(
        c.kubectl(0, &["get", "clusterrole", "gc-invalid-dependent"])
            .ok
    );
    c.ok(0, &["delete", "clusterrole", "gc-invalid-dependent"]);
    // Deleting the cluster-scoped owner collects its namespaced dependent.
    c.ok(0, &["delete", "clusterrole", "gc-owner-role"]);
    wait_gone(c, ns, "of-a-role");
}

const CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
 "metadata": {"name": "gadgets.gc.example.com"},
 "spec": {"group": "gc.example.com", "scope": "Namespaced",
  "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
  "versions": [{"name": "v1", "served": true, "storage": true,
   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}"#;

#[test]
fn custom_resources_created_later_are_owners_and_dependents() {
    let c = cluster();
    let ns = "gc-crd";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(0, &["apply", "-f", "-"], Some(CRD));
    c.wait_until("the gadget type served", WAIT, || {
        c.kubectl(0, &["get", "gadgets", "-n", ns]).ok
    });
    let gadget = |name: &str, refs: Value| {
        let mut meta = json!({"name": name, "namespace": ns});
        if !refs.is_null() {
            meta["ownerReferences"] = refs;
        }
        create(
            c,
            json!({"apiVersion": "gc.example.com/v1", "kind": "Gadget", "metadata": meta}),
        )
    };
    // A custom resource owning a ConfigMap.
    let g = gadget("owner", Value::Null);
    let refs = json!([{"apiVersion": "gc.example.com/v1", "kind": "Gadget", "name": "owner", "uid": g,
                       "blockOwnerDeletion": true}]);
    create(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "of-a-gadget", "namespace": ns, "ownerReferences": refs}}),
    );
    c.ok(
        0,
        &[
            "delete",
            "gadget",
            "-n",
            ns,
            "owner",
            "--cascade=foreground",
        ],
    );
    assert!(
        get(c, ns, "of-a-gadget").is_none(),
        "foreground: the dependent went first"
    );
    // A ConfigMap owning a custom resource (watched since the type was first named, or discovered
    // again at the latest 30 s after it appeared).
    let owner = configmap(c, ns, "cm-owner", &[], &[]);
    let refs = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm-owner", "uid": owner}]);
    gadget("dependent", refs);
    c.ok(0, &["delete", "configmap", "-n", ns, "cm-owner"]);
    let t = Instant::now();
    c.wait_until(
        "the dependent gadget collected",
        Duration::from_secs(120),
        || {
            let r = c.kubectl(0, &["get", "gadget", "-n", ns, "dependent"]);
            !r.ok && r.stderr.contains("NotFound")
        },
    );
    println!(
        "a custom resource dependent collected {:?} after its owner went",
        t.elapsed()
    );
}

fn condition(ns: &Value, ty: &str) -> Option<(String, String)> {
    ns["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

#[test]
fn namespace_deletion_removes_content_and_waits_for_finalizers() {
    let c = cluster();
    let ns = "gc-ns";
    c.ok(0, &["create", "namespace", ns]);
    configmap(c, ns, "plain", &[], &[]);
    configmap(c, ns, "held", &[], &["example.com/hold"]);
    c.ok(
        0,
        &[
            "create",
            "secret",
            "generic",
            "-n",
            ns,
            "s",
            "--from-literal=a=b",
        ],
    );
    let t = Instant::now();
    c.ok(0, &["delete", "namespace", ns, "--wait=false"]);
    wait_gone(c, ns, "plain");
    c.wait_until("the secret gone", WAIT, || {
        !c.kubectl(0, &["get", "secret", "-n", ns, "s"]).ok
    });
    let mut last = Value::Null;
    c.wait_until("the namespace reports what remains", WAIT, || {
        last = serde_json::from_str(&c.ok(0, &["get", "namespace", ns, "-o", "json"])).unwrap();
        condition(&last, "NamespaceContentRemaining").is_some_and(|(s, _)| s == "True")
            && condition(&last, "NamespaceFinalizersRemaining").is_some_and(|(s, _)| s == "True")
    });
    assert_eq!(last["status"]["phase"], "Terminating", "{last}");
    let (_, remaining) = condition(&last, "NamespaceContentRemaining").unwrap();
    assert!(
        remaining.contains("configmaps. has 1 resource instances"),
        "{remaining}"
    );
    let (_, fins) = condition(&last, "NamespaceFinalizersRemaining").unwrap();
    assert!(
        fins.contains("example.com/hold in 1 resource instances"),
        "{fins}"
    );
    let (s, _) = condition(&last, "NamespaceDeletionDiscoveryFailure").unwrap();
    assert_eq!(s, "False", "{last}");
    let held = get(c, ns, "held").expect("an object with a finalizer stays");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    assert!(
        c.kubectl(0, &["get", "namespace", ns]).ok,
        "the namespace waits for its content"
    );
    release(c, ns, "held");
    let released = Instant::now();
    c.wait_until("the namespace gone", WAIT, || {
        let r = c.kubectl(0, &["get", "namespace", ns]);
        !r.ok && r.stderr.contains("NotFound")
    });
    println!(
        "namespace: gone {:?} after its last finalizer was removed ({:?} in all)",
        released.elapsed(),
        t.elapsed()
    );
}

#[test]
fn a_new_leader_collects_what_the_old_one_left() {
    let mut c = KubeCluster::start(keel_bin!(), 3);
    let ns = "gc-failover";
    c.ok(0, &["create", "namespace", ns]);
    let leader = c.cluster_mut().wait_leader(Duration::from_secs(30));
    let survivor = (0..3).find(|&i| i != leader).unwrap();
    let ok = |c: &KubeCluster, args: &[&str]| c.ok(survivor, args);
    // A foreground deletion under way when the leader dies: the new leader finishes it.
    let owner = configmap(&c, ns, "owner", &[], &[]);
    configmap(
        &c,
        ns,
        "dep",
        &[("owner", &owner, true)],
        &["example.com/hold"],
    );
    ok(
        &c,
        &[
            "delete",
            "configmap",
            "-n",
            ns,
            "owner",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    c.wait_until("the dependent being deleted", WAIT, || {
        get(&c, ns, "dep").is_some_and(|d| d["metadata"]["deletionTimestamp"].is_string())
    });
    c.cluster_mut().kill9(leader);
    let t = Instant::now();
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let new_leader =
        c.cluster_mut()
            .wait_leader_among(&others, Duration::from_secs(60), Some(leader));
    println!(
        "failover: member {new_leader} leads {:?} after the kill",
        t.elapsed()
    );
    let get_via = |c: &KubeCluster, name: &str| {
        let r = c.kubectl(survivor, &["get", "configmap", "-n", ns, name]);
        r.ok || !r.stderr.contains("NotFound")
    };
    ok(
        &c,
        &[
            "patch",
            "configmap",
            "-n",
            ns,
            "dep",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    c.wait_until(
        "the owner gone under the new leader",
        Duration::from_secs(120),
        || !get_via(&c, "owner"),
    );
    println!(
        "failover: the foreground owner went {:?} after the leader was killed",
        t.elapsed()
    );
    // A background deletion and a namespace deletion under the new leader.
    let owner = create_on(
        &c,
        survivor,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner2", "namespace": ns}}),
    );
    let refs = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner}]);
    create_on(
        &c,
        survivor,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "dep2", "namespace": ns, "ownerReferences": refs}}),
    );
    ok(&c, &["delete", "configmap", "-n", ns, "owner2"]);
    c.wait_until("the dependent collected", WAIT, || !get_via(&c, "dep2"));
    ok(&c, &["delete", "namespace", ns, "--timeout=60s"]);
    let r = c.kubectl(survivor, &["get", "namespace", ns]);
    assert!(!r.ok && r.stderr.contains("NotFound"), "{r:?}");
}
