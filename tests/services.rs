//! Services for real: a keel member and two worker nodes, each in a network namespace of its own
//! joined by one bridge (testkit's `Net`), each worker a `keel agent` on its own containerd, with
//! real pods, real nftables and the real kubectl. Pods on the two nodes reach each other directly
//! (routes via the nodes' addresses), a ClusterIP spreads over backends on both nodes and follows a
//! scale-down, a NodePort answers the test process outside the nodes, ClientIP affinity sticks, a
//! Service without endpoints refuses at once, a deleted Service's chains go, and no other table (on
//! a node or on the host) changes.
//!
//! Needs root (namespaces, containerd, nftables) as CI has. Packets only travel between the
//! namespaces this test makes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use keel_testkit::agent::{AgentNode, BUSYBOX};
use keel_testkit::binaries::Kind;
use keel_testkit::cluster::Options;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);
/// The worker nodes: name, pod CIDR given with `--pod-cidr` ("": none, the node IPAM controller
/// assigns one). They live in the Net's namespaces 1 and 2 (0 holds the member).
const NODES: [(&str, &str); 2] = [("svc-a", "10.42.1.0/24"), ("svc-b", "")];

/// Worker `i`'s pod CIDR as its Node says.
fn pod_cidr(i: usize) -> String {
    kubectl(&["get", "node", NODES[i].0, "-o", "jsonpath={.spec.podCIDR}"])
}

/// The nodes' upstream resolver (the test's, on the host's address in the namespaces' network).
fn start_upstream() -> std::net::SocketAddr {
    keel_testkit::upstream::start(cluster().cluster().net().root_ip())
}

/// The host's ruleset when the test began (the test must leave it as it was).
static HOST_RULESET: OnceLock<String> = OnceLock::new();

fn host_ruleset() -> String {
    let out = std::process::Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| {
        HOST_RULESET.get_or_init(host_ruleset);
        let mut c =
            KubeCluster::start_with(Options::new(Kind::Keel, 1).keel_bin(keel_bin!()).netns());
        for _ in NODES {
            c.cluster_mut().net_mut().add_node();
        }
        c
    })
}

static NODES_PTR: OnceLock<usize> = OnceLock::new();

extern "C" fn drop_nodes() {
    if let Some(&ptr) = NODES_PTR.get() {
        // SAFETY: `ptr` came from `Box::into_raw` below; exit handlers run once, after the tests.
        drop(unsafe { Box::from_raw(ptr as *mut Vec<AgentNode>) });
    }
}

