//! `GET /metrics` of keel's Kubernetes API through the real kubectl (`kubectl get --raw /metrics`): the text
//! parses as the Prometheus exposition format, upstream's metric names and labels are there, the request
//! counters and latency histograms of the (resource, verb) pairs a few kubectl commands made grow, an open
//! watch shows as a long-running request, store calls and object counts follow, and a request without
//! credentials is refused as on every other non-public path.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::{raw_request, Background, KubeCluster};
use keel_testkit::kubectl::{kubectl_command, run_kubectl, KUBECTL_TIMEOUT};

/// One sample: metric name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: its samples and the `# TYPE` of each family.
#[derive(Debug, Default)]
struct Exposition {
    samples: Vec<Sample>,
    types: HashMap<String, String>,
}

impl Exposition {
    /// The sum of the samples named `name` whose labels include every pair of `want`.
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                want.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Parses `{k="v",...}` (escapes `\\`, `\"`, `\n` in values); the rest of the line after `}`.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("no {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let key = &rest[..eq];
        if !is_name(key) || key.contains(':') {
            return Err(format!("bad label name {key:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, '\n')) | None => return Err("unterminated label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// Parses the Prometheus text format (0.0.4) strictly enough to catch malformed output.
fn parse(text: &str) -> Result<Exposition, String> {
    let mut e = Exposition::default();
    for (n, line) in text.lines().enumerate() {
        let fail = |why: String| format!("line {}: {why}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or_else(|| fail("TYPE".into()))?;
            if !is_name(name)
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
            {
                return Err(fail("bad TYPE".into()));
            }
            if e.types.insert(name.to_string(), kind.to_string()).is_some() {
                return Err(fail("TYPE twice".into()));
            }
            continue;
        }
        if line.starts_with('#') {
            if !(line.starts_with("# HELP ") || line == "#" || line.starts_with("# ")) {
                return Err(fail("bad comment".into()));
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| fail("no value".into()))?;
        let name = &line[..name_end];
        if !is_name(name) {
            return Err(fail("bad metric name".into()));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(fail)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let value = rest
            .strip_prefix(' ')
            .and_then(|v| v.split(' ').next())
            .ok_or_else(|| fail("no value".into()))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| fail("bad value".into()))?,
        };
        // Every sample belongs to a family declared by a `# TYPE` line before it.
        let family = [
            name.to_string(),
            name.trim_end_matches("_bucket").to_string(),
            name.trim_end_matches("_count").to_string(),
            name.trim_end_matches("_sum").to_string(),
        ];
        if !family.iter().any(|f| e.types.contains_key(f)) {
            return Err(fail("sample before its # TYPE".into()));
        }
        e.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(e)
}

/// Histograms: per label set, `le` ascending and cumulative, ending with +Inf = `_count`.
fn check_histogram(e: &Exposition, name: &str) {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for s in e
        .samples
        .iter()
        .filter(|s| s.name == format!("{name}_bucket"))
    {
        let mut l = s.labels.clone();
        let le = l.remove("le").expect("bucket without le");
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().expect("le")
        };
        series
            .entry(format!("{l:?}"))
            .or_default()
            .push((le, s.value));
    }
    assert!(!series.is_empty(), "{name} has no buckets");
    for (labels, buckets) in series {
        assert_eq!(
            buckets.len(),
            24,
            "{name}{labels}: upstream's 23 bounds and +Inf"
        );
        assert_eq!(buckets[0].0, 0.005, "{name}{labels}");
        assert_eq!(buckets[22].0, 60.0, "{name}{labels}");
        for w in buckets.windows(2) {
            assert!(
                w[0].0 < w[1].0 && w[0].1 <= w[1].1,
                "{name}{labels}: {buckets:?}"
            );
        }
        let inf = buckets.last().expect("+Inf");
        assert!(inf.0.is_infinite(), "{name}{labels}");
        let count = e
            .samples
            .iter()
            .find(|s| {
                s.name == format!("{name}_count") && {
                    let mut l = s.labels.clone();
                    l.remove("le");
                    format!("{l:?}") == labels
                }
            })
            .expect("count");
        assert_eq!(count.value, inf.1, "{name}{labels}");
    }
}

fn scrape(c: &KubeCluster) -> Exposition {
    let text = c.ok(0, &["get", "--raw", "/metrics"]);
    parse(&text).unwrap_or_else(|e| c.fail(format!("/metrics does not parse: {e}\n{text}")))
}

#[test]
fn metrics_follow_kubectl_requests() {
    let c = KubeCluster::start(keel_bin!(), 1);
    c.ok(0, &["create", "namespace", "m"]);
    let before = scrape(&c);

    // Upstream's families, with their types.
    for (name, kind) in [
        ("apiserver_request_total", "counter"),
        ("apiserver_request_duration_seconds", "histogram"),
        ("apiserver_current_inflight_requests", "gauge"),
        ("apiserver_longrunning_requests", "gauge"),
        ("apiserver_storage_objects", "gauge"),
        ("etcd_request_duration_seconds", "histogram"),
        ("etcd_requests_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_start_time_seconds", "gauge"),
        ("workqueue_adds_total", "counter"),
        ("workqueue_retries_total", "counter"),
        ("workqueue_work_duration_seconds", "histogram"),
        ("workqueue_unfinished_work", "gauge"),
        ("workqueue_depth", "gauge"),
    ] {
        assert_eq!(
            before.types.get(name).map(String::as_str),
            Some(kind),
            "# TYPE of {name}"
        );
    }
    let labels: Vec<&str> = before
        .samples
        .iter()
        .find(|s| s.name == "apiserver_request_total")
        .expect("a request sample")
        .labels
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        labels,
        [
            "code",
            "component",
            "dry_run",
            "group",
            "resource",
            "scope",
            "subresource",
            "verb",
            "version"
        ]
    );

    // An open watch is a long-running request until it ends.
    let w = Background::start(&c, 0, &["-n", "m", "get", "configmaps", "-w"], "watch");
    let watching = [
        ("verb", "WATCH"),
        ("resource", "configmaps"),
        ("scope", "namespace"),
        ("component", "apiserver"),
    ];
    c.wait_until("the watch to show", Duration::from_secs(20), || {
        scrape(&c).sum("apiserver_longrunning_requests", &watching) >= 1.0
    });
    drop(w);

    let ns = ["-n", "m"];
    let run = |args: &[&str]| c.ok(0, &[&ns[..], args].concat());
    run(&["create", "configmap", "a", "--from-literal=k=v"]);
    run(&[
        "create",
        "configmap",
        "dry",
        "--dry-run=server",
        "--from-literal=k=v",
    ]);
    run(&["get", "configmap", "a"]);
    run(&["get", "configmaps"]);
    run(&["label", "configmap", "a", "x=y"]);
    run(&["annotate", "configmap", "a", "note=1"]);
    let manifest =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: m\ndata:\n  k: v\n";
    c.ok_stdin(0, &["apply", "--server-side", "-f", "-"], Some(manifest));
    let replaced = c.ok(0, &["-n", "m", "get", "configmap", "a", "-o", "json"]);
    let mut obj: serde_json::Value = serde_json::from_str(&replaced).expect("json");
    obj["data"]["k"] = "w".into();
    c.ok_stdin(0, &["replace", "-f", "-"], Some(&obj.to_string()));
    c.err(0, &["-n", "m", "get", "configmap", "nope"]);
    // A watch that ends by itself after a second: WATCH is recorded when it ends.
    c.ok(
        0,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/m/configmaps?watch=1&timeoutSeconds=1",
        ],
    );
    run(&["delete", "configmap", "a"]);
    c.ok(0, &["delete", "--raw", "/api/v1/namespaces/m/configmaps"]);

    let after = scrape(&c);
    let cm = |verb: &'static str, code: &'static str| {
        vec![
            ("resource", "configmaps"),
            ("group", ""),
            ("version", "v1"),
            ("verb", verb),
            ("code", code),
        ]
    };
    for (verb, code, scope, dry_run) in [
        ("POST", "201", "resource", ""),
        ("POST", "201", "resource", "All"),
        ("GET", "200", "resource", ""),
        ("GET", "404", "resource", ""),
        ("LIST", "200", "namespace", ""),
        ("PATCH", "200", "resource", ""),
        ("APPLY", "201", "resource", ""),
        ("PUT", "200", "resource", ""),
        ("WATCH", "200", "namespace", ""),
        ("DELETE", "200", "resource", ""),
        ("DELETE", "200", "namespace", ""),
    ] {
        let mut want = cm(verb, code);
        want.push(("scope", scope));
        want.push(("dry_run", dry_run));
        want.push(("component", "apiserver"));
        let (b, a) = (
            before.sum("apiserver_request_total", &want),
            after.sum("apiserver_request_total", &want),
        );
        assert!(a > b, "apiserver_request_total{want:?}: {b} -> {a}");
        let hist: Vec<(&str, &str)> = want.iter().filter(|(k, _)| *k != "code").copied().collect();
        let (hb, ha) = (
            before.sum("apiserver_request_duration_seconds_count", &hist),
            after.sum("apiserver_request_duration_seconds_count", &hist),
        );
        assert!(ha > hb, "duration count {hist:?}: {hb} -> {ha}");
    }
    // The watch that was open is over; a finished watch took about its second.
    assert_eq!(
        after.sum("apiserver_longrunning_requests", &watching),
        0.0,
        "the watch ended"
    );
    let watch = [("verb", "WATCH"), ("resource", "configmaps")];
    let took = after.sum("apiserver_request_duration_seconds_sum", &watch)
        - before.sum("apiserver_request_duration_seconds_sum", &watch);
    assert!(took >= 1.0, "watch durations: {took}");
    check_histogram(&after, "apiserver_request_duration_seconds");
    check_histogram(&after, "etcd_request_duration_seconds");

    // Health checks are recorded as upstream instruments them; /metrics itself is not.
    assert!(after.sum("apiserver_request_total", &[("subresource", "/readyz")]) >= 1.0);
    assert_eq!(
        after.sum("apiserver_request_total", &[("subresource", "/metrics")]),
        0.0
    );

    // Store calls, by operation and resource.
    for op in ["create", "update", "get", "delete"] {
        let want = [("operation", op), ("type", "configmaps")];
        let (b, a) = (
            before.sum("etcd_requests_total", &want),
            after.sum("etcd_requests_total", &want),
        );
        assert!(a > b, "etcd_requests_total{want:?}: {b} -> {a}");
        assert!(after.sum("etcd_request_duration_seconds_count", &want) >= a);
    }
    // Object counts per resource, as upstream names them (`deployments.apps`).
    let counted = after.sum("apiserver_storage_objects", &[("resource", "namespaces")]);
    let listed = c
        .ok(0, &["get", "namespaces", "-o", "name"])
        .lines()
        .count();
    assert_eq!(counted, listed as f64, "namespaces counted");
    assert!(after
        .samples
        .iter()
        .any(|s| s.name == "apiserver_storage_objects"
            && s.labels.get("resource").map(String::as_str) == Some("deployments.apps")));

    // The controllers' queues: namespace `m` got its default ServiceAccount through a reconcile.
    assert!(
        after.sum("workqueue_adds_total", &[("name", "serviceaccount")]) >= 1.0,
        "serviceaccount reconciles counted"
    );
    assert!(
        after.sum(
            "workqueue_work_duration_seconds_count",
            &[("name", "serviceaccount")]
        ) >= 1.0
    );

    // Both in-flight kinds, and the process' figures.
    for kind in ["readOnly", "mutating"] {
        assert!(
            after
                .samples
                .iter()
                .any(|s| s.name == "apiserver_current_inflight_requests"
                    && s.labels.get("request_kind").map(String::as_str) == Some(kind)),
            "in-flight {kind}"
        );
    }
    assert!(after.sum("process_resident_memory_bytes", &[]) > 1e6);
    assert!(after.sum("process_cpu_seconds_total", &[]) > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let started = after.sum("process_start_time_seconds", &[]);
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "start {started}, now {now}"
    );
    assert!(after.sum("process_open_fds", &[]) > 0.0);

    // Without valid credentials: refused as every non-public path is (kube-apiserver answers 401 when it
    // does not know who asks, and kubectl says so). kubectl gets an unknown token (with no credentials at
    // all it would prompt for a password); the raw request below carries none.
    let kubeconfig = c.member(0).kubeconfig();
    let ca = kubeconfig
        .parent()
        .expect("data dir")
        .join("pki")
        .join("ca.crt");
    let anon = c.dir().join("anonymous.kubeconfig");
    std::fs::write(
        &anon,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: {}\n    certificate-authority: {}\ncontexts:\n- name: anon\n  context:\n    cluster: keel\n    user: anon\ncurrent-context: anon\nusers:\n- name: anon\n  user:\n    token: not-a-known-token\n",
            c.member(0).kube_url(),
            ca.display()
        ),
    )
    .expect("anonymous kubeconfig");
    let r = run_kubectl(
        kubectl_command(
            &anon,
            &c.dir(),
            &c.dir().join("kubecache-anon"),
            &["get", "--raw", "/metrics"],
        ),
        None,
        KUBECTL_TIMEOUT,
    );
    assert!(!r.ok, "anonymous /metrics answered: {}", r.stdout);
    assert!(r.stderr.contains("Unauthorized"), "{}", r.stderr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (code, status) = rt.block_on(async {
        let anon = c.anonymous_client(0).await;
        raw_request(&anon, "GET", "/metrics", &[], Vec::new()).await
    });
    assert_eq!(code, 401, "{status}");
    assert_eq!(status["reason"], "Unauthorized", "{status}");
}
