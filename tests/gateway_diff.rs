//! Differential test of the JSON gateway: the same curl requests against a real etcd 3.4 and
//! against keel, every route etcd 3.4's gateway serves; status line, content type and the
//! normalized JSON bodies must be identical.
//!
//! `KEEL_DIFF_AGAINST_ETCD=1` runs the candidate side as a second real etcd (harness check);
//! `KEEL_DIFF_VERBOSE=1` prints every step's normalized answer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::process::Command;
use std::thread;
use std::time::Duration;

use keel_testkit::{keel_bin, line_diff, Normalizer, Process, Server, Vars};
use serde_json::Value;

/// Longest a step's curl may run.
const CURL_LIMIT: Duration = Duration::from_secs(15);

/// What a step asks and how its answer is compared.
struct Step {
    /// Path below the client URL, e.g. `/v3/kv/put`.
    path: &'static str,
    method: &'static str,
    /// The body, with `{NAME}` replaced by values captured earlier.
    body: &'static str,
    /// For streams: how many body lines to wait for before closing.
    lines: Option<usize>,
    /// `Authorization` header: a captured variable's name.
    token: Option<&'static str>,
    /// Capture a field of the answer (a JSON pointer) as a variable.
    capture: Option<(&'static str, &'static str)>,
    /// Error texts that come from each side's JSON parser (Go's and serde's) are not compared.
    parser_error: bool,
}

fn post(path: &'static str, body: &'static str) -> Step {
    Step {
        path,
        method: "POST",
        body,
        lines: None,
        token: None,
        capture: None,
        parser_error: false,
    }
}

fn stream(path: &'static str, body: &'static str, lines: usize) -> Step {
    Step {
        lines: Some(lines),
        ..post(path, body)
    }
}

impl Step {
    fn method(mut self, m: &'static str) -> Step {
        self.method = m;
        self
    }
    fn token(mut self, var: &'static str) -> Step {
        self.token = Some(var);
        self
    }
    fn capture(mut self, var: &'static str, field: &'static str) -> Step {
        self.capture = Some((var, field));
        self
    }
    fn parser_error(mut self) -> Step {
        self.parser_error = true;
        self
    }
    fn label(&self) -> String {
        format!("{} {} {}", self.method, self.path, self.body)
    }
}

struct Side {
    server: Server,
    norm: Normalizer,
    vars: Vars,
}

impl Side {
    /// Runs one step with curl; returns the status line, content type and normalized body.
    fn run(&mut self, step: &Step) -> String {
        let body = self.vars.subst(step.body);
        let mut cmd = Command::new("curl");
        cmd.args([
            "-s",
            "-N",
            "-D",
            "/dev/stderr",
            "-o",
            "-",
            "-X",
            step.method,
        ])
        .arg("--max-time")
        .arg(CURL_LIMIT.as_secs().to_string());
        if let Some(var) = step.token {
            cmd.arg("-H")
                .arg(format!("Authorization: {}", self.vars.get(var)));
        }
        if step.method == "POST" {
            cmd.args(["--data-binary", "@-"]);
        }
        cmd.arg(format!("{}{}", self.server.client_url(), step.path));
        let mut p = Process::spawn(&mut cmd, Some(body.as_bytes()));
        match step.lines {
            Some(n) => p.wait_lines(n, CURL_LIMIT),
            None => {
                p.wait_exit(CURL_LIMIT);
            }
        }
        let out = p.finish();
        let status = out
            .stderr
            .lines()
            .next()
            .unwrap_or("(no answer)")
            .trim()
            .to_string();
        let content_type = out
            .stderr
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        let lines: Vec<&str> = match step.lines {
            Some(n) => out.stdout.lines().take(n).collect(),
            None => out.stdout.lines().collect(),
        };
        if let (Some((var, field)), Some(first)) = (step.capture, lines.first()) {
            let v = serde_json::from_str::<Value>(first).unwrap_or_default();
            let value = match v.pointer(field) {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => format!("(no {field} in the answer)"),
            };
            self.vars.0.insert(var.to_string(), value);
        }
        let body: Vec<String> = lines
            .iter()
            .map(|l| self.normalize_line(l, step.parser_error))
            .collect();
        format!(
            "{status}\ncontent-type: {content_type}\n{}",
            body.join("\n")
        )
    }

    fn normalize_line(&mut self, line: &str, parser_error: bool) -> String {
        let Ok(mut v) = serde_json::from_str::<Value>(line) else {
            return self.norm.normalize(line);
        };
        mask(&mut v, parser_error);
        let normalized = self.norm.normalize(&v.to_string());
        // etcd lists members in map order: compare them as a set.
        let Ok(mut v) = serde_json::from_str::<Value>(&normalized) else {
            return normalized;
        };
        sort_members(&mut v);
        v.to_string()
    }
}

