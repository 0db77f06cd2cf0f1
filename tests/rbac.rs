//! Authorization with the real kubectl (1.32) and the `kube` crate on one shared 1-member cluster whose
//! users come from a static token file: RBAC denies, allows through a RoleBinding and denies again when
//! it goes; `kubectl auth can-i [--list]` and `kubectl auth whoami` read the reviews; a user cannot grant
//! what they do not hold; impersonation needs `impersonate`; an agent's identity reads only the secrets
//! of pods bound to its node and writes only its own objects. Messages are upstream's, byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Pod;
use keel_testkit::binaries::Kind;
use keel_testkit::cluster::Options;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::kubectl::{kubectl_command, run_kubectl, Run};
use kube::api::{Api, Patch, PatchParams, PostParams};

/// The users of the token file: (token, user, groups).
const USERS: [(&str, &str, &str); 4] = [
    ("alice-token", "alice", ""),
    ("bob-token", "bob", "dev"),
    ("w1-token", "system:node:w1", "system:nodes"),
    ("w2-token", "system:node:w2", "system:nodes"),
];

/// Secrets encrypted with AES-GCM (a fixed test key), everything else plain.
const ENCRYPTION: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n\
- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - {name: key1, secret: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=}\n  - identity: {}\n";

fn scratch() -> PathBuf {
    keel_testkit::scratch_dir("rbac-test")
}

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| {
        let file = scratch().join("tokens.csv");
        let lines: Vec<String> = USERS
            .iter()
            .enumerate()
            .map(|(i, (t, u, g))| format!("{t},{u},{i},\"{g}\""))
            .collect();
        std::fs::write(&file, lines.join("\n")).unwrap();
        let encryption = scratch().join("encryption.yaml");
        std::fs::write(&encryption, ENCRYPTION).unwrap();
        KubeCluster::start_with(
            Options::new(Kind::Keel, 1)
                .keel_bin(keel_bin!())
                .arg(&format!("--token-auth-file={}", file.display()))
                .arg(&format!(
                    "--encryption-provider-config={}",
                    encryption.display()
                ))
                .arg(&format!(
                    "--audit-log-path={}",
                    scratch().join("audit.log").display()
                )),
        )
    })
}

/// A kubeconfig for `user` (a token of [`USERS`]) that trusts the cluster CA and presents no certificate.
fn kubeconfig_of(c: &KubeCluster, user: &str) -> PathBuf {
    let (token, ..) = USERS.iter().find(|(_, u, _)| *u == user).unwrap();
    kubeconfig_with(c, user, token)
}

/// A kubeconfig named `label` that presents `token`.
fn kubeconfig_with(c: &KubeCluster, label: &str, token: &str) -> PathBuf {
    let admin = c.member(0).kubeconfig();
    let ca = admin.parent().unwrap().join("pki").join("ca.crt");
    let path = scratch().join(format!("{}.kubeconfig", label.replace(':', "-")));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster: {{server: \"{}\", certificate-authority: \"{}\"}}\n\
             users:\n- name: u\n  user: {{token: \"{token}\"}}\ncontexts:\n- name: keel\n  context: {{cluster: keel, user: u}}\ncurrent-context: keel\n",
            c.member(0).kube_url(),
            ca.display()
        ),
    )
    .unwrap();
    path
}

/// Runs kubectl as `user`.
fn as_user(c: &KubeCluster, user: &str, args: &[&str]) -> Run {
    run_with(&kubeconfig_of(c, user), args)
}

/// Runs kubectl with `kubeconfig`.
fn run_with(kubeconfig: &std::path::Path, args: &[&str]) -> Run {
    let home = scratch().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cache = tempfile::tempdir_in(scratch()).unwrap();
    run_kubectl(
        kubectl_command(kubeconfig, &home, cache.path(), args),
        None,
        Duration::from_secs(60),
    )
}

/// Waits until kubectl as `user` succeeds (`want` true) or fails (`want` false): authorization follows a
/// binding's create or delete once the member's RBAC view has seen it.
fn wait_for(c: &KubeCluster, user: &str, args: &[&str], want: bool) -> Run {
    let mut last = None;
    c.wait_until(
        &format!("{user}: kubectl {args:?} ok={want}"),
        Duration::from_secs(20),
        || {
            let r = as_user(c, user, args);
            let done = r.ok == want;
            last = Some(r);
            done
        },
    );
    last.unwrap()
}

fn apply(c: &KubeCluster, yaml: &str) {
    c.ok_stdin(0, &["apply", "-f", "-"], Some(yaml));
}

