//! The bytes of keel's answers against upstream's encoding, for a created object of several served kinds,
//! a list, a Status and a watch event: Go's field order, Go's zero values, a newline at the end. Every
//! expected body here is written from upstream's type definitions (k8s.io/api 1.32) and defaults, not
//! from keel's output; volatile values (uid, resourceVersion, times) are replaced before comparing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| {
        let c = KubeCluster::start(keel_bin!(), 1);
        c.ok(0, &["create", "namespace", "wire"]);
        c
    })
}

/// Sends a request; returns the status code and the body's bytes as text.
fn send(c: &KubeCluster, method: &str, path: &str, body: &str) -> (u16, String) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = c.client(0).await;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body.as_bytes().to_vec())
            .unwrap();
        let resp = client
            .send(req.map(kube::client::Body::from))
            .await
            .unwrap();
        let code = resp.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        (code, String::from_utf8(bytes.to_vec()).unwrap())
    })
}

/// Replaces the values of `"key":"…"` with `<key>`.
fn mask(text: &str, keys: &[&str]) -> String {
    let mut out = text.to_string();
    for key in keys {
        let pat = format!("\"{key}\":\"");
        let mut from = 0;
        while let Some(at) = out[from..].find(&pat) {
            let start = from + at + pat.len();
            let end = start + out[start..].find('"').unwrap();
            out.replace_range(start..end, &format!("<{key}>"));
            from = start;
        }
    }
    out
}

fn masked(text: &str) -> String {
    mask(
        text,
        &["uid", "resourceVersion", "creationTimestamp", "time"],
    )
}

/// Removes `,"managedFields":[…]` (its contents follow server-side apply's field sets, tested elsewhere).
fn without_managed_fields(text: &str) -> String {
    let Some(at) = text.find(",\"managedFields\":[") else {
        return text.to_string();
    };
    let mut depth = 0;
    let start = at + ",\"managedFields\":".len();
    for (i, ch) in text[start..].char_indices() {
        match ch {
            '[' | '{' => depth += 1,
            ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return format!("{}{}", &text[..at], &text[start + i + 1..]);
                }
            }
            _ => {}
        }
    }
    text.to_string()
}

#[test]
fn a_configmap_with_its_managed_fields() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/configmaps?fieldManager=wire-test",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"b":"2","a":"1"}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        masked(&body),
        concat!(
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"wire","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>","#,
            r#""managedFields":[{"manager":"wire-test","operation":"Update","apiVersion":"v1","time":"<time>","#,
            r#""fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:a":{},"f:b":{}}}}]},"#,
            r#""data":{"a":"1","b":"2"}}"#,
            "\n"
        )
    );
}

#[test]
fn a_daemonset_with_its_defaults_and_zero_status() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/apps/v1/namespaces/wire/daemonsets",
        r#"{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"d"},"spec":{"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.9"}]}}}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{"name":"d","namespace":"wire","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>","#,
            r#""annotations":{"deprecated.daemonset.template.generation":"1"}},"#,
            r#""spec":{"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"creationTimestamp":null,"labels":{"app":"d"}},"#,
            r#""spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.9","resources":{},"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"#,
            r#""schedulerName":"default-scheduler"}},"#,
            r#""updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1,"maxSurge":0}},"revisionHistoryLimit":10},"#,
            r#""status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}}"#,
            "\n"
        )
    );
}

#[test]
fn a_namespace_a_list_and_a_not_found_status() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces",
        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"wire-ns"}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"wire-ns","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>","#,
            r#""labels":{"kubernetes.io/metadata.name":"wire-ns"}},"#,
            r#""spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}"#,
            "\n"
        )
    );

    send(
        c,
        "POST",
        "/api/v1/namespaces/wire/secrets",
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"k":"v"}}"#,
    );
    let (code, body) = send(c, "GET", "/api/v1/namespaces/wire/secrets", "");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"SecretList","apiVersion":"v1","metadata":{"resourceVersion":"<resourceVersion>"},"#,
            r#""items":[{"metadata":{"name":"s","namespace":"wire","uid":"<uid>","resourceVersion":"<resourceVersion>","#,
            r#""creationTimestamp":"<creationTimestamp>"},"data":{"k":"dg=="},"type":"Opaque"}]}"#,
            "\n"
        )
    );

    let (code, body) = send(c, "GET", "/api/v1/namespaces/wire/configmaps/nope", "");
    assert_eq!(code, 404);
    assert_eq!(
        body,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
            r#""message":"configmaps \"nope\" not found","reason":"NotFound","#,
            r#""details":{"name":"nope","kind":"configmaps"},"code":404}"#,
            "\n"
        )
    );
}

