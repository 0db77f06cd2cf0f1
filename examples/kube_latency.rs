//! A rough latency loop for the Kubernetes API (not a benchmark: that lives in `benches/`): creates N
//! ConfigMaps one after another, reads them back, and lists them, printing p50/p99 per operation.
//!
//! ```sh
//! cargo run --release --example kube_latency -- /path/to/admin.kubeconfig 1000
//! ```

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

fn report(what: &str, v: Vec<Duration>) {
    let n = v.len();
    let total: Duration = v.iter().sum();
    println!(
        "{what:<28} n={n:<6} p50={:>8.2} ms  p99={:>8.2} ms  mean={:>8.2} ms",
        pct(v.clone(), 0.5).as_secs_f64() * 1e3,
        pct(v, 0.99).as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3 / n.max(1) as f64
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: kube_latency <kubeconfig> [objects]")?;
    let n: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(cfg)?;
    let ns = format!("latency-{}", std::process::id());
    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let mut creates = Vec::with_capacity(n);
    for i in 0..n {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("cm-{i:06}"), "labels": {"batch": (i % 10).to_string()}},
            "data": {"payload": "x".repeat(256)},
        }))?;
        let t = Instant::now();
        api.create(&PostParams::default(), &cm).await?;
        creates.push(t.elapsed());
    }
    report("create", creates);
    let mut gets = Vec::new();
    for i in (0..n).step_by((n / 500).max(1)) {
        let t = Instant::now();
        api.get(&format!("cm-{i:06}")).await?;
        gets.push(t.elapsed());
    }
    report("get", gets);
    let mut lists = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let l = api.list(&ListParams::default()).await?;
        assert_eq!(l.items.len(), n);
        lists.push(t.elapsed());
    }
    report(&format!("list all ({n})"), lists);
    let mut pages = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        api.list(&ListParams::default().limit(500)).await?;
        pages.push(t.elapsed());
    }
    report("list limit=500 (first page)", pages);
    let mut selected = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        api.list(&ListParams::default().labels("batch=3")).await?;
        selected.push(t.elapsed());
    }
    report("list labelSelector (10%)", selected);
    nsapi.delete(&ns, &Default::default()).await?;
    Ok(())
}
