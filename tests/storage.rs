//! Persistent storage for real: a 3-member keel, one `keel agent` on a private containerd (started by
//! the test under its own directory) with its local-path provisioner, and the real kubectl. A
//! StatefulSet keeps its data across a pod's replacement and a scale down and up, and its claims,
//! volumes and directories go with it; a static hostPath volume is bound by label and protected while
//! a pod uses its claim; claims nothing satisfies and bad claims are answered as upstream answers them;
//! a burst of claims survives kill -9 of the Raft leader, and provisioning survives kill -9 of the
//! agent, each claim with exactly one volume and one directory.
//!
//! One cluster for the binary: the steps run in order in one test, as a user's session would.
//! Needs root (containerd, runc, CNI, tmpfs) as CI has.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use keel_testkit::agent::{AgentNode, BUSYBOX};
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::kubectl::Run;
use serde_json::Value;

const NODE: &str = "keel-storage-0";
const POD_CIDR: &str = "10.42.9.0/24";
const WAIT: Duration = Duration::from_secs(120);

/// The worker and the cluster; the worker goes first (fields drop in order).
struct Env {
    node: AgentNode,
    c: KubeCluster,
    /// The member kubectl talks to (moved off a member while it is down).
    via: usize,
}

impl Env {
    fn start() -> Env {
        let c = KubeCluster::start(keel_bin!(), 3);
        let dir = c.dir().join("worker");
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("node.kubeconfig");
        let member_dir = c.member(0).kubeconfig().parent().unwrap().to_path_buf();
        keel_testkit::agent::node_kubeconfig(keel_bin!().as_ref(), &member_dir, NODE, &kubeconfig);
        let node = AgentNode::start(
            keel_bin!().as_ref(),
            &dir,
            NODE,
            &kubeconfig,
            POD_CIDR,
            &[
                "--disable-kube-proxy",
                "--disable-dns",
                "--disable-ingress",
                "--address",
                "127.0.0.1",
                "--port",
                &keel_testkit::free_port().to_string(),
                "--node-ip",
                "127.0.0.1",
            ],
        );
        let env = Env { node, c, via: 0 };
        env.wait("the node to be Ready", || {
            env.get(
                &["node", NODE],
                "{.status.conditions[?(@.type==\"Ready\")].status}",
            ) == "True"
        });
        env
    }

    /// Where the agent's local-path volumes are.
    fn storage(&self) -> PathBuf {
        self.node.dir().join("agent").join("storage")
    }

    /// The volume directories on the node whose names contain `part`.
    fn dirs(&self, part: &str) -> BTreeSet<String> {
        std::fs::read_dir(self.storage())
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains(part))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Run {
        self.c.kubectl_stdin(self.via, args, stdin)
    }

    fn ok(&self, args: &[&str]) -> String {
        self.ok_stdin(args, None)
    }

