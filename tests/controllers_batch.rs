//! The job, ttl-after-finished and cronjob controllers on a shared 3-member cluster, driven with the real
//! kubectl; the test plays the kubelet, reporting the jobs' pods Succeeded or Failed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::pods::{report_all, report_exit, Report};
use serde_json::Value;

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

fn job_yaml(ns: &str, name: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {ns}
spec:
{extra_spec}
  template:
    spec:
      containers:
      - name: main
        image: busybox
        command: ["true"]
"#
    )
}

fn get_json(c: &KubeCluster, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&c.ok(0, &a)).unwrap()
}

fn job(c: &KubeCluster, ns: &str, name: &str) -> Value {
    get_json(c, &["job", name, "-n", ns])
}

fn condition(job: &Value, type_: &str) -> Option<Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .cloned()
}

fn pods(c: &KubeCluster, ns: &str, job: &str) -> Vec<Value> {
    let sel = format!("batch.kubernetes.io/job-name={job}");
    let v = get_json(c, &["pods", "-n", ns, "-l", &sel]);
    v["items"].as_array().cloned().unwrap_or_default()
}

fn live(pods: &[Value]) -> Vec<&Value> {
    pods.iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .collect()
}

/// Reports every running pod of `job` as `want` until the job has condition `until`.
fn drive(c: &KubeCluster, ns: &str, name: &str, want: Report, until: &str, timeout: Duration) {
    let rt = rt();
    let client = rt.block_on(c.client(0));
    let sel = format!("batch.kubernetes.io/job-name={name}");
    c.wait_until(&format!("job {name} {until}"), timeout, || {
        // A busy 2-core machine may see a transient "not leader": poll again rather than stop.
        if rt.block_on(report_all(&client, ns, &sel, want)).is_err() {
            return false;
        }
        let r = c.kubectl(0, &["get", "job", name, "-n", ns, "-o", "json"]);
        r.ok && serde_json::from_str::<Value>(&r.stdout)
            .ok()
            .and_then(|j| condition(&j, until))
            .is_some()
    });
}

#[test]
fn a_job_runs_its_completions_with_its_parallelism() {
    let c = cluster();
    let ns = "batch-complete";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(ns, "three", "  completions: 3\n  parallelism: 2")),
    );
    c.wait_until("two pods", Duration::from_secs(30), || {
        live(&pods(c, ns, "three")).len() == 2
    });
    let started = Instant::now();
    let p = &pods(c, ns, "three")[0];
    let j = job(c, ns, "three");
    let uid = j["metadata"]["uid"].as_str().unwrap();
    // Labels, owner and finalizer as upstream puts them.
    assert_eq!(
        p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    assert_eq!(p["metadata"]["labels"]["controller-uid"], uid);
    assert_eq!(p["metadata"]["labels"]["job-name"], "three");
    let owner = &p["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Job");
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["blockOwnerDeletion"], true);
    assert!(p["metadata"]["finalizers"]
        .as_array()
        .unwrap()
        .contains(&Value::from("batch.kubernetes.io/job-tracking")));
    assert!(p["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("three-"));
    assert_eq!(j["status"]["active"], 2, "{j}");
    assert!(j["status"]["startTime"].is_string(), "{j}");

    drive(
        c,
        ns,
        "three",
        Report::Succeeded,
        "Complete",
        Duration::from_secs(60),
    );
    println!("job of 3 completions completed in {:?}", started.elapsed());
    c.ok(
        0,
        &[
            "wait",
            "--for=condition=complete",
            "job/three",
            "-n",
            ns,
            "--timeout=30s",
        ],
    );
    let j = job(c, ns, "three");
    assert_eq!(j["status"]["succeeded"], 3, "{j}");
    assert_eq!(j["status"]["failed"].as_i64().unwrap_or(0), 0, "{j}");
    assert!(j["status"]["completionTime"].is_string(), "{j}");
    assert!(condition(&j, "SuccessCriteriaMet").is_some(), "{j}");
    let complete = condition(&j, "Complete").unwrap();
    assert_eq!(complete["reason"], "CompletionsReached", "{j}");
    // Exactly three pods ran, and every one was released by the controller.
    c.wait_until("finalizers released", Duration::from_secs(30), || {
        pods(c, ns, "three").iter().all(|p| {
            p["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty())
        })
    });
    assert_eq!(pods(c, ns, "three").len(), 3);
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(events.contains("Completed"), "{events}");
}

#[test]
fn an_indexed_job_runs_each_index_once() {
    let c = cluster();
    let ns = "batch-indexed";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(
            ns,
            "idx",
            "  completions: 3\n  parallelism: 3\n  completionMode: Indexed",
        )),
    );
    c.wait_until("three pods", Duration::from_secs(30), || {
        live(&pods(c, ns, "idx")).len() == 3
    });
    let mut seen: Vec<String> = pods(c, ns, "idx")
        .iter()
        .map(|p| {
            let i = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(
                p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"], i,
                "{p}"
            );
            assert_eq!(p["spec"]["hostname"], format!("idx-{i}"), "{p}");
            let name = p["metadata"]["name"].as_str().unwrap();
            assert!(name.starts_with(&format!("idx-{i}-")), "{name}");
            i
        })
        .collect();
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);
    drive(
        c,
        ns,
        "idx",
        Report::Succeeded,
        "Complete",
        Duration::from_secs(60),
    );
    let j = job(c, ns, "idx");
    assert_eq!(j["status"]["completedIndexes"], "0-2", "{j}");
    assert_eq!(j["status"]["succeeded"], 3, "{j}");
}

