//! The deployment and replicaset controllers on a 3-member cluster, driven with the real kubectl. No
//! kubelet runs: the tests report pods Ready themselves (`keel_testkit::pods`). One cluster is shared by
//! every test of this file; each test keeps to its own namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::{Background, KubeCluster};
use keel_testkit::pods::{report_all, Report};

const WAIT: Duration = Duration::from_secs(60);

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Names of the live (not terminating) pods in `ns` matching `selector`.
fn pods(c: &KubeCluster, ns: &str, selector: &str) -> Vec<String> {
    let out = c.ok(0, &["get", "pods", "-n", ns, "-l", selector, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// `kubectl args` on member `i`, retried while the cluster answers that it is between leaders (a
/// loaded machine can trigger an election; clients are expected to retry that answer).
fn ok_retrying(c: &KubeCluster, i: usize, args: &[&str]) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = c.kubectl(i, args);
        if r.ok {
            return r.stdout;
        }
        let transient = r.stderr.contains("cluster is unavailable") || r.stderr.contains("leader");
        if !transient || std::time::Instant::now() > deadline {
            c.fail(format!("kubectl {args:?} failed: {}", r.stderr));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn jsonpath(c: &KubeCluster, ns: &str, what: &str, path: &str) -> String {
    c.ok(
        0,
        &["get", what, "-n", ns, "-o", &format!("jsonpath={path}")],
    )
}

fn namespace(c: &KubeCluster, ns: &str) {
    c.ok(0, &["create", "namespace", ns]);
}

/// Reports every pod matching `selector` in `ns` Ready, as their kubelet would. A pod the controllers
/// delete between the list and the patch (404) makes it go round again.
fn ready(c: &KubeCluster, ns: &str, selector: &str) -> usize {
    rt().block_on(async {
        let client = c.client(0).await;
        for _ in 0..10 {
            match report_all(&client, ns, selector, Report::Ready).await {
                Ok(n) => return n,
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => panic!("reporting pods ready: {e}"),
            }
        }
        panic!("pods kept vanishing while being reported ready")
    })
}

/// Runs `kubectl rollout status` while acting as the kubelet for `selector`; returns its output.
fn rollout_status(c: &KubeCluster, ns: &str, deploy: &str, selector: &str) -> String {
    let mut bg = Background::start(
        c,
        0,
        &["rollout", "status", "-n", ns, deploy, "--timeout=60s"],
        &format!("rollout-{ns}-{}", deploy.replace('/', "-")),
    );
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        ready(c, ns, selector);
        if let Some(ok) = bg.exited() {
            let out = bg.output();
            assert!(ok, "rollout status failed: {out}");
            return out;
        }
        if std::time::Instant::now() > deadline {
            c.fail(format!("rollout status did not finish: {}", bg.output()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_demo_deployment_keeps_three_pods() {
    let c = cluster();
    let ns = "dep-demo";
    namespace(c, ns);
    c.ok(
        0,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            ns,
            "--image=registry.k8s.io/pause:3.9",
            "--replicas=3",
        ],
    );
    c.wait_until("3 web pods", WAIT, || pods(c, ns, "app=web").len() == 3);
    let mut watch = Background::start(
        c,
        0,
        &["get", "pods", "-n", ns, "-l", "app=web", "--watch"],
        "demo-watch",
    );
    let before = pods(c, ns, "app=web");
    c.wait_until("the watch lists the pods", WAIT, || {
        before.iter().all(|p| watch.output().contains(p.as_str()))
    });
    c.ok(0, &["delete", "pod", "-n", ns, &before[0]]);
    c.wait_until("a replacement pod", WAIT, || {
        let now = pods(c, ns, "app=web");
        now.len() == 3 && !now.contains(&before[0])
    });
    let now = pods(c, ns, "app=web");
    let new: Vec<&String> = now.iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "{before:?} -> {now:?}");
    c.wait_until("the watch shows the replacement", WAIT, || {
        watch.output().contains(new[0].as_str())
    });
    assert!(
        watch.exited().is_none(),
        "the watch ended: {}",
        watch.output()
    );
    // One ReplicaSet, named <deploy>-<pod-template-hash>, owning the pods.
    let rs = jsonpath(c, ns, "rs", "{.items[*].metadata.name}");
    let hash = jsonpath(c, ns, "rs", "{.items[0].metadata.labels.pod-template-hash}");
    assert_eq!(rs, format!("web-{hash}"));
    let owner = c.ok(0, &["get", "pod", "-n", ns, new[0], "-o", "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}"]);
    assert_eq!(owner, format!("ReplicaSet/{rs}/true"));
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(
        events.contains(&format!("Scaled up replica set {rs} from 0 to 3")),
        "{events}"
    );
    // Ready pods make the Deployment available.
    rollout_status(c, ns, "deployment/web", "app=web");
    let status = jsonpath(c, ns, "deployment/web", "{.status.replicas}/{.status.updatedReplicas}/{.status.readyReplicas}/{.status.availableReplicas}");
    assert_eq!(status, "3/3/3/3");
}

#[test]
fn a_replicaset_adopts_orphans_and_releases_pods_that_stop_matching() {
    let c = cluster();
    let ns = "dep-adopt";
    namespace(c, ns);
    let orphan = r#"
apiVersion: v1
kind: Pod
metadata: {name: orphan, labels: {app: cache}}
spec: {containers: [{name: c, image: registry.k8s.io/pause:3.9}]}
"#;
    c.ok_stdin(0, &["apply", "-n", ns, "-f", "-"], Some(orphan));
    let rs = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: cache}
spec:
  replicas: 2
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: c, image: registry.k8s.io/pause:3.9}]}
"#;
    c.ok_stdin(0, &["apply", "-n", ns, "-f", "-"], Some(rs));
    c.wait_until("the orphan adopted", WAIT, || {
        jsonpath(c, ns, "pod/orphan", "{.metadata.ownerReferences[0].name}") == "cache"
    });
    c.wait_until("2 pods", WAIT, || pods(c, ns, "app=cache").len() == 2);
    // Only one pod was created: the orphan counts.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(pods(c, ns, "app=cache").len(), 2);
    let rs_uid = jsonpath(c, ns, "rs/cache", "{.metadata.uid}");
    let owner = jsonpath(
        c,
        ns,
        "pod/orphan",
        "{.metadata.ownerReferences[0].uid}/{.metadata.ownerReferences[0].blockOwnerDeletion}",
    );
    assert_eq!(owner, format!("{rs_uid}/true"));
    // Relabelled, it is released and replaced.
    c.ok(
        0,
        &[
            "label",
            "pod",
            "-n",
            ns,
            "orphan",
            "app=other",
            "--overwrite",
        ],
    );
    c.wait_until("the pod released", WAIT, || {
        let refs = jsonpath(c, ns, "pod/orphan", "{.metadata.ownerReferences[*].uid}");
        !refs.contains(&rs_uid)
    });
    c.wait_until("a replacement", WAIT, || {
        pods(c, ns, "app=cache").len() == 2
    });
    ready(c, ns, "app=cache");
    c.wait_until("status counts the ready pods", WAIT, || {
        jsonpath(c, ns, "rs/cache", "{.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}/{.status.fullyLabeledReplicas}") == "2/2/2/2"
    });
}

fn create_web(c: &KubeCluster, ns: &str, replicas: u32) {
    namespace(c, ns);
    c.ok(
        0,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            ns,
            "--image=registry.k8s.io/pause:3.9",
            &format!("--replicas={replicas}"),
        ],
    );
    c.wait_until("the pods", WAIT, || {
        pods(c, ns, "app=web").len() == replicas as usize
    });
    rollout_status(c, ns, "deployment/web", "app=web");
}

/// `name=replicas` of every ReplicaSet in `ns`, sorted.
fn replica_sets(c: &KubeCluster, ns: &str) -> Vec<String> {
    let out = jsonpath(
        c,
        ns,
        "rs",
        "{range .items[*]}{.metadata.name}={.spec.replicas}{\"\\n\"}{end}",
    );
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn images(c: &KubeCluster, ns: &str) -> Vec<String> {
    let out = c.ok(0, &["get", "pods", "-n", ns, "-l", "app=web", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut imgs: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    imgs.sort();
    imgs
}

#[test]
fn scale_set_image_history_and_undo() {
    let c = cluster();
    let ns = "dep-roll";
    create_web(c, ns, 3);
    c.ok(0, &["scale", "-n", ns, "deployment/web", "--replicas=5"]);
    c.wait_until("5 pods", WAIT, || pods(c, ns, "app=web").len() == 5);
    rollout_status(c, ns, "deployment/web", "app=web");
    assert_eq!(replica_sets(c, ns).len(), 1);

    c.ok(
        0,
        &[
            "set",
            "image",
            "-n",
            ns,
            "deployment/web",
            "pause=registry.k8s.io/pause:3.10",
        ],
    );
    let out = rollout_status(c, ns, "deployment/web", "app=web");
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.10".to_string(); 5]
    );
    let sets = replica_sets(c, ns);
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert!(sets.iter().any(|s| s.ends_with("=0")), "{sets:?}");
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(events.contains("Scaled down replica set"), "{events}");
    let conds = jsonpath(
        c,
        ns,
        "deployment/web",
        "{range .status.conditions[*]}{.type}={.status}/{.reason};{end}",
    );
    assert!(
        conds.contains("Available=True/MinimumReplicasAvailable"),
        "{conds}"
    );
    assert!(
        conds.contains("Progressing=True/NewReplicaSetAvailable"),
        "{conds}"
    );

    c.ok(
        0,
        &[
            "set",
            "image",
            "-n",
            ns,
            "deployment/web",
            "pause=registry.k8s.io/pause:3.8",
        ],
    );
    rollout_status(c, ns, "deployment/web", "app=web");
    let history = c.ok(0, &["rollout", "history", "-n", ns, "deployment/web"]);
    for rev in ["1", "2", "3"] {
        assert!(
            history.lines().any(|l| l.trim_start().starts_with(rev)),
            "{history}"
        );
    }
    // Undo goes back to revision 2's template, which becomes revision 4.
    c.ok(0, &["rollout", "undo", "-n", ns, "deployment/web"]);
    rollout_status(c, ns, "deployment/web", "app=web");
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.10".to_string(); 5]
    );
    assert_eq!(
        jsonpath(
            c,
            ns,
            "deployment/web",
            "{.metadata.annotations.deployment\\.kubernetes\\.io/revision}"
        ),
        "4"
    );
    // --to-revision=1: the first template back, still one ReplicaSet per template.
    c.ok(
        0,
        &[
            "rollout",
            "undo",
            "-n",
            ns,
            "deployment/web",
            "--to-revision=1",
        ],
    );
    rollout_status(c, ns, "deployment/web", "app=web");
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.9".to_string(); 5]
    );
    let sets = replica_sets(c, ns);
    assert_eq!(sets.len(), 3, "{sets:?}");
    let history = c.ok(0, &["rollout", "history", "-n", ns, "deployment/web"]);
    let revs: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revs, ["3", "4", "5"], "{history}");
    let status = jsonpath(c, ns, "deployment/web", "{.status.replicas}/{.status.updatedReplicas}/{.status.availableReplicas}/{.status.unavailableReplicas}");
    assert!(status == "5/5/5/0" || status == "5/5/5/", "{status}");
}