    fn ok_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.c.ok_stdin_retrying(self.via, args, stdin)
    }

    fn err(&self, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.run(args, stdin);
        if r.ok {
            self.fail(format!("kubectl {args:?} succeeded: {}", r.stdout));
        }
        r.stderr
    }

    fn get(&self, what: &[&str], jsonpath: &str) -> String {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        let jp = format!("jsonpath={jsonpath}");
        args.extend_from_slice(&["-o", &jp]);
        let r = self.run(&args, None);
        if r.ok {
            r.stdout.trim().to_string()
        } else {
            String::new()
        }
    }

    fn json(&self, what: &[&str]) -> Value {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    fn items(&self, what: &[&str]) -> Vec<Value> {
        self.json(what)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn wait(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        self.fail(format!("timed out after {WAIT:?} waiting for {what}"))
    }

    fn fail(&self, msg: impl std::fmt::Display) -> ! {
        let events = self
            .run(
                &[
                    "get",
                    "events",
                    "-A",
                    "--sort-by=.metadata.creationTimestamp",
                ],
                None,
            )
            .stdout;
        let claims = self.run(&["get", "pvc,pv", "-A"], None).stdout;
        self.c.fail(format!(
            "{msg}\n--- claims and volumes:\n{claims}\n--- events:\n{events}\n{}",
            self.node.log_tails(60)
        ))
    }

    /// Waits until `ns` has `expected` claims, all Bound.
    fn all_bound(&self, ns: &str, expected: usize) {
        self.wait(&format!("{expected} Bound claims in {ns}"), || {
            let claims = self.items(&["pvc", "-n", ns]);
            claims.len() == expected && claims.iter().all(|c| c["status"]["phase"] == "Bound")
        });
    }

    /// The local-path volumes bound to claims of `ns`, checked one per claim (claimRef uid and the
    /// claim's volumeName agree).
    fn one_volume_per_claim(&self, ns: &str) -> usize {
        let claims = self.items(&["pvc", "-n", ns]);
        let volumes: Vec<Value> = self
            .items(&["pv"])
            .into_iter()
            .filter(|v| v["spec"]["claimRef"]["namespace"] == ns)
            .collect();
        assert_eq!(volumes.len(), claims.len(), "one volume per claim in {ns}");
        let uids: BTreeSet<&str> = volumes
            .iter()
            .map(|v| v["spec"]["claimRef"]["uid"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            uids.len(),
            claims.len(),
            "every volume names a different claim"
        );
        for c in &claims {
            let uid = c["metadata"]["uid"].as_str().unwrap();
            let volume = c["spec"]["volumeName"].as_str().unwrap();
            assert_eq!(volume, format!("pvc-{uid}"));
            assert!(uids.contains(uid));
        }
        assert_eq!(
            self.dirs(&format!("_{ns}_")).len(),
            claims.len(),
            "one directory per claim in {ns}"
        );
        claims.len()
    }
}

fn statefulset(ns: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: {ns}}}
spec:
  serviceName: db
  replicas: 3
  podManagementPolicy: Parallel
  persistentVolumeClaimRetentionPolicy: {{whenDeleted: Delete, whenScaled: Retain}}
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      terminationGracePeriodSeconds: 0
      securityContext: {{fsGroup: 2000}}
      containers:
      - name: c
        image: {BUSYBOX}
        command: [sh, -c, 'n=$(cat /data/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/count; echo "$(hostname) $n" >> /data/log; exec sleep 3600']
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 64Mi}}}}}}
"#
    )
}

fn running(env: &Env, ns: &str, selector: &str, n: usize) -> bool {
    let pods = env.items(&["pods", "-n", ns, "-l", selector]);
    pods.len() == n
        && pods.iter().all(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
}

fn claim_uids(env: &Env, ns: &str) -> BTreeSet<String> {
    env.items(&["pvc", "-n", ns])
        .iter()
        .map(|c| c["metadata"]["uid"].as_str().unwrap_or("").to_string())
        .collect()
}

fn claims_yaml(ns: &str, prefix: &str, n: usize) -> String {
    let mut items = Vec::new();
    for i in 0..n {
        items.push(format!(
            r#"{{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
              "metadata": {{"name": "{prefix}-{i}", "namespace": "{ns}",
                            "annotations": {{"volume.kubernetes.io/selected-node": "{NODE}"}}}},
              "spec": {{"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                        "resources": {{"requests": {{"storage": "8Mi"}}}}}}}}"#
        ));
    }
    format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [{}]}}"#,
        items.join(",")
    )
}

#[test]
fn storage_walk() {
    keel_testkit::kubectl::require_kubectl();
    let mut env = Env::start();

    let explained = env.ok(&["explain", "pvc.spec.volumeName"]);
    assert!(
        explained.contains("KIND:       PersistentVolumeClaim"),
        "{explained}"
    );
    // The default class, as `keel up` users get it.
    let classes = env.ok(&["get", "storageclass"]);
    assert!(
        classes.contains("local-path (default)")
            && classes.contains("keel.io/local-path")
            && classes.contains("WaitForFirstConsumer"),
        "{classes}"
    );

    csi_kinds(&env);
    stateful_set_keeps_its_data(&env);
    static_volumes_bind_by_label_and_are_protected(&env);
    unsatisfiable_and_bad_claims(&env);
    memory_ephemeral_and_sub_paths(&env);
    leader_killed_during_a_burst(&mut env);
    agent_killed_while_provisioning(&mut env);

    // Released local-path volumes go, directories first.
    for ns in ["burst", "crash"] {
        env.ok(&["delete", "namespace", ns, "--wait=false"]);
    }
    env.wait("the burst and crash volumes and directories to go", || {
        env.items(&["pv"]).iter().all(|v| {
            let ns = v["spec"]["claimRef"]["namespace"].as_str().unwrap_or("");
            ns != "burst" && ns != "crash"
        }) && env.dirs("_burst_").is_empty()
            && env.dirs("_crash_").is_empty()
    });
}