#[test]
fn a_failing_job_stops_at_its_backoff_limit() {
    let c = cluster();
    let ns = "batch-backoff";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(ns, "fails", "  backoffLimit: 1")),
    );
    let started = Instant::now();
    drive(
        c,
        ns,
        "fails",
        Report::Failed,
        "Failed",
        Duration::from_secs(90),
    );
    println!(
        "backoffLimit 1 reached in {:?} (one 10 s replacement delay)",
        started.elapsed()
    );
    let j = job(c, ns, "fails");
    let failed = condition(&j, "Failed").unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded", "{j}");
    assert_eq!(
        failed["message"], "Job has reached the specified backoff limit",
        "{j}"
    );
    assert!(condition(&j, "FailureTarget").is_some(), "{j}");
    assert_eq!(j["status"]["failed"], 2, "{j}");
    assert_eq!(j["status"]["active"].as_i64().unwrap_or(0), 0, "{j}");
    assert!(j["status"]["completionTime"].is_null(), "{j}");
    // Two pods ran; no third is made.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pods(c, ns, "fails").len(), 2);
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(events.contains("BackoffLimitExceeded"), "{events}");
}

#[test]
fn active_deadline_fails_the_job_and_deletes_its_pods() {
    let c = cluster();
    let ns = "batch-deadline";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(
            ns,
            "slow",
            "  activeDeadlineSeconds: 3\n  parallelism: 2\n  completions: 4",
        )),
    );
    c.wait_until("job slow Failed", Duration::from_secs(60), || {
        condition(&job(c, ns, "slow"), "Failed").is_some()
    });
    let j = job(c, ns, "slow");
    assert_eq!(
        condition(&j, "Failed").unwrap()["reason"],
        "DeadlineExceeded",
        "{j}"
    );
    assert_eq!(j["status"]["active"].as_i64().unwrap_or(0), 0, "{j}");
    c.wait_until("the active pods deleted", Duration::from_secs(30), || {
        pods(c, ns, "slow").is_empty()
    });
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(events.contains("DeadlineExceeded"), "{events}");
    assert!(events.contains("SuccessfulDelete"), "{events}");
}

#[test]
fn a_pod_failure_policy_fails_the_job_on_an_exit_code() {
    let c = cluster();
    let ns = "batch-policy";
    c.ok(0, &["create", "namespace", ns]);
    let spec = r#"  backoffLimit: 6
  parallelism: 1
  podFailurePolicy:
    rules:
    - action: Ignore
      onExitCodes: {operator: In, values: [3]}
    - action: FailJob
      onExitCodes: {containerName: main, operator: In, values: [42]}"#;
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(ns, "policy", spec)),
    );
    let rt = rt();
    let client = rt.block_on(c.client(0));
    // An ignored failure is replaced at once and not counted.
    let first = c.wait_until_pod(ns, "policy");
    rt.block_on(report_exit(&client, ns, &first, "main", 3))
        .unwrap();
    c.wait_until("a replacement pod", Duration::from_secs(30), || {
        live(&pods(c, ns, "policy"))
            .iter()
            .any(|p| p["metadata"]["name"] != first.as_str())
    });
    assert_eq!(
        job(c, ns, "policy")["status"]["failed"]
            .as_i64()
            .unwrap_or(0),
        0
    );
    let second = c.wait_until_pod(ns, "policy");
    rt.block_on(report_exit(&client, ns, &second, "main", 42))
        .unwrap();
    c.wait_until("job policy Failed", Duration::from_secs(30), || {
        condition(&job(c, ns, "policy"), "Failed").is_some()
    });
    let j = job(c, ns, "policy");
    let failed = condition(&j, "Failed").unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy", "{j}");
    let msg = failed["message"].as_str().unwrap();
    assert_eq!(
        msg,
        format!("Container main for pod {ns}/{second} failed with exit code 42 matching FailJob rule at index 1")
    );
    assert_eq!(j["status"]["failed"], 1, "{j}");
}

