//! etcdctl with `http://` endpoint URLs, as users type them. etcdctl 3.4 sends the whole URL as
//! the HTTP/2 `:authority` of its per-endpoint maintenance calls; keel must accept that as etcd does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use keel_testkit::{etcdctl, keel_bin, Server};

#[test]
fn maintenance_calls_work_with_url_endpoints() {
    let s = Server::start_keel(keel_bin!());
    let url = s.client_url();
    assert!(etcdctl(&url, &["put", "a", "b"], None).success());
    for args in [
        &["endpoint", "status", "-w", "json"][..],
        &["endpoint", "hashkv", "-w", "json"],
        &["endpoint", "health"],
        &["defrag"],
        &["alarm", "list"],
        &["member", "list"],
        &["get", "a"],
    ] {
        let out = etcdctl(&url, args, None);
        assert!(out.success(), "etcdctl {args:?} against {url}: {out:?}");
    }
    let status = etcdctl(&url, &["endpoint", "status", "-w", "json"], None);
    let v: serde_json::Value = serde_json::from_str(status.stdout.trim()).expect("status JSON");
    assert_eq!(v[0]["Status"]["version"], "3.4.31", "{v}");
}