/// The `storage.k8s.io` kinds a CSI driver registers are served with upstream's defaults and rules.
fn csi_kinds(env: &Env) {
    let yaml = r#"apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: hostpath.csi.example.com}
spec: {}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: keel-storage-0}
spec:
  drivers: [{name: hostpath.csi.example.com, nodeID: keel-storage-0, topologyKeys: [kubernetes.io/hostname]}]
"#;
    env.ok_stdin(&["apply", "-f", "-"], Some(yaml));
    let driver = env.ok(&["get", "csidriver", "hostpath.csi.example.com"]);
    assert!(
        driver.contains("ATTACHREQUIRED")
            && driver.contains("true")
            && driver.contains("Persistent"),
        "{driver}"
    );
    assert_eq!(
        env.get(&["csinode", NODE], "{.spec.drivers[0].nodeID}"),
        NODE
    );
    let bad = "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: va}\nspec: {attacher: hostpath.csi.example.com, nodeName: keel-storage-0, source: {}}\n";
    let e = env.err(&["apply", "-f", "-"], Some(bad));
    assert!(
        e.contains("spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"),
        "{e}"
    );
    env.ok(&["delete", "csidriver", "hostpath.csi.example.com"]);
    env.ok(&["delete", "csinode", NODE]);
}

fn stateful_set_keeps_its_data(env: &Env) {
    let ns = "sts";
    env.ok(&["create", "namespace", ns]);
    env.ok_stdin(&["apply", "-f", "-"], Some(&statefulset(ns)));
    env.wait("3 pods running", || running(env, ns, "app=db", 3));
    env.all_bound(ns, 3);
    let names: BTreeSet<String> = env
        .items(&["pvc", "-n", ns])
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["data-db-0", "data-db-1", "data-db-2"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    for c in env.items(&["pvc", "-n", ns]) {
        assert_eq!(
            c["spec"]["storageClassName"], "local-path",
            "the default class"
        );
        assert_eq!(c["metadata"]["labels"]["app"], "db");
        assert_eq!(
            c["metadata"]["ownerReferences"][0]["kind"], "StatefulSet",
            "whenDeleted: Delete"
        );
        assert!(c["metadata"]["finalizers"]
            .to_string()
            .contains("kubernetes.io/pvc-protection"));
        assert_eq!(
            c["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
            NODE
        );
    }
    assert_eq!(env.one_volume_per_claim(ns), 3);
    let pv = env
        .items(&["pv"])
        .into_iter()
        .find(|v| v["spec"]["claimRef"]["name"] == "data-db-1")
        .unwrap();
    assert_eq!(pv["status"]["phase"], "Bound");
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
        "keel.io/local-path"
    );
    assert_eq!(
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
            ["values"][0],
        NODE
    );
    let printed = env.ok(&["get", "pvc", "-n", ns, "data-db-1"]);
    assert!(
        printed.contains("Bound") && printed.contains("64Mi") && printed.contains("RWO"),
        "{printed}"
    );
    // fsGroup owns the volume's root.
    let dir = env
        .storage()
        .join(env.dirs("_sts_data-db-1").into_iter().next().unwrap());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().gid(), 2000);

    let log = |pod: &str| env.ok(&["exec", "-n", ns, pod, "--", "cat", "/data/log"]);
    assert_eq!(log("db-1").trim(), "db-1 1");
    let uid = env.get(&["pod", "-n", ns, "db-1"], "{.metadata.uid}");
    env.ok(&["delete", "pod", "-n", ns, "db-1", "--wait=false"]);
    env.wait("db-1 to come back", || {
        let now = env.get(
            &["pod", "-n", ns, "db-1"],
            "{.metadata.uid} {.status.phase}",
        );
        now.ends_with("Running") && !now.starts_with(&uid)
    });
    assert_eq!(
        log("db-1").trim(),
        "db-1 1\ndb-1 2",
        "the new pod read what the old one wrote"
    );
    assert_eq!(
        env.get(&["pod", "-n", ns, "db-1"], "{.spec.nodeName}"),
        NODE
    );

    let before = claim_uids(env, ns);
    env.ok(&["scale", "statefulset", "-n", ns, "db", "--replicas=1"]);
    env.wait("the set to scale to 1", || running(env, ns, "app=db", 1));
    assert_eq!(
        claim_uids(env, ns),
        before,
        "whenScaled: Retain keeps the claims"
    );
    env.ok(&["scale", "statefulset", "-n", ns, "db", "--replicas=3"]);
    env.wait("the set to scale back to 3", || {
        running(env, ns, "app=db", 3)
    });
    assert_eq!(
        claim_uids(env, ns),
        before,
        "the same claims are used again"
    );
    assert_eq!(log("db-2").trim(), "db-2 1\ndb-2 2");

    env.ok(&["delete", "statefulset", "-n", ns, "db", "--wait=false"]);
    env.wait(
        "the claims, volumes and directories to go with the set",
        || {
            env.items(&["pvc", "-n", ns]).is_empty()
                && env
                    .items(&["pv"])
                    .iter()
                    .all(|v| v["spec"]["claimRef"]["namespace"] != ns)
                && env.dirs("_sts_").is_empty()
        },
    );
}