fn sort_members(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if let (true, Value::Array(items)) = (k == "members", &mut *child) {
                    items.sort_by_key(Value::to_string);
                } else {
                    sort_members(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sort_members),
        _ => {}
    }
}

/// Makes the gateway's JSON comparable: int64 IDs, terms, indexes, sizes and key versions
/// (strings in the proto3 mapping) become numbers for the shared normalizer (which masks only
/// the server's version string); values that differ by nature
/// (hashes, snapshot bytes and how many remain, auth tokens) are masked.
fn mask(v: &mut Value, parser_error: bool) {
    match v {
        Value::Object(map) => {
            // How many snapshot bytes remain depends on each server's database size.
            map.remove("remaining_bytes");
            let is_error = map.contains_key("code") && map.contains_key("error");
            for (k, child) in map.iter_mut() {
                match k.as_str() {
                    "cluster_id" | "member_id" | "leader" | "ID" | "lease" | "memberID"
                    | "raft_term" | "raftTerm" | "raftIndex" | "raftAppliedIndex" | "dbSize"
                    | "dbSizeInUse" | "TTL" | "grantedTTL" | "version" => {
                        if let Some(n) = child.as_str().and_then(|s| s.parse::<u64>().ok()) {
                            *child = Value::from(n);
                        }
                    }
                    "hash" | "blob" | "token" => *child = Value::String("<MASKED>".into()),
                    "error" | "message" if is_error && parser_error => {
                        *child = Value::String("<PARSER ERROR>".into())
                    }
                    _ => mask(child, parser_error),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| mask(i, parser_error)),
        _ => {}
    }
}

fn run_scenario(name: &str, steps: &[Step]) {
    let (etcd, keel) = thread::scope(|s| {
        let r = s.spawn(Server::start_etcd);
        let k = Server::start_keel(keel_bin!());
        (r.join().expect("starting etcd panicked"), k)
    });
    let side = |server: Server| Side {
        norm: server.normalizer(),
        server,
        vars: Vars::default(),
    };
    let (mut a, mut b) = (side(etcd), side(keel));
    let verbose = std::env::var("KEEL_DIFF_VERBOSE").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let (ra, rb) = thread::scope(|s| {
            let h = s.spawn(|| a.run(step));
            let rb = b.run(step);
            (h.join().expect("etcd side panicked"), rb)
        });
        if verbose {
            eprintln!("[{name}] step {i}: {}\n{ra}\n", step.label());
        }
        if ra != rb {
            failures.push(format!(
                "step {i}: {}\n{}",
                step.label(),
                line_diff(&ra, &rb, "etcd", "keel")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "scenario {name}: {} of {} steps differ\n\n{}\nlast lines of the keel log:\n{}",
        failures.len(),
        steps.len(),
        failures.join("\n"),
        b.server.log_tail(30)
    );
}

#[test]
fn every_route_answers_as_etcd_does() {
    run_scenario(
        "routes",
        &[
            // KV, both prefixes, proto and lowerCamel field names, int64 as string or number.
            post("/v3/kv/put", r#"{"key":"Zm9v","value":"YmFy"}"#),
            post("/v3beta/kv/range", r#"{"key":"Zm9v"}"#),
            post(
                "/v3/kv/put",
                r#"{"key":"Zm9v","value":"YmF6","prev_kv":true}"#,
            ),
            post("/v3/kv/put", r#"{"key":"Zm9vMA==","value":"djE="}"#),
            post(
                "/v3/kv/range",
                r#"{"key":"AA==","range_end":"AA==","sort_order":"DESCEND","sort_target":"MOD"}"#,
            ),
            post(
                "/v3/kv/range",
                r#"{"key":"Zm9v","rangeEnd":"Zm9w","countOnly":true}"#,
            ),
            post(
                "/v3/kv/range",
                r#"{"key":"Zm9v","range_end":"Zm9w","limit":1,"keys_only":true}"#,
            ),
            post(
                "/v3/kv/range",
                r#"{"key":"Zm9v","range_end":"Zm9w","limit":"1","revision":"2"}"#,
            ),
            post(
                "/v3/kv/txn",
                r#"{"compare":[{"key":"Zm9v","result":"EQUAL","target":"VALUE","value":"YmF6"}],
                    "success":[{"request_range":{"key":"Zm9v"}},{"request_put":{"key":"Zm9v","value":"djI="}}],
                    "failure":[{"request_delete_range":{"key":"Zm9v"}}]}"#,
            ),
            post(
                "/v3/kv/txn",
                r#"{"compare":[{"key":"Zm9v","result":"EQUAL","target":"VALUE","value":"YmF6"}],
                    "failure":[{"request_delete_range":{"key":"Zm9vMA==","prev_kv":true}}]}"#,
            ),
            post(
                "/v3/kv/txn",
                r#"{"compare":[{"key":"Zm9v","target":"VERSION","result":"GREATER","version":"1"}]}"#,
            ),
            // Watch: history, several creates in one body, a refused range, a body that is not JSON.
            stream(
                "/v3/watch",
                r#"{"create_request":{"key":"Zm9v","start_revision":"2"}}"#,
                2,
            ),
            stream(
                "/v3/watch",
                r#"{"create_request":{"key":"YmFy"}} {"create_request":{"key":"YmF6","filters":["NODELETE"],"prev_kv":true}}"#,
                2,
            ),
            stream(
                "/v3/watch",
                r#"{"create_request":{"key":"Zm9v","range_end":"Zm9u"}}"#,
                1,
            ),
            stream("/v3/watch", "garbage", 1).parser_error(),
            // Errors with their codes and HTTP statuses.
            post("/v3/kv/range", r#"{"key":""}"#),
            post("/v3/kv/range", r#"{"key":"Zm9v","revision":"100"}"#),
            post("/v3/kv/put", "nojson").parser_error(),
            post("/v3/kv/put", r#"{"key":5}"#).parser_error(),
            post("/v3/kv/compaction", r#"{"revision":"3"}"#),
            post("/v3/kv/range", r#"{"key":"Zm9v","revision":"2"}"#),
            post("/v3/kv/compaction", r#"{"revision":"3"}"#),
            post("/v3/kv/compaction", r#"{"revision":"100"}"#),
            stream(
                "/v3/watch",
                r#"{"create_request":{"key":"Zm9v","start_revision":"2"}}"#,
                2,
            ),
            post("/v3/kv/deleterange", r#"{"key":"Zm9v","prev_kv":true}"#),
            post("/v3/kv/range", "").method("GET"),
            post("/v3/kv/nothing", "{}"),
            post("/v3alpha/kv/range", r#"{"key":"Zm9v"}"#),
            post("/v3/kv/range", "").method("OPTIONS"),
            // Leases, and the recipes built on them.
            post("/v3/lease/grant", r#"{"TTL":"60","ID":"4660"}"#),
            post("/v3/lease/grant", r#"{"TTL":"60","ID":"4660"}"#),
            post(
                "/v3/kv/put",
                r#"{"key":"azE=","value":"djE=","lease":"4660"}"#,
            ),
            post("/v3/lease/timetolive", r#"{"ID":"4660","keys":true}"#),
            post("/v3/kv/lease/timetolive", r#"{"ID":"4660"}"#),
            post("/v3/lease/leases", "{}"),
            post("/v3/kv/lease/leases", ""),
            stream("/v3/lease/keepalive", r#"{"ID":"4660"}"#, 1),
            stream("/v3/lease/keepalive", r#"{"ID":"1"}"#, 1),
            post("/v3/lock/lock", r#"{"name":"bXk=","lease":"4660"}"#).capture("lock", "/key"),
            post("/v3/lock/unlock", r#"{"key":"{lock}"}"#),
            post(
                "/v3/election/campaign",
                r#"{"name":"ZWw=","lease":"4660","value":"djE="}"#,
            )
            .capture("leader", "/leader"),
            post("/v3/election/leader", r#"{"name":"ZWw="}"#),
            post(
                "/v3/election/proclaim",
                r#"{"leader":{leader},"value":"djI="}"#,
            ),
            stream("/v3/election/observe", r#"{"name":"ZWw="}"#, 1),
            post("/v3/election/resign", r#"{"leader":{leader}}"#),
            post("/v3/election/leader", r#"{"name":"ZWw="}"#),
            post("/v3/lease/revoke", r#"{"ID":"4660"}"#),
            post("/v3/kv/lease/revoke", r#"{"ID":"4660"}"#),
            post("/v3/lease/timetolive", r#"{"ID":"4660"}"#),
            // Maintenance and cluster.
            post("/v3/maintenance/status", "{}"),
            post("/v3/maintenance/hash", "{}"),
            post("/v3/maintenance/alarm", r#"{"action":"GET"}"#),
            post("/v3/maintenance/defragment", "{}"),
            post("/v3/maintenance/transfer-leadership", r#"{"targetID":"1"}"#),
            stream("/v3/maintenance/snapshot", "{}", 1),
            post("/v3/cluster/member/list", "{}"),
            post(
                "/v3/cluster/member/add",
                r#"{"peerURLs":["http://127.0.0.1:1"],"isLearner":true}"#,
            )
            .capture("learner", "/member/ID"),
            post("/v3/cluster/member/promote", r#"{"ID":"{learner}"}"#),
            // etcd 3.4 drops a learner's flag when its URLs are updated; keel keeps it
            // (docs/etcd-compatibility.md), so the update goes to a member that does not exist.
            post(
                "/v3/cluster/member/update",
                r#"{"ID":"1","peerURLs":["http://127.0.0.1:2"]}"#,
            ),
            post("/v3/cluster/member/remove", r#"{"ID":"{learner}"}"#),
            post("/v3/cluster/member/remove", r#"{"ID":"1"}"#),
            post("/v3/cluster/member/add", r#"{"peerURLs":["notaurl"]}"#),
            // Auth, with the token in the Authorization header.
            post("/v3/auth/role/add", r#"{"name":"root"}"#),
            post(
                "/v3/auth/user/add",
                r#"{"name":"root","password":"secret"}"#,
            ),
            post("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#),
            post("/v3/auth/role/add", r#"{"name":"reader"}"#),
            post(
                "/v3/auth/role/grant",
                r#"{"name":"reader","perm":{"permType":"READ","key":"azE=","range_end":"azI="}}"#,
            ),
            post("/v3/auth/role/get", r#"{"role":"reader"}"#),
            post(
                "/v3/auth/role/revoke",
                r#"{"role":"reader","key":"azE=","range_end":"azI="}"#,
            ),
            post("/v3/auth/user/add", r#"{"name":"alice","password":"pw"}"#),
            post(
                "/v3/auth/user/changepw",
                r#"{"name":"alice","password":"pw2"}"#,
            ),
            post("/v3/auth/user/grant", r#"{"user":"alice","role":"reader"}"#),
            post(
                "/v3/auth/user/revoke",
                r#"{"name":"alice","role":"reader"}"#,
            ),
            post("/v3/auth/enable", "{}"),
            post("/v3/kv/range", r#"{"key":"azE="}"#),
            post(
                "/v3/auth/authenticate",
                r#"{"name":"root","password":"wrong"}"#,
            ),
            post(
                "/v3/auth/authenticate",
                r#"{"name":"root","password":"secret"}"#,
            )
            .capture("token", "/token"),
            post("/v3/kv/range", r#"{"key":"azE="}"#).token("token"),
            post("/v3/auth/user/get", r#"{"name":"root"}"#).token("token"),
            post("/v3/auth/user/list", "{}").token("token"),
            post("/v3/auth/role/list", "{}").token("token"),
            post("/v3/auth/user/delete", r#"{"name":"alice"}"#).token("token"),
            post("/v3/auth/role/delete", r#"{"role":"reader"}"#).token("token"),
            post("/v3/auth/disable", "{}").token("token"),
            post("/v3/kv/range", r#"{"key":"azE="}"#),
        ],
    );
}

/// The value of an unlabelled series on a server's `/metrics`.
fn metric(server: &Server, name: &str) -> Option<f64> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5"])
        .arg(format!("{}/metrics", server.client_url()))
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A watch opened through the gateway streams live events while the client stays, and its
/// watcher is gone once the client disconnects; on etcd and on keel alike.
#[test]
fn a_live_gateway_watch_streams_and_ends_with_its_client() {
    const WATCHERS: &str = "etcd_debugging_mvcc_watcher_total";
    let (etcd, keel) = thread::scope(|s| {
        let r = s.spawn(Server::start_etcd);
        let k = Server::start_keel(keel_bin!());
        (r.join().expect("starting etcd panicked"), k)
    });
    for server in [&etcd, &keel] {
        let url = server.client_url();
        let body = r#"{"create_request":{"key":"bGl2ZQ=="}}"#;
        let mut watch = Process::spawn(
            Command::new("curl")
                .args(["-s", "-N", "--max-time", "30", "--data-binary", "@-"])
                .arg(format!("{url}/v3/watch")),
            Some(body.as_bytes()),
        );
        watch.wait_lines(1, CURL_LIMIT);
        let put = Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "5",
                "-d",
                r#"{"key":"bGl2ZQ==","value":"MQ=="}"#,
            ])
            .arg(format!("{url}/v3/kv/put"))
            .output()
            .expect("curl runs");
        assert!(put.status.success(), "put: {put:?}");
        watch.wait_lines(2, CURL_LIMIT);
        let lines: Vec<Value> = watch
            .stdout()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_default())
            .collect();
        let what = server.describe();
        assert_eq!(lines.len(), 2, "{what}: {}", watch.stdout());
        assert_eq!(lines[0]["result"]["created"], true, "{what}");
        assert_eq!(
            lines[1]["result"]["events"][0]["kv"]["value"], "MQ==",
            "{what}: the live put did not arrive"
        );
        assert_eq!(metric(server, WATCHERS), Some(1.0), "{what}");
        drop(watch.finish());
        let deadline = std::time::Instant::now() + CURL_LIMIT;
        while metric(server, WATCHERS) != Some(0.0) && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            metric(server, WATCHERS),
            Some(0.0),
            "{what}: the watcher outlived its client"
        );
    }
}