#[test]
fn ttl_after_finished_deletes_the_job() {
    let c = cluster();
    let ns = "batch-ttl";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(ns, "brief", "  ttlSecondsAfterFinished: 2")),
    );
    drive(
        c,
        ns,
        "brief",
        Report::Succeeded,
        "Complete",
        Duration::from_secs(60),
    );
    let done = Instant::now();
    c.wait_until("job brief deleted", Duration::from_secs(60), || {
        !c.kubectl(0, &["get", "job", "brief", "-n", ns]).ok
    });
    println!(
        "job deleted {:?} after completing (ttl 2 s)",
        done.elapsed()
    );
}

#[test]
fn suspend_deletes_the_pods_and_resume_restarts_them() {
    let c = cluster();
    let ns = "batch-suspend";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&job_yaml(ns, "pause", "  parallelism: 2\n  completions: 2")),
    );
    c.wait_until("two pods", Duration::from_secs(30), || {
        live(&pods(c, ns, "pause")).len() == 2
    });
    c.ok(
        0,
        &[
            "patch",
            "job",
            "pause",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    );
    c.wait_until("suspended", Duration::from_secs(30), || {
        let j = job(c, ns, "pause");
        condition(&j, "Suspended").is_some() && j["status"]["active"].as_i64().unwrap_or(0) == 0
    });
    assert_eq!(
        condition(&job(c, ns, "pause"), "Suspended").unwrap()["reason"],
        "JobSuspended"
    );
    c.wait_until("no live pods", Duration::from_secs(30), || {
        live(&pods(c, ns, "pause")).is_empty()
    });
    c.ok(
        0,
        &[
            "patch",
            "job",
            "pause",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":false}}"#,
        ],
    );
    // The two pods deleted by the suspension count as failed (as upstream's), so their replacements
    // wait out the failure back-off (10 s, doubled: 20 s) before they are created.
    c.wait_until("resumed with two pods", Duration::from_secs(90), || {
        live(&pods(c, ns, "pause")).len() == 2
    });
    drive(
        c,
        ns,
        "pause",
        Report::Succeeded,
        "Complete",
        Duration::from_secs(60),
    );
}

#[test]
fn a_created_job_keeps_no_client_status() {
    let c = cluster();
    let ns = "batch-status";
    c.ok(0, &["create", "namespace", ns]);
    let yaml = job_yaml(ns, "claims", "  suspend: true") + "status:\n  succeeded: 5\n";
    c.ok_stdin(0, &["create", "-f", "-"], Some(&yaml));
    let j = job(c, ns, "claims");
    assert!(
        j["status"]["succeeded"].is_null() || j["status"]["succeeded"] == 0,
        "{j}"
    );
}

trait PodWait {
    fn wait_until_pod(&self, ns: &str, job: &str) -> String;
}

impl PodWait for KubeCluster {
    /// The name of the job's one live pod, once there is exactly one.
    fn wait_until_pod(&self, ns: &str, job: &str) -> String {
        let mut name = String::new();
        self.wait_until(
            &format!("one live pod of {job}"),
            Duration::from_secs(30),
            || {
                let all = pods(self, ns, job);
                let l = live(&all);
                if l.len() == 1 {
                    name = l[0]["metadata"]["name"].as_str().unwrap().to_string();
                    true
                } else {
                    false
                }
            },
        );
        name
    }
}

fn cronjob_yaml(ns: &str, name: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: CronJob
metadata:
  name: {name}
  namespace: {ns}
spec:
  schedule: "* * * * *"
{extra_spec}
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: main
            image: busybox
            command: ["true"]
"#
    )
}