#[test]
fn pause_resume_and_restart() {
    let c = cluster();
    let ns = "dep-pause";
    create_web(c, ns, 2);
    c.ok(0, &["rollout", "pause", "-n", ns, "deployment/web"]);
    c.wait_until("Progressing says paused", WAIT, || {
        jsonpath(
            c,
            ns,
            "deployment/web",
            "{.status.conditions[?(@.type==\"Progressing\")].reason}",
        ) == "DeploymentPaused"
    });
    c.ok(
        0,
        &[
            "set",
            "image",
            "-n",
            ns,
            "deployment/web",
            "pause=registry.k8s.io/pause:3.10",
        ],
    );
    // Paused: scaling still happens, the rollout does not.
    c.ok(0, &["scale", "-n", ns, "deployment/web", "--replicas=3"]);
    c.wait_until("3 pods while paused", WAIT, || {
        pods(c, ns, "app=web").len() == 3
    });
    ready(c, ns, "app=web");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        replica_sets(c, ns).len(),
        1,
        "a paused deployment rolled out"
    );
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.9".to_string(); 3]
    );
    c.ok(0, &["rollout", "resume", "-n", ns, "deployment/web"]);
    rollout_status(c, ns, "deployment/web", "app=web");
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.10".to_string(); 3]
    );
    // Restart: a new template (restartedAt), every pod replaced.
    let before = pods(c, ns, "app=web");
    c.ok(0, &["rollout", "restart", "-n", ns, "deployment/web"]);
    rollout_status(c, ns, "deployment/web", "app=web");
    let after = pods(c, ns, "app=web");
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "{before:?} {after:?}"
    );
    assert_eq!(replica_sets(c, ns).len(), 3);
}

