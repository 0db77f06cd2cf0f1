//! What admission costs a write: ConfigMap creates through the API of a keel cluster, in a namespace
//! nothing watches, in one a no-op validating webhook (an HTTPS server in this process, answering
//! `allowed: true`) checks, and in one a ValidatingAdmissionPolicy (one CEL validation on the object)
//! checks, in rotating phases at each client count, so all see the same machine. For each: latency
//! p50/p99 and server CPU per create over all members; the differences are the webhook's cost (the
//! AdmissionReview over a kept-alive HTTPS connection) and the policy's (matching, CEL compile and
//! evaluation), measured, not asserted.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::future::join_all;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::error::{BenchError, Result};
use crate::load::histogram;
use crate::target::{Api as Served, Binaries, Cluster, Kind};
use crate::workload::controllers::client;

/// The namespace no webhook sees, and the one the webhook checks.
const PLAIN: &str = "bench-plain";
const HOOKED: &str = "bench-hooked";
const POLICED: &str = "bench-policy";

/// One phase's figures.
#[derive(Clone, Debug)]
pub(crate) struct Phase {
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// CPU of all members per create, µs.
    pub cpu_us: f64,
}

/// One client count: creates without and with the webhook.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Concurrent clients.
    pub clients: usize,
    /// Creates no webhook sees.
    pub plain: Phase,
    /// Creates the webhook checks.
    pub hooked: Phase,
    /// Creates the policy checks.
    pub policed: Phase,
}

/// Everything the step measured.
#[derive(Debug)]
pub(crate) struct Figures {
    /// Members of the cluster.
    pub members: usize,
    /// Creates per phase.
    pub ops: usize,
    /// Per client count.
    pub rows: Vec<Row>,
    /// Reviews the webhook answered (at least the hooked creates).
    pub reviews: u64,
}

fn kube_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Kube(format!("{what}: {e}"))
}

/// The no-op webhook: every review allowed.
async fn start_webhook(
    ca: &keel_testkit::https::TestCa,
    reviews: Arc<AtomicU64>,
) -> keel_testkit::https::HttpsServer {
    let handler = move |req: hyper::Request<hyper::body::Incoming>| {
        let reviews = reviews.clone();
        async move {
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let uid = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.pointer("/request/uid").cloned())
                .unwrap_or(Value::Null);
            reviews.fetch_add(1, Ordering::Relaxed);
            let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": true}});
            let mut resp = hyper::Response::new(Full::new(Bytes::from(out.to_string())));
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            resp
        }
    };
    keel_testkit::https::serve(ca, &["127.0.0.1"], None, handler).await
}

/// The namespaces and the configuration pointing at the webhook by URL.
async fn register(c: &Client, port: u16, ca_pem: &str) -> Result<()> {
    use base64::Engine;
    let nss: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    for (name, labels) in [
        (PLAIN, json!({})),
        (HOOKED, json!({"bench-webhook": "on"})),
        (POLICED, json!({"bench-policy": "on"})),
    ] {
        let ns: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}))
            .map_err(|e| kube_error("namespace", e))?;
        match nss.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_error("create namespace", e)),
        }
    }
    let cfg: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
        serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "bench-noop"},
            "webhooks": [{
                "name": "noop.bench.keel.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/"),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"bench-webhook": "on"}},
                "sideEffects": "None", "admissionReviewVersions": ["v1"],
            }],
        }))
        .map_err(|e| kube_error("webhook configuration", e))?;
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(c.clone());
    api.create(&PostParams::default(), &cfg)
        .await
        .map_err(|e| kube_error("create webhook configuration", e))?;
    let policy: k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy =
        serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "bench-size"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""],
                    "apiVersions": ["v1"], "resources": ["configmaps"]}]},
                "validations": [{"expression": "!has(object.data) || object.data.all(k, size(object.data[k]) <= 1024)",
                    "message": "values of at most 1 KiB"}],
            },
        }))
        .map_err(|e| kube_error("policy", e))?;
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(c.clone())
        .create(&PostParams::default(), &policy)
        .await
        .map_err(|e| kube_error("create policy", e))?;
    let binding: k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding =
        serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "bench-size"},
            "spec": {"policyName": "bench-size", "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"bench-policy": "on"}}}},
        }))
        .map_err(|e| kube_error("binding", e))?;
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(
        c.clone(),
    )
    .create(&PostParams::default(), &binding)
    .await
    .map_err(|e| kube_error("create binding", e))?;
    Ok(())
}

