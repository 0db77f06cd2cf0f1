//! PriorityClasses (`scheduling.k8s.io/v1`) and the Priority admission plugin with the real kubectl (1.32)
//! and the `kube` crate on one shared 1-member cluster: the built-in classes listed with upstream's columns
//! and refusing a delete, user classes created, validated and immutable as upstream's, pods given their
//! class's priority and preemption policy, unknown classes and conflicting values refused with upstream's
//! messages, and the one global default.
//!
//! Only `kubectl_classes_and_the_global_default` makes a global default (which every pod without a class
//! then gets), so the other test names a class for each of its pods.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 1))
}

fn json_of(c: &KubeCluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.ok(0, &all)).unwrap()
}

fn pod_yaml(ns: &str, name: &str, spec_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  containers: [{{name: c, image: busybox}}]\n{spec_extra}"
    )
}

/// The cells of the row of `name` in a `kubectl get` table.
fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} missing:\n{table}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn kubectl_classes_and_the_global_default() {
    let c = cluster();
    let ns = "prio-kubectl";
    c.ok(0, &["create", "namespace", ns]);

    // The built-in classes, created at start (readiness waits for them), with upstream's columns.
    let table = c.ok(0, &["get", "pc"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
        "{table}"
    );
    let cluster_critical = row(&table, "system-cluster-critical");
    assert_eq!(cluster_critical[1..3], ["2000000000", "false"], "{table}");
    assert_eq!(cluster_critical[4], "PreemptLowerPriority", "{table}");
    let node_critical = row(&table, "system-node-critical");
    assert_eq!(node_critical[1..3], ["2000001000", "false"], "{table}");
    assert_eq!(node_critical[4], "PreemptLowerPriority", "{table}");
    let snc = json_of(
        c,
        &[
            "get",
            "priorityclass",
            "system-node-critical",
            "--show-managed-fields",
        ],
    );
    assert_eq!(
        snc["description"],
        "Used for system critical pods that must not be moved from their current node."
    );
    assert_eq!(snc["metadata"]["generation"], 1);
    assert_eq!(
        snc["metadata"]["managedFields"][0]["manager"],
        "kube-apiserver"
    );
    let scc = json_of(
        c,
        &[
            "get",
            "priorityclasses.scheduling.k8s.io",
            "system-cluster-critical",
        ],
    );
    assert_eq!(
        scc["description"],
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."
    );
    let ready = c.ok(0, &["get", "--raw", "/readyz?verbose"]);
    assert!(
        ready.contains("[+]poststarthook/scheduling/bootstrap-system-priority-classes ok"),
        "{ready}"
    );
    let res = c.ok(0, &["api-resources", "--api-group=scheduling.k8s.io"]);
    let pc = row(&res, "priorityclasses");
    assert_eq!(
        pc[1..],
        ["pc", "scheduling.k8s.io/v1", "false", "PriorityClass"],
        "{res}"
    );

    let explain = c.ok(0, &["explain", "priorityclass.preemptionPolicy"]);
    assert!(explain.contains("PreemptLowerPriority"), "{explain}");

    // They refuse a delete, and a changed value.
    let err = c.err(0, &["delete", "pc", "system-node-critical"]);
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): priorityclasses.scheduling.k8s.io \"system-node-critical\" is forbidden: this is a system priority class and cannot be deleted",
    );
    let err = c.err(
        0,
        &[
            "patch",
            "pc",
            "system-cluster-critical",
            "--type=merge",
            "-p",
            r#"{"value":5}"#,
        ],
    );
    assert!(
        err.contains("The PriorityClass \"system-cluster-critical\" is invalid: value: Forbidden: may not be changed in an update."),
        "{err}"
    );

    // User classes: created, refused above 1e9 and with the reserved prefix, value 0 when left out.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: prio-high}\nvalue: 1000\ndescription: high\n"),
    );
    c.ok(
        0,
        &[
            "create",
            "priorityclass",
            "prio-never",
            "--value=10",
            "--preemption-policy=Never",
        ],
    );
    let table = c.ok(0, &["get", "pc", "prio-high", "prio-never"]);
    let high = row(&table, "prio-high");
    assert_eq!(high[1..3], ["1000", "false"], "{table}");
    assert_eq!(high[4], "PreemptLowerPriority", "{table}");
    assert_eq!(row(&table, "prio-never")[4], "Never", "{table}");
    let err = c.err(
        0,
        &["create", "priorityclass", "prio-huge", "--value=1000000001"],
    );
    assert_eq!(
        err.trim(),
        "error: failed to create priorityclass: PriorityClass.scheduling.k8s.io \"prio-huge\" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
    );
    let err = c.err(0, &["create", "priorityclass", "system-mine", "--value=5"]);
    assert_eq!(
        err.trim(),
        "error: failed to create priorityclass: PriorityClass.scheduling.k8s.io \"system-mine\" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"
    );
    let err = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: prio-odd}\nvalue: 1\npreemptionPolicy: Sometimes\n"),
    );
    assert!(
        err.contains("preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\""),
        "{err}"
    );
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: prio-zero}\n",
        ),
    );
    assert_eq!(json_of(c, &["get", "pc", "prio-zero"])["value"], 0);

    // value and preemptionPolicy never change; the description may.
    let err = c.err(0, &["patch", "pc", "prio-high", "-p", r#"{"value":2000}"#]);
    assert!(
        err.contains("The PriorityClass \"prio-high\" is invalid: value: Forbidden: may not be changed in an update."),
        "{err}"
    );
    let err = c.err(
        0,
        &[
            "patch",
            "pc",
            "prio-high",
            "--type=merge",
            "-p",
            r#"{"preemptionPolicy":"Never"}"#,
        ],
    );
    assert!(
        err.contains("preemptionPolicy: Invalid value: \"Never\": field is immutable"),
        "{err}"
    );
    c.ok(
        0,
        &[
            "patch",
            "pc",
            "prio-high",
            "--type=merge",
            "-p",
            r#"{"description":"changed"}"#,
        ],
    );
    assert_eq!(
        json_of(c, &["get", "pc", "prio-high"])["description"],
        "changed"
    );
    // A second client-side apply merges (strategic merge patch) into the class.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: prio-high, labels: {tier: high}}\nvalue: 1000\ndescription: high again\n"),
    );
    let high = json_of(c, &["get", "pc", "prio-high"]);
    assert_eq!(high["description"], "high again");
    assert_eq!(high["metadata"]["labels"]["tier"], "high");

    // Pods get their class's priority and policy; the critical classes work outside kube-system too.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(ns, "p-high", "  priorityClassName: prio-high\n")),
    );
    let p = json_of(c, &["get", "pod", "-n", ns, "p-high"]);
    assert_eq!(p["spec"]["priority"], 1000, "{p}");
    assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "p-never",
            "  priorityClassName: prio-never\n",
        )),
    );
    let p = json_of(c, &["get", "pod", "-n", ns, "p-never"]);
    assert_eq!(p["spec"]["priority"], 10, "{p}");
    assert_eq!(p["spec"]["preemptionPolicy"], "Never");
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "p-critical",
            "  priorityClassName: system-node-critical\n",
        )),
    );
    let p = json_of(c, &["get", "pod", "-n", ns, "p-critical"]);
    assert_eq!(p["spec"]["priority"], 2_000_001_000, "{p}");
    // A pod may repeat the value its class gives, not another.
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "p-same",
            "  priorityClassName: prio-high\n  priority: 1000\n",
        )),
    );

    // Upstream's refusals.
    let err = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(ns, "x", "  priorityClassName: foo\n")),
    );
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": pods \"x\" is forbidden: no PriorityClass with name foo was found"
    );
    let err = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "p-five",
            "  priorityClassName: prio-high\n  priority: 5\n",
        )),
    );
    assert!(
        err.contains("pods \"p-five\" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"),
        "{err}"
    );
    let err = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "p-pol",
            "  priorityClassName: prio-high\n  preemptionPolicy: Never\n",
        )),
    );
    assert!(
        err.contains("pods \"p-pol\" is forbidden: the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission controller computed PreemptLowerPriority from the given PriorityClass name"),
        "{err}"
    );
    let gen = "apiVersion: v1\nkind: Pod\nmetadata: {generateName: gen-, namespace: prio-kubectl}\nspec:\n  containers: [{name: c, image: busybox}]\n  priorityClassName: foo\n";
    let err = c.err_stdin(0, &["create", "-f", "-"], Some(gen));
    assert!(
        err.contains("pods \"gen-\" is forbidden: no PriorityClass with name foo was found"),
        "{err}"
    );

    // A pod's priority stays: other changes keep it, a change of it is refused.
    c.ok(0, &["label", "pod", "-n", ns, "p-high", "x=y"]);
    assert_eq!(
        json_of(c, &["get", "pod", "-n", ns, "p-high"])["spec"]["priority"],
        1000
    );
    let err = c.err(
        0,
        &[
            "patch",
            "pod",
            "-n",
            ns,
            "p-high",
            "--type=merge",
            "-p",
            r#"{"spec":{"priority":1}}"#,
        ],
    );
    assert!(err.contains("pod updates may not change fields"), "{err}");

    // No global default: 0 and PreemptLowerPriority, no class name.
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(ns, "p-plain", "")),
    );
    let p = json_of(c, &["get", "pod", "-n", ns, "p-plain"]);
    assert_eq!(p["spec"]["priority"], 0, "{p}");
    assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    assert!(p["spec"].get("priorityClassName").is_none(), "{p}");

    // A global default applies to pods without a class; there is only one.
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: prio-default}\nvalue: 77\nglobalDefault: true\npreemptionPolicy: Never\n"),
    );
    let table = c.ok(0, &["get", "pc", "prio-default"]);
    assert_eq!(row(&table, "prio-default")[1..3], ["77", "true"], "{table}");
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(ns, "p-default", "")),
    );
    let p = json_of(c, &["get", "pod", "-n", ns, "p-default"]);
    assert_eq!(p["spec"]["priority"], 77, "{p}");
    assert_eq!(p["spec"]["priorityClassName"], "prio-default");
    assert_eq!(p["spec"]["preemptionPolicy"], "Never");
    let err = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: prio-default2}\nvalue: 78\nglobalDefault: true\n"),
    );
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": priorityclasses.scheduling.k8s.io \"prio-default2\" is forbidden: PriorityClass prio-default is already marked as default. Only one default can exist"
    );
    let err = c.err(
        0,
        &[
            "patch",
            "pc",
            "prio-high",
            "--type=merge",
            "-p",
            r#"{"globalDefault":true}"#,
        ],
    );
    assert!(
        err.contains("priorityclasses.scheduling.k8s.io \"prio-high\" is forbidden: PriorityClass prio-default is already marked as default. Only one default can exist"),
        "{err}"
    );
    // The default itself may be updated.
    c.ok(
        0,
        &[
            "patch",
            "pc",
            "prio-default",
            "--type=merge",
            "-p",
            r#"{"description":"d"}"#,
        ],
    );
    c.ok(0, &["delete", "pc", "prio-default"]);
    c.ok_stdin(
        0,
        &["create", "-f", "-"],
        Some(&pod_yaml(ns, "p-after", "")),
    );
    assert_eq!(
        json_of(c, &["get", "pod", "-n", ns, "p-after"])["spec"]["priority"],
        0
    );

    // A class deleted after its pods were made leaves them as they are.
    c.ok(0, &["delete", "pc", "prio-never"]);
    assert_eq!(
        json_of(c, &["get", "pod", "-n", ns, "p-never"])["spec"]["priority"],
        10
    );

    c.ok(0, &["delete", "pc", "prio-high", "prio-zero"]);
    c.ok(0, &["delete", "namespace", ns, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_client_classes_and_pods() {
    let c = cluster();
    let client = c.client(0).await;
    let ns = "prio-kube";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class = |name: &str, value: i32| -> PriorityClass {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"test": "prio-kube"}},
            "value": value,
            "description": "from the kube crate",
        }))
        .unwrap()
    };
    let made = classes
        .create(&PostParams::default(), &class("prio-kube-a", 500))
        .await
        .unwrap();
    assert_eq!(made.value, 500);
    assert_eq!(
        made.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    assert_eq!(made.metadata.generation, Some(1));
    classes
        .create(&PostParams::default(), &class("prio-kube-b", -3))
        .await
        .unwrap();
    let listed = classes.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    for n in [
        "system-cluster-critical",
        "system-node-critical",
        "prio-kube-a",
        "prio-kube-b",
    ] {
        assert!(names.iter().any(|x| x == n), "{names:?}");
    }

    // The value is immutable through a replace too.
    let mut changed = classes.get("prio-kube-a").await.unwrap();
    changed.value = 501;
    match classes
        .replace("prio-kube-a", &PostParams::default(), &changed)
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert_eq!(
                s.message,
                "PriorityClass.scheduling.k8s.io \"prio-kube-a\" is invalid: value: Forbidden: may not be changed in an update."
            );
        }
        other => panic!("expected a 422, got {other:?}"),
    }

    // Pods get the class's priority; an unknown class is a 403 with upstream's message and details.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = |name: &str, class: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"priorityClassName": class, "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap()
    };
    let p = pods
        .create(&PostParams::default(), &pod("a", "prio-kube-a"))
        .await
        .unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(spec.priority, Some(500));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    let p = pods
        .create(&PostParams::default(), &pod("b", "prio-kube-b"))
        .await
        .unwrap();
    assert_eq!(p.spec.unwrap().priority, Some(-3));
    match pods.create(&PostParams::default(), &pod("x", "foo")).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "pods \"x\" is forbidden: no PriorityClass with name foo was found"
            );
        }
        other => panic!("expected a 403, got {other:?}"),
    }
    // A dry run is admitted the same way.
    let dry = pods
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &pod("dry", "system-cluster-critical"),
        )
        .await
        .unwrap();
    assert_eq!(dry.spec.unwrap().priority, Some(2_000_000_000));

    // A collection delete removes the classes it selects.
    classes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("test=prio-kube"),
        )
        .await
        .unwrap();
    let left = classes
        .list(&ListParams::default().labels("test=prio-kube"))
        .await
        .unwrap();
    assert!(left.items.is_empty());
    // The pods keep their priority; new ones cannot name the class any more.
    assert_eq!(
        pods.get("a").await.unwrap().spec.unwrap().priority,
        Some(500)
    );
    let err = pods
        .create(&PostParams::default(), &pod("c", "prio-kube-a"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no PriorityClass with name prio-kube-a was found"),
        "{err}"
    );

    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
}