#[test]
fn recreate_removes_every_old_pod_before_making_new_ones() {
    let c = cluster();
    let ns = "dep-recreate";
    namespace(c, ns);
    let yaml = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  strategy: {type: Recreate}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: pause, image: registry.k8s.io/pause:3.9}]}
"#;
    c.ok_stdin(0, &["apply", "-n", ns, "-f", "-"], Some(yaml));
    c.wait_until("3 pods", WAIT, || pods(c, ns, "app=web").len() == 3);
    rollout_status(c, ns, "deployment/web", "app=web");
    let mut watch = Background::start(
        c,
        0,
        &["get", "pods", "-n", ns, "-l", "app=web", "--watch", "--output-watch-events", "-o", "custom-columns=EVENT:.type,IMAGE:.object.spec.containers[0].image,DELETED:.object.metadata.deletionTimestamp", "--no-headers"],
        "recreate-watch",
    );
    c.wait_until("the watch starts", WAIT, || {
        watch.output().lines().count() >= 3
    });
    c.ok(
        0,
        &[
            "set",
            "image",
            "-n",
            ns,
            "deployment/web",
            "pause=registry.k8s.io/pause:3.10",
        ],
    );
    rollout_status(c, ns, "deployment/web", "app=web");
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.10".to_string(); 3]
    );
    c.wait_until("the watch saw the new pods", WAIT, || {
        watch.output().matches("pause:3.10").count() >= 3
    });
    assert!(watch.exited().is_none());
    // Every old pod's DELETED event comes before the first new pod's ADDED.
    let out = watch.output();
    let lines: Vec<&str> = out.lines().collect();
    let first_new = lines
        .iter()
        .position(|l| l.starts_with("ADDED") && l.contains("pause:3.10"))
        .unwrap();
    let last_old_gone = lines
        .iter()
        .rposition(|l| l.starts_with("DELETED") && l.contains("pause:3.9"))
        .unwrap();
    assert!(last_old_gone < first_new, "{out}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("DELETED") && l.contains("pause:3.9"))
            .count(),
        3,
        "{out}"
    );
}