#[test]
fn a_watch_event_puts_its_type_first() {
    let c = cluster();
    send(
        c,
        "POST",
        "/api/v1/namespaces/wire/configmaps",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w"},"data":{"v":"1"}}"#,
    );
    let (code, body) = send(
        c,
        "GET",
        "/api/v1/namespaces/wire/configmaps?watch=True&fieldSelector=metadata.name%3Dw&timeoutSeconds=1",
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"w","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""data":{"v":"1"}}}"#,
            "\n"
        )
    );
    // Upstream's query decoding: `0` and `false` in any case are false, so these are lists.
    for off in ["False", "0", "FALSE"] {
        let (code, body) = send(
            c,
            "GET",
            &format!(
                "/api/v1/namespaces/wire/configmaps?watch={off}&fieldSelector=metadata.name%3Dw"
            ),
            "",
        );
        assert_eq!(code, 200);
        assert!(
            body.starts_with(r#"{"kind":"ConfigMapList""#),
            "{off}: {body}"
        );
    }
}

#[test]
fn a_deployment_with_its_defaults_and_empty_status() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/apps/v1/namespaces/wire/deployments",
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.9"}]}}}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web","namespace":"wire","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"replicas":1,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"creationTimestamp":null,"labels":{"app":"web"}},"#,
            r#""spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.9","resources":{},"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"#,
            r#""schedulerName":"default-scheduler"}},"#,
            r#""strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}},"#,
            r#""revisionHistoryLimit":10,"progressDeadlineSeconds":600},"status":{}}"#,
            "\n"
        )
    );
}

#[test]
fn a_service_with_its_allocated_ip_and_defaults() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/services",
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"},"spec":{"selector":{"app":"web"},"ports":[{"port":80}]}}"#,
    );
    assert_eq!(code, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ip = v["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.96."), "{ip}");
    assert_eq!(
        without_managed_fields(&masked(&body)).replace(&ip, "<ip>"),
        concat!(
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"svc","namespace":"wire","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"ports":[{"protocol":"TCP","port":80,"targetPort":80}],"selector":{"app":"web"},"#,
            r#""clusterIP":"<ip>","clusterIPs":["<ip>"],"type":"ClusterIP","sessionAffinity":"None","#,
            r#""ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","internalTrafficPolicy":"Cluster"},"#,
            r#""status":{"loadBalancer":{}}}"#,
            "\n"
        )
    );
}

/// The pod template spec of the workloads below as upstream writes it: one pause container and the
/// restart policy sent, with SetDefaults_Container's and SetDefaults_PodSpec's values.
fn defaulted_pod_spec(restart: &str) -> String {
    format!(
        concat!(
            r#"{{"containers":[{{"name":"c","image":"registry.k8s.io/pause:3.9","resources":{{}},"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"#,
            r#""restartPolicy":"{}","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{{}},"#,
            r#""schedulerName":"default-scheduler"}}"#,
        ),
        restart
    )
}

/// The body masked, without managedFields, and with the object's uid (also in generated labels and
/// selectors) replaced by `<uid>`.
fn comparable(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let uid = v["metadata"]["uid"].as_str().unwrap().to_string();
    without_managed_fields(&masked(&body.replace(&uid, "<uid>")))
}

const PAUSE: &str = r#"{"name":"c","image":"registry.k8s.io/pause:3.9"}"#;

#[test]
fn a_pod_with_every_default_and_admission_effect() {
    let c = cluster();
    // automountServiceAccountToken: false, so that the ServiceAccount admission adds no token volume
    // (keel does not serve the TokenRequest API that such a volume needs).
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/pods",
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p"}},"spec":{{"automountServiceAccountToken":false,"containers":[{PAUSE}]}}}}"#
        ),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        comparable(&body),
        concat!(
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"wire","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.9","resources":{},"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","#,
            r#""serviceAccountName":"default","serviceAccount":"default","automountServiceAccountToken":false,"#,
            r#""securityContext":{},"schedulerName":"default-scheduler","#,
            r#""tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},"#,
            r#"{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"#,
            r#""priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},"#,
            r#""status":{"phase":"Pending","qosClass":"BestEffort"}}"#,
            "\n"
        )
    );
}

#[test]
fn a_node_with_its_zero_status() {
    let c = cluster();
    // No taint is sent: the TaintNodesByCondition admission adds the not-ready NoSchedule one.
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/nodes",
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"wire-node"}}"#,
    );
    send(c, "DELETE", "/api/v1/nodes/wire-node", "");
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        comparable(&body),
        concat!(
            r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"wire-node","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"taints":[{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"}]},"#,
            r#""status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"#,
            r#""nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","#,
            r#""containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}}"#,
            "\n"
        )
    );
}

