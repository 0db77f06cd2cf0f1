//! The node agent for real: a 3-member keel, one `keel agent` on a private containerd (started by the
//! test under its own directory), the built-in busybox image, and the real kubectl. The seeds' walk
//! `kubectl create deployment` → ReplicaSet → Pods → scheduler → agent → running containers, then what
//! a user does next: events, deleting a pod, a crashing container, bad images and commands, a graceful
//! delete, and killing the agent. Every test works in its own namespace on the one shared node.
//!
//! Needs root (containerd, runc, CNI) as CI has.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use keel_testkit::agent::{AgentNode, BUSYBOX};
use keel_testkit::keel_bin;
use keel_testkit::kube::{Background, KubeCluster};
use serde_json::Value;

const NODE: &str = "keel-worker-0";
const POD_CIDR: &str = "10.42.7.0/24";
const WAIT: Duration = Duration::from_secs(120);

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

static NODE_PTR: OnceLock<usize> = OnceLock::new();
static AGENT_PORT: OnceLock<u16> = OnceLock::new();

/// Tests share the agent (read); the one that kills it runs alone (write), so no other test's pod is
/// caught between a CreateContainer and a StartContainer, or its `kubectl logs -f` cut, by the kill.
static AGENT_TURN: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared_turn() -> std::sync::RwLockReadGuard<'static, ()> {
    AGENT_TURN.read().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn drop_node() {
    if let Some(&ptr) = NODE_PTR.get() {
        // SAFETY: `ptr` came from `Box::into_raw` below; exit handlers run once, after the tests.
        drop(unsafe { Box::from_raw(ptr as *mut std::sync::Mutex<AgentNode>) });
    }
}

/// The worker every test shares, started (and waited Ready) by the first caller; torn down at exit,
/// before the cluster (exit handlers run in reverse order of registration).
fn node() -> &'static std::sync::Mutex<AgentNode> {
    let c = cluster();
    let ptr = *NODE_PTR.get_or_init(|| {
        let dir = c.dir().join("worker-0");
        // The agent's API on a free loopback port: never 10250, which a `keel up` on this machine may hold.
        let port = AGENT_PORT.get_or_init(keel_testkit::free_port).to_string();
        let extra = [
            "--address",
            "127.0.0.1",
            "--port",
            &port,
            "--node-ip",
            "127.0.0.1",
            // This agent shares the host's network namespace: Services are tested in tests/services.rs,
            // in namespaces of their own, and the host's nftables and sysctls stay untouched.
            "--disable-kube-proxy",
            // ...and cluster DNS (port 53 on the host), tested in tests/services.rs too, and the
            // Ingress controller (port 80), tested in tests/up.rs.
            "--disable-dns",
            "--disable-ingress",
            // Small logs rotate within seconds (log_rotation_keeps_the_newest_files); every other test's
            // logs stay far below this.
            "--container-log-max-size",
            "32Ki",
            "--container-log-max-files",
            "3",
            "--container-log-monitor-interval",
            "1s",
            // Image garbage collection at any usage, every second (unused_images_are_collected): only
            // the test's own image is neither local (--image-dir) nor in use.
            "--image-gc-high-threshold",
            "1",
            "--image-gc-low-threshold",
            "0",
            // Long enough for a freshly imported image to be taken by its pod first.
            "--minimum-image-ttl-duration",
            "30s",
            "--image-gc-period",
            "1s",
        ];
        // The agent runs with its own node identity, so the Node authorizer and NodeRestriction decide
        // what it may read and write, as a kubelet's.
        std::fs::create_dir_all(&dir).unwrap();
        let node_kubeconfig = dir.join("node.kubeconfig");
        let member_dir = c.member(0).kubeconfig().parent().unwrap().to_path_buf();
        keel_testkit::agent::node_kubeconfig(
            keel_bin!().as_ref(),
            &member_dir,
            NODE,
            &node_kubeconfig,
        );
        let n = AgentNode::start(
            keel_bin!().as_ref(),
            &dir,
            NODE,
            &node_kubeconfig,
            POD_CIDR,
            &extra,
        );
        let b = Box::new(std::sync::Mutex::new(n));
        // SAFETY: registers a plain extern "C" function with no captured state.
        unsafe { libc::atexit(drop_node) };
        Box::into_raw(b) as usize
    });
    // SAFETY: leaked until exit; only shared references are handed out.
    let n = unsafe { &*(ptr as *const std::sync::Mutex<AgentNode>) };
    wait_for(n, "the node to be Ready", || {
        let out = c.kubectl(
            0,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
        );
        out.stdout.trim() == "True"
    });
    n
}

