//! One pod's worker, the kubelet's syncPod: compare the pod's spec with what CRI reports, decide the
//! actions (a new sandbox, the next init container, app containers to start or restart under the
//! restart policy and its back-off, everything to stop for a deleted or finished pod), do them, and
//! write the status. State lives in CRI labels and annotations, so a restarted agent picks up where the
//! last one left off instead of restarting containers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_cri::v1::{
    Container as CriContainer, ContainerState as CriState, PodSandbox, PodSandboxState,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource};
use serde_json::json;
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::deadline;
use super::events::EventSink;
use super::probe::{Probes, Target};
use super::spec::{self, ContainerInputs, DnsSettings};
use super::status::{self, ContainerView, Observed, ObservedState, PodView};
use super::termination;
use super::volumes;
use crate::cri::{labels, Cri};
use crate::error::{Error, Result};

/// How long a pod's status write or delete may take before the sync moves on (and retries later).
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// How many conflicts the final status write reads the pod again after, before the next sync tries.
const FINAL_STATUS_CONFLICTS: u32 = 5;

/// What every worker shares.
pub struct Shared {
    /// The API.
    pub client: Client,
    /// The runtime.
    pub cri: Cri,
    /// This node's name.
    pub node: String,
    /// This node's IP.
    pub host_ip: String,
    /// Where pod directories go.
    pub root: PathBuf,
    /// Where container logs go.
    pub log_root: PathBuf,
    /// How seccomp profiles are chosen.
    pub seccomp: super::security::SeccompSettings,
    /// Cluster DNS.
    pub dns: DnsSettings,
    /// CPUs of the node (resourceFieldRef without a limit).
    pub cpus: u64,
    /// Memory of the node.
    pub memory: u64,
    /// Events as `kubelet` from this node.
    pub events: EventSink,
    /// Projected service-account tokens.
    pub tokens: crate::pod::token::TokenCache,
    /// Registry mirrors and their credentials.
    pub registries: Arc<crate::image::mirrors::Registries>,
}

/// What a worker sees: the pod (None once it is gone from the API) and its CRI objects.
#[derive(Clone, Default)]
pub struct Input {
    /// The pod.
    pub pod: Option<Arc<Pod>>,
    /// Its sandboxes.
    pub sandboxes: Vec<PodSandbox>,
    /// Its containers.
    pub containers: Vec<CriContainer>,
}

/// After a sync.
pub enum Next {
    /// Look again after this long (or on any change).
    After(Duration),
    /// Nothing is left of the pod: the worker ends.
    Done,
}

/// One pod's worker state.
pub struct Worker {
    sh: Arc<Shared>,
    uid: String,
    backoff: Backoff,
    exited: HashMap<String, Observed>,
    sandbox_ips: HashMap<String, String>,
    waiting: HashMap<String, (String, String)>,
    last_status: Option<PodStatus>,
    announced_backoff: HashMap<String, Instant>,
    deleted: bool,
    deadline_announced: bool,
    probes: Probes,
    // Containers this worker asked the runtime to start (a created one not in here was left by an
    // agent that died before starting it).
    started: std::collections::HashSet<String>,
    // What this worker made that the relist may not show yet: a second sync before the next relist
    // must not make them again (the runtime would refuse the reused name).
    new_sandbox: Option<(String, u32)>,
    new_containers: HashMap<String, (String, u32)>,
    /// Containers killed because their spec changed: restarted whatever the restart policy, at once.
    spec_changed: std::collections::HashSet<String>,
}

fn is_image_local_only(image: &str) -> bool {
    image.starts_with("localhost/")
}