#[test]
fn a_rolebinding_allows_and_its_removal_denies_again() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-a"]);
    let denied = as_user(c, "alice", &["get", "pods", "-n", "rbac-a"]);
    assert!(!denied.ok);
    assert_eq!(
        denied.stderr.trim(),
        r#"Error from server (Forbidden): pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "rbac-a""#
    );
    let named = as_user(c, "alice", &["get", "pod", "web", "-n", "rbac-a"]);
    assert!(
        named.stderr.contains(r#"pods "web" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "rbac-a""#),
        "{}",
        named.stderr
    );
    let cluster_scope = as_user(c, "alice", &["get", "nodes"]);
    assert!(
        cluster_scope.stderr.contains(r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#),
        "{}",
        cluster_scope.stderr
    );
    let no = as_user(
        c,
        "alice",
        &["auth", "can-i", "list", "pods", "-n", "rbac-a"],
    );
    assert_eq!((no.ok, no.stdout.trim()), (false, "no"));

    c.ok(
        0,
        &[
            "create",
            "role",
            "pod-reader",
            "-n",
            "rbac-a",
            "--verb=get,list,watch",
            "--resource=pods",
        ],
    );
    c.ok(
        0,
        &[
            "create",
            "rolebinding",
            "alice-reads",
            "-n",
            "rbac-a",
            "--role=pod-reader",
            "--user=alice",
        ],
    );
    let allowed = wait_for(c, "alice", &["get", "pods", "-n", "rbac-a"], true);
    assert!(
        allowed
            .stderr
            .contains("No resources found in rbac-a namespace."),
        "{}",
        allowed.stderr
    );
    let yes = as_user(
        c,
        "alice",
        &["auth", "can-i", "list", "pods", "-n", "rbac-a"],
    );
    assert_eq!((yes.ok, yes.stdout.trim()), (true, "yes"));
    let still_no = as_user(
        c,
        "alice",
        &["auth", "can-i", "delete", "pods", "-n", "rbac-a"],
    );
    assert_eq!(still_no.stdout.trim(), "no");
    let elsewhere = as_user(
        c,
        "alice",
        &["auth", "can-i", "list", "pods", "-n", "default"],
    );
    assert_eq!(elsewhere.stdout.trim(), "no");

    // `--list` shows the binding's rules and the defaults every authenticated user has.
    let list = as_user(c, "alice", &["auth", "can-i", "--list", "-n", "rbac-a"]);
    assert!(list.ok, "{}", list.stderr);
    let rows: Vec<Vec<&str>> = list
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "Resources",
            "Non-Resource",
            "URLs",
            "Resource",
            "Names",
            "Verbs"
        ]
    );
    assert!(
        rows.contains(&vec!["pods", "[]", "[]", "[get", "list", "watch]"]),
        "{}",
        list.stdout
    );
    assert!(
        rows.contains(&vec![
            "selfsubjectaccessreviews.authorization.k8s.io",
            "[]",
            "[]",
            "[create]"
        ]),
        "{}",
        list.stdout
    );
    assert!(
        rows.iter().any(|r| r.first() == Some(&"[/healthz]")),
        "{}",
        list.stdout
    );

    c.ok(0, &["delete", "rolebinding", "alice-reads", "-n", "rbac-a"]);
    let again = wait_for(c, "alice", &["get", "pods", "-n", "rbac-a"], false);
    assert!(again.stderr.contains("is forbidden"), "{}", again.stderr);

    // A binding to a role that does not exist says so in the refusal.
    c.ok(
        0,
        &[
            "create",
            "rolebinding",
            "dangling",
            "-n",
            "rbac-a",
            "--role=missing",
            "--user=alice",
        ],
    );
    let dangling = wait_for(c, "alice", &["get", "configmaps", "-n", "rbac-a"], false);
    c.wait_until(
        "the dangling binding's error",
        Duration::from_secs(20),
        || {
            as_user(c, "alice", &["get", "configmaps", "-n", "rbac-a"])
                .stderr
                .contains(r#": RBAC: role.rbac.authorization.k8s.io "missing" not found"#)
        },
    );
    assert!(!dangling.ok);
}