fn lock(n: &'static std::sync::Mutex<AgentNode>) -> std::sync::MutexGuard<'static, AgentNode> {
    n.lock().unwrap_or_else(|e| e.into_inner())
}

fn fail(n: &std::sync::Mutex<AgentNode>, msg: impl std::fmt::Display) -> ! {
    let tails = lock_tails(n);
    cluster().fail(format!("{msg}\n{tails}"))
}

fn lock_tails(n: &std::sync::Mutex<AgentNode>) -> String {
    match n.try_lock() {
        Ok(g) => g.log_tails(60),
        Err(_) => "(agent busy)".into(),
    }
}

fn wait_for(n: &std::sync::Mutex<AgentNode>, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < WAIT {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    fail(n, format!("timed out after {WAIT:?} waiting for {what}"))
}

/// kubectl that must succeed. A request refused because the cluster is between leaders ("no leader",
/// "not leader": nothing was written) is retried for a while, as a client of etcd would.
fn kubectl(args: &[&str]) -> String {
    let out = kubectl_run(args);
    if out.ok {
        return out.stdout;
    }
    cluster().ok(0, args)
}

/// One kubectl run, retried while the cluster is between leaders.
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

/// A read as JSON. Reads are retried for a while: under this much load a member may lose the Raft
/// leadership for a moment, and kubectl then sees "not leader", as it would against etcd.
fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    for _ in 0..20 {
        let out = cluster().kubectl(0, &a);
        if out.ok {
            return serde_json::from_str(&out.stdout).unwrap();
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    serde_json::from_str(&kubectl(&a)).unwrap()
}

fn namespace(name: &str) -> String {
    let _ = cluster().kubectl(0, &["create", "namespace", name]);
    name.to_string()
}

fn pods(ns: &str, selector: &str) -> Vec<Value> {
    let v = json(&["-n", ns, "get", "pods", "-l", selector]);
    v["items"].as_array().cloned().unwrap_or_default()
}

fn pod(ns: &str, name: &str) -> Value {
    json(&["-n", ns, "get", "pod", name])
}

fn running_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn container_id(p: &Value) -> String {
    p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Lines of `kubectl get events` (namespace `ns`) as "reason object message".
fn events(ns: &str) -> Vec<String> {
    let v = json(&[
        "-n",
        ns,
        "get",
        "events",
        "--sort-by=.metadata.creationTimestamp",
    ]);
    v["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            format!(
                "{} {} {}",
                e["reason"].as_str().unwrap_or_default(),
                e["involvedObject"]["name"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// [`events`] once they stop changing (the agent publishes Events from a queue, a moment after the
/// status it reports): two equal reads a second apart, or the last read after 20 s.
fn settled_events(ns: &str) -> Vec<String> {
    let mut last = events(ns);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_secs(1));
        let now = events(ns);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// A GET of `http://ip:port/` from this machine (the pod network is a local bridge).
fn http_get(ip: &str, port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = format!("{ip}:{port}").parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET / HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn node_registers_with_capacity_lease_and_images() {
    let _turn = shared_turn();
    let n = node();
    let v = json(&["get", "node", NODE]);
    let st = &v["status"];
    for k in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert!(
            st["allocatable"][k].is_string(),
            "allocatable.{k} missing: {st}"
        );
    }
    assert_eq!(st["allocatable"]["pods"], "110");
    assert!(
        st["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .unwrap_or_default()
            .starts_with("containerd://"),
        "{st}"
    );
    let port = AGENT_PORT.get().copied().unwrap_or_default();
    assert_eq!(st["daemonEndpoints"]["kubeletEndpoint"]["Port"], port);
    let images: Vec<String> = st["images"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .flat_map(|i| i["names"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    assert!(
        images.iter().any(|i| i.contains("localhost/busybox")),
        "images: {images:?}"
    );
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned();
        assert_eq!(
            c.map(|c| c["status"].clone()),
            Some(Value::from("False")),
            "{t}: {st}"
        );
    }
    let lease = json(&["-n", "kube-node-lease", "get", "lease", NODE]);
    assert_eq!(lease["spec"]["holderIdentity"], NODE);
    let first = lease["spec"]["renewTime"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_for(n, "a Lease renewal", || {
        json(&["-n", "kube-node-lease", "get", "lease", NODE])["spec"]["renewTime"].as_str()
            != Some(&first)
    });
}

/// The seeds' walk, for real: a Deployment's three pods run httpd in containerd and answer on their IPs;
/// a deleted pod is replaced by a new running one.
#[test]
fn deployment_pods_run_serve_and_are_replaced() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("walk");
    kubectl(&[
        "-n",
        &ns,
        "create",
        "deployment",
        "web",
        &format!("--image={BUSYBOX}"),
        "--replicas=3",
        "--",
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/etc",
    ]);
    wait_for(n, "3 running, ready web pods", || {
        let ps = pods(&ns, "app=web");
        ps.len() == 3 && ps.iter().all(running_ready)
    });
    let ps = pods(&ns, "app=web");
    let mut ips = Vec::new();
    for p in &ps {
        let ip = p["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            ip.starts_with("10.42.7."),
            "pod IP {ip} not from the node's CIDR: {p}"
        );
        assert_eq!(p["spec"]["nodeName"], NODE);
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        let cs = &p["status"]["containerStatuses"][0];
        assert_eq!(cs["ready"], true, "{cs}");
        assert_eq!(cs["restartCount"], 0, "{cs}");
        assert!(
            cs["containerID"]
                .as_str()
                .unwrap_or_default()
                .starts_with("containerd://"),
            "{cs}"
        );
        assert!(
            cs["imageID"].as_str().is_some_and(|s| !s.is_empty()),
            "{cs}"
        );
        assert!(cs["state"]["running"]["startedAt"].is_string(), "{cs}");
        ips.push(ip);
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 3, "pod IPs must differ: {ips:?}");
    // Each container really serves: busybox httpd answers from the pod's own network namespace.
    for ip in &ips {
        let body =
            http_get(ip, 8080).unwrap_or_else(|| fail(n, format!("no HTTP answer from {ip}:8080")));
        assert!(body.starts_with("HTTP/1."), "{ip}: {body}");
    }
    // Events are published asynchronously: wait until the last kind shows up.
    wait_for(n, "Started events", || {
        events(&ns)
            .iter()
            .filter(|e| e.starts_with("Started "))
            .count()
            >= 3
    });
    let evs = settled_events(&ns);
    for reason in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(
            evs.iter().any(|e| e.starts_with(&format!("{reason} "))),
            "no {reason} event in {evs:#?}"
        );
    }
    assert!(
        evs.iter().any(|e| e.starts_with("Pulled ")
            && e.contains(&format!(
                "Container image \"{BUSYBOX}\" already present on machine"
            ))),
        "{evs:#?}"
    );
    // kubectl's own columns.
    let wide = kubectl(&["-n", &ns, "get", "pods", "-o", "wide"]);
    assert_eq!(
        wide.lines()
            .filter(|l| l.contains("Running") && l.contains(NODE))
            .count(),
        3,
        "{wide}"
    );

    // Delete one: the ReplicaSet makes another, the agent runs it, the old one's container is gone.
    let victim = ps[0]["metadata"]["name"].as_str().unwrap().to_string();
    let victim_ip = ps[0]["status"]["podIP"].as_str().unwrap().to_string();
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "pod",
        &victim,
        "--wait=true",
        "--timeout=90s",
    ]);
    wait_for(n, "a replacement pod running", || {
        let ps = pods(&ns, "app=web");
        ps.len() == 3
            && ps.iter().all(running_ready)
            && ps.iter().all(|p| p["metadata"]["name"] != victim.as_str())
    });
    wait_for(n, "the deleted pod's address to stop answering", || {
        pods(&ns, "app=web")
            .iter()
            .any(|p| p["status"]["podIP"] == victim_ip.as_str())
            || http_get(&victim_ip, 8080).is_none()
    });
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A container that keeps exiting is restarted with back-off and shows CrashLoopBackOff; its last run is
/// in lastState.
#[test]
fn crashing_container_backs_off() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("crash");
    run_busybox(&ns, "crasher", &[], &["sh", "-c", "echo bye; exit 3"]);
    wait_for(n, "CrashLoopBackOff with a restart", || {
        let p = pod(&ns, "crasher");
        let cs = &p["status"]["containerStatuses"][0];
        cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            && cs["restartCount"].as_i64().unwrap_or(0) >= 1
    });
    let p = pod(&ns, "crasher");
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 3, "{cs}");
    assert_eq!(cs["lastState"]["terminated"]["reason"], "Error", "{cs}");
    let msg = cs["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        msg.starts_with("back-off ")
            && msg.contains("restarting failed container=crasher pod=crasher_crash("),
        "{msg}"
    );
    assert_eq!(p["status"]["phase"], "Running", "{p}");
    let table = kubectl(&["-n", &ns, "get", "pod", "crasher"]);
    assert!(
        table.contains("CrashLoopBackOff") || table.contains("Error"),
        "{table}"
    );
    let evs = settled_events(&ns);
    assert!(
        evs.iter()
            .any(|e| e.starts_with("BackOff crasher Back-off restarting failed container crasher")),
        "{evs:#?}"
    );

    // restartPolicy Never: one run, then Failed for good; OnFailure with exit 0: Succeeded.
    run_busybox(&ns, "once", &["--restart=Never"], &["sh", "-c", "exit 2"]);
    run_busybox(&ns, "done", &["--restart=OnFailure"], &["true"]);
    wait_for(n, "Failed and Succeeded pods", || {
        pod(&ns, "once")["status"]["phase"] == "Failed"
            && pod(&ns, "done")["status"]["phase"] == "Succeeded"
    });
    let once = pod(&ns, "once");
    assert_eq!(
        once["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 2,
        "{once}"
    );
    assert_eq!(
        once["status"]["containerStatuses"][0]["restartCount"], 0,
        "{once}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// Bad input: an image nobody has, a command that does not exist.
#[test]
fn bad_images_and_commands_are_reported() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("bad");
    // A registry on a loopback port nothing listens on: the pull fails here, nothing leaves the machine.
    kubectl(&[
        "-n",
        &ns,
        "run",
        "noimage",
        "--image=127.0.0.1:9/nope/nothing:1",
    ]);
    // A `localhost/` image nobody imported, under its default policy (IfNotPresent): pulled, and the
    // pull fails as upstream's would (only https://localhost is asked), no policy it does not have named.
    kubectl(&[
        "-n",
        &ns,
        "run",
        "nolocalpull",
        "--image=localhost/nothing:2",
    ]);
    kubectl(&[
        "-n",
        &ns,
        "run",
        "nolocal",
        "--image=localhost/nothing:1",
        "--image-pull-policy=Never",
    ]);
    run_busybox(&ns, "nocmd", &["--command"], &["/no/such/binary"]);
    wait_for(n, "ErrImagePull or ImagePullBackOff", || {
        let r = pod(&ns, "noimage")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            .clone();
        r == "ErrImagePull" || r == "ImagePullBackOff"
    });
    wait_for(n, "ImagePullBackOff after a retry", || {
        pod(&ns, "noimage")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "ImagePullBackOff"
    });
    let mut waiting = Value::Null;
    wait_for(n, "ErrImagePull for a missing localhost/ image", || {
        waiting =
            pod(&ns, "nolocalpull")["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        let r = waiting["reason"].as_str().unwrap_or_default();
        r == "ErrImagePull" || r == "ImagePullBackOff"
    });
    let events = kubectl(&[
        "-n",
        &ns,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=nolocalpull",
    ]);
    assert!(
        events.contains("Failed to pull image \"localhost/nothing:2\"")
            && !events.contains("pull policy"),
        "{waiting}\n{events}"
    );
    wait_for(n, "ErrImageNeverPull", || {
        pod(&ns, "nolocal")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "ErrImageNeverPull"
    });
    wait_for(n, "a failed start", || {
        let cs = pod(&ns, "nocmd")["status"]["containerStatuses"][0].clone();
        let w = cs["state"]["waiting"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let t = cs["lastState"]["terminated"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        w == "RunContainerError"
            || w == "CrashLoopBackOff" && t == "StartError"
            || t == "ContainerCannotRun"
    });
    let evs = settled_events(&ns);
    assert!(
        evs.iter()
            .any(|e| e
                .starts_with("Failed noimage Failed to pull image \"127.0.0.1:9/nope/nothing:1\"")),
        "{evs:#?}"
    );
    assert!(
        evs.iter().any(|e| e.starts_with("Failed nocmd Error: ")),
        "{evs:#?}"
    );
    // Never started: Pending. A container that was created but could not start counts as stopped, so under
    // restartPolicy Always its pod is Running (restarting), as upstream's phase rules say; never ready.
    for p in ["noimage", "nolocal"] {
        assert_eq!(pod(&ns, p)["status"]["phase"], "Pending", "{p}");
    }
    assert!(!running_ready(&pod(&ns, "nocmd")));
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A pod that asks for more memory than the node has is never started: the scheduler keeps it Pending.
#[test]
fn pod_larger_than_the_node_stays_pending() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("huge");
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"huge"}},"spec":{{"containers":[{{"name":"c","image":"{BUSYBOX}","command":["sleep","3600"],"resources":{{"requests":{{"memory":"64Ti"}}}}}}]}}}}"#
    );
    apply(&ns, &manifest);
    wait_for(n, "FailedScheduling", || {
        events(&ns)
            .iter()
            .any(|e| e.starts_with("FailedScheduling huge "))
    });
    let evs = settled_events(&ns);
    assert!(
        evs.iter().any(|e| e.contains("Insufficient memory")),
        "{evs:#?}"
    );
    let p = pod(&ns, "huge");
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["spec"]["nodeName"].is_null(), "{p}");
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// `kubectl delete pod` runs the preStop hook, stops the container with SIGTERM within the grace period,
/// and the object goes once everything is stopped.
#[test]
fn graceful_delete_runs_pre_stop() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("grace");
    // The hook writes into a hostPath the test reads; the main process ignores nothing (SIGTERM ends sleep's shell).
    let marks = n
        .lock()
        .map(|g| g.dir().join("marks-grace"))
        .unwrap_or_default();
    std::fs::create_dir_all(&marks).unwrap();
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"g"}},"spec":{{"terminationGracePeriodSeconds":20,
          "volumes":[{{"name":"m","hostPath":{{"path":"{}"}}}}],
          "containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never",
            "command":["sh","-c","trap 'echo term > /m/term; exit 0' TERM; while true; do sleep 1; done"],
            "volumeMounts":[{{"name":"m","mountPath":"/m"}}],
            "lifecycle":{{"preStop":{{"exec":{{"command":["sh","-c","echo prestop > /m/prestop"]}}}}}}}}]}}}}"#,
        marks.display()
    );
    apply(&ns, &manifest);
    wait_for(n, "pod g running", || running_ready(&pod(&ns, "g")));
    let t = Instant::now();
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "pod",
        "g",
        "--wait=true",
        "--timeout=90s",
    ]);
    let took = t.elapsed();
    assert!(marks.join("prestop").exists(), "preStop did not run");
    assert_eq!(
        std::fs::read_to_string(marks.join("term"))
            .unwrap_or_default()
            .trim(),
        "term",
        "SIGTERM not delivered"
    );
    // Not a timing assertion on speed: the container handled SIGTERM, so it never needed the 20 s SIGKILL.
    assert!(
        took < Duration::from_secs(20),
        "the container was not stopped by SIGTERM ({took:?})"
    );
    let evs = settled_events(&ns);
    assert!(
        evs.iter()
            .any(|e| e.starts_with("Killing g Stopping container c")),
        "{evs:#?}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// kill -9 of the agent: containers keep running; the restarted agent adopts them (same container IDs, no
/// restarts) and keeps the node Ready.
#[test]
fn restarted_agent_adopts_running_containers() {
    let _turn = AGENT_TURN.write().unwrap_or_else(|e| e.into_inner());
    let n = node();
    let ns = namespace("adopt");
    run_busybox(
        &ns,
        "keep",
        &[],
        &["httpd", "-f", "-p", "8081", "-h", "/etc"],
    );
    wait_for(n, "pod keep running", || running_ready(&pod(&ns, "keep")));
    let before = pod(&ns, "keep");
    let id = container_id(&before);
    let ip = before["status"]["podIP"].as_str().unwrap().to_string();
    {
        let mut g = lock(n);
        g.kill9_agent();
    }
    // With no agent at all, the container still serves.
    assert!(
        http_get(&ip, 8081).is_some(),
        "container died with the agent"
    );
    {
        let mut g = lock(n);
        g.spawn_agent();
    }
    // Make the new agent do something visible for this pod, then check it kept the old container.
    kubectl(&["-n", &ns, "label", "pod", "keep", "touched=yes"]);
    std::thread::sleep(Duration::from_secs(3));
    wait_for(n, "the pod still running after the restart", || {
        running_ready(&pod(&ns, "keep"))
    });
    let after = pod(&ns, "keep");
    assert_eq!(
        container_id(&after),
        id,
        "the container was replaced: {after}"
    );
    assert_eq!(
        after["status"]["containerStatuses"][0]["restartCount"], 0,
        "{after}"
    );
    assert_eq!(after["status"]["podIP"], ip.as_str());
    assert!(http_get(&ip, 8081).is_some());
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// `kubectl run NAME --image=<busybox> --image-pull-policy=Never EXTRA -- CMD` in `ns`.
fn run_busybox(ns: &str, name: &str, extra: &[&str], cmd: &[&str]) {
    let image = format!("--image={BUSYBOX}");
    let mut args = vec![
        "-n",
        ns,
        "run",
        name,
        image.as_str(),
        "--image-pull-policy=Never",
    ];
    args.extend_from_slice(extra);
    if !cmd.is_empty() {
        args.push("--");
        args.extend_from_slice(cmd);
    }
    kubectl(&args);
}

fn apply(ns: &str, manifest: &str) {
    for _ in 0..20 {
        let out = cluster().kubectl_stdin(0, &["-n", ns, "apply", "-f", "-"], Some(manifest));
        if out.ok {
            return;
        }
        if !out.stderr.contains("etcdserver: no leader")
            && !out.stderr.contains("etcdserver: not leader")
        {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    cluster().ok_stdin(0, &["-n", ns, "apply", "-f", "-"], Some(manifest));
}

fn ready_condition(p: &Value) -> String {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Probes: a failing liveness probe restarts the container; a readiness probe moves the pod in and out of
/// Ready; a startup probe holds the container un-started until its port opens, then readiness (httpGet)
/// and liveness (tcpSocket) take over.
#[test]
fn probes_restart_and_gate_readiness() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("probes");
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"live"}},"spec":{{"containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never",
              "command":["sh","-c","touch /tmp/healthy; sleep 4; rm /tmp/healthy; sleep 3600"],
              "livenessProbe":{{"exec":{{"command":["test","-f","/tmp/healthy"]}},"periodSeconds":1,"failureThreshold":2}}}}]}}}}"#
        ),
    );
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"ready"}},"spec":{{"containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never",
              "command":["sh","-c","sleep 2; touch /tmp/ready; sleep 6; rm /tmp/ready; sleep 3600"],
              "readinessProbe":{{"exec":{{"command":["test","-f","/tmp/ready"]}},"periodSeconds":1}}}}]}}}}"#
        ),
    );
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"slow"}},"spec":{{"containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never",
              "command":["sh","-c","sleep 3; exec httpd -f -p 8080 -h /etc"],
              "ports":[{{"name":"web","containerPort":8080}}],
              "startupProbe":{{"tcpSocket":{{"port":"web"}},"periodSeconds":1,"failureThreshold":60}},
              "readinessProbe":{{"httpGet":{{"path":"/hostname","port":8080}},"periodSeconds":1}},
              "livenessProbe":{{"tcpSocket":{{"port":8080}},"periodSeconds":1}}}}]}}}}"#
        ),
    );
    // Readiness: unready, then ready once the file exists, then unready again when it goes; never restarted.
    wait_for(n, "pod ready to become Ready", || {
        ready_condition(&pod(&ns, "ready")) == "True"
    });
    wait_for(n, "pod ready to leave Ready", || {
        ready_condition(&pod(&ns, "ready")) == "False"
    });
    let p = pod(&ns, "ready");
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(
        p["status"]["containerStatuses"][0]["restartCount"], 0,
        "{p}"
    );
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], false, "{p}");
    // Liveness: restarted by the agent after the file disappears.
    wait_for(n, "the liveness restart", || {
        pod(&ns, "live")["status"]["containerStatuses"][0]["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    });
    // Startup then readiness over HTTP.
    wait_for(n, "pod slow started and ready", || {
        let p = pod(&ns, "slow");
        p["status"]["containerStatuses"][0]["started"] == true && running_ready(&p)
    });
    let slow = pod(&ns, "slow");
    assert_eq!(
        slow["status"]["containerStatuses"][0]["restartCount"], 0,
        "{slow}"
    );
    let evs = settled_events(&ns);
    assert!(
        evs.iter()
            .any(|e| e.starts_with("Unhealthy live Liveness probe failed")),
        "{evs:#?}"
    );
    assert!(
        evs.iter()
            .any(|e| e == "Killing live Container c failed liveness probe, will be restarted"),
        "{evs:#?}"
    );
    assert!(
        evs.iter()
            .any(|e| e.starts_with("Unhealthy ready Readiness probe failed")),
        "{evs:#?}"
    );
    assert!(
        evs.iter().any(
            |e| e.starts_with("Unhealthy slow Startup probe failed: dial tcp ")
                && e.contains("connection refused")
        ),
        "{evs:#?}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// `kubectl logs` through the API server to the agent: whole logs, --tail, --timestamps, --limit-bytes,
/// -f that ends with the container, --previous of a restarted container, and upstream's errors.
#[test]
fn logs_reach_the_agent() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("logs");
    run_busybox(
        &ns,
        "count",
        &["--restart=Never"],
        &[
            "sh",
            "-c",
            "for i in 1 2 3 4 5; do echo line $i; sleep 1; done; echo to-stderr >&2",
        ],
    );
    wait_for(n, "pod count started", || {
        let state = pod(&ns, "count")["status"]["containerStatuses"][0]["state"].clone();
        state["running"].is_object() || state["terminated"].is_object()
    });
    // -f streams while the container runs and ends when it exits.
    let followed = kubectl_run(&["-n", &ns, "logs", "-f", "count"]);
    assert!(followed.ok, "{}", followed.stderr);
    assert!(
        followed.stdout.ends_with("line 5\nto-stderr\n"),
        "{:?}",
        followed.stdout
    );
    assert_eq!(
        kubectl(&["-n", &ns, "logs", "count"]),
        "line 1\nline 2\nline 3\nline 4\nline 5\nto-stderr\n"
    );
    assert_eq!(
        kubectl(&["-n", &ns, "logs", "count", "--tail=2"]),
        "line 5\nto-stderr\n"
    );
    let ts = kubectl(&["-n", &ns, "logs", "count", "--tail=1", "--timestamps"]);
    let (stamp, rest) = ts.split_once(' ').unwrap_or_default();
    assert!(
        stamp.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "{ts:?}"
    );
    assert_eq!(rest, "to-stderr\n");
    assert_eq!(
        kubectl(&["-n", &ns, "logs", "count", "--limit-bytes=8"]),
        "line 1\nl"
    );

    // --previous: the run before the restart.
    kubectl(&[
        "-n",
        &ns,
        "run",
        "again",
        &format!("--image={BUSYBOX}"),
        "--image-pull-policy=Never",
        "--",
        "sh",
        "-c",
        "echo run; exit 1",
    ]);
    wait_for(n, "a restart", || {
        pod(&ns, "again")["status"]["containerStatuses"][0]["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    });
    assert_eq!(
        kubectl(&["-n", &ns, "logs", "again", "--previous"]),
        "run\n"
    );

    // Errors as upstream words them.
    let two = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"two"}},"spec":{{"containers":[
          {{"name":"a","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sleep","3600"]}},
          {{"name":"b","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sleep","3600"]}}]}}}}"#
    );
    apply(&ns, &two);
    let e = cluster().err(0, &["-n", &ns, "logs", "two", "-c", "nope"]);
    assert!(e.contains("container nope is not valid for pod two"), "{e}");
    kubectl(&[
        "-n",
        &ns,
        "run",
        "noimg",
        "--image=localhost/none:1",
        "--image-pull-policy=Never",
    ]);
    wait_for(n, "ErrImageNeverPull", || {
        pod(&ns, "noimg")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "ErrImageNeverPull"
    });
    let e = cluster().err(0, &["-n", &ns, "logs", "noimg"]);
    assert!(
        e.contains("container \"noimg\" in pod \"noimg\" is waiting to start: ErrImageNeverPull"),
        "{e}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// kubectl's environment switches for its streaming transports: empty for its default (WebSocket,
/// which the agent translates to the runtime's SPDY), or both set to `false` for SPDY end to end.
const SPDY_ONLY: [(&str, &str); 2] = [
    ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false"),
    ("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false"),
];

/// kubectl with `env`, bounded; the exit code as it was.
fn kubectl_env(
    env: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&[u8]>,
) -> keel_testkit::CtlOutput {
    let mut cmd = cluster().kubectl_cmd(0, args);
    cmd.envs(env.iter().copied());
    keel_testkit::run_bounded(cmd, stdin, Duration::from_secs(60))
}

/// The agent's `keel_agent_stream_sessions_total` by `kind,transport,protocol`, read through the API
/// server's `nodes/proxy`.
fn stream_sessions() -> std::collections::BTreeMap<String, u64> {
    let text = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/metrics"),
    ]);
    let mut m = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("keel_agent_stream_sessions_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let get = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        m.insert(
            format!("{},{},{}", get("kind"), get("transport"), get("protocol")),
            value.trim().parse().unwrap_or(0),
        );
    }
    m
}