/// The pull policy, defaulted as the API server does when the field is missing.
fn pull_policy(c: &Container) -> String {
    if let Some(p) = &c.image_pull_policy {
        return p.clone();
    }
    let img = c.image.as_deref().unwrap_or_default();
    let tagged = img
        .rsplit('/')
        .next()
        .is_some_and(|last| last.contains(':'))
        || img.contains('@');
    if !tagged || img.ends_with(":latest") {
        "Always".into()
    } else {
        "IfNotPresent".into()
    }
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

fn restart_policy(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".into())
}

fn grace_of(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(0)
}

impl Worker {
    /// A worker for the pod `uid`.
    pub fn new(sh: Arc<Shared>, uid: String) -> Worker {
        Worker {
            sh,
            uid,
            backoff: Backoff::default(),
            exited: HashMap::new(),
            sandbox_ips: HashMap::new(),
            waiting: HashMap::new(),
            last_status: None,
            announced_backoff: HashMap::new(),
            deleted: false,
            deadline_announced: false,
            probes: Probes::default(),
            started: std::collections::HashSet::new(),
            new_sandbox: None,
            new_containers: HashMap::new(),
            spec_changed: std::collections::HashSet::new(),
        }
    }

    async fn event(&self, pod: &Pod, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        self.sh.events.send(pod.object_ref(&()), ev);
    }

    /// The CRI runtime handler of the pod's RuntimeClass ("" without one, the runtime's default), or
    /// why it cannot be known.
    async fn runtime_handler(&self, pod: &Pod) -> std::result::Result<String, String> {
        let Some(name) = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref())
            .filter(|n| !n.is_empty())
        else {
            return Ok(String::new());
        };
        let api: Api<RuntimeClass> = Api::all(self.sh.client.clone());
        match api.get_opt(name).await {
            Ok(Some(rc)) => Ok(rc.handler),
            Ok(None) => Err(format!("runtimeclasses.node.k8s.io {name:?} not found")),
            Err(e) => Err(format!("getting RuntimeClass {name:?}: {e}")),
        }
    }

    /// One sync of the pod.
    pub async fn sync(&mut self, input: &Input) -> Next {
        let r = match input.pod.as_deref() {
            None => self.teardown(input, None).await,
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                self.teardown(input, Some(pod)).await
            }
            Some(pod) => self.run_pod(pod, input).await,
        };
        match r {
            Ok(n) => n,
            Err(e) => {
                warn!(pod = %self.uid, error = %e, "pod sync failed; retrying");
                Next::After(Duration::from_secs(2))
            }
        }
    }

    /// Stops everything of the pod; once the pod is gone from the API, removes it.
    async fn teardown(&mut self, input: &Input, pod: Option<&Pod>) -> Result<Next> {
        self.kill_containers(input, pod).await;
        for s in &input.sandboxes {
            if s.state == PodSandboxState::SandboxReady as i32 {
                self.sh.cri.stop_sandbox(&s.id).await?;
            }
        }
        match pod {
            Some(p) => {
                if !self.deleted {
                    // The final status, then the object goes (grace 0: everything is stopped).
                    let mut final_input = input.clone();
                    for c in final_input.containers.iter_mut() {
                        c.state = CriState::ContainerExited as i32;
                    }
                    self.exited.clear();
                    // As the kubelet, the delete waits for the final status: watchers and `kubectl
                    // wait` see the containers terminated and the pod not ready before it goes. A
                    // failure returns, and the next sync tries again.
                    if !self.write_final_status(p, &final_input).await? {
                        self.deleted = true;
                        return Ok(Next::After(Duration::from_secs(1)));
                    }
                    let api: Api<Pod> = Api::namespaced(
                        self.sh.client.clone(),
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                    );
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: p.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match tokio::time::timeout(
                        API_TIMEOUT,
                        api.delete(p.metadata.name.as_deref().unwrap_or_default(), &dp),
                    )
                    .await
                    .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
                    {
                        Ok(_) => {
                            info!(pod = %pod_key(p), "pod stopped and deleted");
                            self.deleted = true;
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                            self.deleted = true
                        }
                        Err(e) => return Err(Error::kube("deleting the pod", e)),
                    }
                }
                Ok(Next::After(Duration::from_secs(1)))
            }
            None => {
                for c in &input.containers {
                    if let Err(e) = self.sh.cri.remove_container(&c.id).await {
                        debug!(error = %e, "container not removed");
                    }
                }
                for s in &input.sandboxes {
                    self.sh.cri.remove_sandbox(&s.id).await?;
                }
                volumes::cleanup(&self.sh.root, &self.uid);
                self.sh.tokens.forget(&self.uid);
                if input.sandboxes.is_empty() && input.containers.is_empty() {
                    super::resources::remove_pod_cgroups(&self.uid);
                }
                if input.sandboxes.is_empty() && input.containers.is_empty() {
                    Ok(Next::Done)
                } else {
                    Ok(Next::After(Duration::from_secs(1)))
                }
            }
        }
    }

    /// The pod ran past `activeDeadlineSeconds`: as the kubelet, a `DeadlineExceeded` Event, its
    /// containers killed (preStop, then the grace period) and its sandbox stopped, and the status
    /// `Failed` with upstream's reason and message.
    async fn deadline_exceeded(&mut self, pod: &Pod, input: &Input) -> Result<Next> {
        if !self.deadline_announced {
            self.deadline_announced = true;
            info!(pod = %pod_key(pod), "active deadline exceeded");
            self.event(pod, false, deadline::REASON, deadline::MESSAGE.into())
                .await;
        }
        self.kill_containers(input, Some(pod)).await;
        self.stop_everything(input).await;
        let mut final_input = input.clone();
        for c in final_input.containers.iter_mut() {
            c.state = CriState::ContainerExited as i32;
        }
        self.exited.clear();
        let sandbox = input
            .sandboxes
            .iter()
            .max_by_key(|s| s.created_at)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let reason = (deadline::REASON.to_string(), deadline::MESSAGE.to_string());
        self.write_status(
            pod,
            &final_input,
            Some(&sandbox),
            false,
            "Failed",
            Some(reason),
        )
        .await;
        Ok(Next::After(Duration::from_secs(1)))
    }

    /// Stops the pod's running (or created) containers, each after its preStop hook with the pod's
    /// grace period, or, for a pod that is gone, the grace period recorded on the container.
    async fn kill_containers(&self, input: &Input, pod: Option<&Pod>) {
        let grace = pod.map(grace_of);
        let running: Vec<&CriContainer> = input
            .containers
            .iter()
            .filter(|c| {
                c.state == CriState::ContainerRunning as i32
                    || c.state == CriState::ContainerCreated as i32
            })
            .collect();
        // Main containers first, then the init containers still running (sidecars), as upstream
        // stops sidecars after the containers they serve.
        for sidecars in [false, true] {
            let mut stops = Vec::new();
            for c in running.iter().filter(|c| {
                (c.annotations
                    .get(labels::CONTAINER_TYPE)
                    .map(String::as_str)
                    == Some("init"))
                    == sidecars
            }) {
                let name = c
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                let g = grace.unwrap_or_else(|| {
                    c.annotations
                        .get(labels::GRACE_PERIOD)
                        .and_then(|g| g.parse().ok())
                        .unwrap_or(30)
                });
                if let Some(p) = pod {
                    self.event(p, false, "Killing", format!("Stopping container {name}"))
                        .await;
                    self.pre_stop(p, &name, &c.id, g).await;
                }
                let cri = self.sh.cri.clone();
                let id = c.id.clone();
                stops.push(async move { cri.stop_container(&id, g).await });
            }
            for r in futures::future::join_all(stops).await {
                if let Err(e) = r {
                    warn!(pod = %self.uid, error = %e, "container not stopped");
                }
            }
        }
    }

    /// StartContainer on a created container, with its Events; a failure becomes its waiting state
    /// (RunContainerError) and a back-off step. Whether it started.
    async fn start_created(&mut self, pod: &Pod, c: &Container, id: &str) -> bool {
        self.started.insert(id.to_string());
        if let Err(e) = self.sh.cri.start_container(id).await {
            let msg = e.runtime_message();
            self.event(pod, true, "Failed", format!("Error: {msg}"))
                .await;
            self.waiting
                .insert(c.name.clone(), ("RunContainerError".into(), msg));
            self.backoff.failed(&c.name, Instant::now(), Duration::ZERO);
            return false;
        }
        self.waiting.remove(&c.name);
        self.event(
            pod,
            false,
            "Started",
            format!("Started container {}", c.name),
        )
        .await;
        true
    }

    /// Upstream's runAsNonRoot check: the effective runAsUser must not be 0, and without one the image's
    /// user must be numeric and not 0.
    async fn verify_non_root(
        &self,
        pod: &Pod,
        c: &Container,
        image: &str,
    ) -> std::result::Result<(), String> {
        let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let sc = c.security_context.as_ref();
        let non_root = sc
            .and_then(|s| s.run_as_non_root)
            .or_else(|| pod_sc.and_then(|s| s.run_as_non_root))
            .unwrap_or(false);
        if !non_root {
            return Ok(());
        }
        let key = pod_key(pod);
        let uid = sc
            .and_then(|s| s.run_as_user)
            .or_else(|| pod_sc.and_then(|s| s.run_as_user));
        if let Some(u) = uid {
            return if u == 0 {
                Err(format!(
                    "container's runAsUser breaks non-root policy (pod: {key:?}, container: {})",
                    c.name
                ))
            } else {
                Ok(())
            };
        }
        let img = self.sh.cri.image_status(image).await.ok().flatten();
        match img {
            Some(i) => match (i.uid.map(|u| u.value), i.username.as_str()) {
                (Some(0), _) => Err(format!(
                    "container has runAsNonRoot and image will run as root (pod: {key:?}, container: {})",
                    c.name
                )),
                (Some(_), _) => Ok(()),
                (None, "") => Err(format!(
                    "container has runAsNonRoot and image will run as root (pod: {key:?}, container: {})",
                    c.name
                )),
                (None, name) => Err(format!(
                    "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root (pod: {key:?}, container: {})",
                    c.name
                )),
            },
            None => Err(format!("image {image:?} not found: cannot verify runAsNonRoot")),
        }
    }

    /// Stops (without removing) every container and sandbox of the pod.
    async fn stop_everything(&self, input: &Input) {
        for c in &input.containers {
            if c.state == CriState::ContainerRunning as i32
                || c.state == CriState::ContainerCreated as i32
            {
                if let Err(e) = self.sh.cri.stop_container(&c.id, 0).await {
                    warn!(pod = %self.uid, error = %e, "container not stopped");
                }
            }
        }
        for sb in &input.sandboxes {
            if sb.state == PodSandboxState::SandboxReady as i32 {
                if let Err(e) = self.sh.cri.stop_sandbox(&sb.id).await {
                    warn!(pod = %self.uid, error = %e, "sandbox not stopped");
                }
            }
        }
    }

    async fn pre_stop(&self, pod: &Pod, name: &str, id: &str, grace: i64) {
        let hook = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == name))
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.clone());
        if let Some(h) = hook {
            let t = Duration::from_secs(grace.max(1) as u64);
            if let Err(msg) = self.run_hook(&h, id, t).await {
                self.event(
                    pod,
                    true,
                    "FailedPreStopHook",
                    format!("PreStopHook failed: {msg}"),
                )
                .await;
            }
        }
    }

    /// Runs a lifecycle hook (exec, httpGet to the pod, sleep) against container `id`.
    async fn run_hook(
        &self,
        h: &k8s_openapi::api::core::v1::LifecycleHandler,
        id: &str,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        if let Some(e) = &h.exec {
            let cmd = e.command.clone().unwrap_or_default();
            return match self.sh.cri.exec_sync(id, cmd, timeout).await {
                Ok(r) if r.exit_code == 0 => Ok(()),
                Ok(r) => Err(format!(
                    "command '{}' exited with {}: {}",
                    e.command.clone().unwrap_or_default().join(" "),
                    r.exit_code,
                    String::from_utf8_lossy(&r.stderr).trim()
                )),
                Err(e) => Err(e.runtime_message()),
            };
        }
        if let Some(sl) = &h.sleep {
            let d = Duration::from_secs(sl.seconds.max(0) as u64).min(timeout);
            tokio::time::sleep(d).await;
            return Ok(());
        }
        if let Some(g) = &h.http_get {
            let ip = self
                .sandbox_ips
                .values()
                .next()
                .cloned()
                .unwrap_or_default();
            let host = g.host.clone().filter(|s| !s.is_empty()).unwrap_or(ip);
            let port = match &g.port {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => *n,
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => {
                    s.parse().unwrap_or(0)
                }
            };
            let port = u16::try_from(port).map_err(|_| format!("invalid port {port}"))?;
            let path = g.path.clone().unwrap_or_else(|| "/".into());
            return match tokio::time::timeout(timeout, super::probe::http_get(&host, port, &path, &[])).await {
                Ok(Ok(code)) if (200..400).contains(&code) => Ok(()),
                Ok(Ok(code)) => Err(format!("HTTP lifecycle hook ({path}) for Container in Pod failed with statuscode: {code}")),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timed out".into()),
            };
        }
        Ok(())
    }

    async fn observe(&mut self, c: &CriContainer) -> Observed {
        let state = match CriState::try_from(c.state) {
            Ok(CriState::ContainerRunning) => ObservedState::Running,
            Ok(CriState::ContainerExited) | Ok(CriState::ContainerUnknown) => ObservedState::Exited,
            _ => ObservedState::Created,
        };
        let attempt = c.metadata.as_ref().map_or(0, |m| m.attempt);
        if state == ObservedState::Exited {
            if let Some(o) = self.exited.get(&c.id) {
                return o.clone();
            }
        }
        let mut o = Observed {
            id: c.id.clone(),
            state,
            attempt,
            image_ref: c.image_ref.clone(),
            ..Default::default()
        };
        if state != ObservedState::Created {
            if let Ok(st) = self.sh.cri.container_status(&c.id).await {
                if state == ObservedState::Exited {
                    o.message = termination::join(&st.message, &termination::message(&st));
                } else {
                    o.message = st.message.clone();
                }
                o.started_at = st.started_at;
                o.finished_at = st.finished_at;
                o.exit_code = st.exit_code;
                o.reason = st.reason;
                if !st.image_ref.is_empty() {
                    o.image_ref = st.image_ref;
                }
                if state == ObservedState::Exited {
                    self.exited.insert(c.id.clone(), o.clone());
                }
            }
        }
        o
    }

    /// The two newest instances of `name` in `sandbox`.
    async fn view(&mut self, input: &Input, sandbox: &str, name: &str) -> ContainerView {
        let mut mine: Vec<&CriContainer> = input
            .containers
            .iter()
            .filter(|c| {
                c.pod_sandbox_id == sandbox && c.metadata.as_ref().is_some_and(|m| m.name == name)
            })
            .collect();
        mine.sort_by_key(|c| {
            std::cmp::Reverse((c.metadata.as_ref().map_or(0, |m| m.attempt), c.created_at))
        });
        if let Some((id, attempt)) = self.new_containers.get(name).cloned() {
            if input.containers.iter().any(|c| c.id == id) {
                self.new_containers.remove(name);
            } else {
                return ContainerView {
                    current: Some(Observed {
                        id,
                        state: ObservedState::Created,
                        attempt,
                        ..Default::default()
                    }),
                    previous: None,
                    waiting: None,
                    ready: false,
                    started: false,
                };
            }
        }
        let current = match mine.first() {
            Some(c) => Some(self.observe(c).await),
            None => None,
        };
        let previous = match mine.get(1) {
            Some(c) => Some(self.observe(c).await),
            None => None,
        };
        ContainerView {
            current,
            previous,
            waiting: self.waiting.get(name).cloned(),
            ready: true,
            started: true,
        }
    }

    fn next_attempt(input: &Input, name: &str) -> u32 {
        input
            .containers
            .iter()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|c| c.metadata.as_ref().map_or(0, |m| m.attempt) + 1)
            .max()
            .unwrap_or(0)
    }

    async fn run_pod(&mut self, pod: &Pod, input: &Input) -> Result<Next> {
        let spec = pod.spec.clone().unwrap_or_default();
        let policy = restart_policy(pod);
        let api_phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if matches!(api_phase.as_str(), "Succeeded" | "Failed") {
            // A finished pod keeps nothing running (its sandbox goes, and with it the pod's address),
            // but its exited containers stay until the pod is deleted: their logs are what
            // `kubectl logs` shows for a completed Job. Its status stays as written.
            self.stop_everything(input).await;
            return Ok(Next::After(Duration::from_secs(30)));
        }
        if deadline::exceeded(pod, k8s_openapi::jiff::Timestamp::now()) {
            return self.deadline_exceeded(pod, input).await;
        }
        let mut sandboxes = input.sandboxes.clone();
        sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        let mut ready = sandboxes
            .iter()
            .find(|s| s.state == PodSandboxState::SandboxReady as i32)
            .cloned();
        if let Some((id, attempt)) = self.new_sandbox.clone() {
            if sandboxes.iter().any(|s| s.id == id) {
                self.new_sandbox = None;
            } else if ready.is_none() {
                ready = Some(PodSandbox {
                    id,
                    metadata: Some(k8s_cri::v1::PodSandboxMetadata {
                        attempt,
                        ..Default::default()
                    }),
                    state: PodSandboxState::SandboxReady as i32,
                    ..Default::default()
                });
            }
        }
        let attempt = sandboxes
            .first()
            .and_then(|s| s.metadata.as_ref())
            .map_or(0, |m| m.attempt + 1);
        let sandbox_config = |attempt: u32| {
            spec::sandbox(
                pod,
                attempt,
                &self.sh.log_root,
                &self.sh.dns,
                &self.sh.seccomp,
            )
        };
        let host_paths = match volumes::prepare(
            &self.sh.client,
            &self.sh.tokens,
            &self.sh.root,
            pod,
            self.sh.memory,
        )
        .await
        {
            Ok(h) => h,
            Err(e) => {
                let note = match e {
                    Error::Mount(m) => m,
                    e => format!("MountVolume.SetUp failed: {e}"),
                };
                self.event(pod, true, "FailedMount", note).await;
                self.write_status(pod, input, None, false, "Pending", None)
                    .await;
                return Ok(Next::After(Duration::from_secs(10)));
            }
        };
        let (sandbox_id, sandbox_cfg) = match ready {
            Some(s) => {
                let a = s.metadata.as_ref().map_or(0, |m| m.attempt);
                (s.id.clone(), sandbox_config(a))
            }
            None => {
                // A dead sandbox takes its containers with it; a new one starts over.
                for c in &input.containers {
                    if c.state == CriState::ContainerRunning as i32 {
                        let _ = self.sh.cri.stop_container(&c.id, 0).await;
                    }
                }
                if let Some(rem) = self.backoff.remaining("sandbox", Instant::now()) {
                    return Ok(Next::After(rem));
                }
                let cfg = sandbox_config(attempt);
                let started = match self.runtime_handler(pod).await {
                    Ok(handler) => self
                        .sh
                        .cri
                        .run_sandbox(cfg.clone(), &handler)
                        .await
                        .map_err(|e| e.runtime_message()),
                    Err(why) => Err(why),
                };
                match started {
                    Ok(id) => {
                        info!(pod = %pod_key(pod), sandbox = %id, "sandbox started");
                        self.backoff.reset("sandbox");
                        self.new_sandbox = Some((id.clone(), attempt));
                        (id, cfg)
                    }
                    Err(why) => {
                        self.backoff
                            .failed("sandbox", Instant::now(), Duration::ZERO);
                        self.event(
                            pod,
                            true,
                            "FailedCreatePodSandBox",
                            format!("Failed to create pod sandbox: {why}"),
                        )
                        .await;
                        self.write_status(pod, input, None, false, "Pending", None)
                            .await;
                        return Ok(Next::After(self.backoff.delay("sandbox")));
                    }
                }
            }
        };
        let ip = match self.sandbox_ips.get(&sandbox_id) {
            Some(ip) => ip.clone(),
            None => {
                let st = self.sh.cri.sandbox_status(&sandbox_id).await?;
                let ip = st.network.map(|n| n.ip).unwrap_or_default();
                self.sandbox_ips.insert(sandbox_id.clone(), ip.clone());
                ip
            }
        };
        let pod_dir = volumes::pod_dir(&self.sh.root, &self.uid);
        let hosts = pod_dir.join("etc-hosts");
        if !hosts.exists() {
            std::fs::create_dir_all(&pod_dir).map_err(|e| Error::io(&pod_dir, e))?;
            std::fs::write(&hosts, spec::hosts_file(pod, &ip)).map_err(|e| Error::io(&hosts, e))?;
        }
        // The pod as its containers' env sees it (IPs known now).
        let mut seen = pod.clone();
        {
            let st = seen.status.get_or_insert_with(Default::default);
            st.pod_ip = Some(ip.clone());
            st.host_ip = Some(self.sh.host_ip.clone());
        }
        let mut wake = Duration::from_secs(10);
        let mut phase = "Pending";
        let mut reason = None;

        // Init containers, one at a time, each to success; a sidecar (`restartPolicy: Always`) only to
        // running, and kept running (restarted under the back-off) for the pod's life.
        let mut init_done = true;
        let initialized_before = spec.containers.iter().any(|a| {
            input.containers.iter().any(|x| {
                x.pod_sandbox_id == sandbox_id
                    && x.metadata.as_ref().is_some_and(|m| m.name == a.name)
            })
        });
        for c in spec.init_containers.iter().flatten() {
            let v = self.view(input, &sandbox_id, &c.name).await;
            if c.restart_policy.as_deref() == Some("Always") {
                match v.current.as_ref().map(|o| o.state) {
                    Some(ObservedState::Running) => {
                        self.waiting.remove(&c.name);
                        let Some(o) = v.current.as_ref() else {
                            continue;
                        };
                        // A sidecar is probed as an app container is; a failed liveness or startup
                        // probe restarts it.
                        if let Some(d) = self.probe(pod, c, o, &ip).await {
                            wake = wake.min(d);
                        }
                        // The next init container waits for the sidecar's startup probe.
                        if !initialized_before && !self.probes.started(c, &o.id) {
                            init_done = false;
                            break;
                        }
                        continue;
                    }
                    Some(ObservedState::Created) => {}
                    _ => {
                        let exited = v
                            .current
                            .as_ref()
                            .filter(|o| o.state == ObservedState::Exited);
                        match self.restart_gate(pod, &c.name, exited).await {
                            Some(d) => wake = wake.min(d),
                            None => {
                                let attempt = Self::next_attempt(input, &c.name);
                                self.start(
                                    &seen,
                                    c,
                                    "init",
                                    attempt,
                                    &host_paths,
                                    &sandbox_id,
                                    &sandbox_cfg,
                                )
                                .await;
                                wake = Duration::from_millis(500);
                            }
                        }
                    }
                }
                // Once the app containers exist, a sidecar's restart holds nothing back.
                if initialized_before {
                    continue;
                }
                init_done = false;
                break;
            }
            match v.current.as_ref().map(|o| (o.state, o.exit_code)) {
                Some((ObservedState::Exited, 0)) => {
                    self.waiting.remove(&c.name);
                    continue;
                }
                Some((ObservedState::Running, _)) => {
                    init_done = false;
                    break;
                }
                Some((ObservedState::Exited, _)) if policy == "Never" => {
                    init_done = false;
                    phase = "Failed";
                    break;
                }
                _ => {}
            }
            init_done = false;
            let exited = v
                .current
                .as_ref()
                .filter(|o| o.state == ObservedState::Exited);
            if let Some(d) = self.restart_gate(pod, &c.name, exited).await {
                wake = wake.min(d);
                break;
            }
            let attempt = Self::next_attempt(input, &c.name);
            self.start(
                &seen,
                c,
                "init",
                attempt,
                &host_paths,
                &sandbox_id,
                &sandbox_cfg,
            )
            .await;
            wake = Duration::from_millis(500);
            break;
        }

        if init_done && phase != "Failed" {
            let mut all_exited = true;
            let mut any_failed = false;
            let mut running = false;
            for c in &spec.containers {
                let v = self.view(input, &sandbox_id, &c.name).await;
                match v.current.as_ref().map(|o| (o.state, o.exit_code)) {
                    Some((ObservedState::Running, _)) => {
                        all_exited = false;
                        running = true;
                        self.waiting.remove(&c.name);
                        if let Some(o) = v.current.as_ref() {
                            if self.kill_if_changed(pod, c, o, input).await {
                                wake = Duration::from_millis(500);
                                continue;
                            }
                            if let Some(d) = self.probe(pod, c, o, &ip).await {
                                wake = wake.min(d);
                            }
                        }
                    }
                    Some((ObservedState::Exited, code)) => {
                        let changed = self.spec_changed.remove(&c.name);
                        let restart =
                            changed || policy == "Always" || (policy == "OnFailure" && code != 0);
                        if code != 0 && !changed {
                            any_failed = true;
                        }
                        if !restart {
                            self.waiting.remove(&c.name);
                            continue;
                        }
                        all_exited = false;
                        running = true;
                        let exited = v.current.clone();
                        if !changed {
                            if let Some(d) = self.restart_gate(pod, &c.name, exited.as_ref()).await
                            {
                                wake = wake.min(d);
                                continue;
                            }
                        }
                        let attempt = Self::next_attempt(input, &c.name);
                        self.start(
                            &seen,
                            c,
                            "regular",
                            attempt,
                            &host_paths,
                            &sandbox_id,
                            &sandbox_cfg,
                        )
                        .await;
                        wake = Duration::from_millis(500);
                    }
                    Some((ObservedState::Created, _)) => {
                        all_exited = false;
                        // Created but never started by this worker: an agent was killed between
                        // CreateContainer and StartContainer. Start it now.
                        if let Some(o) = v.current.as_ref() {
                            if !self.started.contains(&o.id) {
                                info!(pod = %pod_key(pod), container = %c.name, "starting a container left created");
                                self.start_created(pod, c, &o.id).await;
                                wake = Duration::from_millis(500);
                            }
                        }
                    }
                    None => {
                        all_exited = false;
                        if let Some(d) = self.backoff.remaining(&c.name, Instant::now()) {
                            wake = wake.min(d);
                            continue;
                        }
                        self.start(
                            &seen,
                            c,
                            "regular",
                            0,
                            &host_paths,
                            &sandbox_id,
                            &sandbox_cfg,
                        )
                        .await;
                        wake = Duration::from_millis(500);
                    }
                }
            }
            phase = if all_exited {
                if any_failed {
                    "Failed"
                } else {
                    "Succeeded"
                }
            } else if running {
                "Running"
            } else {
                "Pending"
            };
            if phase == "Failed" && policy == "Never" {
                reason = None;
            }
        }
        self.write_status(pod, input, Some(&sandbox_id), true, phase, reason.take())
            .await;
        if matches!(phase, "Succeeded" | "Failed") {
            return Ok(Next::After(Duration::from_secs(1)));
        }
        if let Some(left) = deadline::remaining(pod, k8s_openapi::jiff::Timestamp::now()) {
            wake = wake.min(left.max(Duration::from_millis(100)));
        }
        Ok(Next::After(wake))
    }

    /// For a container that exited and should restart: None when it may start now (the back-off is
    /// then advanced), else how long it must wait (and its waiting state is CrashLoopBackOff).
    async fn restart_gate(
        &mut self,
        pod: &Pod,
        name: &str,
        exited: Option<&Observed>,
    ) -> Option<Duration> {
        let Some(o) = exited else {
            return self.backoff.remaining(name, Instant::now());
        };
        let now = Instant::now();
        if let Some(rem) = self.backoff.remaining(name, now) {
            let delay = self.backoff.delay(name);
            self.waiting.insert(
                name.to_string(),
                (
                    "CrashLoopBackOff".into(),
                    format!(
                        "back-off {}s restarting failed container={name} pod={}",
                        delay.as_secs(),
                        pod_key(pod)
                    ),
                ),
            );
            let last = self.announced_backoff.get(name).copied();
            if last.is_none_or(|t| now.duration_since(t) >= delay) {
                self.announced_backoff.insert(name.to_string(), now);
                self.event(
                    pod,
                    true,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {name} in pod {}",
                        pod_key(pod)
                    ),
                )
                .await;
            }
            return Some(rem);
        }
        let ran =
            Duration::from_nanos(u64::try_from((o.finished_at - o.started_at).max(0)).unwrap_or(0));
        self.backoff.failed(name, now, ran);
        None
    }

    /// Pulls if needed, then creates and starts one container; failures become its waiting state.
    #[allow(clippy::too_many_arguments)]
    async fn start(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: &str,
        attempt: u32,
        host_paths: &volumes::HostPaths,
        sandbox_id: &str,
        sandbox_cfg: &k8s_cri::v1::PodSandboxConfig,
    ) {
        let image = c.image.clone().unwrap_or_default();
        let wait = |me: &mut Worker, reason: &str, msg: String| {
            me.waiting.insert(c.name.clone(), (reason.to_string(), msg));
        };
        // Image.
        let present = self
            .sh
            .cri
            .image_status(&image)
            .await
            .ok()
            .flatten()
            .is_some();
        let policy = pull_policy(c);
        // A present `localhost/` image is not pulled again even under `Always`: the built-in images
        // (`localhost/busybox:latest`) exist only where they were imported, unless the site mirrors
        // `localhost`. A missing one is pulled like any other, so it fails as upstream's would
        // (ErrImagePull, then ImagePullBackOff).
        let pull = if present {
            policy == "Always"
                && (!is_image_local_only(&image) || self.sh.registries.mirrors("localhost"))
        } else {
            policy != "Never"
        };
        if !present && policy == "Never" {
            let msg =
                format!("Container image \"{image}\" is not present with pull policy of {policy}");
            self.event(pod, true, "ErrImageNeverPull", msg.clone())
                .await;
            wait(self, "ErrImageNeverPull", msg);
            self.backoff.failed(&c.name, Instant::now(), Duration::ZERO);
            return;
        }
        if pull {
            let key = format!("pull:{}", c.name);
            if self.backoff.remaining(&key, Instant::now()).is_some() {
                let msg = format!("Back-off pulling image \"{image}\"");
                self.event(pod, false, "BackOff", msg.clone()).await;
                wait(self, "ImagePullBackOff", msg);
                return;
            }
            self.event(pod, false, "Pulling", format!("Pulling image \"{image}\""))
                .await;
            let t = Instant::now();
            match self.pull_with_secrets(pod, &image, sandbox_cfg).await {
                Ok(_) => {
                    self.backoff.reset(&key);
                    self.event(
                        pod,
                        false,
                        "Pulled",
                        format!(
                            "Successfully pulled image \"{image}\" in {:.3}s",
                            t.elapsed().as_secs_f64()
                        ),
                    )
                    .await;
                }
                Err(e) => {
                    self.backoff.failed(&key, Instant::now(), Duration::ZERO);
                    let msg = format!("Failed to pull image \"{image}\": {}", e.runtime_message());
                    self.event(pod, true, "Failed", msg.clone()).await;
                    self.event(pod, true, "Failed", "Error: ErrImagePull".into())
                        .await;
                    wait(self, "ErrImagePull", msg);
                    return;
                }
            }
        } else {
            self.event(
                pod,
                false,
                "Pulled",
                format!("Container image \"{image}\" already present on machine"),
            )
            .await;
        }
        // runAsNonRoot is checked against the effective user, as the kubelet does before creating.
        if let Err(msg) = self.verify_non_root(pod, c, &image).await {
            self.event(pod, true, "Failed", format!("Error: {msg}"))
                .await;
            wait(self, "CreateContainerConfigError", msg);
            self.backoff.failed(&c.name, Instant::now(), Duration::ZERO);
            return;
        }
        // Config.
        let env =
            match super::env::build(&self.sh.client, pod, c, self.sh.cpus, self.sh.memory).await {
                Ok(e) => e,
                Err(e) => {
                    self.event(pod, true, "Failed", format!("Error: {e}")).await;
                    wait(self, "CreateContainerConfigError", e.to_string());
                    self.backoff.failed(&c.name, Instant::now(), Duration::ZERO);
                    return;
                }
            };
        let tlog = volumes::pod_dir(&self.sh.root, &self.uid)
            .join("containers")
            .join(&c.name)
            .join(attempt.to_string());
        let _ = std::fs::create_dir_all(tlog.parent().unwrap_or(&tlog));
        let _ = std::fs::write(&tlog, b"");
        let inputs = ContainerInputs {
            container: c,
            kind,
            restart_count: attempt,
            env,
            volumes: host_paths,
            hosts_file: Some(volumes::pod_dir(&self.sh.root, &self.uid).join("etc-hosts")),
            termination_log: Some(tlog),
            seccomp: &self.sh.seccomp,
        };
        let cfg = match spec::container(pod, inputs) {
            Ok(c) => c,
            Err(e) => {
                self.event(pod, true, "Failed", format!("Error: {e}")).await;
                wait(self, "CreateContainerConfigError", e.to_string());
                return;
            }
        };
        let id = match self
            .sh
            .cri
            .create_container(sandbox_id, cfg, sandbox_cfg.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                let msg = e.runtime_message();
                self.event(pod, true, "Failed", format!("Error: {msg}"))
                    .await;
                wait(self, "CreateContainerError", msg);
                self.backoff.failed(&c.name, Instant::now(), Duration::ZERO);
                return;
            }
        };
        self.new_containers
            .insert(c.name.clone(), (id.clone(), attempt));
        self.event(
            pod,
            false,
            "Created",
            format!("Created container {}", c.name),
        )
        .await;
        if !self.start_created(pod, c, &id).await {
            return;
        }
        // postStart runs right after the start; if it fails the container is killed (and restarted
        // under the restart policy), as upstream does.
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.clone()) {
            let t = Duration::from_secs(grace_of(pod).max(1) as u64);
            if let Err(msg) = self.run_hook(&h, &id, t).await {
                self.event(
                    pod,
                    true,
                    "FailedPostStartHook",
                    format!("PostStartHook failed: {msg}"),
                )
                .await;
                self.event(
                    pod,
                    false,
                    "Killing",
                    format!("FailedPostStartHook: container {} will be killed", c.name),
                )
                .await;
                if let Err(e) = self.sh.cri.stop_container(&id, grace_of(pod)).await {
                    warn!(pod = %pod_key(pod), error = %e, "container not stopped");
                }
            }
        }
    }

    /// Pulls `image` with each credential of the pod's `imagePullSecrets` that applies to it, in turn,
    /// until one works, as the kubelet does; then with the registries file's credentials of each mirror
    /// (anonymously when nothing applies).
    async fn pull_with_secrets(
        &mut self,
        pod: &Pod,
        image: &str,
        sandbox_cfg: &k8s_cri::v1::PodSandboxConfig,
    ) -> crate::Result<String> {
        let (entries, missing) = crate::image::credentials::pod_entries(&self.sh.client, pod).await;
        if !missing.is_empty() {
            let msg = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            );
            self.event(pod, true, "FailedToRetrieveImagePullSecret", msg)
                .await;
        }
        let mut creds = crate::image::credentials::for_image(image, &entries);
        creds.extend(self.sh.registries.credentials_for(image));
        if creds.is_empty() {
            return self
                .sh
                .cri
                .pull_image(image, None, Some(sandbox_cfg.clone()))
                .await;
        }
        let mut last = None;
        for auth in creds {
            match self
                .sh
                .cri
                .pull_image(image, Some(auth), Some(sandbox_cfg.clone()))
                .await
            {
                Ok(r) => return Ok(r),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| crate::Error::Config("no credential tried".into())))
    }

    /// Runs the running container's due probes; kills it when startup or liveness gave up on it. When
    /// the next probe is due.
    /// Kills a running container whose spec changed since it was created (its hash annotation differs,
    /// as upstream's `containerChanged`: in practice a new `image`), with `Killing` "Container c
    /// definition changed, will be restarted", its preStop hook and the pod's grace period.
    async fn kill_if_changed(
        &mut self,
        pod: &Pod,
        c: &Container,
        o: &Observed,
        input: &Input,
    ) -> bool {
        let recorded = input
            .containers
            .iter()
            .find(|x| x.id == o.id)
            .and_then(|x| x.annotations.get(labels::CONTAINER_HASH));
        if recorded.is_none_or(|h| *h == spec::container_hash(c)) {
            return false;
        }
        let msg = format!("Container {} definition changed, will be restarted", c.name);
        self.event(pod, false, "Killing", msg).await;
        self.pre_stop(pod, &c.name, &o.id, grace_of(pod)).await;
        if let Err(e) = self.sh.cri.stop_container(&o.id, grace_of(pod)).await {
            warn!(pod = %pod_key(pod), container = %c.name, error = %e, "container not stopped");
            return true;
        }
        self.spec_changed.insert(c.name.clone());
        true
    }

    async fn probe(
        &mut self,
        pod: &Pod,
        c: &Container,
        o: &Observed,
        pod_ip: &str,
    ) -> Option<Duration> {
        if c.startup_probe.is_none() && c.liveness_probe.is_none() && c.readiness_probe.is_none() {
            return None;
        }
        // The container's start as an Instant: its wall-clock start moved onto the monotonic clock.
        let now = Instant::now();
        let wall_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let age = Duration::from_nanos(u64::try_from(wall_now - o.started_at).unwrap_or(0));
        let started = now.checked_sub(age).unwrap_or(now);
        let target = Target {
            cri: &self.sh.cri,
            container_id: &o.id,
            pod_ip,
        };
        let round = self.probes.run_due(c, &target, started, now).await;
        for (reason, msg) in round.events {
            self.event(pod, true, &reason, msg).await;
        }
        if let Some(msg) = round.kill {
            self.event(pod, false, "Killing", msg).await;
            self.pre_stop(pod, &c.name, &o.id, grace_of(pod)).await;
            if let Err(e) = self.sh.cri.stop_container(&o.id, grace_of(pod)).await {
                warn!(pod = %pod_key(pod), container = %c.name, error = %e, "container not stopped");
            }
            return Some(Duration::from_millis(500));
        }
        round.next
    }

    async fn views(
        &mut self,
        pod: &Pod,
        input: &Input,
        sandbox: &str,
    ) -> (
        Vec<(String, String, ContainerView)>,
        Vec<(String, String, ContainerView)>,
    ) {
        let spec = pod.spec.clone().unwrap_or_default();
        let mut init = Vec::new();
        for c in spec.init_containers.iter().flatten() {
            let mut v = self.view(input, sandbox, &c.name).await;
            if let Some(o) = v
                .current
                .as_ref()
                .filter(|o| o.state == ObservedState::Running)
            {
                if c.restart_policy.as_deref() == Some("Always") {
                    v.started = self.probes.started(c, &o.id);
                    v.ready = self.probes.ready(c, &o.id);
                } else {
                    // An init container is ready once it completed, not while it runs.
                    v.ready = false;
                }
            }
            init.push((c.name.clone(), c.image.clone().unwrap_or_default(), v));
        }
        let mut app = Vec::new();
        for c in &spec.containers {
            let mut v = self.view(input, sandbox, &c.name).await;
            if let Some(o) = v
                .current
                .as_ref()
                .filter(|o| o.state == ObservedState::Running)
            {
                v.started = self.probes.started(c, &o.id);
                v.ready = self.probes.ready(c, &o.id);
            }
            app.push((c.name.clone(), c.image.clone().unwrap_or_default(), v));
        }
        // Sidecars keep their probe state too.
        let names: Vec<&str> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .map(|c| c.name.as_str())
            .collect();
        self.probes.retain(&names);
        (init, app)
    }

    /// Writes the status a stopped pod ends with (every container terminated, not ready); a conflict is
    /// retried on the pod read again, another refusal is logged. Whether the pod is still there (false:
    /// it is gone, or another pod has its name now); an error (the API unreachable) is for the next sync.
    async fn write_final_status(&mut self, pod: &Pod, input: &Input) -> Result<bool> {
        let sandbox = input
            .sandboxes
            .iter()
            .max_by_key(|s| s.created_at)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(
            self.sh.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let mut current = pod.clone();
        let mut attempt = 0;
        loop {
            let phase = final_phase(&current);
            match self
                .try_write_status(&current, input, Some(&sandbox), false, phase, None)
                .await
            {
                Ok(()) => return Ok(true),
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < FINAL_STATUS_CONFLICTS => {}
                // A refusal that a retry cannot change must not keep the pod Terminating forever.
                Err(kube::Error::Api(s))
                    if (400..500).contains(&s.code) && ![409, 429].contains(&s.code) =>
                {
                    warn!(pod = %pod_key(pod), error = %s, "final status refused; deleting the pod without it");
                    return Ok(true);
                }
                Err(e) => return Err(Error::kube("writing the pod's final status", e)),
            }
            attempt += 1;
            debug!(pod = %pod_key(pod), attempt, "final status conflicted; reading the pod again");
            match tokio::time::timeout(API_TIMEOUT, api.get_opt(name))
                .await
                .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
            {
                Ok(Some(p)) if p.metadata.uid == pod.metadata.uid => current = p,
                Ok(_) => return Ok(false),
                Err(e) => return Err(Error::kube("reading the pod for its final status", e)),
            }
        }
    }

    /// [`Worker::try_write_status`], a failure only logged: the next sync writes again.
    async fn write_status(
        &mut self,
        pod: &Pod,
        input: &Input,
        sandbox: Option<&str>,
        sandbox_ready: bool,
        phase: &'static str,
        reason: Option<(String, String)>,
    ) {
        if let Err(e) = self
            .try_write_status(pod, input, sandbox, sandbox_ready, phase, reason)
            .await
        {
            debug!(pod = %pod_key(pod), error = %e, "pod status not written");
        }
    }

    /// Computes the pod's status and writes it when it changed.
    async fn try_write_status(
        &mut self,
        pod: &Pod,
        input: &Input,
        sandbox: Option<&str>,
        sandbox_ready: bool,
        phase: &'static str,
        reason: Option<(String, String)>,
    ) -> std::result::Result<(), kube::Error> {
        // Re-list after actions: what this sync started shows in the next relist; the current view is
        // what the runtime said before, with this sync's waiting reasons.
        let (init, app) = match sandbox {
            Some(s) => self.views(pod, input, s).await,
            None => self.views(pod, input, "").await,
        };
        let pod_ip = sandbox
            .and_then(|s| self.sandbox_ips.get(s).cloned())
            .unwrap_or_default();
        let view = PodView {
            pod,
            sandbox_ready,
            pod_ip,
            host_ip: self.sh.host_ip.clone(),
            init,
            app,
            phase,
            reason,
        };
        let next = status::compute(&view);
        let current = pod.status.clone().unwrap_or_default();
        if !status::changed(&current, &next)
            && self
                .last_status
                .as_ref()
                .is_some_and(|l| !status::changed(l, &next))
        {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(
            self.sh.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        // The status is computed from this version of the pod, and a merge patch replaces whole lists:
        // pinning the resourceVersion keeps conditions others wrote since (readiness gates) from being
        // dropped. A conflict is retried when the newer pod arrives.
        let patch = json!({
            "metadata": {"uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version},
            "status": next,
        });
        tokio::time::timeout(
            API_TIMEOUT,
            api.patch_status(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            ),
        )
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))?;
        debug!(pod = %pod_key(pod), phase, "pod status written");
        self.last_status = Some(next);
        Ok(())
    }
}

/// The phase a stopped pod is written with: a finished one keeps its phase; a running one that restarts
/// always stays Running, others end as their restart policy says.
fn final_phase(pod: &Pod) -> &'static str {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => "Succeeded",
        Some("Failed") => "Failed",
        Some("Running") if restart_policy(pod) == "Always" => "Running",
        _ if restart_policy(pod) == "Always" => "Failed",
        _ => "Succeeded",
    }
}