#[test]
fn a_user_cannot_grant_what_they_do_not_hold() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-b"]);
    apply(
        c,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: role-admin, namespace: rbac-b}\n\
         rules:\n- {apiGroups: [rbac.authorization.k8s.io], resources: [roles, rolebindings], verbs: [create, get, list, update, patch, delete]}\n\
         - {apiGroups: [\"\"], resources: [pods], verbs: [get, list]}\n",
    );
    c.ok(
        0,
        &[
            "create",
            "rolebinding",
            "bob-admin",
            "-n",
            "rbac-b",
            "--role=role-admin",
            "--user=bob",
        ],
    );
    wait_for(c, "bob", &["get", "roles", "-n", "rbac-b"], true);

    // Within what bob holds: allowed.
    let ok = as_user(
        c,
        "bob",
        &[
            "create",
            "role",
            "readers",
            "-n",
            "rbac-b",
            "--verb=get,list",
            "--resource=pods",
        ],
    );
    assert!(ok.ok, "{}", ok.stderr);
    // Beyond it: refused with the missing permissions listed.
    let refused = as_user(
        c,
        "bob",
        &[
            "create",
            "role",
            "deleters",
            "-n",
            "rbac-b",
            "--verb=get,delete,watch",
            "--resource=pods,secrets",
        ],
    );
    assert!(!refused.ok);
    assert_eq!(
        refused.stderr.trim(),
        "Error from server (Forbidden): roles.rbac.authorization.k8s.io \"deleters\" is forbidden: user \"bob\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"watch\"]}\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\" \"watch\"]}"
    );
    // Binding a role with more than bob holds is an escalation too.
    c.ok(
        0,
        &[
            "create",
            "clusterrole",
            "pod-deleter",
            "--verb=delete",
            "--resource=pods",
        ],
    );
    let bind = as_user(
        c,
        "bob",
        &[
            "create",
            "rolebinding",
            "alice-deletes",
            "-n",
            "rbac-b",
            "--clusterrole=pod-deleter",
            "--user=alice",
        ],
    );
    assert!(!bind.ok);
    assert!(
        bind.stderr
            .contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        bind.stderr
    );
    // Binding what bob holds is allowed, and `bind` on a role lifts the check.
    let fine = as_user(
        c,
        "bob",
        &[
            "create",
            "rolebinding",
            "alice-readers",
            "-n",
            "rbac-b",
            "--role=readers",
            "--user=alice",
        ],
    );
    assert!(fine.ok, "{}", fine.stderr);
    apply(
        c,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: may-bind-edit, namespace: rbac-b}\n\
         rules:\n- {apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind], resourceNames: [pod-deleter]}\n",
    );
    c.ok(
        0,
        &[
            "create",
            "rolebinding",
            "bob-binds",
            "-n",
            "rbac-b",
            "--role=may-bind-edit",
            "--user=bob",
        ],
    );
    c.wait_until("bob may bind pod-deleter", Duration::from_secs(20), || {
        as_user(
            c,
            "bob",
            &[
                "auth",
                "can-i",
                "bind",
                "clusterroles/pod-deleter",
                "-n",
                "rbac-b",
            ],
        )
        .ok
    });
    let bound = as_user(
        c,
        "bob",
        &[
            "create",
            "rolebinding",
            "alice-deletes",
            "-n",
            "rbac-b",
            "--clusterrole=pod-deleter",
            "--user=alice",
        ],
    );
    assert!(bound.ok, "{}", bound.stderr);
}