fn grew(before: &std::collections::BTreeMap<String, u64>, key: &str) -> u64 {
    let after = stream_sessions();
    after.get(key).copied().unwrap_or(0) - before.get(key).copied().unwrap_or(0)
}

/// `kubectl exec` (output, error output, exit code, stdin of 2 MiB ended by EOF), a container that
/// is not there, and `kubectl port-forward` to an httpd in pod `ns/srv`, with kubectl's transport
/// chosen by `env`.
fn exec_and_port_forward_checks(n: &std::sync::Mutex<AgentNode>, ns: &str, env: &[(&str, &str)]) {
    // The seeds' check from inside the pod.
    let out = kubectl_env(
        env,
        &[
            "-n",
            ns,
            "exec",
            "srv",
            "--",
            "wget",
            "-qO-",
            "localhost:8080/hostname",
        ],
        None,
    );
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "srv");
    let out = kubectl_env(env, &["-n", ns, "exec", "srv", "--", "echo", "hi"], None);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "hi\n"),
        "{}",
        out.stderr
    );
    // The exit code and both output streams.
    let r = kubectl_env(
        env,
        &[
            "-n",
            ns,
            "exec",
            "srv",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert_eq!(r.stdout, "out\n");
    assert!(
        r.stderr.contains("err\n") && r.stderr.contains("command terminated with exit code 3"),
        "{}",
        r.stderr
    );
    // stdin to EOF: `cat` ends only when its stdin is closed (the v5 close signal over WebSocket).
    // 2 MiB, more than the pipes and sockets on the way hold: stdin and stdout must flow at once.
    let input: String = (0..81920)
        .map(|i| format!("line {i:05} of the input..\n"))
        .collect();
    assert_eq!(input.len(), 81920 * 26);
    let echoed = kubectl_env(
        env,
        &["-n", ns, "exec", "-i", "srv", "--", "cat"],
        Some(input.as_bytes()),
    );
    assert_eq!(echoed.code, Some(0), "{}", echoed.stderr);
    assert!(
        echoed.stdout == input,
        "stdin came back as {} bytes",
        echoed.stdout.len()
    );
    let counted = kubectl_env(
        env,
        &["-n", ns, "exec", "-i", "srv", "--", "wc", "-c"],
        Some(b"data"),
    );
    assert_eq!(counted.stdout.trim(), "4", "{}", counted.stderr);
    // A container that is not there.
    let e = kubectl_env(
        env,
        &["-n", ns, "exec", "srv", "-c", "nope", "--", "true"],
        None,
    );
    assert!(
        e.stderr.contains("container nope is not valid for pod srv")
            || e.stderr.contains("container not found"),
        "{}",
        e.stderr
    );

    // port-forward from a loopback port of this machine to the pod's 8080.
    let local = keel_testkit::free_port();
    let mut cmd = cluster().kubectl_cmd(
        0,
        &[
            "-n",
            ns,
            "port-forward",
            "pod/srv",
            &format!("{local}:8080"),
            "--address",
            "127.0.0.1",
        ],
    );
    cmd.envs(env.iter().copied());
    let log = cluster().dir().join(format!("port-forward-{ns}.out"));
    let pf = keel_testkit::Process::start(&mut cmd, keel_testkit::Capture::Log(log), None).unwrap();
    let mut bodies = Vec::new();
    for _ in 0..60 {
        if pf.stdout().contains("Forwarding from") {
            // Two connections through one port-forward session.
            if let Some(b) = http_get("127.0.0.1", local) {
                bodies.push(b);
                if bodies.len() == 2 {
                    break;
                }
                continue;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    if bodies.len() < 2 {
        fail(
            n,
            format!("no answer through port-forward: {}", pf.stdout()),
        )
    }
    assert!(
        bodies.iter().all(|b| b.starts_with("HTTP/1.")),
        "{bodies:?}"
    );
    drop(pf);
}

/// `kubectl exec`, `cp` and `port-forward` with kubectl's default transport: WebSocket
/// (`v5.channel.k8s.io`, and SPDY tunnelled in WebSocket for port-forward), which the agent
/// translates to containerd's SPDY. The agent's session counter and kubectl's own log show that
/// WebSocket was used, not the SPDY fallback.
#[test]
fn exec_cp_and_port_forward() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("streams");
    run_busybox(
        &ns,
        "srv",
        &[],
        &["httpd", "-f", "-p", "8080", "-h", "/etc"],
    );
    wait_for(n, "pod srv running", || running_ready(&pod(&ns, "srv")));
    let before = stream_sessions();
    exec_and_port_forward_checks(n, &ns, &[]);
    // kubectl says which protocol the server chose.
    let v = kubectl_env(&[], &["-n", &ns, "exec", "srv", "-v=4", "--", "true"], None);
    assert!(
        v.stderr.contains("The subprotocol is v5.channel.k8s.io"),
        "{}",
        v.stderr
    );
    assert!(
        grew(&before, "exec,websocket,v5.channel.k8s.io") >= 6,
        "{:?}",
        stream_sessions()
    );
    assert!(
        grew(&before, "portforward,websocket,SPDY/3.1+portforward.k8s.io") >= 1,
        "{:?}",
        stream_sessions()
    );
    // cp is tar over exec, both ways.
    let dir = cluster().dir().join("cp");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("in.txt");
    std::fs::write(&src, "copied in\n").unwrap();
    kubectl(&["-n", &ns, "cp", src.to_str().unwrap(), "srv:/tmp/in.txt"]);
    assert_eq!(
        kubectl(&["-n", &ns, "exec", "srv", "--", "cat", "/tmp/in.txt"]),
        "copied in\n"
    );
    let back = dir.join("back.txt");
    kubectl(&["-n", &ns, "cp", "srv:/tmp/in.txt", back.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "copied in\n");
    // A TTY (from `script`'s pseudo-terminal, sized 30x100): stderr joins stdout, the size reaches
    // the container through the resize channel, and the exit code still comes back.
    let k = cluster().kubectl_cmd(0, &[]);
    let mut cmd = std::process::Command::new("script");
    for (key, val) in k.get_envs() {
        if let Some(val) = val {
            cmd.env(key, val);
        }
    }
    cmd.args([
        "-qec",
        &format!(
            "stty rows 30 cols 100; kubectl -n {ns} exec -it srv -- sh -c 'sleep 1; stty size; echo e >&2; exit 4'"
        ),
        "/dev/null",
    ]);
    let t = keel_testkit::run_bounded(cmd, None, Duration::from_secs(60));
    assert_eq!(t.code, Some(4), "{} {}", t.stdout, t.stderr);
    assert!(t.stdout.contains("30 100"), "{:?}", t.stdout);
    assert!(t.stdout.contains('e'), "{:?}", t.stdout);
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// The same with kubectl told to use SPDY (its fallback, and what older clients speak): relayed to
/// the runtime unchanged.
#[test]
fn exec_and_port_forward_over_spdy() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("streams-spdy");
    run_busybox(
        &ns,
        "srv",
        &[],
        &["httpd", "-f", "-p", "8080", "-h", "/etc"],
    );
    wait_for(n, "pod srv running", || running_ready(&pod(&ns, "srv")));
    let before = stream_sessions();
    exec_and_port_forward_checks(n, &ns, &SPDY_ONLY);
    assert!(
        grew(&before, "exec,spdy,v4.channel.k8s.io") >= 5,
        "{:?}",
        stream_sessions()
    );
    assert!(
        grew(&before, "portforward,spdy,portforward.k8s.io") >= 1,
        "{:?}",
        stream_sessions()
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// `kubectl attach` with kubectl's default WebSocket transport: a running container's output, and
/// stdin to a container started with `--stdin`.
#[test]
fn attach_over_websocket() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("attach");
    run_busybox(
        &ns,
        "ticker",
        &[],
        &[
            "sh",
            "-c",
            "i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done",
        ],
    );
    run_busybox(&ns, "echo", &["--stdin"], &["cat"]);
    wait_for(n, "pods ticker and echo running", || {
        running_ready(&pod(&ns, "ticker")) && running_ready(&pod(&ns, "echo"))
    });
    let before = stream_sessions();
    let start = |name: &str, args: &[&str], stdin: Option<&[u8]>| {
        let log = cluster().dir().join(format!("attach-{name}.out"));
        let mut cmd = cluster().kubectl_cmd(0, args);
        keel_testkit::Process::start(&mut cmd, keel_testkit::Capture::Log(log), stdin).unwrap()
    };
    let ticker = start("ticker", &["-n", &ns, "attach", "ticker"], None);
    wait_for(n, "attach to print the ticker's output", || {
        ticker.stdout().contains("tick ")
    });
    drop(ticker);
    // stdin stays open until the echo is seen: at the end of an attach's stdin the runtime closes the
    // attach's output too (containerd does, as the kubelet's runtimes do), which could cut the echo.
    let echo_out = cluster().dir().join("attach-echo.out");
    let mut cmd = cluster().kubectl_cmd(0, &["-n", &ns, "attach", "-i", "echo"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::fs::File::create(&echo_out).unwrap())
        .stderr(std::process::Stdio::null());
    let mut echo = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = echo.stdin.take().unwrap();
        stdin.write_all(b"hello through attach\n").unwrap();
        stdin.flush().unwrap();
        let seen = std::time::Instant::now();
        while !std::fs::read_to_string(&echo_out)
            .unwrap_or_default()
            .contains("hello through attach")
        {
            if seen.elapsed() > WAIT {
                let _ = echo.kill();
                let _ = echo.wait();
                fail(n, "attach -i did not echo its stdin");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(stdin);
    }
    let _ = echo.kill();
    let _ = echo.wait();
    assert!(
        grew(&before, "attach,websocket,v5.channel.k8s.io") >= 2,
        "{:?}",
        stream_sessions()
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// An exec quiet for longer than kubectl's WebSocket heartbeat deadline (a ping every 5 s, the
/// session dropped after 61 s without a pong): the agent answers the pings, so it ends normally.
#[test]
fn quiet_exec_outlives_the_websocket_heartbeat_deadline() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("quiet");
    run_busybox(&ns, "q", &[], &["sleep", "3600"]);
    wait_for(n, "pod q running", || running_ready(&pod(&ns, "q")));
    let mut cmd = cluster().kubectl_cmd(
        0,
        &[
            "-n",
            &ns,
            "exec",
            "q",
            "--",
            "sh",
            "-c",
            "sleep 66; echo awake",
        ],
    );
    cmd.envs([("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "true")]);
    let out = keel_testkit::run_bounded(cmd, None, Duration::from_secs(120));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "awake\n"),
        "{}",
        out.stderr
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// The status line containerd's streaming server answers a WebSocket upgrade at `url` offering
/// `protocol`.
fn websocket_probe(url: &str, protocol: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
    )
    .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Why the agent translates: containerd 1.6's streaming server, asked directly (through URLs from CRI
/// `Exec` and `PortForward`), refuses the WebSocket protocols kubectl 1.32 offers (`v5.channel.k8s.io`,
/// `SPDY/3.1+portforward.k8s.io`) and accepts only the older `v4.channel.k8s.io`, which cannot close
/// stdin alone. If a containerd upgrade starts accepting them, this test says so.
#[test]
fn containerd_refuses_the_websocket_protocols_kubectl_offers() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("wsprobe");
    run_busybox(&ns, "p", &[], &["sleep", "3600"]);
    wait_for(n, "pod p running", || running_ready(&pod(&ns, "p")));
    let cid = container_id(&pod(&ns, "p"))
        .trim_start_matches("containerd://")
        .to_string();
    let endpoint = lock(n).containerd().endpoint();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (cri, sandbox) = rt.block_on(async {
        let cri = keel_node_agent::cri::Cri::connect(&endpoint).await.unwrap();
        let sandbox = cri
            .list_sandboxes()
            .await
            .unwrap()
            .into_iter()
            .find(|s| {
                s.labels.get(keel_node_agent::cri::labels::POD_NAMESPACE) == Some(&ns)
                    && s.labels
                        .get(keel_node_agent::cri::labels::POD_NAME)
                        .map(String::as_str)
                        == Some("p")
            })
            .unwrap()
            .id;
        (cri, sandbox)
    });
    let exec = |proto: &str| {
        let url = rt
            .block_on(cri.exec(&cid, vec!["true".into()], false, false, true, true))
            .unwrap();
        websocket_probe(&url, proto)
    };
    let v5 = exec("v5.channel.k8s.io");
    assert!(!v5.contains(" 101 "), "{v5}");
    let v4 = exec("v4.channel.k8s.io");
    assert!(v4.contains(" 101 "), "{v4}");
    let url = rt.block_on(cri.port_forward(&sandbox, vec![8080])).unwrap();
    let tunnel = websocket_probe(&url, "SPDY/3.1+portforward.k8s.io");
    assert!(!tunnel.contains(" 101 "), "{tunnel}");
    eprintln!("containerd: v5 {v5:?}, v4 {v4:?}, port-forward tunnel {tunnel:?}");
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// `kubectl top node` and `kubectl top pod`: metrics.k8s.io served by the API server from the agent's
/// `/stats/summary`, with a busy container using CPU.
#[test]
fn top_shows_node_and_pod_usage() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("top");
    run_busybox(&ns, "busy", &[], &["sh", "-c", "while true; do :; done"]);
    wait_for(n, "pod busy running", || running_ready(&pod(&ns, "busy")));
    let discovery = kubectl(&["api-resources", "--api-group=metrics.k8s.io"]);
    assert!(
        discovery.contains("NodeMetrics") && discovery.contains("PodMetrics"),
        "{discovery}"
    );
    let mut table = String::new();
    wait_for(n, "kubectl top pod with CPU", || {
        let r = kubectl_run(&["-n", &ns, "top", "pod", "busy", "--no-headers"]);
        table = r.stdout.clone();
        // NAME CPU MEMORY, CPU in millicores: a spinning shell uses a good share of a core.
        r.ok && table
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.strip_suffix('m'))
            .and_then(|c| c.parse::<u64>().ok())
            .is_some_and(|m| m >= 50)
    });
    assert!(table.starts_with("busy "), "{table}");
    let node_top = kubectl(&["top", "node", NODE, "--no-headers"]);
    let cols: Vec<&str> = node_top.split_whitespace().collect();
    assert_eq!(cols.first().copied(), Some(NODE), "{node_top}");
    assert!(cols.get(1).is_some_and(|c| c.ends_with('m')), "{node_top}");
    assert!(cols.get(3).is_some_and(|c| c.ends_with("Mi")), "{node_top}");
    let raw: Value = serde_json::from_str(&kubectl(&[
        "get",
        "--raw",
        &format!("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods/busy"),
    ]))
    .unwrap();
    assert_eq!(raw["kind"], "PodMetrics");
    assert_eq!(raw["containers"][0]["name"], "busy");
    let e = cluster().err(
        0,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/nodes/no-such-node",
        ],
    );
    assert!(e.contains("NotFound") || e.contains("not found"), "{e}");
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// securityContext: runAsNonRoot refuses an image that runs as root (CreateContainerConfigError with
/// upstream's message) and accepts an explicit non-root runAsUser, which the container then runs as.
#[test]
fn run_as_non_root_is_enforced() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("nonroot");
    let manifest = |name: &str, sc: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}"}},"spec":{{"securityContext":{sc},
              "containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sh","-c","id -u; sleep 3600"]}}]}}}}"#
        )
    };
    apply(&ns, &manifest("root", r#"{"runAsNonRoot":true}"#));
    apply(
        &ns,
        &manifest(
            "user",
            r#"{"runAsNonRoot":true,"runAsUser":1000,"runAsGroup":1000}"#,
        ),
    );
    wait_for(n, "the root pod refused", || {
        pod(&ns, "root")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    let msg = pod(&ns, "root")["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.starts_with(
            "container has runAsNonRoot and image will run as root (pod: \"root_nonroot("
        ),
        "{msg}"
    );
    wait_for(n, "the user pod running", || {
        running_ready(&pod(&ns, "user"))
    });
    wait_for(n, "its log", || {
        kubectl_run(&["-n", &ns, "logs", "user"]).stdout == "1000\n"
    });
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// Volumes and env from API objects: a configMap and a secret mounted as files, a projected volume with
/// both and the downward API, env from a configMapKeyRef, a fieldRef and `$(VAR)` expansion, an
/// emptyDir shared by two containers.
#[test]
fn volumes_and_env_reach_the_container() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("volumes");
    kubectl(&[
        "-n",
        &ns,
        "create",
        "configmap",
        "cfg",
        "--from-literal=greeting=hello",
        "--from-literal=other=x",
    ]);
    kubectl(&[
        "-n",
        &ns,
        "create",
        "secret",
        "generic",
        "sec",
        "--from-literal=password=s3cret",
    ]);
    // A Service made before the pod: its variables reach the container, as the API server's do.
    kubectl(&[
        "-n",
        &ns,
        "create",
        "service",
        "clusterip",
        "web",
        "--tcp=80:8080",
    ]);
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"vol","labels":{{"tier":"web"}}}},"spec":{{
          "volumes":[
            {{"name":"cfg","configMap":{{"name":"cfg","items":[{{"key":"greeting","path":"g.txt"}}]}}}},
            {{"name":"sec","secret":{{"secretName":"sec"}}}},
            {{"name":"all","projected":{{"sources":[{{"configMap":{{"name":"cfg"}}}},{{"secret":{{"name":"sec"}}}},
              {{"downwardAPI":{{"items":[{{"path":"labels","fieldRef":{{"fieldPath":"metadata.labels"}}}}]}}}}]}}}},
            {{"name":"shared","emptyDir":{{}}}}],
          "containers":[
            {{"name":"main","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sh","-c","sleep 3600"],
              "env":[{{"name":"GREETING","valueFrom":{{"configMapKeyRef":{{"name":"cfg","key":"greeting"}}}}}},
                     {{"name":"POD","valueFrom":{{"fieldRef":{{"fieldPath":"metadata.name"}}}}}},
                     {{"name":"BOTH","value":"$(GREETING)-$(POD)"}},
                     {{"name":"API","value":"$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}}],
              "volumeMounts":[{{"name":"cfg","mountPath":"/cfg"}},{{"name":"sec","mountPath":"/sec"}},
                              {{"name":"all","mountPath":"/all"}},{{"name":"shared","mountPath":"/shared"}}]}},
            {{"name":"writer","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sh","-c","echo from-writer > /shared/f; sleep 3600"],
              "volumeMounts":[{{"name":"shared","mountPath":"/shared"}}]}}]}}}}"#
    );
    apply(&ns, &manifest);
    wait_for(n, "pod vol running", || running_ready(&pod(&ns, "vol")));
    let exec = |cmd: &str| {
        kubectl(&[
            "-n", &ns, "exec", "vol", "-c", "main", "--", "sh", "-c", cmd,
        ])
    };
    assert_eq!(exec("cat /cfg/g.txt"), "hello");
    assert_eq!(exec("cat /sec/password"), "s3cret");
    assert_eq!(exec("cat /all/greeting /all/password"), "hellos3cret");
    assert_eq!(exec("cat /all/labels"), "tier=\"web\"");
    assert_eq!(exec("echo $GREETING $POD $BOTH"), "hello vol hello-vol\n");
    let ip = |ns: &str, name: &str| {
        kubectl(&[
            "-n",
            ns,
            "get",
            "service",
            name,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
    };
    let (api_ip, web_ip) = (ip("default", "kubernetes"), ip(&ns, "web"));
    assert_eq!(exec("echo $API"), format!("{api_ip}:443\n"));
    assert_eq!(
        exec("echo $WEB_SERVICE_HOST $WEB_SERVICE_PORT $WEB_SERVICE_PORT_80_8080 $WEB_PORT"),
        format!("{web_ip} 80 80 tcp://{web_ip}:80\n")
    );
    wait_for(n, "the writer's file", || {
        exec("cat /shared/f 2>/dev/null || true") == "from-writer\n"
    });
    // The ServiceAccount admission's projected volume: a token bound to this pod, the CA, the namespace.
    let sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(exec(&format!("cat {sa_dir}/namespace")), ns);
    assert!(exec(&format!("cat {sa_dir}/ca.crt")).starts_with("-----BEGIN CERTIFICATE-----"));
    let token = exec(&format!("cat {sa_dir}/token"));
    let c = cluster();
    let admin = c.member(0).kubeconfig();
    let ca = admin.parent().unwrap().join("pki").join("ca.crt");
    let whoami = |token: &str| {
        let cache = tempfile::tempdir().unwrap();
        let mut cmd = keel_testkit::kubectl::kubectl_command(
            std::path::Path::new("/dev/null"),
            cache.path(),
            cache.path(),
            &[
                "--server",
                &c.member(0).kube_url(),
                "--certificate-authority",
                ca.to_str().unwrap(),
                "--token",
                token,
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        cmd.env_remove("KUBECONFIG");
        keel_testkit::kubectl::run_kubectl(cmd, None, std::time::Duration::from_secs(30))
    };
    let who = whoami(&token);
    assert_eq!(
        who.stdout,
        format!("system:serviceaccount:{ns}:default"),
        "{}",
        who.stderr
    );
    kubectl(&["-n", &ns, "delete", "pod", "vol", "--wait=true"]);
    let revoked = whoami(&token);
    assert!(!revoked.ok, "a token bound to a deleted pod still works");
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// `activeDeadlineSeconds`: the agent kills the pod's containers once it has been active that long and
/// fails it with upstream's reason, message and Event.
#[test]
fn active_deadline_fails_the_pod() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("deadline");
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"deadline"}},"spec":{{"activeDeadlineSeconds":5,
              "terminationGracePeriodSeconds":2,
              "containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sleep","3600"]}}]}}}}"#
        ),
    );
    wait_for(n, "the pod to fail at its deadline", || {
        pod(&ns, "deadline")["status"]["phase"] == "Failed"
    });
    let p = pod(&ns, "deadline");
    assert_eq!(p["status"]["reason"], "DeadlineExceeded", "{p}");
    assert_eq!(
        p["status"]["message"], "Pod was active on the node longer than the specified deadline",
        "{p}"
    );
    assert_eq!(ready_condition(&p), "False", "{p}");
    let evs = settled_events(&ns);
    assert!(
        evs.iter().any(|e| e
            == "DeadlineExceeded deadline Pod was active on the node longer than the specified deadline"),
        "{evs:#?}"
    );
    // Nothing of it runs any more.
    let cs = &p["status"]["containerStatuses"][0];
    assert!(cs["state"]["running"].is_null(), "{cs}");
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

