//! What a hollow node's kubelet writes for a pod: the status of a pod whose containers all started
//! (built by the real agent's [`crate::pod::status::compute`] from containers that run, so the shapes
//! are the same), and the final delete of a pod being deleted.
//!
//! Nothing runs, so nothing exits: init containers are reported Completed at once, app containers
//! Running and ready for ever, whatever the restart policy (a Job's pod never completes).

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::Client;
use serde_json::json;

use crate::error::Error;
use crate::pod::status::{compute, ContainerView, Observed, ObservedState, PodView};

/// How a write for one pod ended.
#[derive(Debug)]
pub enum Outcome {
    /// Written.
    Done,
    /// The pod is gone, or is another pod of that name now: nothing more to do for it.
    Gone,
    /// Worth another try.
    Failed(Error),
}

fn outcome(r: Result<(), kube::Error>, what: impl Into<String>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Outcome::Gone,
        Err(e) => Outcome::Failed(Error::kube(what, e)),
    }
}

fn hex_digest(data: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A digest reference for `image` as a runtime reports it (`repo@sha256:…`); a given digest is kept.
pub fn image_id(image: &str) -> String {
    if image.contains('@') {
        return image.to_string();
    }
    // A tag is what follows the last ':' after the last '/' (a registry port is before it).
    let repo = match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    };
    format!("{repo}@sha256:{}", hex_digest(image))
}

/// Whether the pod's status is already that of a pod whose containers all run and are ready.
pub fn is_running(pod: &Pod) -> bool {
    let Some(st) = pod.status.as_ref() else {
        return false;
    };
    let wanted = pod.spec.as_ref().map_or(0, |s| s.containers.len());
    let statuses = st.container_statuses.as_deref().unwrap_or_default();
    st.phase.as_deref() == Some("Running")
        && st.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        && statuses.len() == wanted
        && statuses
            .iter()
            .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
        && st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether the pod has finished (a hollow node never ends a pod, but others may, e.g. an eviction).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The status of `pod` with every container started at once, on `pod_ip` and `host_ip`.
pub fn status(pod: &Pod, pod_ip: &str, host_ip: &str) -> PodStatus {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let now = i64::try_from(k8s_openapi::jiff::Timestamp::now().as_nanosecond()).unwrap_or(0);
    let spec = pod.spec.clone().unwrap_or_default();
    let view = |name: &str, image: Option<&str>, state: ObservedState| {
        let image = image.unwrap_or_default();
        let running = state == ObservedState::Running;
        let observed = Observed {
            id: hex_digest(&format!("{uid}/{name}")),
            state,
            attempt: 0,
            image_ref: image_id(image),
            started_at: now,
            finished_at: if running { 0 } else { now },
            exit_code: 0,
            reason: if running {
                String::new()
            } else {
                "Completed".into()
            },
            message: String::new(),
        };
        (
            name.to_string(),
            image.to_string(),
            ContainerView {
                current: Some(observed),
                previous: None,
                waiting: None,
                ready: running,
                started: running,
            },
        )
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| view(&c.name, c.image.as_deref(), ObservedState::Exited))
        .collect();
    let app = spec
        .containers
        .iter()
        .map(|c| view(&c.name, c.image.as_deref(), ObservedState::Running))
        .collect();
    compute(&PodView {
        pod,
        sandbox_ready: true,
        pod_ip: pod_ip.to_string(),
        host_ip: host_ip.to_string(),
        init,
        app,
        phase: "Running",
        reason: None,
    })
}

/// Writes `status` to `pod` as the real agent does (a merge patch of `pods/{name}/status` carrying the
/// pod's uid, so a new pod of the same name is not written).
pub async fn write_status(client: &Client, pod: &Pod, status: &PodStatus) -> Outcome {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"uid": pod.metadata.uid}, "status": status});
    let r = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ());
    outcome(r, format!("writing the status of pod {ns}/{name}"))
}

/// Deletes a pod being deleted once "its containers stopped", as the kubelet does: grace period 0,
/// with the pod's uid as precondition.
pub async fn delete(client: &Client, ns: &str, name: &str, uid: &str) -> Outcome {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let r = api.delete(name, &dp).await.map(|_| ());
    outcome(r, format!("deleting pod {ns}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn pod() -> Pod {
        let c = |name: &str, image: &str| Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        };
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("hollow-0".into()),
                init_containers: Some(vec![c("init", "busybox")]),
                containers: vec![c("a", "nginx:1.25"), c("b", "registry:5000/x/y")],
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn image_ids_are_digests_of_the_repository() {
        assert!(image_id("nginx:1.25").starts_with("nginx@sha256:"));
        assert!(image_id("registry:5000/x/y").starts_with("registry:5000/x/y@sha256:"));
        assert_eq!(image_id("a@sha256:00"), "a@sha256:00");
        assert_eq!(image_id("nginx:1.25").len(), "nginx@sha256:".len() + 64);
    }

    #[test]
    fn a_started_pod_is_running_and_ready() {
        let mut p = pod();
        assert!(!is_running(&p));
        let s = status(&p, "10.42.0.2", "127.1.0.1");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.42.0.2"));
        assert_eq!(s.host_ip.as_deref(), Some("127.1.0.1"));
        assert!(s.start_time.is_some());
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        let conds: Vec<(String, String)> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        for ty in [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
        ] {
            assert!(
                conds.contains(&(ty.into(), "True".into())),
                "{ty}: {conds:?}"
            );
        }
        let cs = s.container_statuses.clone().unwrap();
        assert_eq!(cs.len(), 2);
        for c in &cs {
            assert!(c.ready);
            assert_eq!(c.started, Some(true));
            assert!(c.state.as_ref().unwrap().running.is_some());
            assert!(c
                .container_id
                .as_ref()
                .unwrap()
                .starts_with("containerd://"));
        }
        assert_ne!(cs[0].container_id, cs[1].container_id);
        let init = s.init_container_statuses.clone().unwrap();
        let t = init[0].state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!(t.reason.as_deref(), Some("Completed"));
        assert_eq!(t.exit_code, 0);
        p.status = Some(s);
        assert!(is_running(&p));
        assert!(!is_terminal(&p));
    }
}
