//! Acting as a kubelet where no node agent runs yet: tests that need pods Running, Ready, Succeeded or Failed
//! patch `pods/status` exactly as a kubelet's status manager does (a strategic merge patch of `status`).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

/// What a pod reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Running with every container ready.
    Ready,
    /// Running, not ready.
    NotReady,
    /// Every container exited 0.
    Succeeded,
    /// A container exited 1.
    Failed,
}

/// The pod IP [`status`] and [`report`] give every pod.
pub const DEFAULT_IP: &str = "10.42.0.10";

/// The status body a kubelet would write for `report` at time `now` (RFC 3339).
pub fn status(report: Report, now: &str) -> serde_json::Value {
    status_with_ip(report, now, DEFAULT_IP)
}

/// [`status`] with the pod IP `ip`.
pub fn status_with_ip(report: Report, now: &str, ip: &str) -> serde_json::Value {
    let (phase, ready) = match report {
        Report::Ready => ("Running", "True"),
        Report::NotReady => ("Running", "False"),
        Report::Succeeded => ("Succeeded", "False"),
        Report::Failed => ("Failed", "False"),
    };
    json!({"status": {
        "phase": phase,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
            {"type": "Ready", "status": ready, "lastTransitionTime": now},
        ],
    }})
}

/// Patches the status of pod `ns/name` as its kubelet would.
pub async fn report(
    client: &kube::Client,
    ns: &str,
    name: &str,
    report: Report,
) -> Result<Pod, kube::Error> {
    report_with_ip(client, ns, name, report, DEFAULT_IP).await
}

/// [`report`] with the pod IP `ip` (for tests that need pods told apart by address).
pub async fn report_with_ip(
    client: &kube::Client,
    ns: &str,
    name: &str,
    report: Report,
    ip: &str,
) -> Result<Pod, kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(status_with_ip(report, &now, ip)),
    )
    .await
}

/// Reports `report` for every pod in `ns` matching `selector` that does not report it yet; returns how many
/// it patched.
pub async fn report_all(
    client: &kube::Client,
    ns: &str,
    selector: &str,
    want: Report,
) -> Result<usize, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods = api.list(&ListParams::default().labels(selector)).await?;
    let mut n = 0;
    for p in pods.items {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let already = match want {
            Report::Ready => phase == "Running" && ready,
            Report::NotReady => phase == "Running" && !ready,
            Report::Succeeded => phase == "Succeeded",
            Report::Failed => phase == "Failed",
        };
        if !already {
            if let Some(name) = p.metadata.name.as_deref() {
                report(client, ns, name, want).await?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Patches pod `ns/name` as its kubelet would once its container `container` exited with `code`: phase
/// Succeeded for 0, else Failed, with the container's terminated state (what a pod failure policy reads).
pub async fn report_exit(
    client: &kube::Client,
    ns: &str,
    name: &str,
    container: &str,
    code: i32,
) -> Result<Pod, kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let report = if code == 0 {
        Report::Succeeded
    } else {
        Report::Failed
    };
    let mut body = status(report, &now);
    body["status"]["containerStatuses"] = json!([{
        "name": container,
        "image": "busybox",
        "imageID": "",
        "ready": false,
        "restartCount": 0,
        "state": {"terminated": {
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": now,
            "finishedAt": now,
        }},
    }]);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
        .await
}
