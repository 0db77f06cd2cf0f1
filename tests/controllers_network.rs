//! node-ipam and ServiceLB on a one-member cluster run with `--cluster-cidr 10.99.0.0/22` (four /24
//! ranges, so that exhaustion is a few nodes away), seen through the real kubectl and the `kube` crate,
//! with the test playing the kubelets (hand-made Nodes kept Ready by a [`Heartbeat`]). The two tests share
//! the cluster and run at once: ServiceLB's nodes are made with pod CIDRs outside the cluster CIDR, so they
//! take none of node-ipam's ranges, and node-ipam's nodes are never Ready, so no load balancer lists them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use keel_testkit::binaries::Kind;
use keel_testkit::cluster::Options;
use keel_testkit::heartbeat::Heartbeat;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::pods::{report_with_ip, Report};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| {
        KubeCluster::start_with(
            Options::new(Kind::Keel, 1)
                .keel_bin(keel_bin!())
                .arg("--cluster-cidr")
                .arg("10.99.0.0/22")
                .arg("--disable-scheduler"),
        )
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn json_of(c: &KubeCluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.ok(0, &all)).unwrap()
}

fn create_node(c: &KubeCluster, name: &str, pod_cidr: Option<&str>) {
    let spec = pod_cidr
        .map(|p| format!("spec:\n  podCIDR: {p}\n"))
        .unwrap_or_default();
    let yaml = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n{spec}"
    );
    c.ok_stdin(0, &["create", "-f", "-"], Some(&yaml));
}

/// The node's `(spec.podCIDR, spec.podCIDRs)`.
fn pod_cidrs(c: &KubeCluster, name: &str) -> (Option<String>, Vec<String>) {
    let n = json_of(c, &["get", "node", name]);
    let one = n["spec"]["podCIDR"].as_str().map(String::from);
    let all = n["spec"]["podCIDRs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (one, all)
}

/// Waits until `name` has a pod CIDR; returns it (checking podCIDRs is the same single range).
fn wait_pod_cidr(c: &KubeCluster, name: &str) -> String {
    c.wait_until(&format!("a pod CIDR for {name}"), WAIT, || {
        pod_cidrs(c, name).0.is_some()
    });
    let (one, all) = pod_cidrs(c, name);
    let one = one.unwrap();
    assert_eq!(all, vec![one.clone()], "{name}: podCIDRs follows podCIDR");
    one
}

/// The notes of the `reason` Events about Node `node`.
fn node_events(c: &KubeCluster, node: &str, reason: &str) -> Vec<String> {
    rt().block_on(async {
        let events: Api<Event> = Api::namespaced(c.client(0).await, "default");
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Node")
            })
            .filter_map(|e| e.note)
            .collect()
    })
}