/// The two workers, started once and Ready; torn down at exit before the cluster and its namespaces.
fn nodes() -> &'static [AgentNode] {
    let c = cluster();
    let ptr = *NODES_PTR.get_or_init(|| {
        let upstream = format!("--dns-upstream={}", start_upstream());
        let mut v = Vec::new();
        for (i, (name, cidr)) in NODES.iter().enumerate() {
            let ns = c.cluster().net().ns(i + 1).to_string();
            v.push(AgentNode::start_in(
                keel_bin!().as_ref(),
                &c.dir().join(name),
                name,
                &c.member(0).kubeconfig(),
                cidr,
                &[upstream.as_str()],
                Some(&ns),
            ));
        }
        // SAFETY: registers a plain extern "C" function with no captured state.
        unsafe { libc::atexit(drop_nodes) };
        Box::into_raw(Box::new(v)) as usize
    });
    // SAFETY: leaked until exit; only shared references are handed out.
    let v = unsafe { &*(ptr as *const Vec<AgentNode>) };
    for (name, _) in NODES {
        wait_for(&format!("node {name} Ready"), || {
            kubectl_run(&[
                "get",
                "node",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .stdout
            .trim()
                == "True"
        });
    }
    v
}

fn fail(msg: impl std::fmt::Display) -> ! {
    let tails: Vec<String> = NODES_PTR
        .get()
        .map(|&p| {
            // SAFETY: as in `nodes`.
            let v = unsafe { &*(p as *const Vec<AgentNode>) };
            v.iter().map(|n| n.log_tails(40)).collect()
        })
        .unwrap_or_default();
    cluster().fail(format!("{msg}\n{}", tails.join("\n")))
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < WAIT {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    fail(format!("timed out after {WAIT:?} waiting for {what}"))
}

fn kubectl_run(args: &[&str]) -> keel_testkit::kubectl::Run {
    let mut out = cluster().kubectl(0, args);
    for _ in 0..20 {
        let leaderless = out.stderr.contains("etcdserver: no leader")
            || out.stderr.contains("etcdserver: not leader");
        if out.ok || !leaderless {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        out = cluster().kubectl(0, args);
    }
    out
}

fn kubectl(args: &[&str]) -> String {
    let out = kubectl_run(args);
    if !out.ok {
        fail(format!("kubectl {args:?}: {}{}", out.stdout, out.stderr));
    }
    out.stdout
}

fn apply(yaml: &str) {
    let out = cluster().kubectl_stdin(0, &["apply", "-f", "-"], Some(yaml));
    if !out.ok {
        fail(format!(
            "kubectl apply: {}{}\n{yaml}",
            out.stdout, out.stderr
        ));
    }
}

fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(&a)).unwrap()
}

fn namespace(name: &str) -> String {
    let _ = kubectl_run(&["create", "namespace", name]);
    name.to_string()
}

/// The shell that makes a pod an HTTP server on 8080 whose `/cgi-bin/who` answers "<client address>
/// <pod name>".
const SERVE: &str = "mkdir -p /www/cgi-bin && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR $(hostname)\\n' > /www/cgi-bin/who && chmod +x /www/cgi-bin/who && exec httpd -f -p 8080 -h /www";

/// A Deployment of `replicas` HTTP servers labelled `app=<app>`, pinned to `node`.
fn servers(ns: &str, name: &str, app: &str, node: &str, replicas: u32) {
    apply(&format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{deploy: {name}}}}}
  template:
    metadata: {{labels: {{deploy: {name}, app: {app}}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {node}}}
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: {BUSYBOX}
        command: ["sh", "-c", {serve}]
        ports: [{{containerPort: 8080, name: http}}]
        readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
"#,
        serve = serde_json::to_string(SERVE).unwrap(),
    ));
}

/// A pod on `node` that sleeps, to run clients in with `kubectl exec`.
fn client(ns: &str, node: &str) -> String {
    let name = format!("client-{node}");
    apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "100000"]
"#
    ));
    wait_for(&format!("pod {name} running"), || {
        kubectl_run(&[
            "-n",
            ns,
            "get",
            "pod",
            &name,
            "-o",
            "jsonpath={.status.phase}",
        ])
        .stdout
            == "Running"
    });
    name
}

fn service(ns: &str, name: &str, app: &str, extra_spec: &str) {
    apply(&format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{app: {app}}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
{extra_spec}
"#
    ));
}

fn cluster_ip(ns: &str, name: &str) -> String {
    kubectl(&[
        "-n",
        ns,
        "get",
        "svc",
        name,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])
}

/// The ready endpoint addresses of Service `name`.
fn ready_endpoints(ns: &str, name: &str) -> Vec<String> {
    let v = json(&[
        "-n",
        ns,
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={name}"),
    ]);
    let mut out = Vec::new();
    for s in v["items"].as_array().into_iter().flatten() {
        for e in s["endpoints"].as_array().into_iter().flatten() {
            if e["conditions"]["ready"] != false {
                out.extend(
                    e["addresses"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(str::to_string)),
                );
            }
        }
    }
    out.sort();
    out
}

/// Runs `script` in pod `pod` and returns its output (stdout and stderr).
fn exec(ns: &str, pod: &str, script: &str) -> String {
    let out = kubectl_run(&[
        "-n",
        ns,
        "exec",
        pod,
        "--",
        "sh",
        "-c",
        &format!("{script} 2>&1"),
    ]);
    format!("{}{}", out.stdout, out.stderr)
}

