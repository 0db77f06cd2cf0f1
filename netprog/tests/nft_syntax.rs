//! The rendered table against the real `nft` 1.0.x, inside a throwaway network namespace
//! (`unshare -rn`: a user namespace, so no host privilege is needed and the host's ruleset is never
//! touched): it loads, re-applying it changes nothing, a resync after a Service went away deletes its
//! chains, and the removal script leaves no table behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Command;

use keel_netprog::model::{
    Endpoint, HostPort, NodeView, PortKey, Protocol, ProxyState, ServicePort, TrafficPolicy,
};
use keel_netprog::render::{self, Existing};

fn port(ns: &str, name: &str, ip: [u8; 4], eps: &[(u8, &str)]) -> ServicePort {
    ServicePort {
        key: PortKey {
            namespace: ns.into(),
            service: name.into(),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
        },
        cluster_ip: Some(Ipv4Addr::from(ip)),
        port: 80,
        node_port: None,
        external_ips: vec![],
        load_balancer: false,
        affinity_timeout: None,
        external_policy: TrafficPolicy::Cluster,
        internal_policy: TrafficPolicy::Cluster,
        endpoints: eps
            .iter()
            .map(|(last, node)| Endpoint {
                ip: Ipv4Addr::new(10, 42, 0, *last),
                port: 8080,
                ready: true,
                serving: true,
                terminating: false,
                node: Some((*node).into()),
            })
            .collect(),
    }
}

fn state(ports: Vec<ServicePort>) -> ProxyState {
    ProxyState {
        node: NodeView {
            name: "a".into(),
            addresses: vec![Ipv4Addr::new(198, 18, 0, 11)],
            cluster_cidr: "10.42.0.0/16".parse().unwrap(),
        },
        ports: ports
            .into_iter()
            .map(|p| (p.key.clone(), p))
            .collect::<BTreeMap<_, _>>(),
        host_ports: Vec::new(),
    }
}

fn full() -> ProxyState {
    let mut np = port("default", "np", [10, 96, 0, 21], &[(2, "a"), (3, "b")]);
    np.node_port = Some(30080);
    np.affinity_timeout = Some(600);
    let mut lb = port("kube-system", "lb", [10, 96, 0, 22], &[(4, "a"), (5, "b")]);
    lb.node_port = Some(30081);
    lb.load_balancer = true;
    lb.external_policy = TrafficPolicy::Local;
    lb.external_ips = vec![Ipv4Addr::new(203, 0, 113, 7)];
    let mut udp = port("default", "dns", [10, 96, 0, 10], &[(6, "a")]);
    udp.key.protocol = Protocol::Udp;
    udp.key.port_name = "dns".into();
    udp.port = 53;
    let mut far = port("default", "far", [10, 96, 0, 23], &[(7, "b")]);
    far.internal_policy = TrafficPolicy::Local;
    ProxyState {
        ports: [
            port(
                "default",
                "web",
                [10, 96, 0, 20],
                &[(2, "a"), (3, "b"), (4, "b")],
            ),
            port("default", "empty", [10, 96, 0, 24], &[]),
            np,
            lb,
            udp,
            far,
        ]
        .into_iter()
        .map(|p| (p.key.clone(), p))
        .collect(),
        host_ports: vec![
            HostPort {
                pod: "default/hp".into(),
                protocol: Protocol::Tcp,
                host_ip: None,
                host_port: 18080,
                pod_ip: Ipv4Addr::new(10, 42, 0, 9),
                container_port: 8080,
            },
            HostPort {
                pod: "default/hp".into(),
                protocol: Protocol::Udp,
                host_ip: Some(Ipv4Addr::new(198, 18, 0, 11)),
                host_port: 1053,
                pod_ip: Ipv4Addr::new(10, 42, 0, 9),
                container_port: 53,
            },
        ],
        ..state(vec![])
    }
}

