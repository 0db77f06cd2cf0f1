//! The pod's `status` from what the runtime reports: phase, the kubelet's conditions
//! (PodReadyToStartContainers, Initialized, ContainersReady, Ready with the pod's readiness gates; others
//! kept), container statuses
//! with state, lastState, restartCount, image and container ids, the pod and host IPs, start time,
//! QoS class. Written through `pods/{name}/status` only when it changed.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resources::qos_class;

const OWNED: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// One container as the runtime last reported it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// CRI id.
    pub id: String,
    /// Running, exited or created.
    pub state: ObservedState,
    /// Restart count (the CRI attempt).
    pub attempt: u32,
    /// Image reference (`sha256:…` or a digest).
    pub image_ref: String,
    /// Start time, ns.
    pub started_at: i64,
    /// Finish time, ns.
    pub finished_at: i64,
    /// Exit code.
    pub exit_code: i32,
    /// Runtime's reason (`Completed`, `Error`, `OOMKilled`).
    pub reason: String,
    /// Runtime's message.
    pub message: String,
}

/// A container's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ObservedState {
    /// Created, not started.
    #[default]
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
}

/// What the agent knows of one container of the spec.
#[derive(Debug, Clone, Default)]
pub struct ContainerView {
    /// The newest instance.
    pub current: Option<Observed>,
    /// The instance before it.
    pub previous: Option<Observed>,
    /// Why it is waiting, when it is not running: (reason, message).
    pub waiting: Option<(String, String)>,
    /// Whether its readiness says ready.
    pub ready: bool,
    /// Whether it has started (its startup probe, if any, passed).
    pub started: bool,
}

fn time(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(ns)).ok())
        .flatten()
        .map(Time)
}

fn terminated(o: &Observed) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: o.exit_code,
        reason: Some(if o.reason.is_empty() {
            if o.exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            }
        } else {
            o.reason.clone()
        }),
        message: (!o.message.is_empty()).then(|| o.message.clone()),
        started_at: time(o.started_at),
        finished_at: time(o.finished_at),
        container_id: Some(format!("containerd://{}", o.id)),
        signal: None,
    }
}

/// The status of one container.
pub fn container_status(name: &str, image: &str, v: &ContainerView) -> ContainerStatus {
    let state = match (&v.current, &v.waiting) {
        (Some(o), None) if o.state == ObservedState::Running => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time(o.started_at),
            }),
            ..Default::default()
        },
        (Some(o), None) if o.state == ObservedState::Exited => ContainerState {
            terminated: Some(terminated(o)),
            ..Default::default()
        },
        (_, Some((reason, message))) => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: (!message.is_empty()).then(|| message.clone()),
            }),
            ..Default::default()
        },
        _ => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                message: None,
            }),
            ..Default::default()
        },
    };
    // A container waiting to restart shows its last run in lastState.
    let last = match (&v.current, &v.waiting) {
        (Some(o), Some(_)) if o.state == ObservedState::Exited => Some(o),
        _ => v
            .previous
            .as_ref()
            .filter(|p| p.state == ObservedState::Exited),
    };
    let running = state.running.is_some();
    ContainerStatus {
        name: name.to_string(),
        image: image.to_string(),
        image_id: v
            .current
            .as_ref()
            .map(|o| o.image_ref.clone())
            .unwrap_or_default(),
        container_id: v.current.as_ref().map(|o| format!("containerd://{}", o.id)),
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: last.map(terminated),
            ..Default::default()
        }),
        ready: running && v.ready,
        started: Some(running && v.started),
        restart_count: v.current.as_ref().map_or(0, |o| o.attempt as i32),
        ..Default::default()
    }
}