#[test]
fn a_job_with_its_defaults_and_generated_selector() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/batch/v1/namespaces/wire/jobs",
        &format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"j"}},"spec":{{"template":{{"spec":{{"containers":[{PAUSE}],"restartPolicy":"Never"}}}}}}}}"#
        ),
    );
    assert_eq!(code, 201, "{body}");
    // The labels generated on the template are the Job's own too: upstream defaults empty Job labels
    // from the template's when it reads the stored Job back.
    let labels = concat!(
        r#""labels":{"batch.kubernetes.io/controller-uid":"<uid>","batch.kubernetes.io/job-name":"j","#,
        r#""controller-uid":"<uid>","job-name":"j"}"#
    );
    assert_eq!(
        comparable(&body),
        format!(
            concat!(
                r#"{{"kind":"Job","apiVersion":"batch/v1","metadata":{{"name":"j","namespace":"wire","uid":"<uid>","#,
                r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>",{labels}}},"#,
                r#""spec":{{"parallelism":1,"completions":1,"backoffLimit":6,"#,
                r#""selector":{{"matchLabels":{{"batch.kubernetes.io/controller-uid":"<uid>"}}}},"manualSelector":false,"#,
                r#""template":{{"metadata":{{"creationTimestamp":null,{labels}}},"spec":{spec}}},"#,
                r#""completionMode":"NonIndexed","suspend":false,"podReplacementPolicy":"TerminatingOrFailed"}},"#,
                r#""status":{{}}}}"#,
                "\n"
            ),
            labels = labels,
            spec = defaulted_pod_spec("Never"),
        )
    );
}

#[test]
fn a_cronjob_with_its_defaults_and_an_undefaulted_job_template() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/batch/v1/namespaces/wire/cronjobs",
        &format!(
            r#"{{"apiVersion":"batch/v1","kind":"CronJob","metadata":{{"name":"cj"}},"spec":{{"schedule":"0 0 1 1 *","jobTemplate":{{"spec":{{"template":{{"spec":{{"containers":[{PAUSE}],"restartPolicy":"OnFailure"}}}}}}}}}}}}"#
        ),
    );
    assert_eq!(code, 201, "{body}");
    // Upstream's CronJob defaulter fills the pod spec of the job template but not its JobSpec.
    assert_eq!(
        comparable(&body),
        format!(
            concat!(
                r#"{{"kind":"CronJob","apiVersion":"batch/v1","metadata":{{"name":"cj","namespace":"wire","uid":"<uid>","#,
                r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"}},"#,
                r#""spec":{{"schedule":"0 0 1 1 *","concurrencyPolicy":"Allow","suspend":false,"#,
                r#""jobTemplate":{{"metadata":{{"creationTimestamp":null}},"spec":{{"template":{{"metadata":{{"creationTimestamp":null}},"#,
                r#""spec":{spec}}}}}}},"successfulJobsHistoryLimit":3,"failedJobsHistoryLimit":1}},"#,
                r#""status":{{}}}}"#,
                "\n"
            ),
            spec = defaulted_pod_spec("OnFailure"),
        )
    );
}

#[test]
fn a_statefulset_with_its_defaults_and_zero_status() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/apps/v1/namespaces/wire/statefulsets",
        &format!(
            r#"{{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{{"name":"ss"}},"spec":{{"serviceName":"ss","selector":{{"matchLabels":{{"app":"ss"}}}},"template":{{"metadata":{{"labels":{{"app":"ss"}}}},"spec":{{"containers":[{PAUSE}]}}}}}}}}"#
        ),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        comparable(&body),
        format!(
            concat!(
                r#"{{"kind":"StatefulSet","apiVersion":"apps/v1","metadata":{{"name":"ss","namespace":"wire","uid":"<uid>","#,
                r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"}},"#,
                r#""spec":{{"replicas":1,"selector":{{"matchLabels":{{"app":"ss"}}}},"#,
                r#""template":{{"metadata":{{"creationTimestamp":null,"labels":{{"app":"ss"}}}},"spec":{spec}}},"#,
                r#""serviceName":"ss","podManagementPolicy":"OrderedReady","#,
                r#""updateStrategy":{{"type":"RollingUpdate","rollingUpdate":{{"partition":0}}}},"revisionHistoryLimit":10,"#,
                r#""persistentVolumeClaimRetentionPolicy":{{"whenDeleted":"Retain","whenScaled":"Retain"}}}},"#,
                r#""status":{{"replicas":0,"availableReplicas":0}}}}"#,
                "\n"
            ),
            spec = defaulted_pod_spec("Always"),
        )
    );
}