#[test]
fn impersonation_and_whoami() {
    let c = cluster();
    // The review kinds are in discovery, create-only, as upstream lists them.
    let names = c.ok(
        0,
        &[
            "api-resources",
            "--api-group=authorization.k8s.io",
            "-o",
            "name",
        ],
    );
    assert!(
        names
            .lines()
            .any(|l| l == "selfsubjectaccessreviews.authorization.k8s.io"),
        "{names}"
    );
    let wide = c.ok(
        0,
        &[
            "api-resources",
            "--api-group=authentication.k8s.io",
            "-o",
            "wide",
        ],
    );
    assert!(
        wide.lines()
            .any(|l| l.starts_with("tokenreviews") && l.split_whitespace().any(|w| w == "create")),
        "{wide}"
    );
    let me = c.ok(0, &["auth", "whoami"]);
    assert!(me.contains("kubernetes-admin"), "{me}");
    assert!(me.contains("system:masters"), "{me}");
    let alice = as_user(
        c,
        "alice",
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
        ],
    );
    assert_eq!(
        alice.stdout, r#"alice ["system:authenticated"]"#,
        "{}",
        alice.stderr
    );
    // The admin may act as anyone; what alice may do is then decided for alice.
    let as_alice = c.kubectl(
        0,
        &[
            "auth", "can-i", "list", "secrets", "-n", "default", "--as", "alice",
        ],
    );
    assert_eq!(as_alice.stdout.trim(), "no");
    let as_group = c.ok(
        0,
        &[
            "auth",
            "whoami",
            "--as",
            "carol",
            "--as-group",
            "ops",
            "-o",
            "jsonpath={.status.userInfo.groups}",
        ],
    );
    assert_eq!(as_group, r#"["ops","system:authenticated"]"#);
    // alice may not.
    let refused = as_user(
        c,
        "alice",
        &["get", "--raw", "/api/v1/namespaces", "--as", "bob"],
    );
    assert_eq!(
        refused.stderr.trim(),
        r#"Error from server (Forbidden): users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_self_subject_access_review_through_the_kube_crate() {
    let c = cluster();
    let client = keel_testkit::kube::client(&kubeconfig_of(c, "alice"), true).await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
    let ask = |verb: &str, group: &str, resource: &str, ns: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews
        .create(
            &PostParams::default(),
            &ask(
                "create",
                "authorization.k8s.io",
                "selfsubjectaccessreviews",
                "",
            ),
        )
        .await
        .unwrap();
    let status = answer.status.unwrap();
    assert!(status.allowed);
    assert_eq!(
        status.reason.as_deref(),
        Some(
            r#"RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user" to Group "system:authenticated""#
        )
    );
    let answer = reviews
        .create(&PostParams::default(), &ask("delete", "", "nodes", ""))
        .await
        .unwrap();
    assert!(!answer.status.unwrap().allowed);
}

#[test]
fn an_agent_reads_only_what_its_pods_use_and_writes_only_its_own() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-n"]);
    for s in ["s1", "s2", "pull"] {
        c.ok(
            0,
            &[
                "create",
                "secret",
                "generic",
                s,
                "-n",
                "rbac-n",
                "--from-literal=k=v",
            ],
        );
    }
    let pod = |name: &str, node: &str, secret: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: rbac-n}}\n\
             spec:\n  nodeName: {node}\n  imagePullSecrets: [{{name: pull}}]\n  containers: [{{name: c, image: busybox}}]\n\
             \x20 volumes: [{{name: v, secret: {{secretName: {secret}}}}}]\n"
        )
    };
    apply(c, &pod("on-w1", "w1", "s1"));
    apply(c, &pod("on-w2", "w2", "s2"));

    let mine = as_user(
        c,
        "system:node:w1",
        &["get", "secret", "s1", "-n", "rbac-n"],
    );
    assert!(mine.ok, "{}", mine.stderr);
    assert!(
        as_user(
            c,
            "system:node:w1",
            &["get", "secret", "pull", "-n", "rbac-n"]
        )
        .ok
    );
    let theirs = as_user(
        c,
        "system:node:w1",
        &["get", "secret", "s2", "-n", "rbac-n"],
    );
    assert_eq!(
        theirs.stderr.trim(),
        r#"Error from server (Forbidden): secrets "s2" is forbidden: User "system:node:w1" cannot get resource "secrets" in API group "" in the namespace "rbac-n": no relationship found between node 'w1' and this object"#
    );
    let all = as_user(c, "system:node:w1", &["get", "secrets", "-n", "rbac-n"]);
    assert!(
        all.stderr.contains("No Object name found"),
        "{}",
        all.stderr
    );
    assert!(
        as_user(
            c,
            "system:node:w2",
            &["get", "secret", "s2", "-n", "rbac-n"]
        )
        .ok
    );
    // The system:node rules: reading pods and nodes is allowed, deleting a namespace is not.
    assert!(as_user(c, "system:node:w1", &["get", "pods", "-A"]).ok);
    assert!(
        !as_user(
            c,
            "system:node:w1",
            &["delete", "namespace", "rbac-n", "--dry-run=server"]
        )
        .ok
    );

    // NodeRestriction: its own pods' status only (as the agent writes it: a PATCH of `pods/status`).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let node = runtime.block_on(keel_testkit::kube::client(
        &kubeconfig_of(c, "system:node:w1"),
        true,
    ));
    let pods: Api<Pod> = Api::namespaced(node, "rbac-n");
    let patch = Patch::Merge(
        serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    let own = runtime.block_on(pods.patch_status("on-w1", &PatchParams::default(), &patch));
    assert!(own.is_ok(), "{own:?}");
    let other = runtime.block_on(pods.patch_status("on-w2", &PatchParams::default(), &patch));
    match other {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403);
            assert_eq!(
                e.message,
                r#"pods "on-w2" is forbidden: node "w1" can only update pod status for pods with spec.nodeName set to itself"#
            );
        }
        other => panic!("{other:?}"),
    }
    let create = as_user(
        c,
        "system:node:w1",
        &[
            "run",
            "sneaky",
            "-n",
            "rbac-n",
            "--image=busybox",
            "--overrides={\"spec\":{\"nodeName\":\"w1\"}}",
        ],
    );
    assert!(
        create.stderr.contains("can only create mirror pods"),
        "{}",
        create.stderr
    );
}