/// `ops` creates in `ns` from `clients` clients (client `w` on member `w % members`).
async fn phase(
    cluster: &Cluster,
    clients: &[Client],
    ns: &str,
    tag: &str,
    n_clients: usize,
    ops: usize,
) -> Result<Phase> {
    let per = ops.div_ceil(n_clients).max(1);
    let cpu = cluster.cpu_us();
    let outcomes = join_all((0..n_clients).map(|w| {
        let api: Api<ConfigMap> = Api::namespaced(clients[w % clients.len()].clone(), ns);
        async move {
            let mut hist = histogram();
            let mut last = None;
            for n in 0..per {
                let cm: ConfigMap = match serde_json::from_value(json!({"apiVersion": "v1",
                    "kind": "ConfigMap", "metadata": {"name": format!("cm-{tag}-{w}-{n}")},
                    "data": {"payload": "x".repeat(200)}}))
                {
                    Ok(c) => c,
                    Err(e) => return (hist, Some(e.to_string())),
                };
                let t0 = Instant::now();
                match api.create(&PostParams::default(), &cm).await {
                    Ok(_) => {
                        let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
                    }
                    Err(e) => last = Some(e.to_string()),
                }
            }
            (hist, last)
        }
    }))
    .await;
    let cpu = cluster.cpu_us().saturating_sub(cpu) as f64;
    let mut hist: Histogram<u64> = histogram();
    for (h, last) in outcomes {
        if let Some(e) = last {
            return Err(kube_error(&format!("create in {ns}"), e));
        }
        let _ = hist.add(&h);
    }
    Ok(Phase {
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        cpu_us: cpu / (per * n_clients) as f64,
    })
}

/// Runs the step: a cluster of `members`, the webhook and the policy, then per client count a short
/// warm-up of each kind and the measured phases in a rotating order.
pub(crate) async fn run(
    root: &Path,
    bins: &Binaries,
    members: usize,
    client_counts: &[usize],
    ops: usize,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    progress(format!("starting {members} members"));
    let cluster = Cluster::start_with(Kind::Keel, members, root, bins, Served::Kube).await?;
    let mut clients = Vec::with_capacity(members);
    for i in 0..members {
        clients.push(client(&cluster, i).await?);
    }
    let ca = keel_testkit::https::TestCa::new("bench-webhook-ca");
    let reviews = Arc::new(AtomicU64::new(0));
    let server = start_webhook(&ca, reviews.clone()).await;
    register(&clients[0], server.port, &ca.pem).await?;
    let mut rows = Vec::new();
    for (k, &n) in client_counts.iter().enumerate() {
        progress(format!("{n} clients: warm-up"));
        for (ns, tag) in [(PLAIN, "p"), (HOOKED, "h"), (POLICED, "c")] {
            phase(
                &cluster,
                &clients,
                ns,
                &format!("w{k}{tag}"),
                n,
                ops / 4 + 1,
            )
            .await?;
        }
        progress(format!("{n} clients: measuring"));
        // The three phases in a rotating order: each client count starts with another.
        let mut got: [Option<Phase>; 3] = [None, None, None];
        for j in 0..3 {
            let which = (j + k) % 3;
            let (ns, tag) = [(PLAIN, "p"), (HOOKED, "h"), (POLICED, "c")][which];
            got[which] = Some(phase(&cluster, &clients, ns, &format!("m{k}{tag}"), n, ops).await?);
        }
        let [Some(plain), Some(hooked), Some(policed)] = got else {
            return Err(kube_error("admission phases", "a phase did not run"));
        };
        rows.push(Row {
            clients: n,
            plain,
            hooked,
            policed,
        });
    }
    drop(server);
    Ok(Figures {
        members,
        ops,
        rows,
        reviews: reviews.load(Ordering::Relaxed),
    })
}

/// The report: per client count, both phases and the difference.
pub(crate) fn text(f: &Figures) -> String {
    let ms = |us: u64| format!("{:.2}", us as f64 / 1000.0);
    let mut out = format!(
        "admission cost: {} members, {} ConfigMap creates per phase; a no-op validating webhook over HTTPS ({} reviews answered); a ValidatingAdmissionPolicy with one CEL validation\n",
        f.members, f.ops, f.reviews
    );
    out.push_str("| clients | p50 plain / webhook / policy (ms) | p99 plain / webhook / policy (ms) | server CPU per create plain / webhook / policy (µs) |\n|---|---|---|---|\n");
    for r in &f.rows {
        out.push_str(&format!(
            "| {} | {} / {} / {} | {} / {} / {} | {:.0} / {:.0} / {:.0} |\n",
            r.clients,
            ms(r.plain.p50_us),
            ms(r.hooked.p50_us),
            ms(r.policed.p50_us),
            ms(r.plain.p99_us),
            ms(r.hooked.p99_us),
            ms(r.policed.p99_us),
            r.plain.cpu_us,
            r.hooked.cpu_us,
            r.policed.cpu_us,
        ));
    }
    out
}