/// `n` requests from pod `pod` to `url`; the answers' pod names, counted.
fn spread(ns: &str, pod: &str, url: &str, n: u32) -> BTreeMap<String, u32> {
    let out = exec(
        ns,
        pod,
        &format!(
            "for i in $(seq {n}); do timeout 5 wget -q -O- {url}/cgi-bin/who || echo FAILED; done"
        ),
    );
    let mut counts = BTreeMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let who = line.split_whitespace().last().unwrap_or("").to_string();
        *counts.entry(who).or_insert(0) += 1;
    }
    counts
}

/// The node namespace of worker `i`.
fn node_ns(i: usize) -> String {
    cluster().cluster().net().ns(i + 1).to_string()
}

fn in_node(i: usize, args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &node_ns(i)])
        .args(args)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The client address in a `/cgi-bin/who` answer; httpd listens on an IPv6 socket, so an IPv4
/// client shows as `[::ffff:a.b.c.d]`.
fn client_addr(answer: &str) -> String {
    let first = answer.split_whitespace().next().unwrap_or("");
    let bare = first.trim_start_matches('[').trim_end_matches(']');
    bare.strip_prefix("::ffff:").unwrap_or(bare).to_string()
}

fn pod_ip(ns: &str, name: &str) -> String {
    kubectl(&[
        "-n",
        ns,
        "get",
        "pod",
        name,
        "-o",
        "jsonpath={.status.podIP}",
    ])
}

