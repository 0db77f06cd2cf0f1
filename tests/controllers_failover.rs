//! The deployment and replicaset controllers across a failover: the Raft leader (which runs the
//! controllers) is killed with SIGKILL in the middle of a rollout; the controllers resume on the new leader
//! and finish it with no ReplicaSet or pod lost or made twice. Prints how long the controllers were idle.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use keel_testkit::keel_bin;
use keel_testkit::kube::{Background, KubeCluster};
use keel_testkit::pods::{report_all, Report};

const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "failover";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn json(c: &KubeCluster, i: usize, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.extend(["-n", NS, "-o", "json"]);
    serde_json::from_str(&c.ok(i, &a)).unwrap()
}

/// Live pods: (name, image, owner ReplicaSet).
fn pods(c: &KubeCluster, i: usize) -> Vec<(String, String, String)> {
    json(c, i, &["get", "pods", "-l", "app=web"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                p["metadata"]["ownerReferences"][0]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

fn holder(c: &KubeCluster, i: usize) -> String {
    c.kubectl(
        i,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    )
    .stdout
    .trim()
    .to_string()
}

fn ready(c: &KubeCluster, i: usize) {
    rt().block_on(async {
        let client = c.client(i).await;
        // A member that just lost its peer may refuse for a moment; the next round retries.
        let _ = report_all(&client, NS, "app=web", Report::Ready).await;
    });
}

fn rollout_status(c: &KubeCluster, i: usize) {
    let mut bg = Background::start(
        c,
        i,
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "deployment/web",
            "--timeout=90s",
        ],
        &format!("rollout-{i}"),
    );
    let deadline = Instant::now() + WAIT;
    loop {
        ready(c, i);
        if let Some(ok) = bg.exited() {
            assert!(ok, "rollout status failed: {}", bg.output());
            return;
        }
        if Instant::now() > deadline {
            c.fail(format!("rollout status did not finish: {}", bg.output()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_rollout_survives_the_leader_being_killed() {
    let mut c = KubeCluster::start(keel_bin!(), 3);
    let leader = c.cluster_mut().leader().expect("a leader");
    let s = (leader + 1) % 3; // a survivor to talk to
    c.wait_until("the controllers' Lease on the leader", WAIT, || {
        holder(&c, s) == c.member(leader).name
    });
    c.ok(s, &["create", "namespace", NS]);
    c.ok(
        s,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            NS,
            "--image=registry.k8s.io/pause:3.9",
            "--replicas=6",
        ],
    );
    c.wait_until("6 pods", WAIT, || pods(&c, s).len() == 6);
    rollout_status(&c, s);

    // Start a rollout and leave the new pods unready, so it stops halfway: surge 2, unavailable 1.
    c.ok(
        s,
        &[
            "set",
            "image",
            "-n",
            NS,
            "deployment/web",
            "pause=registry.k8s.io/pause:3.10",
        ],
    );
    c.wait_until("the rollout under way", WAIT, || {
        let p = pods(&c, s);
        p.iter().filter(|(_, img, _)| img.ends_with("3.10")).count() >= 2
            && p.iter().any(|(_, img, _)| img.ends_with("3.9"))
    });
    std::thread::sleep(Duration::from_millis(500));
    let before: BTreeSet<String> = pods(&c, s).into_iter().map(|p| p.0).collect();
    let old_holder = holder(&c, s);

    let killed = Instant::now();
    c.cluster_mut().kill9(leader);
    // Act as the kubelet for the pods made so far; the controllers' next move shows they are back.
    let mut lease_moved = None;
    let mut acted = None;
    let deadline = Instant::now() + WAIT;
    while lease_moved.is_none() || acted.is_none() {
        if Instant::now() > deadline {
            c.fail(format!(
                "controllers idle after the kill: lease moved {lease_moved:?}, acted {acted:?}"
            ));
        }
        if lease_moved.is_none() {
            let h = holder(&c, s);
            if !h.is_empty() && h != old_holder {
                lease_moved = Some(killed.elapsed());
            }
        }
        if acted.is_none() {
            let now = c.kubectl(
                s,
                &[
                    "get",
                    "pods",
                    "-n",
                    NS,
                    "-l",
                    "app=web",
                    "-o",
                    "jsonpath={.items[*].metadata.name}",
                ],
            );
            if now.ok && now.stdout.split_whitespace().any(|p| !before.contains(p)) {
                acted = Some(killed.elapsed());
            }
        }
        ready(&c, s);
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "failover: SIGKILL of the leader -> Lease held by the new leader after {:?}; first pod created by the new leader after {:?}",
        lease_moved.unwrap(),
        acted.unwrap()
    );
    rollout_status(&c, s);

    // Exactly one ReplicaSet per template, the new one at 6, the old at 0, and exactly 6 pods, all new.
    let sets = json(&c, s, &["get", "rs"]);
    let sets: Vec<(String, i64, String)> = sets["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["metadata"]["name"].as_str().unwrap().to_string(),
                r["spec"]["replicas"].as_i64().unwrap(),
                r["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(sets.len(), 2, "{sets:?}");
    let new = sets
        .iter()
        .find(|r| r.2.ends_with("3.10"))
        .expect("the new ReplicaSet");
    let old = sets
        .iter()
        .find(|r| r.2.ends_with("3.9"))
        .expect("the old ReplicaSet");
    assert_eq!((new.1, old.1), (6, 0), "{sets:?}");
    // Settled: nothing more is created or deleted.
    std::thread::sleep(Duration::from_secs(2));
    let p = pods(&c, s);
    assert_eq!(p.len(), 6, "{p:?}");
    assert!(
        p.iter()
            .all(|(_, img, owner)| img.ends_with("3.10") && owner == &new.0),
        "{p:?}"
    );
    let status = c.ok(
        s,
        &[
            "get",
            "deployment/web",
            "-n",
            NS,
            "-o",
            "jsonpath={.status.replicas}/{.status.updatedReplicas}/{.status.availableReplicas}",
        ],
    );
    assert_eq!(status, "6/6/6");
}