fn static_volumes_bind_by_label_and_are_protected(env: &Env) {
    let ns = "static";
    let path = env.c.dir().join("static-volume");
    env.ok(&["create", "namespace", ns]);
    let yaml = format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: site-static, labels: {{tier: gold}}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  hostPath: {{path: {path}, type: DirectoryOrCreate}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: site-other, labels: {{tier: bronze}}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  hostPath: {{path: {path}-other}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: gold, namespace: {ns}}}
spec:
  storageClassName: ""
  accessModes: [ReadWriteOnce]
  selector: {{matchLabels: {{tier: gold}}}}
  resources: {{requests: {{storage: 100Mi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: user, namespace: {ns}}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sh, -c, 'echo kept > /site/file; exec sleep 3600']
    volumeMounts: [{{name: site, mountPath: /site}}]
  volumes: [{{name: site, persistentVolumeClaim: {{claimName: gold}}}}]
"#,
        path = path.display()
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&yaml));
    env.all_bound(ns, 1);
    assert_eq!(
        env.get(&["pvc", "-n", ns, "gold"], "{.spec.volumeName}"),
        "site-static"
    );
    assert_eq!(
        env.get(&["pv", "site-other"], "{.status.phase}"),
        "Available"
    );
    env.wait("the pod to run", || running(env, ns, "!nothing", 1));
    env.wait("the pod's file on the volume", || {
        std::fs::read_to_string(path.join("file")).is_ok_and(|s| s == "kept\n")
    });
    let described = env.ok(&["describe", "pvc", "-n", ns, "gold"]);
    assert!(
        described.contains("site-static")
            && described.contains("Used By:")
            && described.contains("user"),
        "{described}"
    );
    env.ok(&["delete", "pvc", "-n", ns, "gold", "--wait=false"]);
    // pvc-protection: the claim is only marked while the pod uses it.
    for _ in 0..3 {
        let shown = env.ok(&["get", "pvc", "-n", ns, "gold"]);
        assert!(shown.contains("Terminating"), "{shown}");
        env.ok(&["exec", "-n", ns, "user", "--", "cat", "/site/file"]);
    }
    env.ok(&["delete", "pod", "-n", ns, "user"]);
    env.wait("the claim to go once its pod is gone", || {
        env.items(&["pvc", "-n", ns]).is_empty()
    });
    env.wait("the volume to be Released and kept (Retain)", || {
        env.get(&["pv", "site-static"], "{.status.phase}") == "Released"
    });
    assert!(path.join("file").exists());
    env.ok(&["delete", "pv", "site-static", "site-other"]);
}

fn unsatisfiable_and_bad_claims(env: &Env) {
    let ns = "lonely";
    env.ok(&["create", "namespace", ns]);
    env.ok(&[
        "create",
        "quota",
        "-n",
        ns,
        "disk",
        "--hard=requests.storage=6Gi,persistentvolumeclaims=5",
    ]);
    env.wait("the quota's status", || {
        env.get(
            &["quota", "-n", ns, "disk"],
            "{.status.hard.requests\\.storage}",
        ) == "6Gi"
    });
    let yaml = format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: nothing-fits, namespace: {ns}}}