fn cron_jobs(c: &KubeCluster, ns: &str) -> Vec<Value> {
    let v = get_json(c, &["jobs", "-n", ns]);
    v["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_cronjob_fires_within_its_minute_and_names_its_job_by_the_schedule() {
    let c = cluster();
    let ns = "batch-cron";
    c.ok(0, &["create", "namespace", ns]);
    // As upstream, the zone is refused inside the schedule.
    let tz = cronjob_yaml(ns, "zoned", "").replace("\"* * * * *\"", "\"CRON_TZ=UTC * * * * *\"");
    let refused = c.err_stdin(0, &["apply", "-f", "-"], Some(&tz));
    assert!(
        refused.contains("cannot use TZ or CRON_TZ in schedule, use timeZone field instead"),
        "{refused}"
    );
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&cronjob_yaml(ns, "tick", "")),
    );
    let started = Instant::now();
    c.wait_until("the first job", Duration::from_secs(75), || {
        !cron_jobs(c, ns).is_empty()
    });
    println!("cronjob's first job after {:?}", started.elapsed());
    let jobs = cron_jobs(c, ns);
    let j = &jobs[0];
    let scheduled = j["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        .as_str()
        .unwrap();
    let t: k8s_openapi::jiff::Timestamp = scheduled.parse().unwrap();
    assert_eq!(t.as_second() % 60, 0, "{scheduled}");
    assert_eq!(
        j["metadata"]["name"],
        format!("tick-{}", t.as_second() / 60),
        "{j}"
    );
    let owner = &j["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "CronJob");
    assert_eq!(owner["controller"], true);
    c.wait_until(
        "status.active and lastScheduleTime",
        Duration::from_secs(30),
        || {
            let cj = get_json(c, &["cronjob", "tick", "-n", ns]);
            cj["status"]["active"][0]["name"] == j["metadata"]["name"]
                && cj["status"]["lastScheduleTime"]
                    .as_str()
                    .map(|s| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap())
                    == Some(t)
        },
    );
    // kubectl makes a Job from the CronJob's template on the client side.
    c.ok(
        0,
        &["create", "job", "manual", "--from=cronjob/tick", "-n", ns],
    );
    let manual = job(c, ns, "manual");
    assert_eq!(
        manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"], "manual",
        "{manual}"
    );
    c.wait_until("the manual job's pod", Duration::from_secs(30), || {
        !pods(c, ns, "manual").is_empty()
    });
    // Completing the job shows up as lastSuccessfulTime.
    let name = j["metadata"]["name"].as_str().unwrap().to_string();
    drive(
        c,
        ns,
        &name,
        Report::Succeeded,
        "Complete",
        Duration::from_secs(60),
    );
    c.wait_until("lastSuccessfulTime", Duration::from_secs(30), || {
        get_json(c, &["cronjob", "tick", "-n", ns])["status"]["lastSuccessfulTime"].is_string()
    });
    c.ok(0, &["delete", "cronjob", "tick", "-n", ns]);
}

#[test]
fn a_forbid_cronjob_starts_no_second_job_while_one_runs() {
    let c = cluster();
    let ns = "batch-forbid";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&cronjob_yaml(ns, "solo", "  concurrencyPolicy: Forbid")),
    );
    c.wait_until("the first job", Duration::from_secs(75), || {
        !cron_jobs(c, ns).is_empty()
    });
    let first = cron_jobs(c, ns)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    // The next schedule passes while the first still runs: the controller says so and starts nothing.
    c.wait_until("JobAlreadyActive", Duration::from_secs(90), || {
        c.ok(0, &["get", "events", "-n", ns])
            .contains("JobAlreadyActive")
    });
    let jobs = cron_jobs(c, ns);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["metadata"]["name"], first.as_str());
    c.ok(0, &["delete", "cronjob", "solo", "-n", ns]);
}

#[test]
fn backoff_limit_per_index_fails_only_that_index() {
    let c = cluster();
    let ns = "batch-per-index";
    c.ok(0, &["create", "namespace", ns]);
    let spec =
        "  completions: 2\n  parallelism: 2\n  completionMode: Indexed\n  backoffLimitPerIndex: 0";
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&job_yaml(ns, "pi", spec)));
    c.wait_until("two pods", Duration::from_secs(30), || {
        live(&pods(c, ns, "pi")).len() == 2
    });
    assert_eq!(job(c, ns, "pi")["spec"]["backoffLimit"], i32::MAX);
    let rt = rt();
    let client = rt.block_on(c.client(0));
    for p in pods(c, ns, "pi") {
        let name = p["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"],
            "0"
        );
        let code = match p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
        {
            Some("0") => 1,
            _ => 0,
        };
        rt.block_on(report_exit(&client, ns, name, "main", code))
            .unwrap();
    }
    c.wait_until("job pi Failed", Duration::from_secs(30), || {
        condition(&job(c, ns, "pi"), "Failed").is_some()
    });
    let j = job(c, ns, "pi");
    assert_eq!(
        condition(&j, "Failed").unwrap()["reason"],
        "FailedIndexes",
        "{j}"
    );
    assert_eq!(j["status"]["failedIndexes"], "0", "{j}");
    assert_eq!(j["status"]["completedIndexes"], "1", "{j}");
    assert_eq!(pods(c, ns, "pi").len(), 2, "index 0 is not retried");
}