#[test]
fn node_ipam_gives_free_ranges_keeps_preset_ones_and_reuses_freed_ones() {
    let c = cluster();
    // A node registered with a range of its own (as `keel agent --pod-cidr` does) keeps it, and the API
    // makes podCIDRs from it.
    create_node(c, "ipam-preset", Some("10.99.1.0/24"));
    assert_eq!(
        pod_cidrs(c, "ipam-preset"),
        (
            Some("10.99.1.0/24".to_string()),
            vec!["10.99.1.0/24".to_string()]
        )
    );
    // Nodes without one get the free /24s, lowest first, never the preset one.
    create_node(c, "ipam-a", None);
    create_node(c, "ipam-b", None);
    let a = wait_pod_cidr(c, "ipam-a");
    let b = wait_pod_cidr(c, "ipam-b");
    let mut got = vec![a.clone(), b.clone()];
    got.sort();
    assert_eq!(got, ["10.99.0.0/24", "10.99.2.0/24"], "a={a} b={b}");
    create_node(c, "ipam-c", None);
    assert_eq!(wait_pod_cidr(c, "ipam-c"), "10.99.3.0/24");
    assert_eq!(
        pod_cidrs(c, "ipam-preset").0.as_deref(),
        Some("10.99.1.0/24")
    );
    println!(
        "{}",
        c.ok(
            0,
            &[
                "get",
                "nodes",
                "-o",
                "custom-columns=NAME:.metadata.name,PODCIDR:.spec.podCIDR,PODCIDRS:.spec.podCIDRs"
            ]
        )
    );

    // The cluster CIDR is used up: the next node waits, with upstream's Event.
    create_node(c, "ipam-d", None);
    c.wait_until("CIDRNotAvailable on ipam-d", WAIT, || {
        !node_events(c, "ipam-d", "CIDRNotAvailable").is_empty()
    });
    assert_eq!(
        node_events(c, "ipam-d", "CIDRNotAvailable")[0],
        "Node ipam-d status is now: CIDRNotAvailable"
    );
    assert_eq!(pod_cidrs(c, "ipam-d"), (None, vec![]));

    // Deleting the node holding 10.99.0.0/24 frees it for the waiting one.
    let holder = if a == "10.99.0.0/24" {
        "ipam-a"
    } else {
        "ipam-b"
    };
    c.ok(0, &["delete", "node", holder]);
    assert_eq!(wait_pod_cidr(c, "ipam-d"), "10.99.0.0/24");

    // The API server lets a range be set on a node that has none (here by hand: none is free) and
    // refuses any change once set, as upstream.
    create_node(c, "ipam-e", None);
    c.wait_until("CIDRNotAvailable on ipam-e", WAIT, || {
        !node_events(c, "ipam-e", "CIDRNotAvailable").is_empty()
    });
    c.ok(
        0,
        &[
            "patch",
            "node",
            "ipam-e",
            "--type=merge",
            "-p",
            r#"{"spec":{"podCIDR":"10.200.0.0/24"}}"#,
        ],
    );
    assert_eq!(
        pod_cidrs(c, "ipam-e"),
        (
            Some("10.200.0.0/24".to_string()),
            vec!["10.200.0.0/24".to_string()]
        )
    );
    let err = c.err(
        0,
        &[
            "patch",
            "node",
            "ipam-c",
            "--type=merge",
            "-p",
            r#"{"spec":{"podCIDR":"10.99.9.0/24","podCIDRs":["10.99.9.0/24"]}}"#,
        ],
    );
    assert!(
        err.contains(
            r#"spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid"#
        ),
        "{err}"
    );
    let err = c.err(
        0,
        &[
            "patch",
            "node",
            "ipam-c",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/podCIDRs"},{"op":"remove","path":"/spec/podCIDR"}]"#,
        ],
    );
    assert!(err.contains("node updates may not change podCIDR"), "{err}");
    assert_eq!(pod_cidrs(c, "ipam-c").0.as_deref(), Some("10.99.3.0/24"));
    let err = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: Node\nmetadata:\n  name: ipam-bad\nspec:\n  podCIDRs: [10.99.0.0/24, 10.98.0.0/24]\n"),
    );
    assert!(
        err.contains("may specify no more than one CIDR for each IP family"),
        "{err}"
    );

    for n in [
        "ipam-preset",
        "ipam-a",
        "ipam-b",
        "ipam-c",
        "ipam-d",
        "ipam-e",
    ] {
        c.ok(0, &["delete", "node", n, "--ignore-not-found"]);
    }
}

/// A node kept Ready by a heartbeat, with `addresses` in its status and a pod CIDR outside the cluster
/// CIDR (so node-ipam gives it none).
fn lb_node(c: &'static KubeCluster, name: &str, cidr: &str, addresses: Value) -> Heartbeat {
    create_node(c, name, Some(cidr));
    let beat = Heartbeat::start(c, name);
    rt().block_on(async {
        let nodes: Api<Node> = Api::all(c.client(0).await);
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"addresses": addresses}})),
            )
            .await
            .unwrap();
    });
    beat
}