#[test]
fn service_account_tokens_from_the_token_request_api() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-t"]);
    c.ok(0, &["create", "serviceaccount", "robot", "-n", "rbac-t"]);
    let token = c
        .ok(0, &["create", "token", "robot", "-n", "rbac-t"])
        .trim()
        .to_string();
    let robot = kubeconfig_with(c, "robot", &token);
    let who = run_with(
        &robot,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
        ],
    );
    assert_eq!(
        who.stdout,
        r#"system:serviceaccount:rbac-t:robot ["system:serviceaccounts","system:serviceaccounts:rbac-t","system:authenticated"]"#,
        "{}",
        who.stderr
    );
    let denied = run_with(&robot, &["get", "pods", "-n", "rbac-t"]);
    assert!(
        denied
            .stderr
            .contains(r#"User "system:serviceaccount:rbac-t:robot" cannot list resource "pods""#),
        "{}",
        denied.stderr
    );
    c.ok(
        0,
        &[
            "create",
            "rolebinding",
            "robot-views",
            "-n",
            "rbac-t",
            "--clusterrole=admin",
            "--serviceaccount=rbac-t:robot",
        ],
    );
    c.wait_until("the robot may list pods", Duration::from_secs(20), || {
        run_with(&robot, &["get", "pods", "-n", "rbac-t"]).ok
    });

    // Upstream's limits and bindings.
    let short = c.kubectl(
        0,
        &["create", "token", "robot", "-n", "rbac-t", "--duration=5m"],
    );
    assert!(
        short.stderr.contains("spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"),
        "{}",
        short.stderr
    );
    let missing = c.kubectl(0, &["create", "token", "nobody", "-n", "rbac-t"]);
    assert!(
        missing
            .stderr
            .contains(r#"serviceaccounts "nobody" not found"#),
        "{}",
        missing.stderr
    );
    c.ok(
        0,
        &[
            "create",
            "secret",
            "generic",
            "anchor",
            "-n",
            "rbac-t",
            "--from-literal=k=v",
        ],
    );
    let bound = c
        .ok(
            0,
            &[
                "create",
                "token",
                "robot",
                "-n",
                "rbac-t",
                "--bound-object-kind=Secret",
                "--bound-object-name=anchor",
            ],
        )
        .trim()
        .to_string();
    let bound_cfg = kubeconfig_with(c, "robot-bound", &bound);
    assert!(run_with(&bound_cfg, &["get", "pods", "-n", "rbac-t"]).ok);
    c.ok(0, &["delete", "secret", "anchor", "-n", "rbac-t"]);
    let gone = run_with(&bound_cfg, &["get", "pods", "-n", "rbac-t"]);
    assert!(
        gone.stderr.contains("You must be logged in to the server"),
        "{}",
        gone.stderr
    );

    // A legacy token Secret, made only when asked for: filled at create, good while it holds the token.
    apply(
        c,
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\nmetadata:\n  name: robot-legacy\n  namespace: rbac-t\n  annotations: {kubernetes.io/service-account.name: robot}\n",
    );
    let encoded = c.ok(
        0,
        &[
            "get",
            "secret",
            "robot-legacy",
            "-n",
            "rbac-t",
            "-o",
            "jsonpath={.data.token}",
        ],
    );
    use base64::Engine;
    let legacy = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .unwrap(),
    )
    .unwrap();
    let legacy_cfg = kubeconfig_with(c, "robot-legacy", &legacy);
    let who = run_with(
        &legacy_cfg,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(
        who.stdout, "system:serviceaccount:rbac-t:robot",
        "{}",
        who.stderr
    );
    let ns = c.ok(
        0,
        &[
            "get",
            "secret",
            "robot-legacy",
            "-n",
            "rbac-t",
            "-o",
            "jsonpath={.data.namespace}",
        ],
    );
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(ns.trim())
            .unwrap(),
        b"rbac-t"
    );
    c.ok(0, &["delete", "secret", "robot-legacy", "-n", "rbac-t"]);
    assert!(
        !run_with(&legacy_cfg, &["auth", "whoami"]).ok,
        "the token died with its Secret"
    );

    // The issuer's documents, and a token dies with its service account.
    let discovery: serde_json::Value =
        serde_json::from_str(&c.ok(0, &["get", "--raw", "/.well-known/openid-configuration"]))
            .unwrap();
    assert_eq!(
        discovery["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    let jwks: serde_json::Value =
        serde_json::from_str(&c.ok(0, &["get", "--raw", "/openid/v1/jwks"])).unwrap();
    assert_eq!(jwks["keys"][0]["alg"], "ES256");
    c.ok(0, &["delete", "serviceaccount", "robot", "-n", "rbac-t"]);
    let dead = run_with(&robot, &["get", "pods", "-n", "rbac-t"]);
    assert!(
        dead.stderr.contains("You must be logged in to the server"),
        "{}",
        dead.stderr
    );
}

#[test]
fn pod_security_levels_refuse_warn_and_validate() {
    let c = cluster();
    let ns_yaml = |name: &str, labels: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\n"
        )
    };
    apply(
        c,
        &ns_yaml("psa-r", "pod-security.kubernetes.io/enforce: restricted"),
    );
    let refused = c.kubectl(0, &["run", "p", "-n", "psa-r", "--image=busybox"]);
    assert!(!refused.ok);
    assert_eq!(
        refused.stderr.trim(),
        "Error from server (Forbidden): pods \"p\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"p\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"p\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"p\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"p\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    let compliant = "apiVersion: v1\nkind: Pod\nmetadata: {name: ok, namespace: psa-r}\nspec:\n  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n  \
                     containers: [{name: c, image: busybox, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n";
    c.ok_stdin(0, &["apply", "-f", "-"], Some(compliant));
    // A workload's template only warns (warn follows the stricter enforce level).
    let deploy = c.kubectl(
        0,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "psa-r",
            "--image=busybox",
        ],
    );
    assert!(deploy.ok, "{}", deploy.stderr);
    assert!(
        deploy.stderr.contains("Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"),
        "{}",
        deploy.stderr
    );

    apply(c, &ns_yaml("psa-b", "pod-security.kubernetes.io/enforce: baseline, pod-security.kubernetes.io/warn: restricted"));
    let privileged = "apiVersion: v1\nkind: Pod\nmetadata: {name: root, namespace: psa-b}\nspec:\n  containers: [{name: c, image: busybox, securityContext: {privileged: true}}]\n";
    let refused = c.kubectl_stdin(0, &["apply", "-f", "-"], Some(privileged));
    assert!(
        refused.stderr.contains(
            "pods \"root\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
        ),
        "{}",
        refused.stderr
    );
    let plain = c.kubectl(0, &["run", "plain", "-n", "psa-b", "--image=busybox"]);
    assert!(plain.ok, "{}", plain.stderr);
    assert!(
        plain
            .stderr
            .contains("Warning: would violate PodSecurity \"restricted:latest\""),
        "{}",
        plain.stderr
    );

    // Tightening a namespace warns about the pods it already holds; a bad label is refused.
    let tighten = c.kubectl(
        0,
        &[
            "label",
            "--overwrite",
            "ns",
            "psa-b",
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    );
    assert!(tighten.ok, "{}", tighten.stderr);
    assert!(
        tighten.stderr.contains("Warning: existing pods in namespace \"psa-b\" violate the new PodSecurity enforce level \"restricted:latest\""),
        "{}",
        tighten.stderr
    );
    assert!(
        tighten.stderr.contains("Warning: plain: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"),
        "{}",
        tighten.stderr
    );
    let bad = c.kubectl(
        0,
        &[
            "label",
            "--overwrite",
            "ns",
            "psa-b",
            "pod-security.kubernetes.io/enforce=strict",
        ],
    );
    assert_eq!(
        bad.stderr.trim(),
        "The Namespace \"psa-b\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
    );
}

#[test]
fn secrets_are_encrypted_at_rest_and_not_in_a_snapshot() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-e"]);
    let payload = "zebra-payload-8c1f";
    c.ok(
        0,
        &[
            "create",
            "secret",
            "generic",
            "vault",
            "-n",
            "rbac-e",
            &format!("--from-literal=k={payload}"),
        ],
    );
    c.ok(
        0,
        &[
            "create",
            "configmap",
            "open",
            "-n",
            "rbac-e",
            &format!("--from-literal=k={payload}"),
        ],
    );
    // Through the API: as written.
    let read = c.ok(
        0,
        &[
            "get",
            "secret",
            "vault",
            "-n",
            "rbac-e",
            "-o",
            "jsonpath={.data.k}",
        ],
    );
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(read.trim())
            .unwrap(),
        payload.as_bytes()
    );
    // Through etcd: upstream's envelope for the secret, the configmap as it is.
    let endpoint = c.member(0).endpoint();
    let raw = keel_testkit::etcdctl(
        &endpoint,
        &[
            "get",
            "/registry/secrets/rbac-e/vault",
            "--print-value-only",
        ],
        None,
    );
    assert!(raw.success(), "{}", raw.stderr);
    assert!(
        raw.stdout.starts_with("k8s:enc:aesgcm:v1:key1:"),
        "{:?}",
        &raw.stdout[..raw.stdout.len().min(60)]
    );
    assert!(!raw.stdout.contains(payload));
    let cm = keel_testkit::etcdctl(
        &endpoint,
        &[
            "get",
            "/registry/configmaps/rbac-e/open",
            "--print-value-only",
        ],
        None,
    );
    assert!(
        cm.stdout.contains(payload),
        "configmaps are not in the configuration"
    );
    // A snapshot holds the configmap's value but never the secret's, in any encoding.
    let file = scratch().join("at-rest.db");
    let saved = keel_testkit::etcdctl(
        &endpoint,
        &["snapshot", "save", file.to_str().unwrap()],
        None,
    );
    assert!(saved.success(), "{}", saved.stderr);
    let bytes = std::fs::read(&file).unwrap();
    let count = |needle: &[u8]| bytes.windows(needle.len()).filter(|w| *w == needle).count();
    assert_eq!(count(payload.as_bytes()), 1, "only the configmap's copy");
    let b64 = base64::engine::general_purpose::STANDARD.encode(payload);
    assert_eq!(count(b64.as_bytes()), 0);
    assert!(count(b"k8s:enc:aesgcm:v1:key1:") >= 1);
}

#[test]
fn the_audit_log_records_writes_and_refusals() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-audit"]);
    c.ok(
        0,
        &[
            "create",
            "configmap",
            "noted",
            "-n",
            "rbac-audit",
            "--from-literal=k=v",
        ],
    );
    c.ok(0, &["get", "configmap", "noted", "-n", "rbac-audit"]);
    assert!(!as_user(c, "alice", &["get", "secrets", "-n", "rbac-audit"]).ok);
    let events = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(scratch().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON event per line"))
            .filter(|e| e["objectRef"]["namespace"] == "rbac-audit")
            .collect()
    };
    c.wait_until("the audit events", Duration::from_secs(10), || {
        let evs = events();
        evs.iter().any(|e| e["objectRef"]["name"] == "noted")
            && evs.iter().any(|e| e["user"]["username"] == "alice")
    });
    let events = events();
    let create = events
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["name"] == "noted")
        .expect("create logged");
    assert_eq!(create["kind"], "Event");
    assert_eq!(create["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(create["level"], "Metadata");
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["user"]["username"], "kubernetes-admin");
    assert_eq!(create["objectRef"]["name"], "noted");
    assert_eq!(create["responseStatus"]["code"], 201);
    assert_eq!(create["sourceIPs"][0], "127.0.0.1");
    let denied = events
        .iter()
        .find(|e| e["user"]["username"] == "alice")
        .expect("refusal logged");
    assert_eq!(
        (
            denied["verb"].as_str(),
            denied["responseStatus"]["code"].as_i64()
        ),
        (Some("list"), Some(403))
    );
    assert_eq!(
        denied["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert!(
        !events.iter().any(|e| e["verb"] == "get"),
        "reads are not in the default policy"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn token_reviews_name_the_token_owner() {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-tr"]);
    c.ok(0, &["create", "serviceaccount", "bot", "-n", "rbac-tr"]);
    let token = c
        .ok(0, &["create", "token", "bot", "-n", "rbac-tr"])
        .trim()
        .to_string();
    let other = c
        .ok(
            0,
            &[
                "create",
                "token",
                "bot",
                "-n",
                "rbac-tr",
                "--audience=vault",
            ],
        )
        .trim()
        .to_string();
    let admin = keel_testkit::kube::client(&c.member(0).kubeconfig(), true).await;
    let reviews: Api<TokenReview> = Api::all(admin);
    let review = |token: &str, audiences: Option<Vec<String>>| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences,
        },
        ..Default::default()
    };
    let pp = PostParams::default();
    let got = reviews
        .create(&pp, &review(&token, None))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(got.authenticated, Some(true));
    let user = got.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:rbac-tr:bot")
    );
    assert!(user
        .groups
        .unwrap()
        .contains(&"system:serviceaccounts:rbac-tr".to_string()));
    // A token for another audience is not the API server's, but is that audience's.
    let wrong = reviews
        .create(&pp, &review(&other, None))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_ne!(wrong.authenticated, Some(true));
    let vault = reviews
        .create(&pp, &review(&other, Some(vec!["vault".into()])))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(vault.authenticated, Some(true));
    assert_eq!(vault.audiences, Some(vec!["vault".to_string()]));
    let junk = reviews
        .create(&pp, &review("not-a-token", None))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_ne!(junk.authenticated, Some(true));
    // Reviewing needs `create tokenreviews` (system:auth-delegator); alice has none.
    let alice: Api<TokenReview> =
        Api::all(keel_testkit::kube::client(&kubeconfig_of(c, "alice"), true).await);
    match alice.create(&pp, &review(&token, None)).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("{other:?}"),
    }
}