#[test]
fn pods_on_two_nodes_talk_directly() {
    nodes();
    let ns = namespace("flat");
    servers(&ns, "srv", "srv", NODES[0].0, 1);
    let cli = client(&ns, NODES[1].0);
    wait_for("the server's endpoint", || {
        json(&["-n", &ns, "get", "pods", "-l", "deploy=srv"])["items"][0]["status"]["podIP"]
            .is_string()
    });
    let srv = json(&["-n", &ns, "get", "pods", "-l", "deploy=srv"]);
    let srv_ip = srv["items"][0]["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let cli_ip = pod_ip(&ns, &cli);
    assert!(srv_ip.starts_with("10.42.1."), "{srv_ip}");
    // Node b was started without --pod-cidr: node IPAM gave it the lowest free /24, and the agent
    // waited for it.
    assert_eq!(pod_cidr(1), "10.42.0.0/24");
    assert!(cli_ip.starts_with("10.42.0."), "{cli_ip}");
    let mut answer = String::new();
    wait_for("the server pod to answer across nodes", || {
        answer = exec(
            &ns,
            &cli,
            &format!("timeout 3 wget -q -O- http://{srv_ip}:8080/cgi-bin/who"),
        );
        answer.contains("srv-")
    });
    // No NAT between pods: the server sees the client pod's own address.
    assert_eq!(client_addr(&answer), cli_ip, "{answer}");
    // The route on node b to node a's pods goes via node a's address, and is netprog's.
    let routes = in_node(1, &["ip", "route", "show", "proto", "75"]);
    let a_ip = cluster().cluster().net().ip(1).to_string();
    assert!(
        routes.contains(&format!("10.42.1.0/24 via {a_ip}")),
        "{routes}"
    );
    // A pod IP on no node is refused on the node, never routed off it.
    let lost = exec(
        &ns,
        &cli,
        "timeout 3 wget -q -O- http://10.42.99.9:8080/ || true",
    );
    assert!(!lost.contains("who"), "{lost}");
    let route = in_node(1, &["ip", "route", "get", "10.42.99.9"]);
    assert!(
        route.contains("unreachable") || route.contains("No route to host"),
        "{route}"
    );
}

#[test]
fn a_cluster_ip_spreads_over_both_nodes_and_follows_scaling() {
    nodes();
    let ns = namespace("spread");
    servers(&ns, "web-a", "web", NODES[0].0, 2);
    servers(&ns, "web-b", "web", NODES[1].0, 2);
    service(&ns, "web", "web", "");
    let cli = client(&ns, NODES[0].0);
    wait_for("four ready endpoints", || {
        ready_endpoints(&ns, "web").len() == 4
    });
    let ip = cluster_ip(&ns, "web");
    let url = format!("http://{ip}");
    let mut counts = BTreeMap::new();
    wait_for("answers from pods on both nodes", || {
        counts = spread(&ns, &cli, &url, 40);
        counts.keys().any(|k| k.starts_with("web-a-"))
            && counts.keys().any(|k| k.starts_with("web-b-"))
    });
    assert!(!counts.contains_key("FAILED"), "{counts:?}");
    eprintln!("40 requests to {ip}: {counts:?}");
    // The node itself (a hostNetwork process) reaches the ClusterIP too, despite the service
    // CIDR's unreachable route.
    let from_node = in_node(
        0,
        &[
            "timeout",
            "5",
            "wget",
            "-q",
            "-O-",
            &format!("{url}/cgi-bin/who"),
        ],
    );
    assert!(from_node.contains("web-"), "{from_node}");

    // Scale node b's servers away: once the slice says so, no request reaches them.
    kubectl(&["-n", &ns, "scale", "deployment", "web-b", "--replicas", "0"]);
    wait_for("two endpoints", || ready_endpoints(&ns, "web").len() == 2);
    let start = Instant::now();
    wait_for("answers from node a only", || {
        let c = spread(&ns, &cli, &url, 10);
        c.keys().all(|k| k.starts_with("web-a-"))
    });
    eprintln!(
        "rules followed the scale-down {:?} after the EndpointSlice did",
        start.elapsed()
    );

    // The agent's counters, through the API server's node proxy as an operator scrapes them.
    let scrape = || {
        kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{}/proxy/metrics", NODES[0].0),
        ])
    };
    // The scale-down moved pods' Ready conditions: the slice write carried that change's time, and
    // netprog observed the network programming latency once the rules were in force.
    let mut metrics = String::new();
    wait_for("a network programming latency observation", || {
        metrics = scrape();
        metrics
            .lines()
            .find(|l| l.starts_with("keel_agent_proxy_network_programming_duration_seconds_count "))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| v >= 1.0)
    });
    let value = |name: &str| -> Option<f64> {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    assert!(
        value("keel_agent_proxy_syncs_total").is_some_and(|v| v >= 1.0),
        "{metrics}"
    );
    assert!(
        value("keel_agent_proxy_service_ports").is_some_and(|v| v >= 1.0),
        "{metrics}"
    );
    assert_eq!(
        value("keel_agent_proxy_sync_failing"),
        Some(0.0),
        "{metrics}"
    );
    assert!(
        metrics.contains("keel_agent_dns_queries_total"),
        "{metrics}"
    );
}