/// Inputs of the pod's status.
pub struct PodView<'a> {
    /// The pod as the API has it.
    pub pod: &'a Pod,
    /// Whether a sandbox is ready.
    pub sandbox_ready: bool,
    /// The pod's IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
    /// Init containers, in spec order.
    pub init: Vec<(String, String, ContainerView)>,
    /// App containers, in spec order.
    pub app: Vec<(String, String, ContainerView)>,
    /// Phase decided by the worker (Failed or Succeeded for a finished pod).
    pub phase: &'static str,
    /// A pod-level reason and message (a rejected pod, a deadline).
    pub reason: Option<(String, String)>,
}

fn cond(
    prev: &[PodCondition],
    ty: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let transition = prev
        .iter()
        .find(|c| c.type_ == ty && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(now);
    PodCondition {
        type_: ty.into(),
        status: status.into(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: Some(transition),
        ..Default::default()
    }
}

/// Upstream's reason for a pod whose containers are ready but a readiness gate is not.
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// Upstream's message when some of the pod's `readinessGates` have no condition, or one that is not
/// `True`, in `conditions` (written by others); None when every gate is `True`.
pub fn gates_not_ready(pod: &Pod, conditions: &[PodCondition]) -> Option<String> {
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref())?;
    let msgs: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let ty = &g.condition_type;
            match conditions.iter().find(|c| &c.type_ == ty) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {ty:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {ty:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!msgs.is_empty()).then(|| msgs.join(", "))
}

/// The pod's status.
pub fn compute(v: &PodView<'_>) -> PodStatus {
    let prev = v.pod.status.clone().unwrap_or_default();
    let prev_conds = prev.conditions.clone().unwrap_or_default();
    // A sidecar (an init container with `restartPolicy: Always`) is done once it runs.
    let sidecar = |name: &str| {
        v.pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == name))
            .is_some_and(|c| c.restart_policy.as_deref() == Some("Always"))
    };
    let done = |name: &str, c: &ContainerView| {
        c.current.as_ref().is_some_and(|o| {
            (o.state == ObservedState::Exited && o.exit_code == 0)
                || (o.state == ObservedState::Running && sidecar(name))
        })
    };
    let init_done = v.init.iter().all(|(n, _, c)| done(n, c));
    // Running sidecars count for readiness as app containers do (upstream lists them first).
    let not_ready: Vec<&str> = v
        .init
        .iter()
        .filter(|(n, _, _)| sidecar(n))
        .chain(v.app.iter())
        .filter(|(_, _, c)| {
            !(c.ready
                && c.current
                    .as_ref()
                    .is_some_and(|o| o.state == ObservedState::Running)
                && c.waiting.is_none())
        })
        .map(|(n, _, _)| n.as_str())
        .collect();
    let terminal = matches!(v.phase, "Succeeded" | "Failed");
    let all_ready = not_ready.is_empty() && !terminal;
    let unready_msg =
        (!all_ready).then(|| format!("containers with unready status: [{}]", not_ready.join(" ")));
    let unready_reason = if terminal {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let uninit: Vec<&str> = v
        .init
        .iter()
        .filter(|(n, _, c)| !done(n, c))
        .map(|(n, _, _)| n.as_str())
        .collect();
    let mut conditions = vec![
        cond(
            &prev_conds,
            "PodReadyToStartContainers",
            v.sandbox_ready,
            None,
            None,
        ),
        if init_done || terminal {
            cond(&prev_conds, "Initialized", true, None, None)
        } else {
            cond(
                &prev_conds,
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: [{}]",
                    uninit.join(" ")
                )),
            )
        },
        match (all_ready, gates_not_ready(v.pod, &prev_conds)) {
            (true, Some(msg)) => cond(
                &prev_conds,
                "Ready",
                false,
                Some(READINESS_GATES_NOT_READY),
                Some(msg),
            ),
            _ => cond(
                &prev_conds,
                "Ready",
                all_ready,
                (!all_ready).then_some(unready_reason),
                unready_msg.clone(),
            ),
        },
        cond(
            &prev_conds,
            "ContainersReady",
            all_ready,
            (!all_ready).then_some(unready_reason),
            unready_msg,
        ),
    ];
    conditions.extend(
        prev_conds
            .iter()
            .filter(|c| !OWNED.contains(&c.type_.as_str()))
            .cloned(),
    );
    conditions.sort_by_key(|c| match c.type_.as_str() {
        "PodReadyToStartContainers" => 0,
        "Initialized" => 1,
        "Ready" => 2,
        "ContainersReady" => 3,
        "PodScheduled" => 4,
        _ => 5,
    });
    let statuses = |cs: &[(String, String, ContainerView)]| -> Vec<ContainerStatus> {
        cs.iter()
            .map(|(n, img, c)| container_status(n, img, c))
            .collect()
    };
    let start = prev
        .start_time
        .clone()
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    PodStatus {
        phase: Some(v.phase.to_string()),
        conditions: Some(conditions),
        host_ip: (!v.host_ip.is_empty()).then(|| v.host_ip.clone()),
        host_ips: (!v.host_ip.is_empty()).then(|| {
            vec![HostIP {
                ip: v.host_ip.clone(),
            }]
        }),
        pod_ip: (!v.pod_ip.is_empty()).then(|| v.pod_ip.clone()),
        pod_ips: (!v.pod_ip.is_empty()).then(|| {
            vec![PodIP {
                ip: v.pod_ip.clone(),
            }]
        }),
        start_time: Some(start),
        qos_class: Some(qos_class(v.pod).into()),
        container_statuses: Some(statuses(&v.app)),
        init_container_statuses: (!v.init.is_empty()).then(|| statuses(&v.init)),
        reason: v.reason.as_ref().map(|r| r.0.clone()),
        message: v.reason.as_ref().map(|r| r.1.clone()),
        ..prev
    }
}