#[test]
fn scaling_down_deletes_unready_pods_first() {
    let c = cluster();
    let ns = "dep-rank";
    create_web(c, ns, 4);
    let all = pods(c, ns, "app=web");
    let unready = [all[1].clone(), all[3].clone()];
    rt().block_on(async {
        let client = c.client(0).await;
        for p in &unready {
            keel_testkit::pods::report(&client, ns, p, Report::NotReady)
                .await
                .unwrap();
        }
    });
    c.wait_until("the status sees 2 ready", WAIT, || {
        jsonpath(c, ns, "rs", "{.items[0].status.readyReplicas}") == "2"
    });
    c.ok(0, &["scale", "-n", ns, "deployment/web", "--replicas=2"]);
    c.wait_until("2 pods", WAIT, || pods(c, ns, "app=web").len() == 2);
    let left = pods(c, ns, "app=web");
    assert!(
        left.iter().all(|p| !unready.contains(p)),
        "kept {left:?}, unready were {unready:?}"
    );
    let events = c.ok(0, &["get", "events", "-n", ns]);
    for p in &unready {
        assert!(events.contains(&format!("Deleted pod: {p}")), "{events}");
    }
}

/// Churn: 12 Deployments created at once, then scaled twice at once (up and down), converge on exactly the
/// pods asked for. Counts extras and gaps over all of them; prints how long convergence took.
#[test]
fn many_deployments_created_and_scaled_at_once_converge_exactly() {
    let c = cluster();
    let ns = "dep-churn";
    namespace(c, ns);
    const N: usize = 12;
    let sizes = |round: usize| -> Vec<usize> { (0..N).map(|i| (i * 7 + round * 3) % 6).collect() };
    let check = |want: &[usize]| -> (usize, usize) {
        let out = c.ok(0, &["get", "pods", "-n", ns, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let mut have = [0usize; N];
        for p in v["items"].as_array().unwrap() {
            if !p["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let app = p["metadata"]["labels"]["app"].as_str().unwrap_or("");
            if let Some(i) = app
                .strip_prefix("churn")
                .and_then(|i| i.parse::<usize>().ok())
            {
                have[i] += 1;
            }
        }
        let extras = have
            .iter()
            .zip(want)
            .map(|(h, w)| h.saturating_sub(*w))
            .sum();
        let gaps = have
            .iter()
            .zip(want)
            .map(|(h, w)| w.saturating_sub(*h))
            .sum();
        (extras, gaps)
    };
    let started = std::time::Instant::now();
    let first = sizes(0);
    std::thread::scope(|s| {
        for (i, n) in first.iter().enumerate() {
            s.spawn(move || {
                ok_retrying(
                    c,
                    i % 3,
                    &[
                        "create",
                        "deployment",
                        &format!("churn{i}"),
                        "-n",
                        ns,
                        "--image=registry.k8s.io/pause:3.9",
                        &format!("--replicas={n}"),
                    ],
                );
            });
        }
    });
    for round in 1..3 {
        let want = sizes(round);
        std::thread::scope(|s| {
            for (i, n) in want.iter().enumerate() {
                s.spawn(move || {
                    ok_retrying(
                        c,
                        (i + round) % 3,
                        &[
                            "scale",
                            "-n",
                            ns,
                            &format!("deployment/churn{i}"),
                            &format!("--replicas={n}"),
                        ],
                    );
                });
            }
        });
    }
    let want = sizes(2);
    c.wait_until("the churned deployments converge", WAIT, || {
        check(&want) == (0, 0)
    });
    let converged = started.elapsed();
    // Settled: still exact a moment later, and one ReplicaSet each.
    std::thread::sleep(Duration::from_secs(2));
    let (extras, gaps) = check(&want);
    println!(
        "churn: {N} deployments, {} pods wanted at the end ({} at the start); converged {converged:?} after the first create; extras {extras}, gaps {gaps}",
        want.iter().sum::<usize>(),
        first.iter().sum::<usize>()
    );
    assert_eq!((extras, gaps), (0, 0));
    let sets = replica_sets(c, ns);
    assert_eq!(sets.len(), N, "{sets:?}");
}

fn rs_sizes_by_image(c: &KubeCluster, ns: &str) -> Vec<(String, i64)> {
    let out = c.ok(0, &["get", "rs", "-n", ns, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut sets: Vec<(String, i64)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                r["spec"]["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    sets.sort();
    sets
}

/// A rollout stuck on unready new pods: scaling it spreads the new replicas over both ReplicaSets in
/// proportion, and the progress deadline marks it failed.
#[test]
fn a_stuck_rollout_scales_proportionally_and_exceeds_its_deadline() {
    let c = cluster();
    let ns = "dep-stuck";
    create_web(c, ns, 10);
    c.ok(
        0,
        &[
            "patch",
            "-n",
            ns,
            "deployment/web",
            "-p",
            r#"{"spec":{"progressDeadlineSeconds":5}}"#,
        ],
    );
    c.ok(
        0,
        &[
            "set",
            "image",
            "-n",
            ns,
            "deployment/web",
            "pause=registry.k8s.io/pause:3.10",
        ],
    );
    // maxSurge 3 (25% of 10, up), maxUnavailable 2 (down): old 10 -> 8, new 0 -> 5, then no new pod is
    // ready so nothing moves.
    let stuck = vec![
        ("registry.k8s.io/pause:3.10".to_string(), 5),
        ("registry.k8s.io/pause:3.9".to_string(), 8),
    ];
    c.wait_until("the rollout stuck at 8 old / 5 new", WAIT, || {
        rs_sizes_by_image(c, ns) == stuck
    });
    c.wait_until("13 pods", WAIT, || pods(c, ns, "app=web").len() == 13);
    // 20 replicas: 25 allowed with surge; old 8 * 25/13 -> 15, new 5 * 25/13 -> 10.
    c.ok(0, &["scale", "-n", ns, "deployment/web", "--replicas=20"]);
    let spread = vec![
        ("registry.k8s.io/pause:3.10".to_string(), 10),
        ("registry.k8s.io/pause:3.9".to_string(), 15),
    ];
    c.wait_until("the new replicas spread in proportion", WAIT, || {
        rs_sizes_by_image(c, ns) == spread
    });
    c.wait_until("ProgressDeadlineExceeded", WAIT, || {
        jsonpath(c, ns, "deployment/web", "{.status.conditions[?(@.type==\"Progressing\")].status}/{.status.conditions[?(@.type==\"Progressing\")].reason}")
            == "False/ProgressDeadlineExceeded"
    });
    let r = c.kubectl(
        0,
        &[
            "rollout",
            "status",
            "-n",
            ns,
            "deployment/web",
            "--timeout=30s",
        ],
    );
    assert!(!r.ok, "{}", r.stdout);
    assert!(
        r.stderr.contains("exceeded its progress deadline"),
        "{}",
        r.stderr
    );
    // Once the new pods are ready it completes after all. A deadline of 5 s could pass again between two
    // steps on a loaded machine, and `rollout status` gives up at once on a timed-out condition, so the
    // deadline goes back to the default and the pods are reported ready until the rollout moves.
    c.ok(
        0,
        &[
            "patch",
            "-n",
            ns,
            "deployment/web",
            "-p",
            r#"{"spec":{"progressDeadlineSeconds":600}}"#,
        ],
    );
    c.wait_until("the rollout progressing again", WAIT, || {
        ready(c, ns, "app=web");
        jsonpath(
            c,
            ns,
            "deployment/web",
            "{.status.conditions[?(@.type==\"Progressing\")].reason}",
        ) != "ProgressDeadlineExceeded"
    });
    rollout_status(c, ns, "deployment/web", "app=web");
    assert_eq!(
        images(c, ns),
        vec!["registry.k8s.io/pause:3.10".to_string(); 20]
    );
}

/// minReadySeconds holds availability back (and reaches the ReplicaSet), and revisionHistoryLimit prunes
/// old ReplicaSets.
#[test]
fn min_ready_seconds_and_revision_history_limit() {
    let c = cluster();
    let ns = "dep-limits";
    namespace(c, ns);
    let yaml = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  minReadySeconds: 3600
  revisionHistoryLimit: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: pause, image: registry.k8s.io/pause:3.9}]}
"#;
    c.ok_stdin(0, &["apply", "-n", ns, "-f", "-"], Some(yaml));
    c.wait_until("2 pods", WAIT, || pods(c, ns, "app=web").len() == 2);
    ready(c, ns, "app=web");
    c.wait_until("2 ready", WAIT, || {
        jsonpath(c, ns, "deployment/web", "{.status.readyReplicas}") == "2"
    });
    assert_eq!(
        jsonpath(c, ns, "rs", "{.items[0].spec.minReadySeconds}"),
        "3600"
    );
    let st = jsonpath(c, ns, "deployment/web", "{.status.availableReplicas}/{.status.unavailableReplicas}/{.status.conditions[?(@.type==\"Available\")].status}");
    assert!(st == "0/2/False" || st == "/2/False", "{st}");
    c.ok(
        0,
        &[
            "patch",
            "-n",
            ns,
            "deployment/web",
            "-p",
            r#"{"spec":{"minReadySeconds":0}}"#,
        ],
    );
    c.wait_until("available once minReadySeconds is 0", WAIT, || {
        jsonpath(
            c,
            ns,
            "deployment/web",
            "{.status.availableReplicas}/{.status.conditions[?(@.type==\"Available\")].status}",
        ) == "2/True"
    });
    for img in ["3.10", "3.8", "3.7"] {
        c.ok(
            0,
            &[
                "set",
                "image",
                "-n",
                ns,
                "deployment/web",
                &format!("pause=registry.k8s.io/pause:{img}"),
            ],
        );
        rollout_status(c, ns, "deployment/web", "app=web");
    }
    c.wait_until("one old ReplicaSet kept", WAIT, || {
        replica_sets(c, ns).len() == 2
    });
    let history = c.ok(0, &["rollout", "history", "-n", ns, "deployment/web"]);
    let revs: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revs, ["3", "4"], "{history}");
}

/// A Deployment re-adopts its ReplicaSet when the owner reference is taken away, and releases one whose
/// labels stop matching; the replacement's name then collides with the released one, which
/// `status.collisionCount` resolves.
#[test]
fn a_deployment_adopts_releases_and_survives_a_name_collision() {
    let c = cluster();
    let ns = "dep-own";
    create_web(c, ns, 2);
    let rs = jsonpath(c, ns, "rs", "{.items[0].metadata.name}");
    let uid = jsonpath(c, ns, "deployment/web", "{.metadata.uid}");
    c.ok(
        0,
        &[
            "patch",
            "-n",
            ns,
            &format!("rs/{rs}"),
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/ownerReferences"}]"#,
        ],
    );
    c.wait_until("the ReplicaSet adopted again", WAIT, || {
        jsonpath(
            c,
            ns,
            &format!("rs/{rs}"),
            "{.metadata.ownerReferences[0].uid}",
        ) == uid
    });
    assert_eq!(replica_sets(c, ns), vec![format!("{rs}=2")]);
    assert_eq!(pods(c, ns, "app=web").len(), 2);

    c.ok(
        0,
        &[
            "label",
            "-n",
            ns,
            &format!("rs/{rs}"),
            "app=gone",
            "--overwrite",
        ],
    );
    c.wait_until("a replacement ReplicaSet after a collision", WAIT, || {
        jsonpath(c, ns, "deployment/web", "{.status.collisionCount}") == "1"
            && replica_sets(c, ns).len() == 2
    });
    let refs = jsonpath(
        c,
        ns,
        &format!("rs/{rs}"),
        "{.metadata.ownerReferences[*].uid}",
    );
    assert!(!refs.contains(&uid), "still owned: {refs}");
    rollout_status(c, ns, "deployment/web", "app=web");
    let sets = replica_sets(c, ns);
    let new: Vec<&String> = sets
        .iter()
        .filter(|s| !s.starts_with(&format!("{rs}=")))
        .collect();
    assert_eq!(new.len(), 1, "{sets:?}");
    assert!(
        new[0].starts_with("web-") && new[0].ends_with("=2"),
        "{sets:?}"
    );
    // The released ReplicaSet keeps its own pods; the new one made two more.
    assert_eq!(pods(c, ns, "app=web").len(), 4);
}

/// A ReplicationController (core/v1) keeps its pods as a ReplicaSet does: its selector and labels default
/// from the template, `kubectl get rc` prints upstream's columns, `kubectl scale rc` resizes it, a deleted
/// pod is replaced, and deleting the controller collects its pods.
#[test]
fn a_replication_controller_keeps_scales_and_collects_its_pods() {
    let c = cluster();
    let ns = "dep-rc";
    namespace(c, ns);
    let rc = format!(
        r#"apiVersion: v1
kind: ReplicationController
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 3
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]
"#
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&rc));
    assert_eq!(
        jsonpath(
            c,
            ns,
            "rc/web",
            "{.spec.selector.app}/{.metadata.labels.app}"
        ),
        "web/web"
    );
    c.wait_until("3 pods", WAIT, || pods(c, ns, "app=web").len() == 3);
    let owners = jsonpath(
        c,
        ns,
        "pods",
        "{range .items[*]}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].apiVersion} {end}",
    );
    assert_eq!(
        owners.split_whitespace().collect::<Vec<_>>(),
        ["ReplicationController/v1"; 3]
    );
    ready(c, ns, "app=web");
    c.wait_until("3 ready", WAIT, || {
        jsonpath(
            c,
            ns,
            "rc/web",
            "{.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}/{.status.observedGeneration}",
        ) == "3/3/3/1"
    });
    let table = c.ok(0, &["get", "rc", "-n", ns, "-o", "wide"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        [row[0], row[1], row[2], row[3], row[5], row[6], row[7]],
        [
            "web",
            "3",
            "3",
            "3",
            "c",
            "registry.k8s.io/pause:3.9",
            "app=web"
        ],
        "{table}"
    );

    let out = c.ok(0, &["scale", "rc", "web", "-n", ns, "--replicas=5"]);
    assert!(out.contains("scaled"), "{out}");
    c.wait_until("5 pods", WAIT, || pods(c, ns, "app=web").len() == 5);
    let scale = c.ok(
        0,
        &[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/{ns}/replicationcontrollers/web/scale"),
        ],
    );
    assert!(scale.contains(r#""selector":"app=web""#), "{scale}");

    let victim = pods(c, ns, "app=web").remove(0);
    c.ok(0, &["delete", "pod", "-n", ns, &victim]);
    c.wait_until("a replacement", WAIT, || {
        let now = pods(c, ns, "app=web");
        now.len() == 5 && !now.contains(&victim)
    });
    let events = c.ok(
        0,
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector=involvedObject.kind=ReplicationController",
            "-o",
            "jsonpath={.items[*].reason}",
        ],
    );
    assert!(events.contains("SuccessfulCreate"), "{events}");

    c.ok(0, &["delete", "rc", "web", "-n", ns]);
    c.wait_until("the pods collected", WAIT, || {
        pods(c, ns, "app=web").is_empty()
    });
}

/// Every live pod of `ns` with the uids of its owners, comma-separated (empty for an orphan).
fn pod_owners(c: &KubeCluster, ns: &str) -> Vec<(String, String)> {
    let out = c.ok(0, &["get", "pods", "-n", ns, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let uids: Vec<&str> = p["metadata"]["ownerReferences"]
                .as_array()
                .map(|a| a.iter().filter_map(|r| r["uid"].as_str()).collect())
                .unwrap_or_default();
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                uids.join(","),
            )
        })
        .collect()
}

fn create_rc(c: &KubeCluster, ns: &str, name: &str) -> String {
    let rc = format!(
        r#"apiVersion: v1
kind: ReplicationController
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: 2
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]
"#
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&rc));
    c.wait_until("2 pods", WAIT, || {
        pods(c, ns, &format!("app={name}")).len() == 2
    });
    jsonpath(c, ns, &format!("rc/{name}"), "{.metadata.uid}")
}