#[test]
fn a_node_port_answers_from_outside_the_node() {
    nodes();
    let ns = namespace("np");
    servers(&ns, "np-a", "np", NODES[0].0, 1);
    service(&ns, "np", "np", "  type: NodePort");
    wait_for("an endpoint", || ready_endpoints(&ns, "np").len() == 1);
    let port = kubectl(&[
        "-n",
        &ns,
        "get",
        "svc",
        "np",
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    // From the test process (the host, outside both nodes) to node b, whose pods do not include the
    // server: node b forwards, masquerading (Cluster policy), so the server sees node b's address.
    let b_ip = cluster().cluster().net().ip(2).to_string();
    let mut body = String::new();
    wait_for("the NodePort to answer", || {
        let out = std::process::Command::new("wget")
            .args([
                "-q",
                "-T",
                "3",
                "-O-",
                &format!("http://{b_ip}:{port}/cgi-bin/who"),
            ])
            .output();
        body = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        body.contains("np-a-")
    });
    assert_eq!(client_addr(&body), b_ip, "{body}");
}

#[test]
fn client_ip_affinity_sticks() {
    nodes();
    let ns = namespace("sticky");
    servers(&ns, "st-a", "st", NODES[0].0, 2);
    servers(&ns, "st-b", "st", NODES[1].0, 1);
    service(&ns, "st", "st", "  sessionAffinity: ClientIP");
    let cli = client(&ns, NODES[1].0);
    wait_for("three endpoints", || ready_endpoints(&ns, "st").len() == 3);
    let url = format!("http://{}", cluster_ip(&ns, "st"));
    wait_for("the service to answer", || {
        spread(&ns, &cli, &url, 1)
            .keys()
            .any(|k| k.starts_with("st-"))
    });
    let counts = spread(&ns, &cli, &url, 30);
    assert_eq!(counts.len(), 1, "one backend for one client: {counts:?}");
    assert_eq!(counts.values().sum::<u32>(), 30, "{counts:?}");
}

#[test]
fn a_service_without_endpoints_refuses_and_a_deleted_one_leaves_no_chain() {
    nodes();
    let ns = namespace("empty");
    service(&ns, "nobody", "nobody-matches-this", "");
    let cli = client(&ns, NODES[0].0);
    let ip = cluster_ip(&ns, "nobody");
    let mut out = String::new();
    wait_for("a refusal", || {
        out = exec(
            &ns,
            &cli,
            &format!("timeout 10 wget -q -O- http://{ip}/ ; echo rc=$?"),
        );
        out.contains("refused")
    });
    assert!(!out.contains("rc=0"), "{out}");

    // A Service with a backend, then deleted: its chains leave node a's table.
    servers(&ns, "gone", "gone", NODES[0].0, 1);
    service(&ns, "gone", "gone", "");
    wait_for("an endpoint", || ready_endpoints(&ns, "gone").len() == 1);
    let marker = format!("{ns}/gone/tcp/http");
    wait_for("the service's chains", || {
        in_node(0, &["nft", "list", "table", "ip", "keel"]).contains(&marker)
    });
    kubectl(&["-n", &ns, "delete", "svc", "gone"]);
    wait_for("the chains to go", || {
        !in_node(0, &["nft", "list", "table", "ip", "keel"]).contains(&marker)
    });
}

#[test]
fn other_tables_are_never_touched() {
    nodes();
    let bystander = "table inet bystander {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\ttcp dport 9 counter packets 0 bytes 0 accept\n\t}\n}\n";
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &node_ns(1), "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bystander.as_bytes())?;
            c.wait()
        })
        .unwrap();
    assert!(out.success());
    let before = in_node(1, &["nft", "list", "table", "inet", "bystander"]);
    // Some Service churn, so netprog writes its table several times. Without endpoints a Service
    // is an element of the no-endpoint map, keyed by its cluster IP.
    let ns = namespace("bystander");
    for i in 0..3 {
        service(&ns, &format!("s{i}"), "none", "");
    }
    let ips: Vec<String> = (0..3).map(|i| cluster_ip(&ns, &format!("s{i}"))).collect();
    let table = || in_node(1, &["nft", "list", "table", "ip", "keel"]);
    wait_for("the services in node b's table", || {
        let t = table();
        ips.iter().all(|ip| t.contains(&format!("{ip} . tcp . 80")))
    });
    kubectl(&["-n", &ns, "delete", "svc", "s0", "s1"]);
    wait_for("two services gone", || {
        let t = table();
        !t.contains(&format!("{} . tcp . 80", ips[0]))
            && !t.contains(&format!("{} . tcp . 80", ips[1]))
    });
    let after = in_node(1, &["nft", "list", "table", "inet", "bystander"]);
    assert_eq!(after, before, "the other table changed");
    // The host (outside every node) has the ruleset it had when the test began.
    assert_eq!(&host_ruleset(), HOST_RULESET.get().unwrap());
}