#[test]
fn a_replicationcontroller_with_selector_and_labels_from_its_template() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/replicationcontrollers",
        &format!(
            r#"{{"apiVersion":"v1","kind":"ReplicationController","metadata":{{"name":"rc"}},"spec":{{"template":{{"metadata":{{"labels":{{"app":"rc"}}}},"spec":{{"containers":[{PAUSE}]}}}}}}}}"#
        ),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        comparable(&body),
        format!(
            concat!(
                r#"{{"kind":"ReplicationController","apiVersion":"v1","metadata":{{"name":"rc","namespace":"wire","uid":"<uid>","#,
                r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>","#,
                r#""labels":{{"app":"rc"}}}},"#,
                r#""spec":{{"replicas":1,"selector":{{"app":"rc"}},"#,
                r#""template":{{"metadata":{{"creationTimestamp":null,"labels":{{"app":"rc"}}}},"spec":{spec}}}}},"#,
                r#""status":{{"replicas":0}}}}"#,
                "\n"
            ),
            spec = defaulted_pod_spec("Always"),
        )
    );
}

#[test]
fn a_poddisruptionbudget_with_its_zero_status() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/policy/v1/namespaces/wire/poddisruptionbudgets",
        r#"{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"pdb"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"pdb"}}}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        comparable(&body),
        concat!(
            r#"{"kind":"PodDisruptionBudget","apiVersion":"policy/v1","metadata":{"name":"pdb","namespace":"wire","uid":"<uid>","#,
            r#""resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"pdb"}}},"#,
            r#""status":{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":0,"expectedPods":0}}"#,
            "\n"
        )
    );
}

#[test]
fn an_endpointslice_with_its_port_defaults_and_zero_conditions() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/discovery.k8s.io/v1/namespaces/wire/endpointslices",
        r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"es"},"addressType":"IPv4","endpoints":[{"addresses":["10.1.0.1"],"conditions":{"ready":true},"nodeName":"n1","zone":"z1"},{"addresses":["10.1.0.2"]}],"ports":[{"port":80},{"name":"https","protocol":"TCP","port":443,"appProtocol":"https"}]}"#,
    );
    assert_eq!(code, 201, "{body}");
    // Upstream sets generation 1 on create and defaults a port's name to "" and protocol to TCP.
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"name":"es","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""addressType":"IPv4","endpoints":[{"addresses":["10.1.0.1"],"conditions":{"ready":true},"nodeName":"n1","zone":"z1"},"#,
            r#"{"addresses":["10.1.0.2"],"conditions":{}}],"#,
            r#""ports":[{"name":"","protocol":"TCP","port":80},{"name":"https","protocol":"TCP","port":443,"appProtocol":"https"}]}"#,
            "\n"
        )
    );

    // Without endpoints and ports: both fields lack omitempty, and an empty list comes back from
    // upstream's protobuf storage as nil, so both are null.
    let (code, body) = send(
        c,
        "POST",
        "/apis/discovery.k8s.io/v1/namespaces/wire/endpointslices",
        r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"es-empty"},"addressType":"IPv6","endpoints":[]}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"name":"es-empty","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""addressType":"IPv6","endpoints":null,"ports":null}"#,
            "\n"
        )
    );
}

#[test]
fn a_lease_with_its_micro_times_in_utc() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/wire/leases",
        r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":{"holderIdentity":"h","leaseDurationSeconds":15,"acquireTime":"2024-05-01T10:00:00.000000Z","renewTime":"2024-05-01T12:00:05.500000+02:00","leaseTransitions":0}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"holderIdentity":"h","leaseDurationSeconds":15,"acquireTime":"2024-05-01T10:00:00.000000Z","#,
            r#""renewTime":"2024-05-01T10:00:05.500000Z","leaseTransitions":0}}"#,
            "\n"
        )
    );

    // A spec is a struct: Go writes it even when it is empty.
    let (code, body) = send(
        c,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/wire/leases",
        r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l-empty"}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l-empty","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{}}"#,
            "\n"
        )
    );
}

#[test]
fn times_go_cannot_parse_are_refused_as_upstream() {
    let c = cluster();
    // A MicroTime needs exactly six fraction digits (apimachinery's RFC3339Micro layout).
    let (code, body) = send(
        c,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/wire/leases",
        r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l-bad"},"spec":{"renewTime":"2024-01-01T00:00:00Z"}}"#,
    );
    assert_eq!(
        (code, body.as_str()),
        (
            400,
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"Lease in version \"v1\" cannot be handled as a Lease: parsing time \"2024-01-01T00:00:00Z\" "#,
                r#"as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\"","#,
                r#""reason":"BadRequest","code":400}"#,
                "\n"
            )
        )
    );
    // A Time is RFC 3339: a fraction is accepted (and cut when written), a date alone is not.
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/events",
        r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"ev-bad"},"involvedObject":{"kind":"ConfigMap","namespace":"wire","name":"c"},"firstTimestamp":"2024-05-01"}"#,
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains(r#""message":"Event in version \"v1\" cannot be handled as a Event: parsing time \"2024-05-01\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"\" as \"T\"""#),
        "{body}"
    );
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/events",
        r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"ev-frac"},"involvedObject":{"kind":"ConfigMap","namespace":"wire","name":"c"},"firstTimestamp":"2024-05-01T10:00:00.75+02:00"}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert!(
        body.contains(r#""firstTimestamp":"2024-05-01T08:00:00Z""#),
        "{body}"
    );
}