/// The ingress IPs (or hostnames) of Service `ns/name`.
fn ingress(c: &KubeCluster, ns: &str, name: &str) -> Vec<String> {
    let svc = json_of(c, &["get", "service", "-n", ns, name]);
    svc["status"]["loadBalancer"]["ingress"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|i| {
                    i["ip"]
                        .as_str()
                        .or(i["hostname"].as_str())
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn wait_ingress(c: &KubeCluster, ns: &str, name: &str, want: &[&str], what: &str) {
    c.wait_until(what, WAIT, || ingress(c, ns, name) == want);
}

#[test]
fn servicelb_lists_the_ready_nodes_addresses() {
    let c = cluster();
    let ns = "lb";
    c.ok(0, &["create", "namespace", ns]);
    let b1 = lb_node(
        c,
        "lb-1",
        "10.201.1.0/24",
        json!([{"type": "InternalIP", "address": "192.0.2.11"}, {"type": "Hostname", "address": "lb-1"}]),
    );
    let b2 = lb_node(
        c,
        "lb-2",
        "10.201.2.0/24",
        json!([{"type": "InternalIP", "address": "192.0.2.12"}, {"type": "ExternalIP", "address": "198.51.100.12"}]),
    );
    let b3 = lb_node(
        c,
        "lb-3",
        "10.201.3.0/24",
        json!([{"type": "InternalIP", "address": "192.0.2.13"}]),
    );
    let web = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  type: LoadBalancer\n  selector:\n    app: web\n  ports:\n  - name: http\n    port: 80\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&web));
    // Another implementation's Service (it has a class): its status is its own.
    let other = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: other\n  namespace: {ns}\nspec:\n  type: LoadBalancer\n  loadBalancerClass: example.com/other-lb\n  ports:\n  - port: 80\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&other));
    c.ok(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            "other",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.7"}]}}}"#,
        ],
    );

    // Every Ready, schedulable node: its ExternalIP if it has one, else its InternalIP; sorted.
    wait_ingress(
        c,
        ns,
        "web",
        &["192.0.2.11", "192.0.2.13", "198.51.100.12"],
        "the three nodes' addresses",
    );
    let table = c.ok(0, &["get", "service", "-n", ns]);
    println!("{table}");
    assert!(
        table.contains("192.0.2.11,192.0.2.13,198.51.100.12"),
        "{table}"
    );

    // externalTrafficPolicy Local: only the nodes running a ready endpoint.
    c.ok(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            "web",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Local"}}"#,
        ],
    );
    wait_ingress(c, ns, "web", &[], "no node runs an endpoint");
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: {ns}\n  labels:\n    app: web\nspec:\n  nodeName: lb-3\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.9\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&pod));
    rt().block_on(async {
        report_with_ip(&c.client(0).await, ns, "web-0", Report::Ready, "10.201.3.5")
            .await
            .unwrap();
    });
    wait_ingress(
        c,
        ns,
        "web",
        &["192.0.2.13"],
        "the node of the ready endpoint",
    );
    c.ok(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            "web",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Cluster"}}"#,
        ],
    );
    wait_ingress(
        c,
        ns,
        "web",
        &["192.0.2.11", "192.0.2.13", "198.51.100.12"],
        "every node again",
    );

    // A cordoned node, a NotReady one and a deleted one drop out; an uncordoned one comes back.
    c.ok(0, &["cordon", "lb-3"]);
    wait_ingress(
        c,
        ns,
        "web",
        &["192.0.2.11", "198.51.100.12"],
        "the cordoned node gone",
    );
    rt().block_on(async {
        let nodes: Api<Node> = Api::all(c.client(0).await);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
            "reason": "KubeletNotReady", "message": "test", "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
        nodes
            .patch_status("lb-1", &PatchParams::default(), &Patch::Strategic(not_ready))
            .await
            .unwrap();
    });
    wait_ingress(c, ns, "web", &["198.51.100.12"], "the NotReady node gone");
    b2.stop();
    c.ok(0, &["delete", "node", "lb-2"]);
    wait_ingress(c, ns, "web", &[], "no node left");
    let svc = json_of(c, &["get", "service", "-n", ns, "web"]);
    assert_eq!(svc["status"]["loadBalancer"], json!({}), "{svc}");
    c.ok(0, &["uncordon", "lb-3"]);
    wait_ingress(c, ns, "web", &["192.0.2.13"], "the uncordoned node back");

    // No longer a LoadBalancer: the ingress is cleared.
    c.ok(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/type","value":"ClusterIP"},{"op":"remove","path":"/spec/ports/0/nodePort"},{"op":"remove","path":"/spec/externalTrafficPolicy"}]"#,
        ],
    );
    wait_ingress(
        c,
        ns,
        "web",
        &[],
        "the ingress of a ClusterIP Service cleared",
    );
    // The classed Service was never touched.
    assert_eq!(ingress(c, ns, "other"), ["203.0.113.7"]);

    b1.stop();
    b3.stop();
    for n in ["lb-1", "lb-3"] {
        c.ok(0, &["delete", "node", n]);
    }
}