spec:
  storageClassName: ""
  accessModes: [ReadWriteMany]
  resources: {{requests: {{storage: 5Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: waiting, namespace: {ns}}}
spec:
  containers: [{{name: c, image: {BUSYBOX}, command: [sleep, "3600"]}}]
  volumes: [{{name: v, persistentVolumeClaim: {{claimName: nothing-fits}}}}]
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: far-away}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  local: {{path: /nonexistent}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [no-such-node]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: far, namespace: {ns}}}
spec:
  storageClassName: ""
  volumeName: far-away
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: pinned-elsewhere, namespace: {ns}}}
spec:
  containers: [{{name: c, image: {BUSYBOX}, command: [sleep, "3600"]}}]
  volumes: [{{name: v, persistentVolumeClaim: {{claimName: far}}}}]
"#
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&yaml));
    env.wait("the FailedBinding event", || {
        env.c
            .event_messages(env.via, ns, "nothing-fits", "FailedBinding")
            .iter()
            .any(|m| {
                m == "no persistent volumes available for this claim and no storage class is set"
            })
    });
    assert_eq!(
        env.get(&["pvc", "-n", ns, "nothing-fits"], "{.status.phase}"),
        "Pending"
    );
    env.wait("FailedScheduling for the unbound claim", || {
        env.c
            .event_messages(env.via, ns, "waiting", "FailedScheduling")
            .iter()
            .any(|m| {
                m.contains(
                    "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
                )
            })
    });
    env.wait("the claim naming its volume to be Bound", || {
        env.get(&["pvc", "-n", ns, "far"], "{.status.phase}") == "Bound"
    });
    env.wait("FailedScheduling for the volume on another node", || {
        env.c
            .event_messages(env.via, ns, "pinned-elsewhere", "FailedScheduling")
            .iter()
            .any(|m| m.contains("1 node(s) had volume node affinity conflict"))
    });

    // The quota counts both claims' requests; one more gigabyte is refused.
    env.wait("the quota to count the claims", || {
        env.get(
            &["quota", "-n", ns, "disk"],
            "{.status.used.requests\\.storage}",
        ) == "6Gi"
    });
    let more = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: more, namespace: {ns}}}\nspec: {{storageClassName: local-path, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n"
    );
    let e = env.err(&["apply", "-f", "-"], Some(&more));
    assert!(
        e.contains(r#"persistentvolumeclaims "more" is forbidden: exceeded quota: disk, requested: requests.storage=1Gi, used: requests.storage=6Gi, limited: requests.storage=6Gi"#),
        "{e}"
    );
    // A Bound claim whose class does not allow expansion does not grow.
    let e = env.err(
        &[
            "patch",
            "pvc",
            "-n",
            ns,
            "far",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
        ],
        None,
    );
    assert!(
        e.contains("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"),
        "{e}"
    );
    let bad = format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: bad, namespace: {ns}}}
spec:
  accessModes: [ReadWriteSometimes]
  resources: {{requests: {{storage: "0"}}}}
"#
    );
    let e = env.err(&["apply", "-f", "-"], Some(&bad));
    assert!(
        e.contains(r#"PersistentVolumeClaim "bad" is invalid"#)
            && e.contains(r#"spec.accessModes: Unsupported value: "ReadWriteSometimes": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod""#)
            && e.contains(r#"spec.resources[storage]: Invalid value: "0": must be greater than zero"#),
        "{e}"
    );
    // A pod placed by hand on the node, its claim missing: the agent waits with the kubelet's Event.
    let placed = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: placed, namespace: {ns}}}\nspec: {{nodeName: {NODE}, containers: [{{name: c, image: {BUSYBOX}, command: [sleep, '3600']}}], volumes: [{{name: data, persistentVolumeClaim: {{claimName: missing}}}}]}}\n"
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&placed));
    env.wait("the FailedMount event", || {
        env.c.event_messages(env.via, ns, "placed", "FailedMount").iter().any(|m| {
            m == &format!("Unable to attach or mount volumes: unmounted volumes=[data], failed to process volumes=[data]: error processing PVC {ns}/missing: failed to fetch PVC from API server: persistentvolumeclaims \"missing\" not found")
        })
    });
    assert_eq!(
        env.get(&["pod", "-n", ns, "placed"], "{.status.phase}"),
        "Pending",
        "the pod waits for its claim"
    );
    env.ok(&["delete", "namespace", ns, "--wait=false"]);
    env.ok(&["delete", "pv", "far-away", "--wait=false"]);
}