/// Runs `nslookup` in pod `pod` (busybox's own resolver, which reads the pod's resolv.conf).
fn nslookup(ns: &str, pod: &str, args: &str) -> String {
    exec(ns, pod, &format!("nslookup {args}"))
}

#[test]
fn cluster_dns_answers_services_pods_and_forwards() {
    nodes();
    let ns = namespace("dns");
    servers(&ns, "dweb", "dweb", NODES[0].0, 2);
    service(&ns, "dweb", "dweb", "");
    service(&ns, "dweb-h", "dweb", "  clusterIP: None");
    let cli = client(&ns, NODES[1].0);
    wait_for("two endpoints", || ready_endpoints(&ns, "dweb").len() == 2);
    wait_for("two headless endpoints", || {
        ready_endpoints(&ns, "dweb-h").len() == 2
    });

    // The agents published the resolver: kube-dns at 10.96.0.10, one slice per node.
    assert_eq!(cluster_ip("kube-system", "kube-dns"), "10.96.0.10");
    wait_for("a kube-dns slice per node", || {
        let slices = kubectl(&["-n", "kube-system", "get", "endpointslices", "-o", "name"]);
        NODES
            .iter()
            .all(|(node, _)| slices.contains(&format!("kube-dns-{node}")))
    });

    // The pod's resolv.conf is upstream's ClusterFirst one.
    let conf = exec(&ns, &cli, "cat /etc/resolv.conf");
    assert!(conf.contains("nameserver 10.96.0.10"), "{conf}");
    assert!(
        conf.contains(&format!(
            "search {ns}.svc.cluster.local svc.cluster.local cluster.local"
        )),
        "{conf}"
    );
    assert!(conf.contains("ndots:5"), "{conf}");

    // A for a ClusterIP Service.
    let ip = cluster_ip(&ns, "dweb");
    let fqdn = format!("dweb.{ns}.svc.cluster.local");
    let mut out = String::new();
    wait_for("the Service's A record", || {
        out = nslookup(&ns, &cli, &fqdn);
        out.contains(&ip)
    });
    // One A per ready endpoint for a headless Service.
    let eps = ready_endpoints(&ns, "dweb-h");
    wait_for("the headless Service's addresses", || {
        out = nslookup(&ns, &cli, &format!("dweb-h.{ns}.svc.cluster.local"));
        eps.iter().all(|e| out.contains(e.as_str()))
    });
    // SRV for the named port.
    out = nslookup(&ns, &cli, &format!("-type=srv _http._tcp.{fqdn}"));
    assert!(out.contains(&fqdn) && out.contains(" 80 "), "{out}");
    // <dashed pod IP>.<ns>.pod.
    let dashed = eps[0].replace('.', "-");
    out = nslookup(&ns, &cli, &format!("{dashed}.{ns}.pod.cluster.local"));
    assert!(out.contains(eps[0].as_str()), "{out}");
    // A Service that does not exist: NXDOMAIN.
    out = nslookup(&ns, &cli, &format!("nothing.{ns}.svc.cluster.local"));
    assert!(
        out.contains("NXDOMAIN") || out.contains("can't find"),
        "{out}"
    );
    // By its short name through the search path, as an application would: resolved by the pod's
    // libc (busybox's wget), then through the ClusterIP to a backend.
    let mut body = String::new();
    wait_for("wget by the Service's short name", || {
        body = exec(&ns, &cli, "timeout 5 wget -q -O- http://dweb/cgi-bin/who");
        body.contains("dweb-")
    });
    // Anything else goes to the node's upstream (the test's resolver).
    out = nslookup(
        &ns,
        &cli,
        keel_testkit::upstream::NAME.trim_end_matches('.'),
    );
    assert!(
        out.contains(&keel_testkit::upstream::ADDR.to_string()),
        "{out}"
    );
    eprintln!("cluster DNS: Service, headless, SRV, pod and forwarded names answered");
}

/// A sleeping pod named `name` on `node` with `labels` (a YAML flow map).
fn labelled(ns: &str, name: &str, node: &str, labels: &str) -> String {
    apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {labels}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "100000"]