fn condition(p: &Value, ty: &str) -> Value {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .cloned()
        .unwrap_or_default()
}

/// `readinessGates`: ready containers are not enough; the pod is Ready once the gate's condition, written
/// by someone else through `pods/status`, is True, and the agent keeps that condition.
#[test]
fn readiness_gate_holds_ready_until_its_condition_is_true() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("gates");
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"gated"}},"spec":{{
              "readinessGates":[{{"conditionType":"example.com/lb-ready"}}],
              "containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sleep","3600"]}}]}}}}"#
        ),
    );
    wait_for(n, "the containers to be ready", || {
        condition(&pod(&ns, "gated"), "ContainersReady")["status"] == "True"
    });
    let p = pod(&ns, "gated");
    let ready = condition(&p, "Ready");
    assert_eq!(ready["status"], "False", "{p}");
    assert_eq!(ready["reason"], "ReadinessGatesNotReady", "{p}");
    assert_eq!(
        ready["message"],
        r#"corresponding condition of pod readiness gate "example.com/lb-ready" does not exist."#,
        "{p}"
    );
    let set_gate = |status: &str| {
        let patch = format!(
            r#"{{"status":{{"conditions":[{{"type":"example.com/lb-ready","status":"{status}"}}]}}}}"#
        );
        kubectl(&[
            "-n",
            &ns,
            "patch",
            "pod",
            "gated",
            "--subresource=status",
            "--type=strategic",
            "-p",
            &patch,
        ]);
    };
    set_gate("False");
    wait_for(n, "the gate's False status in Ready's message", || {
        condition(&pod(&ns, "gated"), "Ready")["message"]
            == r#"the status of pod readiness gate "example.com/lb-ready" is not "True", but False"#
    });
    assert_eq!(condition(&pod(&ns, "gated"), "Ready")["status"], "False");
    set_gate("True");
    wait_for(n, "the pod to become Ready", || {
        running_ready(&pod(&ns, "gated"))
    });
    let p = pod(&ns, "gated");
    assert_eq!(
        condition(&p, "example.com/lb-ready")["status"],
        "True",
        "{p}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// The termination message: the file at `terminationMessagePath` in `state.terminated.message` (and in
/// `lastState` after a restart), and the log's tail with `FallbackToLogsOnError` and an empty file.
#[test]
fn termination_message_is_reported() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("termmsg");
    let pod_json = |name: &str, policy: &str, restart: &str, script: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}"}},"spec":{{"restartPolicy":"{restart}",
              "containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never","terminationMessagePolicy":"{policy}",
              "command":["sh","-c","{script}"]}}]}}}}"#
        )
    };
    apply(
        &ns,
        &pod_json(
            "bye",
            "File",
            "Never",
            "printf bye > /dev/termination-log; exit 1",
        ),
    );
    apply(
        &ns,
        &pod_json(
            "tail",
            "FallbackToLogsOnError",
            "Never",
            "echo first; sleep 0.2; echo second >&2; exit 2",
        ),
    );
    apply(
        &ns,
        &pod_json(
            "again",
            "File",
            "Always",
            "printf again > /dev/termination-log; exit 3",
        ),
    );
    wait_for(n, "both pods to fail", || {
        pod(&ns, "bye")["status"]["phase"] == "Failed"
            && pod(&ns, "tail")["status"]["phase"] == "Failed"
    });
    let bye = pod(&ns, "bye");
    assert_eq!(
        bye["status"]["containerStatuses"][0]["state"]["terminated"]["message"], "bye",
        "{bye}"
    );
    let tail = pod(&ns, "tail");
    assert_eq!(
        tail["status"]["containerStatuses"][0]["state"]["terminated"]["message"], "first\nsecond\n",
        "{tail}"
    );
    wait_for(n, "the restarted container's lastState message", || {
        pod(&ns, "again")["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"]
            == "again"
    });
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// The cluster CA's certificate file (the member's `pki/ca.crt`).
fn ca_file() -> std::path::PathBuf {
    cluster()
        .member(0)
        .kubeconfig()
        .parent()
        .unwrap()
        .join("pki/ca.crt")
}