#[test]
fn deleting_a_replication_controller_neither_releases_nor_orphans_its_pods() {
    let c = cluster();
    let ns = "dep-rc-delete";
    namespace(c, ns);

    // A matching orphan is adopted and counts as one of the replicas.
    let stray = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: stray, namespace: {ns}, labels: {{app: fg}}}}\nspec: {{containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]}}\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&stray));
    let fg = create_rc(c, ns, "fg");
    c.wait_until("the orphan adopted", WAIT, || {
        jsonpath(c, ns, "pod/stray", "{.metadata.ownerReferences[0].uid}") == fg
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(pods(c, ns, "app=fg").len(), 2, "only one pod was made");

    // Foreground: kubectl waits until the controller is gone, its pods first.
    c.ok(0, &["delete", "rc", "fg", "-n", ns, "--cascade=foreground"]);
    c.wait_until("the foreground delete's pods gone", WAIT, || {
        pod_owners(c, ns).is_empty()
    });

    // Background, with the controller held in deletion by a finalizer: a pod that stops matching is not
    // released (it would escape the delete), no replacement is made, and the pod goes with the rest.
    let bg = create_rc(c, ns, "bg");
    c.ok(
        0,
        &[
            "patch",
            "rc",
            "bg",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
    );
    c.ok(
        0,
        &[
            "delete",
            "rc",
            "bg",
            "-n",
            ns,
            "--cascade=background",
            "--wait=false",
        ],
    );
    let moved = pods(c, ns, "app=bg").remove(0);
    c.ok(
        0,
        &["label", "pod", "-n", ns, &moved, "app=moved", "--overwrite"],
    );
    std::thread::sleep(Duration::from_secs(3));
    let owners = pod_owners(c, ns);
    assert_eq!(owners.len(), 2, "no replacement while deleting: {owners:?}");
    assert!(
        owners.iter().all(|(_, uids)| uids == &bg),
        "a deleting controller released a pod: {owners:?}"
    );
    c.ok(
        0,
        &[
            "patch",
            "rc",
            "bg",
            "-n",
            ns,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    );
    c.wait_until("the background delete's pods gone", WAIT, || {
        pod_owners(c, ns).is_empty()
    });

    // Orphan: the pods stay, with no owner reference, and nobody deletes or replaces them.
    create_rc(c, ns, "keep");
    c.ok(0, &["delete", "rc", "keep", "-n", ns, "--cascade=orphan"]);
    c.wait_until("the orphans' owner references removed", WAIT, || {
        let owners = pod_owners(c, ns);
        owners.len() == 2 && owners.iter().all(|(_, uids)| uids.is_empty())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pods(c, ns, "app=keep").len(), 2);
    assert!(c
        .ok(0, &["get", "rc", "-n", ns, "-o", "name"])
        .trim()
        .is_empty());
    c.ok(0, &["delete", "pods", "-n", ns, "-l", "app=keep"]);
}