"#
    ));
    wait_for(&format!("pod {name} running"), || {
        kubectl_run(&[
            "-n",
            ns,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.status.phase}",
        ])
        .stdout
            == "Running"
    });
    name.to_string()
}

#[test]
fn network_policies_isolate_pods_in_both_directions() {
    nodes();
    let ns = namespace("netpol");
    servers(&ns, "guarded", "guarded", NODES[0].0, 1);
    let front = labelled(&ns, "front", NODES[1].0, "{role: front}");
    let other = labelled(&ns, "other", NODES[1].0, "{role: other}");
    // On the server's own node: its traffic is bridged, not routed.
    let near = labelled(&ns, "near", NODES[0].0, "{role: front}");
    wait_for("the server's address", || {
        json(&["-n", &ns, "get", "pods", "-l", "deploy=guarded"])["items"][0]["status"]["podIP"]
            .is_string()
    });
    let srv = json(&["-n", &ns, "get", "pods", "-l", "deploy=guarded"])["items"][0]["status"]
        ["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let reaches = |pod: &str| {
        exec(
            &ns,
            pod,
            &format!("timeout 3 wget -q -O- http://{srv}:8080/cgi-bin/who"),
        )
        .contains("guarded-")
    };
    wait_for("every pod to reach the server", || {
        reaches(&front) && reaches(&other) && reaches(&near)
    });

    // Default deny for the server: nobody gets in.
    apply(&format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: deny, namespace: {ns}}}
spec:
  podSelector: {{matchLabels: {{app: guarded}}}}
  policyTypes: [Ingress]
"#
    ));
    wait_for("the server to be isolated", || {
        !reaches(&front) && !reaches(&other) && !reaches(&near)
    });

    // Allow role=front on the named port: front (other node) and near (same node) get in, other not.
    apply(&format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: allow-front, namespace: {ns}}}
spec:
  podSelector: {{matchLabels: {{app: guarded}}}}
  ingress:
  - from: [{{podSelector: {{matchLabels: {{role: front}}}}}}]
    ports: [{{port: http}}]
"#
    ));
    wait_for("role=front to get in", || reaches(&front) && reaches(&near));
    assert!(!reaches(&other), "role=other must stay out");
    let listed = kubectl(&["-n", &ns, "get", "netpol"]);
    assert!(
        listed.contains("allow-front") && listed.contains("app=guarded"),
        "{listed}"
    );

    // Egress isolation of role=front: only node b's pod range is allowed, so the server (on node a)
    // is out of reach for both front pods, whatever its ingress allows.
    apply(&format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: front-out, namespace: {ns}}}
spec:
  podSelector: {{matchLabels: {{role: front}}}}
  policyTypes: [Egress]
  egress:
  - to: [{{ipBlock: {{cidr: {b_range}}}}}]
"#,
        b_range = pod_cidr(1)
    ));
    wait_for("front's egress to be cut", || {
        !reaches(&front) && !reaches(&near)
    });

    // Policies deleted: everyone gets in again.
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "netpol",
        "deny",
        "allow-front",
        "front-out",
    ]);
    wait_for("isolation to end", || {
        reaches(&front) && reaches(&other) && reaches(&near)
    });
}