/// The nodePorts of Service `name`, in port order (0 for a port without one).
fn node_ports(c: &KubeCluster, ns: &str, name: &str) -> Vec<i64> {
    let svc = json_of(c, &["get", "service", "-n", ns, name]);
    svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["nodePort"].as_i64().unwrap_or(0))
        .collect()
}

fn spec_of(c: &KubeCluster, ns: &str, name: &str) -> Value {
    json_of(c, &["get", "service", "-n", ns, name])["spec"].clone()
}

/// A node port no Service of the cluster holds now.
fn free_node_port(c: &KubeCluster, avoid: &[i64]) -> i64 {
    let all = json_of(c, &["get", "services", "-A"]);
    let mut used: Vec<i64> = avoid.to_vec();
    for s in all["items"].as_array().unwrap() {
        for p in s["spec"]["ports"].as_array().into_iter().flatten() {
            used.extend(p["nodePort"].as_i64());
        }
        used.extend(s["spec"]["healthCheckNodePort"].as_i64());
    }
    (32000..32767).find(|p| !used.contains(p)).unwrap()
}

fn patch(c: &KubeCluster, ns: &str, name: &str, kind: &str, body: &str) -> String {
    c.ok(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            name,
            &format!("--type={kind}"),
            "-p",
            body,
        ],
    )
}

fn patch_err(c: &KubeCluster, ns: &str, name: &str, kind: &str, body: &str) -> String {
    c.err(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            name,
            &format!("--type={kind}"),
            "-p",
            body,
        ],
    )
}

fn in_range(p: i64) -> bool {
    (30000..=32767).contains(&p)
}