/// A client certificate and key of the cluster CA for `user`, written under `dir` (through `keel
/// kubeconfig`, as an administrator hands one out).
fn user_cert(dir: &std::path::Path, user: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    use base64::Engine;
    let member_dir = cluster()
        .member(0)
        .kubeconfig()
        .parent()
        .unwrap()
        .to_path_buf();
    let kc = dir.join(format!("{user}.kubeconfig"));
    let out = std::process::Command::new(keel_bin!())
        .arg("kubeconfig")
        .arg("--data-dir")
        .arg(&member_dir)
        .args(["--user", user, "--out"])
        .arg(&kc)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&kc).unwrap();
    let field = |name: &str| {
        let line = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(line.trim())
            .unwrap()
    };
    let (crt, key) = (
        dir.join(format!("{user}.crt")),
        dir.join(format!("{user}.key")),
    );
    std::fs::write(&crt, field("client-certificate-data:")).unwrap();
    std::fs::write(&key, field("client-key-data:")).unwrap();
    (crt, key)
}

/// curl to the agent's API, checking its serving certificate against the cluster CA for 127.0.0.1:
/// the HTTP status and body, or status 0 when no HTTP answer came (a refused handshake).
fn agent_call(path: &str, args: &[&str]) -> (u16, String) {
    let port = *AGENT_PORT.get().unwrap();
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "30", "--cacert"])
        .arg(ca_file())
        .args(args)
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn agent_api_serves_a_ca_signed_certificate_and_authorizes_callers() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("agent-authz");
    // The agent asked for its serving certificate with a CSR, which the API server approved and signed.
    wait_for(n, "the agent's serving certificate to be issued", || {
        let csrs = json(&["get", "csr"]);
        csrs["items"].as_array().into_iter().flatten().any(|c| {
            c["spec"]["username"] == format!("system:node:{NODE}")
                && c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                && c["status"]["conditions"][0]["type"] == "Approved"
                && c["status"]["conditions"][0]["reason"] == "AutoApproved"
                && c["status"]["certificate"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
        })
    });
    // ...and serves it: curl checks it against the cluster CA for the node's address.
    let dir = tempfile::tempdir().unwrap();
    // The member's admin certificate (`system:masters`).
    let pki = ca_file().parent().unwrap().to_path_buf();
    let (admin_crt, admin_key) = (pki.join("admin.crt"), pki.join("admin.key"));
    let admin = [
        "--cert",
        admin_crt.to_str().unwrap(),
        "--key",
        admin_key.to_str().unwrap(),
    ];
    wait_for(n, "the agent to serve its issued certificate", || {
        agent_call("/healthz", &admin).0 == 200
    });
    let (code, body) = agent_call("/stats/summary", &admin);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"nodeName\""), "{body}");

    // No credentials: 401. A certificate of another CA: the handshake is refused.
    let (code, body) = agent_call("/stats/summary", &[]);
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other
        .distinguished_name
        .push(rcgen::DnType::CommonName, "mallory");
    other
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    let other = other.self_signed(&other_key).unwrap();
    std::fs::write(dir.path().join("mallory.crt"), other.pem()).unwrap();
    std::fs::write(dir.path().join("mallory.key"), other_key.serialize_pem()).unwrap();
    let (m_crt, m_key) = (
        dir.path().join("mallory.crt"),
        dir.path().join("mallory.key"),
    );
    let mallory = [
        "--cert",
        m_crt.to_str().unwrap(),
        "--key",
        m_key.to_str().unwrap(),
    ];
    assert_eq!(agent_call("/stats/summary", &mallory).0, 0);

    // A user of the cluster CA without RBAC on the node: 403 with the kubelet's message.
    let (crt, key) = user_cert(dir.path(), "nobody-much");
    let nobody = [
        "--cert",
        crt.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let (code, body) = agent_call("/stats/summary", &nobody);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        "Forbidden (user=nobody-much, verb=get, resource=nodes, subresource=stats)"
    );
    let (code, body) = agent_call(&format!("/containerLogs/{ns}/x/y"), &nobody);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource=proxy"), "{body}");

    // Allowed nodes/stats (granted before its first call): stats yes, the proxy subresource no.
    kubectl(&[
        "create",
        "clusterrole",
        "agent-stats-reader",
        "--verb=get",
        "--resource=nodes/stats",
    ]);
    kubectl(&[
        "create",
        "clusterrolebinding",
        "agent-stats-reader",
        "--clusterrole=agent-stats-reader",
        "--user=stats-reader",
    ]);
    let (crt, key) = user_cert(dir.path(), "stats-reader");
    let reader = [
        "--cert",
        crt.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let (code, body) = agent_call("/stats/summary", &reader);
    assert_eq!(code, 200, "{body}");
    let (code, _) = agent_call(&format!("/containerLogs/{ns}/x/y"), &reader);
    assert_eq!(code, 403);

    // Bearer tokens go through TokenReview: a service account's is authenticated (and has no rights
    // on the node), a made-up one is not.
    kubectl(&["-n", &ns, "create", "serviceaccount", "probe"]);
    let token = kubectl(&["-n", &ns, "create", "token", "probe"]);
    let bearer = format!("Authorization: Bearer {}", token.trim());
    let (code, body) = agent_call("/stats/summary", &["-H", &bearer]);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("user=system:serviceaccount:{ns}:probe")),
        "{body}"
    );
    let (code, _) = agent_call(
        "/stats/summary",
        &["-H", "Authorization: Bearer not-a-token"],
    );
    assert_eq!(code, 401);

    // The API server verifies the agent's certificate and is allowed through: kubectl logs works.
    run_busybox(
        &ns,
        "hello",
        &["--restart=Never"],
        &["echo", "hello from the pod"],
    );
    wait_for(n, "pod hello to finish", || {
        pod(&ns, "hello")["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        kubectl(&["-n", &ns, "logs", "hello"]),
        "hello from the pod\n"
    );
    let _ = cluster().kubectl(0, &["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn a_changed_image_restarts_the_container() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("set-image");
    // Another name for the busybox image, so the change is visible without a registry.
    let tagged =
        lock(n)
            .containerd()
            .ctr(&["images", "tag", "--force", BUSYBOX, "localhost/busybox:v2"]);
    assert_eq!(tagged.code, Some(0), "ctr images tag: {}", tagged.stderr);
    apply(
        &ns,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
"#
        ),
    );
    wait_for(n, "pod p running", || running_ready(&pod(&ns, "p")));
    let first = container_id(&pod(&ns, "p"));
    kubectl(&["-n", &ns, "set", "image", "pod/p", "c=localhost/busybox:v2"]);
    wait_for(n, "the container restarted with the new image", || {
        let p = pod(&ns, "p");
        let s = &p["status"]["containerStatuses"][0];
        s["restartCount"] == 1
            && s["state"]["running"].is_object()
            && s["image"] == "localhost/busybox:v2"
            && container_id(&p) != first
    });
    let evs = settled_events(&ns);
    assert!(
        evs.iter()
            .any(|e| e == "Killing p Container c definition changed, will be restarted"),
        "{evs:?}"
    );
    let _ = cluster().kubectl(0, &["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn sidecar_runs_beside_the_main_container() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("sidecar");
    apply(
        &ns,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: shared
    emptyDir: {{}}
  initContainers:
  - name: once
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["sh", "-c", "echo init > /shared/log"]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  - name: side
    image: {BUSYBOX}
    imagePullPolicy: Never
    restartPolicy: Always
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do echo side >> /shared/log; sleep 1; done"]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
"#
        ),
    );
    wait_for(n, "pod p running with its sidecar", || {
        let p = pod(&ns, "p");
        let init = &p["status"]["initContainerStatuses"];
        running_ready(&p)
            && init[0]["state"]["terminated"]["reason"] == "Completed"
            && init[1]["state"]["running"].is_object()
            && init[1]["started"] == true
            && init[1]["ready"] == true
    });
    // The sidecar keeps writing to the volume the main container reads.
    wait_for(n, "the sidecar's lines in the shared volume", || {
        let out = kubectl_run(&[
            "-n",
            &ns,
            "exec",
            "p",
            "-c",
            "main",
            "--",
            "cat",
            "/shared/log",
        ]);
        out.ok && out.stdout.starts_with("init\nside\n") && out.stdout.matches("side").count() >= 2
    });
    // A sidecar that exits is started again while the pod runs.
    kubectl(&["-n", &ns, "exec", "p", "-c", "side", "--", "kill", "1"]);
    wait_for(n, "the sidecar restarted", || {
        let p = pod(&ns, "p");
        let s = &p["status"]["initContainerStatuses"][1];
        s["restartCount"] == 1 && s["state"]["running"].is_object() && running_ready(&p)
    });
    let _ = cluster().kubectl(0, &["delete", "namespace", &ns, "--wait=false"]);
}

/// `fsGroup` owns the agent's volumes and joins the processes' groups; seccomp profiles reach the
/// runtime (the kernel reports filter mode 2 under RuntimeDefault, 0 unconfined); a Localhost profile
/// that is not on the node is refused with the reason.
#[test]
fn fs_group_and_seccomp_reach_the_container() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("fsgroup");
    kubectl(&[
        "-n",
        &ns,
        "create",
        "configmap",
        "cfg",
        "--from-literal=k=v",
    ]);
    let script = "grep Seccomp: /proc/self/status; id -G; stat -c '%g %a' /e; touch /e/new; \
                  stat -c %g /e/new; cat /c/k; echo; sleep 3600";
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p"}},"spec":{{
              "securityContext":{{"runAsUser":1000,"runAsGroup":1000,"fsGroup":2000,"supplementalGroups":[3000],
                                  "seccompProfile":{{"type":"RuntimeDefault"}}}},
              "volumes":[{{"name":"e","emptyDir":{{}}}},{{"name":"c","configMap":{{"name":"cfg","defaultMode":288}}}}],
              "containers":[
                {{"name":"confined","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sh","-c","{script}"],
                  "volumeMounts":[{{"name":"e","mountPath":"/e"}},{{"name":"c","mountPath":"/c"}}]}},
                {{"name":"open","image":"{BUSYBOX}","imagePullPolicy":"Never",
                  "securityContext":{{"seccompProfile":{{"type":"Unconfined"}}}},
                  "command":["sh","-c","grep Seccomp: /proc/self/status; sleep 3600"]}}]}}}}"#
        ),
    );
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"missing"}},"spec":{{
              "containers":[{{"name":"c","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sleep","3600"],
                "securityContext":{{"seccompProfile":{{"type":"Localhost","localhostProfile":"nope.json"}}}}}}]}}}}"#
        ),
    );
    wait_for(n, "the pod running", || running_ready(&pod(&ns, "p")));
    let logs = |c: &str| kubectl_run(&["-n", &ns, "logs", "p", "-c", c]).stdout;
    wait_for(n, "the confined container's report", || {
        logs("confined").lines().count() >= 5
    });
    let out = logs("confined");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["Seccomp:", "2"],
        "{out}"
    );
    let mut groups: Vec<&str> = lines[1].split_whitespace().collect();
    groups.sort_unstable();
    assert_eq!(groups, ["1000", "2000", "3000"], "{out}");
    // The emptyDir belongs to fsGroup with the set-group-id bit, so new files inherit the group.
    assert_eq!(lines[2], "2000 2777", "{out}");
    assert_eq!(lines[3], "2000", "{out}");
    // defaultMode 0440 and root ownership: only the group (fsGroup) lets uid 1000 read the file.
    assert_eq!(lines[4], "v", "{out}");
    wait_for(n, "the unconfined container's report", || {
        !logs("open").is_empty()
    });
    assert_eq!(
        logs("open").split_whitespace().collect::<Vec<_>>(),
        ["Seccomp:", "0"]
    );
    wait_for(n, "the missing profile refused", || {
        pod(&ns, "missing")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    let msg = pod(&ns, "missing")["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("nope.json") && msg.contains("not found"),
        "{msg}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A chatty container's log is rotated by size: at most `--container-log-max-files` files are kept, and
/// `kubectl logs -f` started before a rotation goes on with the lines written after it.
#[test]
fn log_rotation_keeps_the_newest_files() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("rotate");
    // About 100 lines of 100 bytes a second: 32 Ki fills in a few seconds.
    run_busybox(
        &ns,
        "chatty",
        &[],
        &[
            "sh",
            "-c",
            "i=0; while :; do echo \"$i $(printf %090d 0)\"; i=$((i+1)); usleep 10000; done",
        ],
    );
    wait_for(n, "the pod running", || running_ready(&pod(&ns, "chatty")));
    let uid = pod(&ns, "chatty")["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let dir = lock(n)
        .dir()
        .join("pods-logs")
        .join(format!("{ns}_chatty_{uid}"))
        .join("chatty");
    let follower = Background::start(
        cluster(),
        0,
        &["-n", &ns, "logs", "-f", "chatty"],
        "rotate-follow",
    );
    let files = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let first_number = |text: &str| -> Option<u64> {
        text.lines().next()?.split_whitespace().next()?.parse().ok()
    };
    // The follower is attached (it printed) to the live file of this moment; wait for a rotation after
    // that, so the follower must move to the new file to see its lines.
    wait_for(n, "the follower's first lines", || {
        !follower.output().is_empty()
    });
    let ino = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0)
    };
    let attached = ino(&dir.join("0.log"));
    wait_for(n, "a rotation after the follower attached", || {
        let now = ino(&dir.join("0.log"));
        now != 0 && now != attached
    });
    let first_live = |n: &std::sync::Mutex<AgentNode>| {
        let live = std::fs::read_to_string(dir.join("0.log")).unwrap_or_default();
        // CRI log lines: `<time> stdout F <text>`.
        live.lines()
            .next()
            .and_then(|l| l.splitn(4, ' ').nth(3))
            .and_then(first_number)
            .unwrap_or_else(|| fail(n, format!("no line in the live log: {live:?}")))
    };
    let mut after = None;
    wait_for(n, "a line in the new live file", || {
        after = std::fs::read_to_string(dir.join("0.log"))
            .ok()
            .filter(|t| t.contains('\n'))
            .map(|_| first_live(n));
        after.is_some()
    });
    let first_live = after.unwrap_or_default();
    wait_for(n, "the follower past the rotation", || {
        follower
            .output()
            .lines()
            .any(|l| first_number(l).is_some_and(|i| i > first_live))
    });
    wait_for(n, "two rotated files", || files().len() == 3);
    // More rotations never keep more than three files, and `kubectl logs` reads the live one.
    wait_for(n, "another rotation", || {
        files().len() == 3 && ino(&dir.join("0.log")) != attached
    });
    let names = files();
    assert!(names.len() <= 3, "{names:?}");
    assert!(
        names
            .iter()
            .all(|f| f == "0.log" || f.starts_with("0.log.")),
        "{names:?}"
    );
    let tail = kubectl(&["-n", &ns, "logs", "chatty", "--tail=1"]);
    assert!(
        first_number(&tail).is_some_and(|i| i > first_live),
        "{tail:?}"
    );
    drop(follower);
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// Image garbage collection: an image a pod uses is kept; once the pod is gone it is removed, while the
/// local images from `--image-dir` are never collected.
#[test]
fn unused_images_are_collected() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("imagegc");
    const EXTRA: &str = "example.invalid/gc-me:1";
    let archive = lock(n).dir().join("gc-me.tar");
    // busybox under another name, with its own config (so its own image ID).
    let mut def = keel_node_agent::image::oci::busybox_def(std::path::Path::new(
        keel_node_agent::image::oci::BUSYBOX,
    ))
    .unwrap_or_else(|e| fail(n, format!("busybox image: {e}")));
    def.name = EXTRA.into();
    def.cmd = vec!["sleep".into(), "3600".into()];
    keel_node_agent::image::oci::write_archive(&def, &archive)
        .unwrap_or_else(|e| fail(n, format!("writing {}: {e}", archive.display())));
    let ctr = |args: &[&str]| {
        let out = lock(n).containerd().ctr(args);
        assert!(out.success(), "ctr {args:?}: {}", out.stderr);
        out.stdout
    };
    let images = || ctr(&["images", "ls", "-q"]);
    lock(n).containerd().import(&archive);
    let imported = Instant::now();
    assert!(images().lines().any(|l| l == EXTRA), "{}", images());
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"holder"}},"spec":{{
              "terminationGracePeriodSeconds":0,
              "containers":[{{"name":"c","image":"{EXTRA}","imagePullPolicy":"Never"}}]}}}}"#
        ),
    );
    wait_for(n, "the holder running", || {
        running_ready(&pod(&ns, "holder"))
    });
    // Collection runs every second at any usage: in use, the image outlives passes past its minimum
    // age (30 s from the import).
    std::thread::sleep(
        (imported + Duration::from_secs(33)).saturating_duration_since(Instant::now()),
    );
    assert!(images().lines().any(|l| l == EXTRA), "{}", images());
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "pod",
        "holder",
        "--grace-period=0",
        "--force",
    ]);
    wait_for(n, "the unused image collected", || {
        !images().lines().any(|l| l == EXTRA)
    });
    let left = images();
    for local in [BUSYBOX, "localhost/pause:3.10"] {
        assert!(
            left.lines().any(|l| l == local),
            "{local} collected: {left}"
        );
    }
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A sidecar's probes: the app container waits for its startup probe, and its readiness is part of the
/// pod's.
#[test]
fn sidecar_probes_gate_start_and_readiness() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("sideprobe");
    apply(
        &ns,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  terminationGracePeriodSeconds: 0
  initContainers:
  - name: side
    image: {BUSYBOX}
    imagePullPolicy: Never
    restartPolicy: Always
    command: ["sh", "-c", "sleep 4; touch /tmp/up /tmp/ready; while true; do sleep 1; done"]
    startupProbe:
      exec: {{command: ["test", "-f", "/tmp/up"]}}
      periodSeconds: 1
      failureThreshold: 60
    readinessProbe:
      exec: {{command: ["test", "-f", "/tmp/ready"]}}
      periodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["sh", "-c", "while true; do sleep 1; done"]
"#
        ),
    );
    // Until the sidecar's startup probe passes, the main container is not started.
    let mut seen_unstarted = false;
    wait_for(n, "the sidecar started", || {
        let p = pod(&ns, "p");
        let side = &p["status"]["initContainerStatuses"][0];
        let main_running = p["status"]["containerStatuses"][0]["state"]["running"].is_object();
        if side["state"]["running"].is_object() && side["started"] == false {
            seen_unstarted = true;
            assert!(
                !main_running,
                "main started before the sidecar's startup probe: {p}"
            );
        }
        side["started"] == true
    });
    assert!(
        seen_unstarted,
        "the sidecar was never seen running and not yet started"
    );
    wait_for(n, "the pod ready", || running_ready(&pod(&ns, "p")));
    // The sidecar's readiness is the pod's.
    kubectl(&[
        "-n",
        &ns,
        "exec",
        "p",
        "-c",
        "side",
        "--",
        "rm",
        "/tmp/ready",
    ]);
    wait_for(n, "the pod unready with its sidecar", || {
        let p = pod(&ns, "p");
        let ready = condition(&p, "Ready");
        ready["status"] == "False"
            && ready["message"] == "containers with unready status: [side]"
            && p["status"]["initContainerStatuses"][0]["ready"] == false
    });
    kubectl(&[
        "-n",
        &ns,
        "exec",
        "p",
        "-c",
        "side",
        "--",
        "touch",
        "/tmp/ready",
    ]);
    wait_for(n, "the pod ready again", || running_ready(&pod(&ns, "p")));
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A real registry (distribution's `docker-registry`) on loopback behind basic auth: a pod without
/// credentials fails to pull with the registry's refusal; a pod whose service account names a
/// `docker-registry` Secret inherits it (ServiceAccount admission) and the agent pulls with it.
#[test]
fn image_pull_secrets_reach_the_registry() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("pullsecret");
    let dir = lock(n).dir().join("registry");
    std::fs::create_dir_all(&dir).unwrap();
    let htpasswd = std::process::Command::new("htpasswd")
        .args(["-Bbn", "puller", "s3cret"])
        .output()
        .unwrap_or_else(|e| fail(n, format!("htpasswd: {e}")));
    assert!(htpasswd.status.success(), "htpasswd failed");
    std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).unwrap();
    let port = keel_testkit::free_port();
    let registry = format!("127.0.0.1:{port}");
    std::fs::write(
        dir.join("config.yml"),
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {registry}\n\
             auth:\n  htpasswd:\n    realm: keel-test\n    path: {}\n",
            dir.join("data").display(),
            dir.join("htpasswd").display()
        ),
    )
    .unwrap();
    let _server = keel_testkit::process::Process::start(
        std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml")),
        keel_testkit::process::Capture::Log(dir.join("registry.log")),
        None,
    )
    .unwrap_or_else(|e| fail(n, format!("cannot start docker-registry: {e}")));
    // Push busybox there through the worker's containerd, under the registry's name.
    let ctr = |args: &[&str]| {
        let out = lock(n).containerd().ctr(args);
        (out.success(), out.stderr)
    };
    let image = format!("{registry}/keel/busybox:1");
    let (ok, err) = ctr(&["images", "tag", BUSYBOX, &image]);
    assert!(ok, "ctr images tag: {err}");
    let mut pushed = (false, String::new());
    wait_for(n, "busybox pushed to the registry", || {
        pushed = ctr(&[
            "images",
            "push",
            "--plain-http",
            "-u",
            "puller:s3cret",
            &image,
        ]);
        pushed.0
    });
    let (ok, err) = ctr(&["images", "rm", &image]);
    assert!(ok, "ctr images rm: {err}");

    let manifest = |name: &str, sa: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}"}},"spec":{{
              "serviceAccountName":"{sa}","terminationGracePeriodSeconds":0,
              "containers":[{{"name":"c","image":"{image}","imagePullPolicy":"Always","command":["sleep","3600"]}}]}}}}"#
        )
    };
    apply(&ns, &manifest("anonymous", "default"));
    kubectl(&[
        "-n",
        &ns,
        "create",
        "secret",
        "docker-registry",
        "regcred",
        &format!("--docker-server={registry}"),
        "--docker-username=puller",
        "--docker-password=s3cret",
    ]);
    kubectl(&["-n", &ns, "create", "serviceaccount", "puller"]);
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "serviceaccount",
        "puller",
        "-p",
        r#"{"imagePullSecrets":[{"name":"regcred"}]}"#,
    ]);
    apply(&ns, &manifest("authorized", "puller"));
    let p = pod(&ns, "authorized");
    assert_eq!(
        p["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "regcred"}]),
        "inherited from the service account: {p}"
    );
    wait_for(n, "the authorized pod running", || {
        running_ready(&pod(&ns, "authorized"))
    });
    wait_for(n, "the anonymous pull refused", || {
        let s = &pod(&ns, "anonymous")["status"]["containerStatuses"][0]["state"]["waiting"];
        matches!(
            s["reason"].as_str(),
            Some("ErrImagePull" | "ImagePullBackOff")
        )
    });
    let refused = events(&ns)
        .into_iter()
        .find(|e| e.contains("Failed to pull image") && e.contains("anonymous"))
        .unwrap_or_default();
    assert!(
        refused.contains("401 Unauthorized") || refused.contains("authorization failed"),
        "{refused}"
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A deleted pod's last status, as the kubelet writes it before its grace-0 delete: a watcher sees every
/// container terminated with its exit code and `Ready`/`ContainersReady` False before `DELETED`, and
/// `kubectl wait --for=condition=Ready=false` returns.
#[test]
fn deleted_pod_shows_its_final_status() {
    let _turn = shared_turn();
    let n = node();
    let c = cluster();
    let ns = namespace("final-status");
    // Both containers end on SIGTERM, each with its own exit code.
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"f"}},"spec":{{"terminationGracePeriodSeconds":30,
          "containers":[
            {{"name":"three","image":"{BUSYBOX}","imagePullPolicy":"Never",
              "command":["sh","-c","trap 'exit 3' TERM; while true; do sleep 1; done"]}},
            {{"name":"zero","image":"{BUSYBOX}","imagePullPolicy":"Never",
              "command":["sh","-c","trap 'exit 0' TERM; while true; do sleep 1; done"]}}]}}}}"#
    );
    apply(&ns, &manifest);
    wait_for(n, "pod f running", || running_ready(&pod(&ns, "f")));
    let watch = Background::start(
        c,
        0,
        &[
            "-n",
            &ns,
            "get",
            "pod",
            "f",
            "-w",
            "-o",
            "json",
            "--output-watch-events",
        ],
        "final-status-watch",
    );
    let mut waiter = Background::start(
        c,
        0,
        &[
            "-n",
            &ns,
            "wait",
            "--for=condition=Ready=false",
            "pod/f",
            "--timeout=120s",
            "-v=6",
        ],
        "final-status-wait",
    );
    // Both have the pod before it changes: the watch printed it, the waiter opened its watch.
    wait_for(n, "the watch to print the pod", || {
        watch.output().contains("\"ADDED\"")
    });
    wait_for(n, "kubectl wait to watch the pod", || {
        waiter.output().contains("watch=true")
    });
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "pod",
        "f",
        "--grace-period=10",
        "--wait=true",
        "--timeout=90s",
    ]);
    let events = || -> Vec<Value> {
        serde_json::Deserializer::from_str(&watch.output())
            .into_iter::<Value>()
            .map_while(Result::ok)
            .collect()
    };
    wait_for(n, "the watch to see DELETED", || {
        events().iter().any(|e| e["type"] == "DELETED")
    });
    let events = events();
    let deleted = events.iter().position(|e| e["type"] == "DELETED").unwrap();
    let stopped = |p: &Value| {
        let statuses = p["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        statuses.len() == 2
            && statuses.iter().all(|s| !s["state"]["terminated"].is_null())
            && condition(p, "Ready")["status"] == "False"
            && condition(p, "ContainersReady")["status"] == "False"
    };
    let last = events[..deleted]
        .iter()
        .rposition(|e| e["type"] == "MODIFIED" && stopped(&e["object"]))
        .unwrap_or_else(|| {
            fail(
                n,
                format!("no MODIFIED event with the final status before DELETED: {events:#?}"),
            )
        });
    let p = &events[last]["object"];
    assert!(!p["metadata"]["deletionTimestamp"].is_null(), "{p}");
    let code = |name: &str| {
        p["status"]["containerStatuses"]
            .as_array()
            .and_then(|cs| cs.iter().find(|s| s["name"] == name))
            .map(|s| s["state"]["terminated"]["exitCode"].clone())
            .unwrap_or_default()
    };
    assert_eq!(code("three"), 3, "{p}");
    assert_eq!(code("zero"), 0, "{p}");
    assert!(stopped(&events[deleted]["object"]), "{:#}", events[deleted]);
    wait_for(n, "kubectl wait to return", || waiter.exited().is_some());
    let out = waiter.output();
    if waiter.exited() != Some(true) || !out.contains("pod/f condition met") {
        fail(n, format!("kubectl wait: {out}"));
    }
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// RuntimeClasses: a pod of a class runs with the class's handler (containerd's `runc`) and takes its
/// overhead; a class whose handler containerd lacks fails the sandbox with containerd's reason; a pod
/// naming a class that does not exist is refused with the RuntimeClass plugin's 403.
#[test]
fn runtime_classes_pick_the_handler() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("rtclass");
    let classes = r#"
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: plain-runc}
handler: runc
overhead: {podFixed: {cpu: 10m}}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: no-such-runtime}
handler: nope
"#;
    apply(&ns, classes);
    let table = kubectl(&["get", "runtimeclasses"]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["plain-runc", "runc"])),
        "{table}"
    );
    let pod_of = |name: &str, class: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  runtimeClassName: {class}\n  \
             containers: [{{name: c, image: {BUSYBOX}, imagePullPolicy: Never, command: [sleep, \"3600\"]}}]\n"
        )
    };
    apply(&ns, &pod_of("runs", "plain-runc"));
    apply(&ns, &pod_of("stuck", "no-such-runtime"));
    let refused = cluster().kubectl_stdin(
        0,
        &["-n", &ns, "apply", "-f", "-"],
        Some(&pod_of("absent", "not-there")),
    );
    assert!(
        !refused.ok
            && refused.stderr.contains(
                "pods \"absent\" is forbidden: pod rejected: RuntimeClass \"not-there\" not found"
            ),
        "{}",
        refused.stderr
    );
    wait_for(n, "the runc-class pod running", || {
        running_ready(&pod(&ns, "runs"))
    });
    assert_eq!(
        pod(&ns, "runs")["spec"]["overhead"],
        serde_json::json!({"cpu": "10m"})
    );
    wait_for(n, "the sandbox of the unknown handler to fail", || {
        events(&ns).iter().any(|e| {
            e.starts_with("FailedCreatePodSandBox stuck Failed to create pod sandbox:")
                && e.contains("no runtime for \"nope\" is configured")
        })
    });
    assert_eq!(pod(&ns, "stuck")["status"]["phase"], "Pending");
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    kubectl(&["delete", "runtimeclass", "plain-runc", "no-such-runtime"]);
}

/// The HorizontalPodAutoscaler, end to end: `kubectl autoscale` (autoscaling/v1) on a Deployment whose
/// pods burn CPU, measured through keel's metrics API from this agent's stats; the controller on the Raft
/// leader scales it 1 → 3 (the max), then back to 1 once the load stops and the (shortened) scale-down
/// window has passed. kubectl shows the targets as upstream prints them, in both API versions.
#[test]
fn hpa_scales_a_cpu_burning_deployment_up_and_back_down() {
    let _turn = shared_turn();
    let n = node();
    let ns = namespace("hpa");
    // Each pod burns up to its 200m limit against a 50m request (400 % of it) until /tmp/stop exists.
    apply(
        &ns,
        &format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"burn"}},"spec":{{"replicas":1,
              "selector":{{"matchLabels":{{"app":"burn"}}}},"template":{{"metadata":{{"labels":{{"app":"burn"}}}},
              "spec":{{"terminationGracePeriodSeconds":0,"containers":[{{"name":"burn","image":"{BUSYBOX}","imagePullPolicy":"Never",
              "command":["sh","-c","while [ ! -f /tmp/stop ]; do :; done; exec sleep 3600"],
              "resources":{{"requests":{{"cpu":"50m"}},"limits":{{"cpu":"200m"}}}}}}]}}}}}}}}"#
        ),
    );
    let out = kubectl(&[
        "-n",
        &ns,
        "autoscale",
        "deployment",
        "burn",
        "--cpu-percent=50",
        "--min=1",
        "--max=3",
    ]);
    assert_eq!(
        out.trim(),
        "horizontalpodautoscaler.autoscaling/burn autoscaled"
    );
    // A shorter scale-down window than the default five minutes, through v2.
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "hpa",
        "burn",
        "--type=merge",
        "-p",
        r#"{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":15}}}}"#,
    ]);
    let v2 = json(&["-n", &ns, "get", "hpa", "burn"]);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        50
    );
    assert_eq!(
        v2["spec"]["behavior"]["scaleUp"]["policies"][0],
        serde_json::json!({"type": "Pods", "value": 4, "periodSeconds": 15})
    );
    let replicas = || {
        json(&["-n", &ns, "get", "deployment", "burn"])["spec"]["replicas"]
            .as_i64()
            .unwrap_or(0)
    };
    let wait_long = |what: &str, check: &mut dyn FnMut() -> bool| {
        // Up to three syncs (15 s each), the metrics' window and the scale-down window, with room for
        // a loaded machine.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(240) {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        fail(n, format!("timed out waiting for {what}"))
    };
    wait_long("the HPA to scale burn to 3", &mut || replicas() == 3);
    let mut row = String::new();
    wait_long("kubectl get hpa to show the CPU above target", &mut || {
        row = kubectl(&["-n", &ns, "get", "hpa", "burn", "--no-headers"]);
        // NAME REFERENCE TARGETS ("cpu: N%/50%", two words) MINPODS MAXPODS REPLICAS AGE
        let cols: Vec<&str> = row.split_whitespace().collect();
        cols.get(3)
            .and_then(|t| t.split_once("%/"))
            .and_then(|(n, _)| n.parse::<u64>().ok())
            .is_some_and(|u| u > 50)
            && cols.get(4) == Some(&"1")
            && cols.get(5) == Some(&"3")
            && cols.get(6) == Some(&"3")
    });
    assert!(row.starts_with("burn "), "{row}");
    assert!(row.contains("Deployment/burn"), "{row}");
    assert!(row.contains("/50%"), "{row}");
    wait_long("the SuccessfulRescale Event", &mut || {
        events(&ns).iter().any(|e| {
            e.starts_with("SuccessfulRescale burn New size: 3; reason: cpu resource utilization (percentage of request) above target")
        })
    });
    let status = json(&["-n", &ns, "get", "hpa", "burn"])["status"].clone();
    let condition = |t: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t).cloned())
            .unwrap_or_default()
    };
    assert_eq!(condition("AbleToScale")["status"], "True", "{status}");
    assert_eq!(
        condition("ScalingActive")["reason"],
        "ValidMetricFound",
        "{status}"
    );
    assert!(status["lastScaleTime"].is_string(), "{status}");
    // The same object through autoscaling/v1: the CPU target in its field, behavior in the annotation.
    let v1 = json(&[
        "-n",
        &ns,
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "burn",
    ]);
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert!(
        v1["status"]["currentCPUUtilizationPercentage"].is_i64(),
        "{v1}"
    );
    assert!(
        v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/behavior"]
            .as_str()
            .is_some_and(|b| b.contains("\"StabilizationWindowSeconds\":15")),
        "{v1}"
    );

    // The load stops: every pod leaves its loop.
    wait_for(n, "all three pods running", || {
        let ps = pods(&ns, "app=burn");
        ps.len() == 3 && ps.iter().all(running_ready)
    });
    for p in pods(&ns, "app=burn") {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        kubectl(&["-n", &ns, "exec", &name, "--", "touch", "/tmp/stop"]);
    }
    wait_long("the HPA to scale burn back to 1", &mut || replicas() == 1);
    wait_long("the scale-down Event", &mut || {
        events(&ns).iter().any(|e| {
            e.starts_with("SuccessfulRescale burn New size: 1; reason: All metrics below target")
        })
    });
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
