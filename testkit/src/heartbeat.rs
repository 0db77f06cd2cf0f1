//! A kubelet's heartbeats for a Node object a test made: Ready posted once, the node's Lease in
//! `kube-node-lease` renewed every second until stopped, so the node lifecycle controller keeps the
//! node healthy while no node agent runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test support stops loudly

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::kube::KubeCluster;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// A kubelet's heartbeats for one node: Ready posted once, the node Lease renewed every second, until
/// stopped.
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    /// Posts Ready for `node` and renews its Lease every second from a thread of its own.
    pub fn start(c: &'static KubeCluster, node: &str) -> Heartbeat {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, node) = (stop.clone(), node.to_string());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            rt().block_on(async move {
                let client = c.client(0).await;
                post_ready(&client, &node).await;
                let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
                let mut told = false;
                while !flag.load(Ordering::SeqCst) {
                    // A MicroTime: exactly six fraction digits, or the API server refuses it as upstream's does.
                    let now = k8s_openapi::jiff::Timestamp::now()
                        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                        .to_string();
                    let lease = json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": node, "namespace": "kube-node-lease"},
                        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now},
                    });
                    let renewed = match leases.get_opt(&node).await {
                        Ok(Some(_)) => leases
                            .patch(&node, &PatchParams::default(), &Patch::Merge(&lease))
                            .await
                            .is_ok(),
                        Ok(None) => leases
                            .create(&PostParams::default(), &serde_json::from_value(lease).unwrap())
                            .await
                            .is_ok(),
                        Err(_) => false,
                    };
                    if renewed && !told {
                        told = true;
                        let _ = ready_tx.send(());
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        });
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the first lease renewal");
        Heartbeat {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops renewing and waits for the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Posts the node's status as a healthy kubelet does.
pub async fn post_ready(client: &kube::Client, node: &str) {
    // A MicroTime: exactly six fraction digits, or the API server refuses it as upstream's does.
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let cond = |ty: &str, status: &str, reason: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": reason,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let status = json!({"status": {"conditions": [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID"),
        cond("Ready", "True", "KubeletReady"),
    ]}});
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}