#[test]
fn a_core_event_with_its_zero_times_and_reporting_fields() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/events",
        r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"ev1"},"involvedObject":{"kind":"ConfigMap","namespace":"wire","name":"c","apiVersion":"v1"},"reason":"Tested","message":"m","source":{"component":"wire-test"},"firstTimestamp":"2024-05-01T12:00:00+02:00","lastTimestamp":"2024-05-01T10:00:01.250Z","count":1,"type":"Normal"}"#,
    );
    assert_eq!(code, 201, "{body}");
    // metav1.Time is written in UTC to the second; a zero MicroTime is null; the reporting fields
    // have no omitempty.
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"ev1","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""involvedObject":{"kind":"ConfigMap","namespace":"wire","name":"c","apiVersion":"v1"},"#,
            r#""reason":"Tested","message":"m","source":{"component":"wire-test"},"#,
            r#""firstTimestamp":"2024-05-01T10:00:00Z","lastTimestamp":"2024-05-01T10:00:01Z","count":1,"type":"Normal","#,
            r#""eventTime":null,"reportingComponent":"","reportingInstance":""}"#,
            "\n"
        )
    );

    let (code, body) = send(
        c,
        "POST",
        "/api/v1/namespaces/wire/events",
        r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"ev2"},"involvedObject":{"kind":"Pod","namespace":"wire","name":"p"}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"ev2","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""involvedObject":{"kind":"Pod","namespace":"wire","name":"p"},"source":{},"#,
            r#""firstTimestamp":null,"lastTimestamp":null,"eventTime":null,"reportingComponent":"","reportingInstance":""}"#,
            "\n"
        )
    );
}

#[test]
fn an_events_k8s_io_event_with_its_deprecated_zero_fields() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/wire/events",
        r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"ev3"},"eventTime":"2024-05-01T12:00:00.123456+02:00","reportingController":"wire.example.com/test","reportingInstance":"wire-1","action":"Testing","reason":"Tested","regarding":{"kind":"ConfigMap","namespace":"wire","name":"c"},"note":"n","type":"Warning"}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"ev3","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""eventTime":"2024-05-01T10:00:00.123456Z","reportingController":"wire.example.com/test","#,
            r#""reportingInstance":"wire-1","action":"Testing","reason":"Tested","#,
            r#""regarding":{"kind":"ConfigMap","namespace":"wire","name":"c"},"note":"n","type":"Warning","#,
            r#""deprecatedSource":{},"deprecatedFirstTimestamp":null,"deprecatedLastTimestamp":null}"#,
            "\n"
        )
    );

    // The same event read through core/v1.
    let (code, body) = send(c, "GET", "/api/v1/namespaces/wire/events/ev3", "");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"ev3","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""involvedObject":{"kind":"ConfigMap","namespace":"wire","name":"c"},"reason":"Tested","message":"n","#,
            r#""source":{},"firstTimestamp":null,"lastTimestamp":null,"type":"Warning","#,
            r#""eventTime":"2024-05-01T10:00:00.123456Z","action":"Testing","#,
            r#""reportingComponent":"wire.example.com/test","reportingInstance":"wire-1"}"#,
            "\n"
        )
    );
}

#[test]
fn roles_and_bindings_with_their_defaulted_api_groups() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/wire/roles",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"r"},"rules":[{"apiGroups":["apps"],"resources":["deployments"],"resourceNames":["web"],"verbs":["get"]}]}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Role","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"r","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""rules":[{"verbs":["get"],"apiGroups":["apps"],"resources":["deployments"],"resourceNames":["web"]}]}"#,
            "\n"
        )
    );

    // `rules` has no omitempty: an empty list is stored as nil and written as null.
    let (code, body) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/wire/roles",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"r-empty"},"rules":[]}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"Role","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"r-empty","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""rules":null}"#,
            "\n"
        )
    );

    let (code, body) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/wire/rolebindings",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"rb"},"roleRef":{"kind":"Role","name":"r"},"subjects":[{"kind":"User","name":"alice"},{"kind":"ServiceAccount","name":"default","namespace":"wire"},{"kind":"Group","name":"devs"}]}"#,
    );
    assert_eq!(code, 201, "{body}");
    // rbac/v1 defaults: roleRef.apiGroup, and a User's or Group's apiGroup, are rbac.authorization.k8s.io.
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"RoleBinding","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"rb","namespace":"wire","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"alice"},"#,
            r#"{"kind":"ServiceAccount","name":"default","namespace":"wire"},"#,
            r#"{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"devs"}],"#,
            r#""roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"}}"#,
            "\n"
        )
    );
}