#[test]
fn resource_quota_and_limit_range_admit_count_and_refuse() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "quota-a"]);
    c.ok(
        0,
        &[
            "create",
            "quota",
            "q",
            "-n",
            "quota-a",
            "--hard=pods=2,requests.cpu=1,requests.memory=1Gi,limits.cpu=2",
        ],
    );
    // The controller copies spec.hard to status.hard and counts what the namespace holds.
    let used = |what: &str| {
        c.ok(
            0,
            &[
                "get",
                "quota",
                "q",
                "-n",
                "quota-a",
                "-o",
                &format!("jsonpath={{.status.used.{what}}}"),
            ],
        )
    };
    c.wait_until("the quota counted", Duration::from_secs(30), || {
        used("pods") == "0"
    });

    // Quota on cpu and memory means every container must say what it asks for.
    let no_sizes = c.kubectl(0, &["run", "a", "-n", "quota-a", "--image=busybox"]);
    assert_eq!(
        no_sizes.stderr.trim(),
        "Error from server (Forbidden): pods \"a\" is forbidden: failed quota: q: must specify limits.cpu for: a; requests.cpu for: a; requests.memory for: a"
    );

    // A LimitRange fills those in, and refuses what exceeds its bounds.
    apply(
        c,
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: lr, namespace: quota-a}\nspec:\n  limits:\n  - type: Container\n    \
         max: {cpu: \"1\"}\n    default: {cpu: 500m, memory: 128Mi}\n    defaultRequest: {cpu: 200m, memory: 64Mi}\n",
    );
    let big = c.kubectl_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: quota-a}\nspec:\n  containers: [{name: c, image: busybox, resources: {limits: {cpu: \"2\"}}}]\n"),
    );
    assert!(
        big.stderr.contains(
            "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{}",
        big.stderr
    );
    c.ok(0, &["run", "a", "-n", "quota-a", "--image=busybox"]);
    let pod = |field: &str| {
        c.ok(
            0,
            &[
                "get",
                "pod",
                "a",
                "-n",
                "quota-a",
                "-o",
                &format!("jsonpath={field}"),
            ],
        )
    };
    assert_eq!(pod("{.spec.containers[0].resources.requests.cpu}"), "200m");
    assert_eq!(
        pod("{.spec.containers[0].resources.limits.memory}"),
        "128Mi"
    );
    assert_eq!(
        pod("{.metadata.annotations.kubernetes\\.io/limit-ranger}"),
        "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a"
    );
    // Admission charged the quota as it admitted the pod.
    assert_eq!(used("pods"), "1");
    assert_eq!(used("requests\\.cpu"), "200m");

    c.ok(0, &["run", "b", "-n", "quota-a", "--image=busybox"]);
    let over = c.kubectl(0, &["run", "c", "-n", "quota-a", "--image=busybox"]);
    assert_eq!(
        over.stderr.trim(),
        "Error from server (Forbidden): pods \"c\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );
    let table = c.ok(0, &["get", "quota", "-n", "quota-a"]);
    assert!(
        table.contains("pods: 2/2, requests.cpu: 400m/1, requests.memory: 128Mi/1Gi")
            && table.contains("limits.cpu: 1/2"),
        "{table}"
    );

    // A pod that goes gives its share back: the controller recounts and the next one fits.
    c.ok(0, &["delete", "pod", "a", "-n", "quota-a", "--wait=false"]);
    c.wait_until("the quota freed", Duration::from_secs(30), || {
        used("pods") == "1"
    });
    c.ok(0, &["run", "c", "-n", "quota-a", "--image=busybox"]);
    assert_eq!(used("pods"), "2");
}

/// The status code of a list through `api`: 200, or the API's error code (403 when refused).
async fn list_code<K>(api: &Api<K>) -> u16
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("list: {e}"),
    }
}

/// RBAC judges from one moment of the store, and an RBAC write is in force once acknowledged:
/// - a service account lists pods at the cluster scope 400 times under a ClusterRoleBinding it keeps while
///   another client creates and deletes namespaces, Roles and RoleBindings (and the namespace controller
///   deletes their content): no refusal;
/// - 40 rounds of a RoleBinding created then deleted, each acknowledged write followed at once by a
///   request of the account: allowed after every create, refused after every delete.
#[tokio::test(flavor = "multi_thread")]
async fn rbac_judges_from_one_consistent_view_under_churn() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    use kube::api::{DeleteParams, ObjectMeta};
    const LISTS: usize = 400;
    const ROUNDS: usize = 40;
    let c = cluster();
    c.ok(0, &["create", "namespace", "rbac-churn"]);
    c.ok(
        0,
        &["-n", "rbac-churn", "create", "serviceaccount", "lister"],
    );
    c.ok(
        0,
        &[
            "create",
            "clusterrole",
            "churn-pod-lister",
            "--verb=list",
            "--resource=pods",
        ],
    );
    c.ok(
        0,
        &[
            "create",
            "clusterrolebinding",
            "churn-lister",
            "--clusterrole=churn-pod-lister",
            "--serviceaccount=rbac-churn:lister",
        ],
    );
    let token = c
        .ok(0, &["-n", "rbac-churn", "create", "token", "lister"])
        .trim()
        .to_string();
    let sa = keel_testkit::kube::client(&kubeconfig_with(c, "churn-lister", &token), true).await;
    let admin = c.client(0).await;
    let role = |ns: &str, name: &str, resource: &str| Role {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![resource.into()]),
            verbs: vec!["list".into()],
            ..Default::default()
        }]),
    };
    let binding = |ns: &str, name: &str, role: &str| RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "lister".into(),
            namespace: Some("rbac-churn".into()),
            ..Default::default()
        }]),
    };
    let pp = PostParams::default();

    // The binding was acknowledged: the first request already has it.
    let pods: Api<Pod> = Api::all(sa.clone());
    assert_eq!(list_code(&pods).await, 200);
    let done = std::sync::atomic::AtomicBool::new(false);
    let churn = async {
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        let mut round = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let ns = format!("rbac-churn-{round}");
            let n = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            namespaces.create(&pp, &n).await.unwrap();
            let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
            let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
            roles.create(&pp, &role(&ns, "r", "pods")).await.unwrap();
            bindings.create(&pp, &binding(&ns, "b", "r")).await.unwrap();
            if round % 2 == 0 {
                bindings
                    .delete("b", &DeleteParams::default())
                    .await
                    .unwrap();
                roles.delete("r", &DeleteParams::default()).await.unwrap();
            }
            namespaces
                .delete(&ns, &DeleteParams::default())
                .await
                .unwrap();
            round += 1;
        }
        round
    };
    let lists = async {
        let mut refused = Vec::new();
        for i in 0..LISTS {
            let code = list_code(&pods).await;
            if code != 200 {
                refused.push((i, code));
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        refused
    };
    let (rounds, refused) = tokio::join!(churn, lists);
    eprintln!(
        "{LISTS} lists during {rounds} churn rounds: {} refused",
        refused.len()
    );
    assert!(refused.is_empty(), "refused (request, code): {refused:?}");

    // The reverse: a deletion acknowledged is never honoured afterwards.
    let roles: Api<Role> = Api::namespaced(admin.clone(), "rbac-churn");
    roles
        .create(&pp, &role("rbac-churn", "cm-lister", "configmaps"))
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "rbac-churn");
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), "rbac-churn");
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        bindings
            .create(&pp, &binding("rbac-churn", "cm", "cm-lister"))
            .await
            .unwrap();
        let granted = list_code(&cms).await;
        bindings
            .delete("cm", &DeleteParams::default())
            .await
            .unwrap();
        let revoked = list_code(&cms).await;
        if granted != 200 || revoked != 403 {
            wrong.push((round, granted, revoked));
        }
    }
    eprintln!("{ROUNDS} grant/revoke rounds: {} wrong", wrong.len());
    assert!(
        wrong.is_empty(),
        "(round, after create, after delete): {wrong:?}"
    );
}