fn memory_ephemeral_and_sub_paths(env: &Env) {
    let ns = "scratch";
    env.ok(&["create", "namespace", ns]);
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: eph, namespace: {ns}}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sleep, "3600"]
    env: [{{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
    volumeMounts:
    - {{name: mem, mountPath: /mem}}
    - {{name: scratch, mountPath: /scratch, subPathExpr: "logs/$(POD)"}}
  volumes:
  - name: mem
    emptyDir: {{medium: Memory, sizeLimit: 16Mi}}
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 8Mi}}}}}}
"#
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&yaml));
    env.wait("the pod with memory and ephemeral volumes to run", || {
        running(env, ns, "!nothing", 1)
    });
    let claim = env.json(&["pvc", "-n", ns, "eph-scratch"]);
    assert_eq!(claim["metadata"]["ownerReferences"][0]["kind"], "Pod");
    assert_eq!(claim["status"]["phase"], "Bound");
    let mounts = env.ok(&["exec", "-n", ns, "eph", "--", "cat", "/proc/mounts"]);
    let mem = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some("/mem"))
        .unwrap_or("");
    assert!(
        mem.starts_with("tmpfs ") && mem.contains("size=16384k"),
        "{mounts}"
    );
    env.ok(&[
        "exec",
        "-n",
        ns,
        "eph",
        "--",
        "sh",
        "-c",
        "echo hi > /scratch/f",
    ]);
    let dir = env
        .storage()
        .join(env.dirs("_scratch_eph-scratch").into_iter().next().unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.join("logs/eph/f")).unwrap(),
        "hi\n"
    );
    env.ok(&["delete", "pod", "-n", ns, "eph"]);
    env.wait(
        "the ephemeral claim, its volume and directory to go with the pod",
        || env.items(&["pvc", "-n", ns]).is_empty() && env.dirs("_scratch_").is_empty(),
    );
}

fn leader_killed_during_a_burst(env: &mut Env) {
    let ns = "burst";
    env.ok(&["create", "namespace", ns]);
    let leader = env.c.cluster_mut().wait_leader(WAIT);
    env.via = (leader + 1) % 3;
    env.ok_stdin(&["apply", "-f", "-"], Some(&claims_yaml(ns, "c", 50)));
    env.c.cluster_mut().kill9(leader);
    env.c.cluster_mut().restart(leader);
    env.all_bound(ns, 50);
    assert_eq!(env.one_volume_per_claim(ns), 50);
    env.via = 0;
}

fn agent_killed_while_provisioning(env: &mut Env) {
    let ns = "crash";
    env.ok(&["create", "namespace", ns]);
    // A provisioning cut short after its directory was made: the directory is there, no volume yet.
    env.node.kill9_agent();
    env.ok_stdin(&["apply", "-f", "-"], Some(&claims_yaml(ns, "c", 10)));
    env.wait(
        "the PV controller to hand the claims to the provisioner",
        || {
            env.items(&["pvc", "-n", ns]).iter().all(|c| {
                c["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"]
                    == "keel.io/local-path"
            })
        },
    );
    let uid = env.get(&["pvc", "-n", ns, "c-0"], "{.metadata.uid}");
    let half_done = env.storage().join(format!("pvc-{uid}_{ns}_c-0"));
    std::fs::create_dir_all(&half_done).unwrap();
    std::fs::write(half_done.join("marker"), b"made before the crash").unwrap();
    // And a kill -9 in the middle of the next burst of provisioning.
    env.node.spawn_agent();
    env.wait("the first volume", || {
        env.items(&["pv"])
            .iter()
            .any(|v| v["spec"]["claimRef"]["namespace"] == ns)
    });
    env.node.kill9_agent();
    env.node.spawn_agent();
    env.all_bound(ns, 10);
    assert_eq!(env.one_volume_per_claim(ns), 10);
    assert!(
        half_done.join("marker").exists(),
        "the half-made directory was used, not made again"
    );
}