#[test]
fn cluster_roles_with_and_without_an_aggregation_rule() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"wire-reader"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list"]},{"nonResourceURLs":["/healthz"],"verbs":["get"]}]}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"ClusterRole","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"wire-reader","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""rules":[{"verbs":["get","list"],"apiGroups":[""],"resources":["pods"]},{"verbs":["get"],"nonResourceURLs":["/healthz"]}]}"#,
            "\n"
        )
    );

    // Without rules: `rules` has no omitempty, so the answer to the create shows null (the aggregation
    // controller fills the rules in later).
    let (code, body) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"wire-aggregated"},"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"wire.example.com/aggregate":"true"}}]}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"ClusterRole","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"wire-aggregated","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""rules":null,"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"wire.example.com/aggregate":"true"}}]}}"#,
            "\n"
        )
    );
}

#[test]
fn priority_classes_with_their_default_preemption_policy() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        r#"{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"wire-high"},"value":1000,"description":"wire"}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"PriorityClass","apiVersion":"scheduling.k8s.io/v1","metadata":{"name":"wire-high","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""value":1000,"description":"wire","preemptionPolicy":"PreemptLowerPriority"}"#,
            "\n"
        )
    );

    // `value` has no omitempty; `globalDefault: false` is left out.
    let (code, body) = send(
        c,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        r#"{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"wire-zero"},"value":0,"globalDefault":false,"preemptionPolicy":"Never"}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"PriorityClass","apiVersion":"scheduling.k8s.io/v1","metadata":{"name":"wire-zero","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""value":0,"preemptionPolicy":"Never"}"#,
            "\n"
        )
    );
}

#[test]
fn apiservices_local_and_with_a_service() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        r#"{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1.local.wire.example.com"},"spec":{"group":"local.wire.example.com","version":"v1","groupPriorityMinimum":1000,"versionPriority":15}}"#,
    );
    assert_eq!(code, 201, "{body}");
    // Upstream's strategy marks an APIService without a service Available on create.
    assert_eq!(
        mask(
            &without_managed_fields(&masked(&body)),
            &["lastTransitionTime"]
        ),
        concat!(
            r#"{"kind":"APIService","apiVersion":"apiregistration.k8s.io/v1","metadata":{"name":"v1.local.wire.example.com","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"group":"local.wire.example.com","version":"v1","groupPriorityMinimum":1000,"versionPriority":15},"#,
            r#""status":{"conditions":[{"type":"Available","status":"True","lastTransitionTime":"<lastTransitionTime>","#,
            r#""reason":"Local","message":"Local APIServices are always available"}]}}"#,
            "\n"
        )
    );

    // With a service: its port defaults to 443, and the status starts empty (the availability
    // controller fills it in later).
    let (code, body) = send(
        c,
        "POST",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        r#"{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1beta1.remote.wire.example.com"},"spec":{"service":{"namespace":"wire","name":"nope"},"group":"remote.wire.example.com","version":"v1beta1","insecureSkipTLSVerify":true,"groupPriorityMinimum":100,"versionPriority":10}}"#,
    );
    assert_eq!(code, 201, "{body}");
    // Leaves no unavailable group behind for discovery in the other tests.
    for name in [
        "v1.local.wire.example.com",
        "v1beta1.remote.wire.example.com",
    ] {
        send(
            c,
            "DELETE",
            &format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}"),
            "",
        );
    }
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"APIService","apiVersion":"apiregistration.k8s.io/v1","metadata":{"name":"v1beta1.remote.wire.example.com","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"service":{"namespace":"wire","name":"nope","port":443},"group":"remote.wire.example.com","#,
            r#""version":"v1beta1","insecureSkipTLSVerify":true,"groupPriorityMinimum":100,"versionPriority":10},"#,
            r#""status":{}}"#,
            "\n"
        )
    );
}

