//! `GET /stats/summary`: what the node and its pods use now, in the shape of the kubelet's Summary API
//! (the fields `kubectl top` needs: `usageNanoCores` and `workingSetBytes`, for the node and for each
//! container of each pod). The node's figures come from `/proc` (CPU from two readings of `/proc/stat`,
//! memory as total minus available), the containers' from CRI's ListContainerStats; a CPU rate the runtime
//! does not give is computed from the previous reading of its cumulative usage.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

use crate::cri::{labels, Cri};
use crate::error::Result;

/// Earlier readings, for rates.
#[derive(Debug, Default)]
pub struct Rates {
    /// The node: (when, busy and total jiffies).
    node: Option<(Instant, u64, u64)>,
    /// Containers by id: (when, cumulative CPU ns).
    containers: HashMap<String, (Instant, u64)>,
}

/// Busy and total jiffies of all CPUs (the `cpu` line of /proc/stat).
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    // idle and iowait are the 4th and 5th numbers.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

fn cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// Memory in use (MemTotal - MemAvailable), bytes.
fn node_working_set() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = |k: &str| {
        info.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    kb("MemTotal:").saturating_sub(kb("MemAvailable:")) * 1024
}

/// The summary document for node `node`.
pub async fn summary(cri: &Cri, node: &str, rates: &Mutex<Rates>) -> Result<Value> {
    let stats = cri.container_stats().await?;
    let containers = cri.list_containers().await?;
    let now = Instant::now();
    let time = jiff::Timestamp::now().to_string();
    // Node CPU: the share of busy jiffies since the last reading (or a quarter-second one when there is
    // none recent), times the CPUs.
    let previous = rates
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .node
        .filter(|(t, _, _)| now.duration_since(*t) < std::time::Duration::from_secs(60));
    let base = match previous {
        Some((_, b, t)) => Some((b, t)),
        None => {
            let b = cpu_jiffies();
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            b
        }
    };
    let current = cpu_jiffies();
    let node_cpu = match (base, current) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
            (b1.saturating_sub(b0) as f64 / (t1 - t0) as f64 * cpus() as f64 * 1e9) as u64
        }
        _ => 0,
    };
    let now = Instant::now();
    let mut r = rates.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((b, t)) = current {
        r.node = Some((now, b, t));
    }
    let by_id: HashMap<&str, &k8s_cri::v1::Container> =
        containers.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut pods: HashMap<(String, String, String), Vec<Value>> = HashMap::new();
    let mut seen = Vec::new();
    for s in &stats {
        let Some(attrs) = s.attributes.as_ref() else {
            continue;
        };
        // Only running containers count, as upstream's resource metrics.
        let running = by_id
            .get(attrs.id.as_str())
            .is_some_and(|c| c.state == k8s_cri::v1::ContainerState::ContainerRunning as i32);
        if !running {
            continue;
        }
        let l = &attrs.labels;
        let key = (
            l.get(labels::POD_NAMESPACE).cloned().unwrap_or_default(),
            l.get(labels::POD_NAME).cloned().unwrap_or_default(),
            l.get(labels::POD_UID).cloned().unwrap_or_default(),
        );
        let name = l.get(labels::CONTAINER_NAME).cloned().unwrap_or_default();
        let cumulative = s
            .cpu
            .as_ref()
            .and_then(|c| c.usage_core_nano_seconds.as_ref())
            .map_or(0, |v| v.value);
        let given = s
            .cpu
            .as_ref()
            .and_then(|c| c.usage_nano_cores.as_ref())
            .map_or(0, |v| v.value);
        let rate = if given > 0 {
            given
        } else {
            match r.containers.get(&attrs.id) {
                Some((t0, c0)) if now > *t0 => {
                    (cumulative.saturating_sub(*c0) as f64 / now.duration_since(*t0).as_secs_f64())
                        as u64
                }
                _ => 0,
            }
        };
        r.containers.insert(attrs.id.clone(), (now, cumulative));
        seen.push(attrs.id.clone());
        let ws = s
            .memory
            .as_ref()
            .and_then(|m| m.working_set_bytes.as_ref())
            .map_or(0, |v| v.value);
        pods.entry(key).or_default().push(json!({
            "name": name,
            "cpu": {"time": time, "usageNanoCores": rate, "usageCoreNanoSeconds": cumulative},
            "memory": {"time": time, "workingSetBytes": ws},
        }));
    }
    r.containers.retain(|id, _| seen.contains(id));
    let pods: Vec<Value> = pods
        .into_iter()
        .map(|((ns, name, uid), cs)| {
            let cpu: u64 = cs
                .iter()
                .map(|c| c["cpu"]["usageNanoCores"].as_u64().unwrap_or(0))
                .sum();
            let mem: u64 = cs
                .iter()
                .map(|c| c["memory"]["workingSetBytes"].as_u64().unwrap_or(0))
                .sum();
            json!({
                "podRef": {"name": name, "namespace": ns, "uid": uid},
                "containers": cs,
                "cpu": {"time": time, "usageNanoCores": cpu},
                "memory": {"time": time, "workingSetBytes": mem},
            })
        })
        .collect();
    Ok(json!({
        "node": {
            "nodeName": node,
            "cpu": {"time": time, "usageNanoCores": node_cpu},
            "memory": {"time": time, "workingSetBytes": node_working_set()},
        },
        "pods": pods,
    }))
}