/// Service updates allocate and release as upstream's Service REST does: node ports when the type starts
/// using them and for new or changed ports, given back when ports, types or requests change (a released
/// port can be taken by another Service at once); the cluster IP when leaving or entering ExternalName;
/// the health-check node port of a LoadBalancer with `externalTrafficPolicy: Local`; the error texts
/// upstream answers, and nothing held after a refused update.
#[test]
fn service_updates_allocate_and_release_node_ports_and_cluster_ips() {
    let c = cluster();
    let ns = "svc-alloc";
    c.ok(0, &["create", "namespace", ns]);
    let service = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{extra}  selector:\n    app: {name}\n  ports:\n  - name: http\n    port: 80\n  - name: metrics\n    port: 81\n"
        )
    };
    // One NodePort port asking for `port`.
    let node_port = |name: &str, port: i64| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  type: NodePort\n  ports:\n  - name: http\n    port: 80\n    nodePort: {port}\n"
        )
    };
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&service("a", "")));
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&service("b", "")));
    let ip_a = spec_of(c, ns, "a")["clusterIP"]
        .as_str()
        .unwrap()
        .to_string();

    // ClusterIP -> NodePort: every port gets a node port; the cluster IP stays.
    patch(c, ns, "a", "strategic", r#"{"spec":{"type":"NodePort"}}"#);
    let np = node_ports(c, ns, "a");
    assert!(np.iter().all(|p| in_range(*p)) && np[0] != np[1], "{np:?}");
    let spec = spec_of(c, ns, "a");
    assert_eq!(spec["clusterIP"], json!(ip_a));
    assert_eq!(spec["externalTrafficPolicy"], json!("Cluster"));
    let table = c.ok(0, &["get", "svc", "-n", ns, "a"]);
    assert!(
        table.contains(&format!("80:{}/TCP,81:{}/TCP", np[0], np[1])),
        "{table}"
    );

    // Another Service asking for a held port, or one out of range, is refused and holds nothing.
    let err = patch_err(
        c,
        ns,
        "b",
        "strategic",
        &format!(
            r#"{{"spec":{{"type":"NodePort","ports":[{{"port":80,"nodePort":{}}}]}}}}"#,
            np[0]
        ),
    );
    assert!(
        err.contains(&format!(
            "spec.ports[0].nodePort: Invalid value: {}: provided port is already allocated",
            np[0]
        )),
        "{err}"
    );
    let err = patch_err(
        c,
        ns,
        "b",
        "strategic",
        r#"{"spec":{"type":"NodePort","ports":[{"port":81,"nodePort":80}]}}"#,
    );
    assert!(
        err.contains("spec.ports[1].nodePort: Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767"),
        "{err}"
    );
    let b = spec_of(c, ns, "b");
    assert_eq!(b["type"], json!("ClusterIP"), "{b}");
    assert_eq!(node_ports(c, ns, "b"), [0, 0]);

    // A node port the user changes is claimed and the old one given back: b can take it now.
    let moved = free_node_port(c, &np);
    patch(
        c,
        ns,
        "a",
        "json",
        &format!(r#"[{{"op":"replace","path":"/spec/ports/0/nodePort","value":{moved}}}]"#),
    );
    assert_eq!(node_ports(c, ns, "a"), [moved, np[1]]);
    patch(
        c,
        ns,
        "b",
        "strategic",
        &format!(
            r#"{{"spec":{{"type":"NodePort","ports":[{{"port":80,"nodePort":{}}}]}}}}"#,
            np[0]
        ),
    );
    let np_b = node_ports(c, ns, "b");
    assert_eq!(np_b[0], np[0]);
    assert!(in_range(np_b[1]), "{np_b:?}");

    // Removing a port releases its node port; adding one allocates.
    patch(
        c,
        ns,
        "a",
        "json",
        r#"[{"op":"remove","path":"/spec/ports/1"}]"#,
    );
    assert_eq!(node_ports(c, ns, "a"), [moved]);
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&node_port("c", np[1])));
    patch(
        c,
        ns,
        "a",
        "json",
        r#"[{"op":"add","path":"/spec/ports/-","value":{"name":"extra","port":82}}]"#,
    );
    let np_a = node_ports(c, ns, "a");
    assert_eq!(np_a.len(), 2);
    assert!(np_a[0] == moved && in_range(np_a[1]), "{np_a:?}");

    // NodePort -> ClusterIP: node ports and the traffic policy are cleared and released.
    patch(c, ns, "a", "strategic", r#"{"spec":{"type":"ClusterIP"}}"#);
    assert_eq!(node_ports(c, ns, "a"), [0, 0]);
    let spec = spec_of(c, ns, "a");
    assert!(spec.get("externalTrafficPolicy").is_none(), "{spec}");
    assert_eq!(spec["clusterIP"], json!(ip_a));
    patch(
        c,
        ns,
        "c",
        "strategic",
        &format!(r#"{{"spec":{{"ports":[{{"port":80,"nodePort":{moved}}}]}}}}"#),
    );
    assert_eq!(node_ports(c, ns, "c"), [moved]);
    // Node ports on a ClusterIP Service are refused.
    let err = patch_err(
        c,
        ns,
        "a",
        "json",
        &format!(
            r#"[{{"op":"add","path":"/spec/ports/0/nodePort","value":{}}}]"#,
            np_a[1]
        ),
    );
    assert!(
        err.contains(
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        ),
        "{err}"
    );

    // The cluster IP may not change once set.
    let err = patch_err(
        c,
        ns,
        "a",
        "merge",
        r#"{"spec":{"clusterIP":"10.96.250.250"}}"#,
    );
    assert!(
        err.contains(r#"spec.clusterIPs[0]: Invalid value: []string{"10.96.250.250"}: may not change once set"#),
        "{err}"
    );

    // To ExternalName: the cluster IP must not be changed on the way, and is released.
    let err = patch_err(
        c,
        ns,
        "a",
        "merge",
        r#"{"spec":{"type":"ExternalName","externalName":"example.com","clusterIP":"10.96.250.250"}}"#,
    );
    assert!(
        err.contains("spec.clusterIPs: Forbidden: may not be set for ExternalName services"),
        "{err}"
    );
    patch(
        c,
        ns,
        "a",
        "merge",
        r#"{"spec":{"type":"ExternalName","externalName":"example.com"}}"#,
    );
    let spec = spec_of(c, ns, "a");
    for gone in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        assert!(spec.get(gone).is_none(), "{gone}: {spec}");
    }
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&service("d", &format!("  clusterIP: {ip_a}\n"))),
    );
    assert_eq!(spec_of(c, ns, "d")["clusterIP"], json!(ip_a));

    // From ExternalName: a new cluster IP.
    patch(
        c,
        ns,
        "a",
        "merge",
        r#"{"spec":{"type":"ClusterIP","externalName":null}}"#,
    );
    let spec = spec_of(c, ns, "a");
    let ip = spec["clusterIP"].as_str().unwrap();
    assert!(ip.starts_with("10.96.") && ip != ip_a, "{spec}");
    assert_eq!(spec["clusterIPs"], json!([ip]));

    // LoadBalancer + Local: a health-check node port, kept across updates, released when not needed.
    patch(
        c,
        ns,
        "a",
        "merge",
        r#"{"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local"}}"#,
    );
    let hc = spec_of(c, ns, "a")["healthCheckNodePort"].as_i64().unwrap();
    assert!(
        in_range(hc) && !node_ports(c, ns, "a").contains(&hc),
        "{hc}"
    );
    c.ok(0, &["label", "service", "-n", ns, "a", "touched=yes"]);
    assert_eq!(spec_of(c, ns, "a")["healthCheckNodePort"], json!(hc));
    patch(
        c,
        ns,
        "a",
        "merge",
        r#"{"spec":{"externalTrafficPolicy":"Cluster"}}"#,
    );
    let spec = spec_of(c, ns, "a");
    assert!(spec.get("healthCheckNodePort").is_none(), "{spec}");
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&node_port("e", hc)));
    assert_eq!(node_ports(c, ns, "e"), [hc]);
    // A requested health-check port already held is refused as upstream does (an internal error).
    let err = patch_err(
        c,
        ns,
        "a",
        "merge",
        &format!(r#"{{"spec":{{"externalTrafficPolicy":"Local","healthCheckNodePort":{hc}}}}}"#),
    );
    assert!(
        err.contains(&format!(
            "failed to allocate requested HealthCheck NodePort {hc}: provided port is already allocated"
        )),
        "{err}"
    );

    // Deleting the Services gives everything back.
    c.ok(0, &["delete", "namespace", ns]);
}