/// Runs `script` in a fresh user+network namespace; returns what it printed.
fn in_netns(script: &str) -> String {
    let out = Command::new("unshare")
        .args([if is_root() { "-n" } else { "-rn" }, "sh", "-ec", script])
        .output()
        .expect("unshare runs");
    assert!(
        out.status.success(),
        "{script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_table_loads_and_reapplies_to_the_same_thing() {
    let dir = tempfile::tempdir().unwrap();
    let first = render::render(&full(), &Existing::default());
    let f1 = dir.path().join("1.nft");
    std::fs::write(&f1, &first.text).unwrap();
    // The Service "web" goes away; the second render knows what the first put in.
    let mut smaller = full();
    smaller
        .ports
        .retain(|k, _| k.service != "web" && k.service != "np");
    let second = render::render(
        &smaller,
        &Existing {
            chains: first.chains.clone(),
            sets: first.sets.clone(),
        },
    );
    assert!(second.text.contains("delete chain"), "{}", second.text);
    assert!(second.text.contains("delete set"), "{}", second.text);
    let f2 = dir.path().join("2.nft");
    std::fs::write(&f2, &second.text).unwrap();
    let rm = dir.path().join("rm.nft");
    std::fs::write(&rm, render::removal()).unwrap();
    let (a, b, r) = (f1.display(), f2.display(), rm.display());
    let out = in_netns(&format!(
        "nft -f {a}; nft list table ip keel > {d}/x1; nft -f {a}; nft list table ip keel > {d}/x2; \
         cmp {d}/x1 {d}/x2; echo SAME; nft -f {b}; nft list table ip keel; echo '== after removal'; \
         nft -f {r}; nft list ruleset",
        d = dir.path().display()
    ));
    assert!(out.contains("SAME"), "{out}");
    let (after, removed) = out.split_once("== after removal").unwrap();
    assert!(
        !after.contains("default/web/"),
        "web's chains are gone: {after}"
    );
    assert!(
        !after.contains("default/np/"),
        "np's chains and sets are gone: {after}"
    );
    assert!(after.contains("kube-system/lb/"), "{after}");
    assert!(
        after.contains("10.96.0.24 . tcp . 80 : goto reject-chain"),
        "{after}"
    );
    assert!(removed.trim().is_empty(), "no table left: {removed}");
}

#[test]
fn a_thousand_services_render_and_load() {
    let ports: Vec<ServicePort> = (0..1000u32)
        .map(|i| {
            let ip = [10, 96, (i / 250) as u8 + 1, (i % 250) as u8 + 1];
            let eps: Vec<(u8, &str)> = (0..10).map(|e| (e as u8 + 2, "a")).collect();
            let mut p = port("bench", &format!("svc-{i}"), ip, &eps);
            for (n, e) in p.endpoints.iter_mut().enumerate() {
                e.ip = Ipv4Addr::new(10, 42, (i % 200) as u8, n as u8 + 2);
            }
            p
        })
        .collect();
    let r = render::render(&state(ports), &Existing::default());
    assert_eq!((r.services, r.endpoints), (1000, 10_000));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("big.nft");
    std::fs::write(&f, &r.text).unwrap();
    let out = in_netns(&format!(
        "nft -f {}; nft list chains ip | grep -c 'chain '",
        f.display()
    ));
    let chains: usize = out.trim().parse().unwrap();
    assert_eq!(chains, 11_000 + 12, "{out}");
}

/// As root a plain network namespace is used: nft inside a user namespace cannot raise its netlink
/// buffer, which a large transaction needs.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn network_policy_chains_load_and_go_when_the_policy_does() {
    use keel_netprog::policy::{compile, PolicyPod};
    let pod = |name: &str, ip: [u8; 4], role: &str, node: &str| PolicyPod {
        namespace: "app".into(),
        name: name.into(),
        ip: Ipv4Addr::from(ip),
        labels: BTreeMap::from([("role".to_string(), role.to_string())]),
        node: Some(node.into()),
        named_ports: BTreeMap::from([(("http".to_string(), Protocol::Tcp), 8080)]),
    };
    let pods = vec![
        pod("db", [10, 42, 0, 5], "db", "a"),
        pod("web", [10, 42, 1, 6], "web", "b"),
    ];
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "app"}})).unwrap();
    let policy: k8s_openapi::api::networking::v1::NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db", "namespace": "app"},
        "spec": {"podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "web"}}},
                                   {"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.1.0/24"]}}],
                         "ports": [{"port": "http"}, {"port": 9000, "endPort": 9010}]}],
            "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}
    }))
    .unwrap();
    let isolation = compile("a", &pods, [&ns], [&policy]);
    assert_eq!(isolation.len(), 1);
    let with = render::render_with_policy(&full(), &isolation, &Existing::default());
    let without = render::render_with_policy(
        &full(),
        &[],
        &Existing {
            chains: with.chains.clone(),
            sets: with.sets.clone(),
        },
    );
    assert!(
        without.text.contains("delete chain ip keel policy-in-"),
        "{}",
        without.text
    );
    let dir = tempfile::tempdir().unwrap();
    let (f1, f2) = (dir.path().join("1.nft"), dir.path().join("2.nft"));
    std::fs::write(&f1, &with.text).unwrap();
    std::fs::write(&f2, &without.text).unwrap();
    let out = in_netns(&format!(
        "nft -f {}; nft list table ip keel; echo '== without'; nft -f {}; nft list table ip keel",
        f1.display(),
        f2.display()
    ));
    let (on, off) = out.split_once("== without").unwrap();
    assert!(on.contains("10.42.0.5 : jump policy-in-"), "{on}");
    assert!(
        on.contains("ip saddr 10.42.1.6 meta l4proto tcp tcp dport 8080 return")
            || on.contains("ip saddr 10.42.1.6 tcp dport 8080 return"),
        "{on}"
    );
    assert!(on.contains("ip saddr != 192.168.1.0/24"), "{on}");
    assert!(on.contains("udp dport 53 return"), "{on}");
    assert!(!off.contains("policy-in-"), "{off}");
}