#[test]
fn a_crd_as_created_and_a_custom_resource_with_sorted_keys() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.wire.example.com"},"spec":{"group":"wire.example.com","names":{"plural":"widgets","kind":"Widget"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}},"subresources":{"status":{}},"additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"}]}]}}"#,
    );
    assert_eq!(code, 201, "{body}");
    // The answer to the create is the object as stored: apiextensions/v1 defaults (singular, listKind,
    // conversion), generation 1, the storage version recorded, and no conditions or accepted names yet
    // (the naming and establishing controllers write those afterwards).
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1","metadata":{"name":"widgets.wire.example.com","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","generation":1,"creationTimestamp":"<creationTimestamp>"},"#,
            r#""spec":{"group":"wire.example.com","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},"#,
            r#""scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,"#,
            r#""schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}},"#,
            r#""subresources":{"status":{}},"additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"}]}],"#,
            r#""conversion":{"strategy":"None"}},"#,
            r#""status":{"conditions":null,"acceptedNames":{"plural":"","kind":""},"storedVersions":["v1"]}}"#,
            "\n"
        )
    );

    // A custom resource is written as upstream writes unstructured objects: keys sorted, numbers as Go
    // writes a float64 or int64 decoded from the request (2.0 is 2).
    let mut created = None;
    for _ in 0..100 {
        let (code, body) = send(
            c,
            "POST",
            "/apis/wire.example.com/v1/namespaces/wire/widgets",
            r#"{"apiVersion":"wire.example.com/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"size":3,"ratio":1.5,"whole":2.0,"b":{"z":1,"a":[true,null,"x"]}},"status":{"ignored":true}}"#,
        );
        if code == 201 {
            created = Some(body);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let body = created.expect("the custom resource was created once its CRD was established");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"apiVersion":"wire.example.com/v1","kind":"Widget","metadata":{"creationTimestamp":"<creationTimestamp>","#,
            r#""generation":1,"name":"w1","namespace":"wire","resourceVersion":"<resourceVersion>","uid":"<uid>"},"#,
            r#""spec":{"b":{"a":[true,null,"x"],"z":1},"ratio":1.5,"size":3,"whole":2}}"#,
            "\n"
        )
    );
}

/// POSTs `body` to `path`, expects 201 and returns the body masked, without managedFields.
fn created(path: &str, body: &str) -> String {
    let (code, out) = send(cluster(), "POST", path, body);
    assert_eq!(code, 201, "{out}");
    without_managed_fields(&masked(&out))
}

/// The metadata of a created object named `name` in the `wire` namespace (`generation`: its kind counts
/// generations).
fn meta(name: &str, generation: bool) -> String {
    format!(
        r#""metadata":{{"name":"{name}","namespace":"wire","uid":"<uid>","resourceVersion":"<resourceVersion>",{}"creationTimestamp":"<creationTimestamp>"}}"#,
        if generation { r#""generation":1,"# } else { "" }
    )
}

#[test]
fn a_secret_with_string_data_merged_and_its_default_type() {
    // In `default`: the list test owns the secrets of `wire`.
    let body = created(
        "/api/v1/namespaces/default/secrets",
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"wire-merged"},"stringData":{"b":"b"},"data":{"a":"YQ=="}}"#,
    );
    send(
        cluster(),
        "DELETE",
        "/api/v1/namespaces/default/secrets/wire-merged",
        "",
    );
    assert_eq!(
        body,
        format!(
            r#"{{"kind":"Secret","apiVersion":"v1",{},"data":{{"a":"YQ==","b":"Yg=="}},"type":"Opaque"}}{}"#,
            meta("wire-merged", false).replace(r#""namespace":"wire""#, r#""namespace":"default""#),
            "\n"
        )
    );
}

#[test]
fn a_service_account_in_field_order() {
    let body = created(
        "/api/v1/namespaces/wire/serviceaccounts",
        r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"sa"},"automountServiceAccountToken":false,"imagePullSecrets":[{"name":"reg"}]}"#,
    );
    assert_eq!(
        body,
        format!(
            r#"{{"kind":"ServiceAccount","apiVersion":"v1",{},"imagePullSecrets":[{{"name":"reg"}}],"automountServiceAccountToken":false}}{}"#,
            meta("sa", false),
            "\n"
        )
    );
}

#[test]
fn endpoints_repacked_with_their_port_protocol() {
    // Addresses come back sorted by IP, an address given twice once, ports defaulted to TCP, and a
    // subset without addresses is gone (upstream's RepackSubsets on every write).
    let body = created(
        "/api/v1/namespaces/wire/endpoints",
        r#"{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"ep"},"subsets":[{"addresses":[{"ip":"10.1.0.2"},{"ip":"10.1.0.1","nodeName":"n1"}],"ports":[{"name":"http","port":80}]},{"addresses":[{"ip":"10.1.0.2"}],"ports":[{"name":"http","port":80}]},{"ports":[{"port":9}]}]}"#,
    );
    assert_eq!(
        body,
        format!(
            concat!(
                r#"{{"kind":"Endpoints","apiVersion":"v1",{},"subsets":[{{"addresses":[{{"ip":"10.1.0.1","nodeName":"n1"}},"#,
                r#"{{"ip":"10.1.0.2"}}],"ports":[{{"name":"http","port":80,"protocol":"TCP"}}]}}]}}{}"#
            ),
            meta("ep", false),
            "\n"
        )
    );
}