#[test]
fn external_traffic_policy_local_keeps_the_client_address_and_skips_nodes_without_endpoints() {
    nodes();
    let ns = namespace("local");
    servers(&ns, "lc-a", "lc", NODES[0].0, 1);
    service(
        &ns,
        "lc",
        "lc",
        "  type: NodePort\n  externalTrafficPolicy: Local",
    );
    wait_for("an endpoint", || ready_endpoints(&ns, "lc").len() == 1);
    let port = kubectl(&[
        "-n",
        &ns,
        "get",
        "svc",
        "lc",
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    let net = cluster().cluster().net();
    let (a_ip, b_ip, me) = (
        net.ip(1).to_string(),
        net.ip(2).to_string(),
        net.root_ip().to_string(),
    );
    let get = |ip: &str| {
        std::process::Command::new("timeout")
            .args([
                "5",
                "wget",
                "-q",
                "-t",
                "1",
                "-T",
                "3",
                "-O-",
                &format!("http://{ip}:{port}/cgi-bin/who"),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let mut body = String::new();
    wait_for("node a to answer", || {
        body = get(&a_ip);
        body.contains("lc-a-")
    });
    // Local: not masqueraded, the server sees the test process's own address.
    assert_eq!(client_addr(&body), me, "{body}");
    // Node b has no local endpoint: its NodePort drops instead of forwarding.
    let from_b = get(&b_ip);
    assert!(!from_b.contains("lc-a-"), "{from_b}");
    let table = in_node(1, &["nft", "list", "table", "ip", "keel"]);
    assert!(table.contains(&format!("tcp . {port} : drop")), "{table}");
}

#[test]
fn a_load_balancer_gets_the_nodes_addresses_and_answers_on_each() {
    nodes();
    let ns = namespace("lb");
    servers(&ns, "lb-a", "lb", NODES[0].0, 1);
    service(&ns, "lb", "lb", "  type: LoadBalancer");
    wait_for("an endpoint", || ready_endpoints(&ns, "lb").len() == 1);
    let net = cluster().cluster().net();
    let (a_ip, b_ip) = (net.ip(1).to_string(), net.ip(2).to_string());
    // The ServiceLB controller writes the Ready nodes' addresses, as k3s's does.
    let mut ingress = String::new();
    wait_for("both nodes in status.loadBalancer.ingress", || {
        ingress = kubectl(&[
            "-n",
            &ns,
            "get",
            "svc",
            "lb",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[*].ip}",
        ]);
        ingress.split_whitespace().any(|i| i == a_ip)
            && ingress.split_whitespace().any(|i| i == b_ip)
    });
    // Each node answers on the Service's own port, with or without a local endpoint.
    for ip in [&a_ip, &b_ip] {
        wait_for(&format!("{ip}:80 to answer"), || {
            std::process::Command::new("timeout")
                .args([
                    "5",
                    "wget",
                    "-q",
                    "-t",
                    "1",
                    "-T",
                    "3",
                    "-O-",
                    &format!("http://{ip}/cgi-bin/who"),
                ])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("lb-a-"))
                .unwrap_or(false)
        });
    }
    eprintln!("LoadBalancer ingress {ingress} answered on both nodes");
}

/// A pod's `hostPort` answers on its node's address, from outside the node and from the other node,
/// and goes away with the pod.
#[test]
fn a_host_port_reaches_its_pod() {
    nodes();
    let ns = namespace("hostport");
    apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: hp, namespace: {ns}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 0
  containers:
  - name: web
    image: {BUSYBOX}
    command: ["sh", "-c", {serve}]
    ports: [{{containerPort: 8080, hostPort: 18080}}]
    readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
"#,
        node = NODES[0].0,
        serve = serde_json::to_string(SERVE).unwrap(),
    ));
    let a_ip = cluster().cluster().net().ip(1).to_string();
    let url = format!("http://{a_ip}:18080/cgi-bin/who");
    let fetch = |from_node_b: bool| {
        if from_node_b {
            in_node(1, &["wget", "-q", "-T", "3", "-O-", &url])
        } else {
            std::process::Command::new("wget")
                .args(["-q", "-T", "3", "-O-", &url])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        }
    };
    wait_for("the hostPort to answer from the host", || {
        fetch(false).contains("hp")
    });
    wait_for("the hostPort to answer from node b", || {
        fetch(true).contains("hp")
    });
    kubectl(&["-n", &ns, "delete", "pod", "hp", "--wait=true"]);
    wait_for("the hostPort gone with its pod", || {
        !in_node(0, &["nft", "list", "map", "ip", "keel", "host-ports"]).contains("18080")
    });
}