/// Whether `a` and `b` differ in more than condition times.
pub fn changed(a: &PodStatus, b: &PodStatus) -> bool {
    let strip = |s: &PodStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time = None;
            c.last_probe_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec};

    fn gated(gates: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: g.to_string(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn condition(ty: &str, status: &str) -> PodCondition {
        PodCondition {
            type_: ty.into(),
            status: status.into(),
            ..Default::default()
        }
    }

    #[test]
    fn readiness_gates_use_upstreams_messages() {
        assert_eq!(gates_not_ready(&Pod::default(), &[]), None);
        let pod = gated(&["example.com/a", "example.com/b"]);
        assert_eq!(
            gates_not_ready(&pod, &[condition("example.com/b", "False")]).as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"example.com/a\" does not exist., \
                 the status of pod readiness gate \"example.com/b\" is not \"True\", but False"
            )
        );
        let both = [
            condition("example.com/a", "True"),
            condition("example.com/b", "True"),
        ];
        assert_eq!(gates_not_ready(&pod, &both), None);
    }

    fn running() -> ContainerView {
        ContainerView {
            current: Some(Observed {
                id: "x".into(),
                state: ObservedState::Running,
                ..Default::default()
            }),
            ready: true,
            started: true,
            ..Default::default()
        }
    }

    fn ready_of(st: &PodStatus) -> PodCondition {
        st.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn a_gate_holds_ready_and_its_condition_is_kept() {
        let mut pod = gated(&["example.com/lb"]);
        let view = |pod: &Pod| {
            compute(&PodView {
                pod,
                sandbox_ready: true,
                pod_ip: String::new(),
                host_ip: String::new(),
                init: vec![],
                app: vec![("c".into(), "img".into(), running())],
                phase: "Running",
                reason: None,
            })
        };
        let st = view(&pod);
        let ready = ready_of(&st);
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some(READINESS_GATES_NOT_READY));
        let containers_ready = st
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "ContainersReady")
            .map(|c| c.status.clone());
        assert_eq!(containers_ready.as_deref(), Some("True"));
        pod.status = Some(PodStatus {
            conditions: Some(vec![condition("example.com/lb", "True")]),
            ..Default::default()
        });
        let st = view(&pod);
        assert_eq!(ready_of(&st).status, "True");
        assert!(st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "example.com/lb" && c.status == "True"));
    }
}