#[test]
fn a_network_policy_with_its_policy_types_and_port_protocol() {
    let body = created(
        "/apis/networking.k8s.io/v1/namespaces/wire/networkpolicies",
        r#"{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"np"},"spec":{"egress":[{"ports":[{"port":53}]}],"podSelector":{}}}"#,
    );
    assert_eq!(
        body,
        format!(
            concat!(
                r#"{{"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1",{},"#,
                r#""spec":{{"podSelector":{{}},"egress":[{{"ports":[{{"protocol":"TCP","port":53}}]}}],"policyTypes":["Ingress","Egress"]}}}}{}"#
            ),
            meta("np", true),
            "\n"
        )
    );
}

#[test]
fn a_replicaset_with_its_defaults_and_zero_status() {
    let body = created(
        "/apis/apps/v1/namespaces/wire/replicasets",
        &format!(
            r#"{{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{{"name":"rs"}},"spec":{{"replicas":0,"selector":{{"matchLabels":{{"app":"rs"}}}},"template":{{"metadata":{{"labels":{{"app":"rs"}}}},"spec":{{"containers":[{PAUSE}]}}}}}}}}"#
        ),
    );
    assert_eq!(
        body,
        format!(
            concat!(
                r#"{{"kind":"ReplicaSet","apiVersion":"apps/v1",{},"spec":{{"replicas":0,"selector":{{"matchLabels":{{"app":"rs"}}}},"#,
                r#""template":{{"metadata":{{"creationTimestamp":null,"labels":{{"app":"rs"}}}},"spec":{}}}}},"status":{{"replicas":0}}}}{}"#
            ),
            meta("rs", true),
            defaulted_pod_spec("Always"),
            "\n"
        )
    );
}

#[test]
fn a_controller_revision_with_its_raw_data() {
    let body = created(
        "/apis/apps/v1/namespaces/wire/controllerrevisions",
        r#"{"apiVersion":"apps/v1","kind":"ControllerRevision","metadata":{"name":"cr"},"revision":3,"data":{"a":{"b":1}}}"#,
    );
    assert_eq!(
        body,
        format!(
            r#"{{"kind":"ControllerRevision","apiVersion":"apps/v1",{},"data":{{"a":{{"b":1}}}},"revision":3}}{}"#,
            meta("cr", false),
            "\n"
        )
    );
}

#[test]
fn a_cluster_role_binding_with_its_defaulted_api_groups() {
    let c = cluster();
    let (code, body) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"wire-crb"},"roleRef":{"kind":"ClusterRole","name":"wire-nothing"},"subjects":[{"kind":"User","name":"wire-user"},{"kind":"ServiceAccount","name":"sa","namespace":"wire"}]}"#,
    );
    send(
        c,
        "DELETE",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/wire-crb",
        "",
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        without_managed_fields(&masked(&body)),
        concat!(
            r#"{"kind":"ClusterRoleBinding","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"wire-crb","#,
            r#""uid":"<uid>","resourceVersion":"<resourceVersion>","creationTimestamp":"<creationTimestamp>"},"#,
            r#""subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"wire-user"},"#,
            r#"{"kind":"ServiceAccount","name":"sa","namespace":"wire"}],"#,
            r#""roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"wire-nothing"}}"#,
            "\n"
        )
    );
}

/// The `managedFields` array of a body, as written.
fn managed_fields(text: &str) -> String {
    let start = text.find("\"managedFields\":[").unwrap() + "\"managedFields\":".len();
    let mut depth = 0;
    for (i, ch) in text[start..].char_indices() {
        match ch {
            '[' | '{' => depth += 1,
            ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return text[start..start + i + 1].to_string();
                }
            }
            _ => {}
        }
    }
    panic!("unterminated managedFields in {text}")
}

#[test]
fn a_pods_managed_fields_hold_what_was_sent_and_defaulted_not_what_admission_added() {
    // Upstream's field manager runs after decoding and defaulting, before mutating admission: the
    // service account, the default tolerations, the priority and the status are nobody's fields.
    let (code, body) = send(
        cluster(),
        "POST",
        "/api/v1/namespaces/wire/pods?fieldManager=wire-test",
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p-fields"}},"spec":{{"automountServiceAccountToken":false,"containers":[{PAUSE}]}}}}"#
        ),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        mask(&managed_fields(&body), &["time"]),
        concat!(
            r#"[{"manager":"wire-test","operation":"Update","apiVersion":"v1","time":"<time>","fieldsType":"FieldsV1","#,
            r#""fieldsV1":{"f:spec":{"f:automountServiceAccountToken":{},"f:containers":{"k:{\"name\":\"c\"}":{".":{},"#,
            r#""f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"#,
            r#""f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"#,
            r#""f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}]"#
        )
    );
}
