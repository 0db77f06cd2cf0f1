//! Column definitions and cells per kind, matching upstream's printers (names, types, priorities).

use serde_json::{json, Value};

use crate::age::since;
use crate::object::{self, path};
use crate::resource::Printer;
use crate::selector::LabelSelector;

pub use super::column::Column;
use super::column::{col, AGE, NAME};

const CONTAINERS: Column = col(
    "Containers",
    "string",
    1,
    "Names of each container in the template.",
);
const IMAGES: Column = col(
    "Images",
    "string",
    1,
    "Images referenced by each container in the template.",
);
const SELECTOR: Column = col("Selector", "string", 1, "The label selector of the pods.");

/// The columns of a printer.
pub fn columns(p: Printer) -> Vec<Column> {
    match p {
        Printer::PersistentVolume
        | Printer::PersistentVolumeClaim
        | Printer::StorageClass
        | Printer::VolumeAttachment
        | Printer::CSIDriver
        | Printer::CSINode
        | Printer::CSIStorageCapacity => super::storage::columns(p),
        Printer::PodTemplate
        | Printer::RuntimeClass
        | Printer::WebhookConfiguration
        | Printer::ValidatingAdmissionPolicy
        | Printer::ValidatingAdmissionPolicyBinding => {
            super::runtime::columns(p)
        }
        Printer::HorizontalPodAutoscaler => super::autoscaling::columns(),
        Printer::Pod => vec![
            NAME,
            col(
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status",
                "string",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            col(
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted.",
            ),
            AGE,
            col("IP", "string", 1, "IP address allocated to the pod."),
            col("Node", "string", 1, "Name of the Node this pod runs on."),
            col(
                "Nominated Node",
                "string",
                1,
                "Name of the node the scheduler nominated for this pod.",
            ),
            col("Readiness Gates", "string", 1, "Pod readiness gates."),
        ],
        Printer::Node => vec![
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col(
                "Version",
                "string",
                0,
                "Kubelet Version reported by the node.",
            ),
            col(
                "Internal-IP",
                "string",
                1,
                "List of addresses reachable to the node.",
            ),
            col(
                "External-IP",
                "string",
                1,
                "List of addresses reachable to the node.",
            ),
            col(
                "OS-Image",
                "string",
                1,
                "OS Image reported by the node from /etc/os-release.",
            ),
            col(
                "Kernel-Version",
                "string",
                1,
                "Kernel Version reported by the node.",
            ),
            col(
                "Container-Runtime",
                "string",
                1,
                "Container runtime version reported by the node.",
            ),
        ],
        Printer::Namespace => vec![
            NAME,
            col("Status", "string", 0, "The status of the namespace"),
            AGE,
        ],
        Printer::Service => vec![
            NAME,
            col("Type", "string", 0, "How the service is exposed."),
            col("Cluster-IP", "string", 0, "The IP address of the service."),
            col("External-IP", "string", 0, "External IPs of the service."),
            col("Port(s)", "string", 0, "The ports exposed by the service."),
            AGE,
            SELECTOR,
        ],
        Printer::Endpoints => vec![
            NAME,
            col("Endpoints", "string", 0, "Endpoints of the service."),
            AGE,
        ],
        Printer::ConfigMap => vec![
            NAME,
            col(
                "Data",
                "integer",
                0,
                "Number of keys in data and binaryData.",
            ),
            AGE,
        ],
        Printer::Secret => vec![
            NAME,
            col("Type", "string", 0, "The type of the secret."),
            col("Data", "integer", 0, "Number of keys in data."),
            AGE,
        ],
        Printer::ServiceAccount => vec![
            NAME,
            col("Secrets", "integer", 0, "Number of secrets referenced."),
            AGE,
        ],
        Printer::Event => vec![
            col(
                "Last Seen",
                "string",
                0,
                "Time since the most recent occurrence.",
            ),
            col("Type", "string", 0, "Type of this event (Normal, Warning)."),
            col("Reason", "string", 0, "Short reason for the transition."),
            col("Object", "string", 0, "The object this event is about."),
            col(
                "Subobject",
                "string",
                1,
                "The part of the object this event is about.",
            ),
            col("Source", "string", 1, "The component reporting this event."),
            col("Message", "string", 0, "Human-readable description."),
            col(
                "First Seen",
                "string",
                1,
                "Time since the first occurrence.",
            ),
            col("Count", "string", 1, "How many times this event occurred."),
            NAME,
        ],
        Printer::EventsV1 | Printer::Default | Printer::Custom => vec![
            NAME,
            col("Created At", "date", 0, "When the object was created."),
        ],
        Printer::Deployment => vec![
            NAME,
            col(
                "Ready",
                "string",
                0,
                "Number of ready replicas out of the desired count.",
            ),
            col(
                "Up-to-date",
                "integer",
                0,
                "Total number of non-terminated pods with the desired template.",
            ),
            col("Available", "integer", 0, "Total number of available pods."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        Printer::ReplicaSet | Printer::ReplicationController => vec![
            NAME,
            col("Desired", "integer", 0, "Number of desired replicas."),
            col("Current", "integer", 0, "Number of observed replicas."),
            col("Ready", "integer", 0, "Number of ready replicas."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        Printer::StatefulSet => vec![
            NAME,
            col(
                "Ready",
                "string",
                0,
                "Number of ready replicas out of the desired count.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
        ],
        Printer::DaemonSet => vec![
            NAME,
            col(
                "Desired",
                "integer",
                0,
                "Number of nodes that should run the daemon pod.",
            ),
            col(
                "Current",
                "integer",
                0,
                "Number of nodes running at least one daemon pod.",
            ),
            col(
                "Ready",
                "integer",
                0,
                "Number of nodes with a ready daemon pod.",
            ),
            col(
                "Up-to-date",
                "integer",
                0,
                "Number of nodes running the updated daemon pod.",
            ),
            col(
                "Available",
                "integer",
                0,
                "Number of nodes with an available daemon pod.",
            ),
            col(
                "Node Selector",
                "string",
                0,
                "Node selector of the daemon pods.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        Printer::Job => vec![
            NAME,
            col("Status", "string", 0, "Status of the job."),
            col(
                "Completions",
                "string",
                0,
                "Succeeded pods out of the desired completions.",
            ),
            col("Duration", "string", 0, "Time the job took to complete."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        Printer::CronJob => vec![
            NAME,
            col("Schedule", "string", 0, "The schedule in Cron format."),
            col("Timezone", "string", 0, "The time zone of the schedule."),
            col(
                "Suspend",
                "boolean",
                0,
                "Whether later executions are suspended.",
            ),
            col("Active", "integer", 0, "Number of running jobs."),
            col(
                "Last Schedule",
                "string",
                0,
                "When the job was last scheduled.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        Printer::NetworkPolicy => vec![
            NAME,
            col(
                "Pod-Selector",
                "string",
                0,
                "The label selector of the pods the policy applies to.",
            ),
            AGE,
        ],
        Printer::Lease => vec![
            NAME,
            col("Holder", "string", 0, "The current holder of the lease."),
            AGE,
        ],
        Printer::Ingress => vec![
            NAME,
            col(
                "Class",
                "string",
                0,
                "The name of the IngressClass resource that should be used for additional configuration",
            ),
            col(
                "Hosts",
                "string",
                0,
                "Hosts that incoming requests are matched against before the ingress rule",
            ),
            col(
                "Address",
                "string",
                0,
                "Address is a list containing ingress points for the load-balancer",
            ),
            col("Ports", "string", 0, "Ports of TLS configurations that open"),
            AGE,
        ],
        Printer::IngressClass => vec![
            NAME,
            col(
                "Controller",
                "string",
                0,
                "Controller that is responsible for handling this class",
            ),
            col(
                "Parameters",
                "string",
                0,
                "A reference to a resource with additional parameters",
            ),
            AGE,
        ],
        Printer::EndpointSlice => vec![
            NAME,
            col(
                "AddressType",
                "string",
                0,
                "The type of addresses in the slice.",
            ),
            col("Ports", "string", 0, "The ports of the slice."),
            col("Endpoints", "string", 0, "The addresses of the slice."),
            AGE,
        ],
        Printer::PodDisruptionBudget => vec![
            NAME,
            col(
                "Min Available",
                "string",
                0,
                "The minimum number of pods that must be available.",
            ),
            col(
                "Max Unavailable",
                "string",
                0,
                "The maximum number of pods that may be unavailable.",
            ),
            col(
                "Allowed Disruptions",
                "integer",
                0,
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE,
        ],
        Printer::ControllerRevision => vec![
            NAME,
            col("Controller", "string", 0, "Controller of the object."),
            col(
                "Revision",
                "integer",
                0,
                "Revision of the ControllerRevision.",
            ),
            AGE,
        ],
        Printer::APIService => vec![
            NAME,
            col(
                "Service",
                "string",
                0,
                "The reference to the service that hosts this API endpoint.",
            ),
            col(
                "Available",
                "string",
                0,
                "Whether this service is available.",
            ),
            AGE,
        ],
        Printer::ResourceQuota => vec![
            NAME,
            AGE,
            col(
                "Request",
                "string",
                0,
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            col(
                "Limit",
                "string",
                0,
                "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            ),
        ],
        Printer::PriorityClass => vec![
            NAME,
            col(
                "Value",
                "integer",
                0,
                "The priority pods of this class get.",
            ),
            col(
                "Global-Default",
                "boolean",
                0,
                "Whether pods without a class get this one.",
            ),
            AGE,
            col(
                "PreemptionPolicy",
                "string",
                0,
                "Whether pods of this class preempt pods of lower priority.",
            ),
        ],
        Printer::RoleBinding => vec![
            NAME,
            col("Role", "string", 0, "The role being bound."),
            AGE,
            col("Users", "string", 1, "Users bound."),
            col("Groups", "string", 1, "Groups bound."),
            col("ServiceAccounts", "string", 1, "Service accounts bound."),
        ],
    }
}

fn s<'a>(o: &'a Value, p: &str) -> &'a str {
    path(o, p).and_then(Value::as_str).unwrap_or("")
}

fn i(o: &Value, p: &str) -> i64 {
    path(o, p).and_then(Value::as_i64).unwrap_or(0)
}

fn or_none(v: &str) -> Value {
    if v.is_empty() {
        json!("<none>")
    } else {
        json!(v)
    }
}

fn arr<'a>(o: &'a Value, p: &str) -> &'a [Value] {
    path(o, p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn template_cells(o: &Value, template: &str, selector: Option<&str>) -> Vec<Value> {
    let containers = arr(o, &format!("{template}.spec.containers"));
    let names: Vec<&str> = containers.iter().map(|c| s(c, "name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| s(c, "image")).collect();
    let mut out = vec![json!(names.join(",")), json!(images.join(","))];
    if let Some(sel) = selector {
        let q = path(o, sel)
            .map(|v| LabelSelector::from_object(v).to_query())
            .unwrap_or_default();
        out.push(or_none(&q));
    }
    out
}

fn age(o: &Value) -> Value {
    json!(since(path(o, "metadata.creationTimestamp")))
}

/// The `Status` column of a pod, computed as upstream's printer does.
pub fn pod_status(o: &Value) -> String {
    let mut reason = s(o, "status.phase").to_string();
    if !s(o, "status.reason").is_empty() {
        reason = s(o, "status.reason").to_string();
    }
    let inits = arr(o, "status.initContainerStatuses");
    let init_total = arr(o, "spec.initContainers").len();
    let mut initializing = false;
    for (idx, c) in inits.iter().enumerate() {
        let term = path(c, "state.terminated");
        if term.is_some_and(|t| i(t, "exitCode") == 0) {
            continue;
        }
        initializing = true;
        reason = if let Some(t) = term {
            let r = s(t, "reason");
            if r.is_empty() {
                format!("Init:ExitCode:{}", i(t, "exitCode"))
            } else {
                format!("Init:{r}")
            }
        } else {
            let w = s(c, "state.waiting.reason");
            if !w.is_empty() && w != "PodInitializing" {
                format!("Init:{w}")
            } else {
                format!("Init:{idx}/{init_total}")
            }
        };
        break;
    }
    if !initializing {
        let mut has_running = false;
        for c in arr(o, "status.containerStatuses").iter().rev() {
            let w = s(c, "state.waiting.reason");
            let t = path(c, "state.terminated");
            if !w.is_empty() {
                reason = w.to_string();
            } else if let Some(t) = t {
                let r = s(t, "reason");
                reason = if !r.is_empty() {
                    r.to_string()
                } else if i(t, "signal") != 0 {
                    format!("Signal:{}", i(t, "signal"))
                } else {
                    format!("ExitCode:{}", i(t, "exitCode"))
                };
            } else if path(c, "state.running").is_some() && c.get("ready") == Some(&json!(true)) {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            reason = "Running".to_string();
        }
    }
    if object::is_deleting(o) {
        reason = if s(o, "status.reason") == "NodeLost" {
            "Unknown".to_string()
        } else {
            "Terminating".to_string()
        };
    }
    reason
}

fn service_ports(o: &Value) -> String {
    let ports: Vec<String> = arr(o, "spec.ports")
        .iter()
        .map(|p| {
            let proto = match s(p, "protocol") {
                "" => "TCP",
                x => x,
            };
            match i(p, "nodePort") {
                0 => format!("{}/{proto}", i(p, "port")),
                np => format!("{}:{np}/{proto}", i(p, "port")),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    }
}

/// An Ingress's rule hosts: up to three, then how many rules more (upstream counts rules, not hosts);
/// `*` when no rule names one.
fn ingress_hosts(o: &Value) -> String {
    let rules = arr(o, "spec.rules");
    let mut hosts: Vec<&str> = Vec::new();
    for r in rules {
        if hosts.len() == 3 {
            return format!("{} + {} more...", hosts.join(","), rules.len() - 3);
        }
        if !s(r, "host").is_empty() {
            hosts.push(s(r, "host"));
        }
    }
    if hosts.is_empty() {
        "*".to_string()
    } else {
        hosts.join(",")
    }
}

/// An Ingress's load-balancer addresses (IP, else hostname; sorted, once each), cut to 16 bytes as
/// upstream's.
fn ingress_address(o: &Value) -> String {
    let list: std::collections::BTreeSet<&str> = arr(o, "status.loadBalancer.ingress")
        .iter()
        .map(|i| {
            if s(i, "ip").is_empty() {
                s(i, "hostname")
            } else {
                s(i, "ip")
            }
        })
        .filter(|v| !v.is_empty())
        .collect();
    let list: Vec<&str> = list.into_iter().collect();
    let joined = list.join(",");
    if joined.chars().count() > 16 {
        format!("{}...", joined.chars().take(13).collect::<String>())
    } else {
        joined
    }
}

fn external_ips(o: &Value) -> String {
    let mut ips: Vec<String> = arr(o, "spec.externalIPs")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    for ing in arr(o, "status.loadBalancer.ingress") {
        let v = if s(ing, "ip").is_empty() {
            s(ing, "hostname")
        } else {
            s(ing, "ip")
        };
        if !v.is_empty() {
            ips.push(v.to_string());
        }
    }
    if ips.is_empty() {
        if s(o, "spec.type") == "LoadBalancer" {
            "<pending>".to_string()
        } else {
            "<none>".to_string()
        }
    } else {
        ips.join(",")
    }
}

fn node_status(o: &Value) -> String {
    let mut parts = Vec::new();
    let ready = arr(o, "status.conditions")
        .iter()
        .find(|c| s(c, "type") == "Ready")
        .map(|c| s(c, "status") == "True");
    parts.push(match ready {
        Some(true) => "Ready",
        Some(false) => "NotReady",
        None => "Unknown",
    });
    if path(o, "spec.unschedulable") == Some(&json!(true)) {
        parts.push("SchedulingDisabled");
    }
    parts.join(",")
}

fn node_roles(o: &Value) -> String {
    let mut roles: Vec<String> = object::labels(o)
        .map(|l| {
            l.keys()
                .filter_map(|k| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .filter(|r| !r.is_empty())
                        .map(str::to_string)
                        .or_else(|| {
                            (k == "kubernetes.io/role").then(|| {
                                l.get(k)
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_string()
                            })
                        })
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    }
}

fn node_address(o: &Value, kind: &str) -> String {
    arr(o, "status.addresses")
        .iter()
        .find(|a| s(a, "type") == kind)
        .map(|a| s(a, "address").to_string())
        .unwrap_or_else(|| "<none>".to_string())
}

fn endpoints_summary(o: &Value) -> String {
    let mut list = Vec::new();
    for subset in arr(o, "subsets") {
        let ports = arr(subset, "ports");
        for a in arr(subset, "addresses") {
            if ports.is_empty() {
                list.push(s(a, "ip").to_string());
            }
            for p in ports {
                list.push(format!("{}:{}", s(a, "ip"), i(p, "port")));
            }
        }
    }
    summarize(list)
}

fn summarize(list: Vec<String>) -> String {
    let n = list.len();
    if n == 0 {
        return "<none>".to_string();
    }
    let mut out = list.into_iter().take(3).collect::<Vec<_>>().join(",");
    if n > 3 {
        out.push_str(&format!(" + {} more...", n - 3));
    }
    out
}

fn job_status(o: &Value) -> &'static str {
    let conds = arr(o, "status.conditions");
    let has = |t: &str| {
        conds
            .iter()
            .any(|c| s(c, "type") == t && s(c, "status") == "True")
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if has("Suspended") {
        "Suspended"
    } else {
        "Running"
    }
}

fn job_duration(o: &Value) -> String {
    let start = path(o, "status.startTime")
        .and_then(Value::as_str)
        .and_then(object::parse_time);
    let Some(start) = start else {
        return String::new();
    };
    let end = path(o, "status.completionTime")
        .and_then(Value::as_str)
        .and_then(object::parse_time)
        .unwrap_or_else(jiff::Timestamp::now);
    crate::age::human(end.as_second() - start.as_second())
}

/// The cells of one row.
pub fn cells(p: Printer, o: &Value) -> Vec<Value> {
    let name = json!(object::name(o));
    match p {
        Printer::PersistentVolume
        | Printer::PersistentVolumeClaim
        | Printer::StorageClass
        | Printer::VolumeAttachment
        | Printer::CSIDriver
        | Printer::CSINode
        | Printer::CSIStorageCapacity => super::storage::cells(p, o),
        Printer::PodTemplate
        | Printer::RuntimeClass
        | Printer::WebhookConfiguration
        | Printer::ValidatingAdmissionPolicy
        | Printer::ValidatingAdmissionPolicyBinding => super::runtime::cells(p, o),
        Printer::HorizontalPodAutoscaler => super::autoscaling::cells(o),
        Printer::Pod => {
            let total = arr(o, "spec.containers").len();
            let statuses = arr(o, "status.containerStatuses");
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready") == Some(&json!(true)))
                .count();
            let restarts: i64 = statuses.iter().map(|c| i(c, "restartCount")).sum();
            let gates = arr(o, "spec.readinessGates");
            let gates = if gates.is_empty() {
                json!("<none>")
            } else {
                json!(format!("0/{}", gates.len()))
            };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts),
                age(o),
                or_none(s(o, "status.podIP")),
                or_none(s(o, "spec.nodeName")),
                or_none(s(o, "status.nominatedNodeName")),
                gates,
            ]
        }
        Printer::Node => vec![
            name,
            json!(node_status(o)),
            json!(node_roles(o)),
            age(o),
            json!(s(o, "status.nodeInfo.kubeletVersion")),
            json!(node_address(o, "InternalIP")),
            json!(node_address(o, "ExternalIP")),
            or_none(s(o, "status.nodeInfo.osImage")),
            or_none(s(o, "status.nodeInfo.kernelVersion")),
            or_none(s(o, "status.nodeInfo.containerRuntimeVersion")),
        ],
        Printer::Namespace => vec![name, json!(s(o, "status.phase")), age(o)],
        Printer::Service => {
            let mut ip = s(o, "spec.clusterIP").to_string();
            if ip.is_empty() {
                ip = "<none>".to_string();
            }
            let selector = path(o, "spec.selector")
                .and_then(Value::as_object)
                .map(|m| {
                    let mut v: Vec<String> = m
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect();
                    v.sort();
                    v.join(",")
                })
                .unwrap_or_default();
            let kind = match s(o, "spec.type") {
                "" => "ClusterIP",
                t => t,
            };
            vec![
                name,
                json!(kind),
                json!(ip),
                json!(external_ips(o)),
                json!(service_ports(o)),
                age(o),
                or_none(&selector),
            ]
        }
        Printer::Endpoints => vec![name, json!(endpoints_summary(o)), age(o)],
        Printer::ConfigMap => {
            let n = path(o, "data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + path(o, "binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            vec![name, json!(n), age(o)]
        }
        Printer::Secret => {
            let n = path(o, "data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            let t = match s(o, "type") {
                "" => "Opaque",
                t => t,
            };
            vec![name, json!(t), json!(n), age(o)]
        }
        Printer::ServiceAccount => vec![name, json!(arr(o, "secrets").len()), age(o)],
        Printer::Event => {
            let last = path(o, "lastTimestamp")
                .filter(|v| !v.is_null())
                .or_else(|| path(o, "eventTime"))
                .or_else(|| path(o, "metadata.creationTimestamp"));
            let first = path(o, "firstTimestamp")
                .filter(|v| !v.is_null())
                .or_else(|| path(o, "eventTime"));
            let kind = s(o, "involvedObject.kind").to_lowercase();
            let obj = format!("{kind}/{}", s(o, "involvedObject.name"));
            let source = match (s(o, "source.component"), s(o, "source.host")) {
                ("", _) => s(o, "reportingComponent").to_string(),
                (c, "") => c.to_string(),
                (c, h) => format!("{c}, {h}"),
            };
            let count = match i(o, "count") {
                0 => 1,
                n => n,
            };
            vec![
                json!(since(last)),
                json!(s(o, "type")),
                json!(s(o, "reason")),
                json!(obj),
                json!(s(o, "involvedObject.fieldPath")),
                json!(source),
                json!(s(o, "message").trim()),
                json!(since(first)),
                json!(count.to_string()),
                name,
            ]
        }
        Printer::EventsV1 | Printer::Default | Printer::Custom => {
            vec![name, json!(s(o, "metadata.creationTimestamp"))]
        }
        Printer::Deployment => {
            let mut v = vec![
                name,
                json!(format!(
                    "{}/{}",
                    i(o, "status.readyReplicas"),
                    path(o, "spec.replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                )),
                json!(i(o, "status.updatedReplicas")),
                json!(i(o, "status.availableReplicas")),
                age(o),
            ];
            v.extend(template_cells(o, "spec.template", Some("spec.selector")));
            v
        }
        Printer::ReplicaSet | Printer::ReplicationController => {
            let mut v = vec![
                name,
                json!(path(o, "spec.replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)),
                json!(i(o, "status.replicas")),
                json!(i(o, "status.readyReplicas")),
                age(o),
            ];
            if p == Printer::ReplicaSet {
                v.extend(template_cells(o, "spec.template", Some("spec.selector")));
            } else {
                v.extend(template_cells(o, "spec.template", None));
                // A ReplicationController's selector is a label map, printed as upstream's FormatLabels does.
                let sel = path(o, "spec.selector")
                    .map(|m| LabelSelector::from_map(m).to_query())
                    .unwrap_or_default();
                v.push(or_none(&sel));
            }
            v
        }
        Printer::StatefulSet => {
            let mut v = vec![
                name,
                json!(format!(
                    "{}/{}",
                    i(o, "status.readyReplicas"),
                    path(o, "spec.replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                )),
                age(o),
            ];
            v.extend(template_cells(o, "spec.template", None));
            v
        }
        Printer::DaemonSet => {
            let node_sel = path(o, "spec.template.spec.nodeSelector")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            let mut v = vec![
                name,
                json!(i(o, "status.desiredNumberScheduled")),
                json!(i(o, "status.currentNumberScheduled")),
                json!(i(o, "status.numberReady")),
                json!(i(o, "status.updatedNumberScheduled")),
                json!(i(o, "status.numberAvailable")),
                or_none(&node_sel),
                age(o),
            ];
            v.extend(template_cells(o, "spec.template", Some("spec.selector")));
            v
        }
        Printer::Job => {
            let completions = match path(o, "spec.completions").and_then(Value::as_i64) {
                Some(c) => format!("{}/{c}", i(o, "status.succeeded")),
                None => format!(
                    "{}/1 of {}",
                    i(o, "status.succeeded"),
                    i(o, "spec.parallelism").max(1)
                ),
            };
            let mut v = vec![
                name,
                json!(job_status(o)),
                json!(completions),
                json!(job_duration(o)),
                age(o),
            ];
            v.extend(template_cells(o, "spec.template", Some("spec.selector")));
            v
        }
        Printer::CronJob => {
            let last = path(o, "status.lastScheduleTime");
            let last = if last.is_some_and(|v| !v.is_null()) {
                since(last)
            } else {
                "<none>".to_string()
            };
            let mut v = vec![
                name,
                json!(s(o, "spec.schedule")),
                or_none(s(o, "spec.timeZone")),
                json!(path(o, "spec.suspend")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)),
                json!(arr(o, "status.active").len()),
                json!(last),
                age(o),
            ];
            v.extend(template_cells(
                o,
                "spec.jobTemplate.spec.template",
                Some("spec.jobTemplate.spec.selector"),
            ));
            v
        }
        Printer::Lease => vec![name, or_none(s(o, "spec.holderIdentity")), age(o)],
        Printer::Ingress => vec![
            name,
            or_none(s(o, "spec.ingressClassName")),
            json!(ingress_hosts(o)),
            json!(ingress_address(o)),
            json!(if arr(o, "spec.tls").is_empty() {
                "80"
            } else {
                "80, 443"
            }),
            age(o),
        ],
        Printer::IngressClass => {
            let params = match path(o, "spec.parameters") {
                Some(p) if p.is_object() => {
                    let kind = match p.get("apiGroup").and_then(Value::as_str) {
                        Some(group) => format!("{}.{group}", s(p, "kind")),
                        None => s(p, "kind").to_string(),
                    };
                    format!("{kind}/{}", s(p, "name"))
                }
                _ => "<none>".to_string(),
            };
            vec![name, json!(s(o, "spec.controller")), json!(params), age(o)]
        }
        Printer::NetworkPolicy => {
            let q = path(o, "spec.podSelector")
                .map(|v| LabelSelector::from_object(v).to_query())
                .unwrap_or_default();
            vec![name, or_none(&q), age(o)]
        }
        Printer::EndpointSlice => {
            let ports: Vec<String> = arr(o, "ports")
                .iter()
                .map(|p| i(p, "port").to_string())
                .collect();
            let addrs: Vec<String> = arr(o, "endpoints")
                .iter()
                .flat_map(|e| {
                    arr(e, "addresses")
                        .iter()
                        .filter_map(|a| a.as_str().map(str::to_string))
                })
                .collect();
            let ports = if ports.is_empty() {
                "<unset>".to_string()
            } else {
                ports.join(",")
            };
            vec![
                name,
                json!(s(o, "addressType")),
                json!(ports),
                json!(summarize(addrs)),
                age(o),
            ]
        }
        Printer::PodDisruptionBudget => {
            let bound = |p: &str| match path(o, p) {
                Some(Value::Number(n)) => json!(n.to_string()),
                Some(Value::String(t)) => json!(t),
                _ => json!("N/A"),
            };
            vec![
                name,
                bound("spec.minAvailable"),
                bound("spec.maxUnavailable"),
                json!(i(o, "status.disruptionsAllowed")),
                age(o),
            ]
        }
        Printer::ControllerRevision => {
            let owner = path(o, "metadata.ownerReferences")
                .and_then(Value::as_array)
                .and_then(|refs| {
                    refs.iter()
                        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                })
                .map(|r| {
                    let group = s(r, "apiVersion").split('/').next().unwrap_or("");
                    let group = if s(r, "apiVersion").contains('/') {
                        group
                    } else {
                        ""
                    };
                    let kind = s(r, "kind").to_lowercase();
                    if group.is_empty() {
                        format!("{kind}/{}", s(r, "name"))
                    } else {
                        format!("{kind}.{group}/{}", s(r, "name"))
                    }
                })
                .unwrap_or_else(|| "<none>".into());
            vec![name, json!(owner), json!(i(o, "revision")), age(o)]
        }
        Printer::APIService => {
            // Upstream prints `namespace/name`, or `Local` for a group-version the server serves itself.
            let service = match path(o, "spec.service") {
                Some(svc) if !svc.is_null() => {
                    format!("{}/{}", s(svc, "namespace"), s(svc, "name"))
                }
                _ => "Local".to_string(),
            };
            let available = arr(o, "status.conditions")
                .iter()
                .find(|c| s(c, "type") == "Available")
                .map(|c| match s(c, "status") {
                    "True" => "True".to_string(),
                    st => format!("{st} ({})", s(c, "reason")),
                })
                .unwrap_or_else(|| "Unknown".into());
            vec![name, json!(service), json!(available), age(o)]
        }
        Printer::ResourceQuota => {
            let hard = path(o, "status.hard").and_then(Value::as_object);
            let used = path(o, "status.used").and_then(Value::as_object);
            let (mut request, mut limit) = (Vec::new(), Vec::new());
            let mut names: Vec<&String> = hard.into_iter().flat_map(|h| h.keys()).collect();
            names.sort();
            for r in names {
                let text = |m: Option<&serde_json::Map<String, Value>>| {
                    m.and_then(|m| m.get(r))
                        .and_then(Value::as_str)
                        .unwrap_or("0")
                        .to_string()
                };
                let cell = format!("{r}: {}/{}", text(used), text(hard));
                // Upstream puts `limits.*` in the Limit column, everything else under Request.
                if r.split('.').count() > 1 && r.starts_with("limits.") {
                    limit.push(cell);
                } else {
                    request.push(cell);
                }
            }
            vec![
                name,
                age(o),
                json!(request.join(", ")),
                json!(limit.join(", ")),
            ]
        }
        Printer::PriorityClass => vec![
            name,
            json!(i(o, "value")),
            json!(path(o, "globalDefault").and_then(Value::as_bool) == Some(true)),
            age(o),
            json!(s(o, "preemptionPolicy")),
        ],
        Printer::RoleBinding => {
            let subjects = arr(o, "subjects");
            let of = |k: &str| {
                subjects
                    .iter()
                    .filter(|x| s(x, "kind") == k)
                    .map(|x| {
                        if k == "ServiceAccount" {
                            format!("{}/{}", s(x, "namespace"), s(x, "name"))
                        } else {
                            s(x, "name").to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                name,
                json!(format!("{}/{}", s(o, "roleRef.kind"), s(o, "roleRef.name"))),
                age(o),
                json!(of("User")),
                json!(of("Group")),
                json!(of("ServiceAccount")),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::BUILTIN;

    #[test]
    fn ingress_cells_follow_upstream() {
        let ing = json!({"spec": {"rules": [{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {}]},
                         "status": {"loadBalancer": {"ingress": [
                             {"ip": "10.42.0.1"}, {"hostname": "node.example"}, {"ip": "10.42.0.1"}]}}});
        assert_eq!(
            ingress_hosts(&ing),
            "a,b,c + 3 more...",
            "rules counted, not hosts"
        );
        assert_eq!(ingress_hosts(&json!({"spec": {"rules": [{}]}})), "*");
        assert_eq!(
            ingress_address(&ing),
            "10.42.0.1,nod...",
            "sorted, deduplicated, cut at 16"
        );
        let class = json!({"metadata": {"name": "c"}, "spec": {"controller": "k/x",
                           "parameters": {"apiGroup": "", "kind": "K", "name": "p"}}});
        assert_eq!(cells(Printer::IngressClass, &class)[2], json!("K./p"));
    }

    #[test]
    fn cells_match_columns_for_every_printer() {
        let empty = json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        for r in BUILTIN.iter() {
            assert_eq!(
                columns(r.printer).len(),
                cells(r.printer, &empty).len(),
                "{}",
                r.plural
            );
        }
    }

    #[test]
    fn pod_status_rules() {
        let waiting = json!({"status": {"phase": "Pending", "containerStatuses": [
            {"ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(pod_status(&waiting), "ContainerCreating");
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                              "status": {"phase": "Running"}});
        assert_eq!(pod_status(&deleting), "Terminating");
        let svc = json!({"spec": {"ports": [{"port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]}});
        assert_eq!(service_ports(&svc), "80:30080/TCP,53/UDP");
    }
}