/// Updates racing for one node port: exactly one Service gets it, the others are refused with upstream's
/// error and hold nothing of the update (their other port got no node port either); once the winner gives
/// it back, a loser takes it.
#[test]
fn racing_updates_give_a_node_port_to_one_service() {
    let c = cluster();
    let ns = "svc-race";
    c.ok(0, &["create", "namespace", ns]);
    const N: usize = 6;
    for i in 0..N {
        let yaml = format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: r{i}\n  namespace: {ns}\nspec:\n  ports:\n  - name: a\n    port: 80\n  - name: b\n    port: 81\n"
        );
        c.ok_stdin(0, &["apply", "-f", "-"], Some(&yaml));
    }
    let port = free_node_port(c, &[]);
    let results: Vec<Result<(), String>> = rt().block_on(async {
        let client = c.client(0).await;
        let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, ns);
        let body = json!({"spec": {"type": "NodePort", "ports": [{"port": 81, "nodePort": port}]}});
        let tries = (0..N).map(|i| {
            let api = api.clone();
            let body = body.clone();
            async move {
                api.patch(
                    &format!("r{i}"),
                    &PatchParams::default(),
                    &Patch::Strategic(body),
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
        });
        futures::future::join_all(tries).await
    });
    let winners: Vec<usize> = (0..N).filter(|i| results[*i].is_ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0];
    for (i, r) in results.iter().enumerate() {
        if i == winner {
            continue;
        }
        let err = r.as_ref().unwrap_err();
        assert!(
            err.contains(&format!(
                "spec.ports[1].nodePort: Invalid value: {port}: provided port is already allocated"
            )),
            "{err}"
        );
        let spec = spec_of(c, ns, &format!("r{i}"));
        assert_eq!(spec["type"], json!("ClusterIP"), "{spec}");
    }
    let won = node_ports(c, ns, &format!("r{winner}"));
    assert!(won[1] == port && in_range(won[0]), "{won:?}");

    // The winner goes back to ClusterIP: both its ports are free, and a loser takes the contended one.
    patch(
        c,
        ns,
        &format!("r{winner}"),
        "strategic",
        r#"{"spec":{"type":"ClusterIP"}}"#,
    );
    let loser = (winner + 1) % N;
    patch(
        c,
        ns,
        &format!("r{loser}"),
        "strategic",
        &format!(
            r#"{{"spec":{{"type":"NodePort","ports":[{{"port":80,"nodePort":{}}},{{"port":81,"nodePort":{port}}}]}}}}"#,
            won[0]
        ),
    );
    assert_eq!(node_ports(c, ns, &format!("r{loser}")), [won[0], port]);
    c.ok(0, &["delete", "namespace", ns]);
}
