//! The auth store as the state machine sees it: apply, checks at apply time, persistence,
//! keel snapshots and the etcd-format export/import.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::bbolt::reader::BoltReader;
use crate::command::{Command, CommandKind, CommandResponse};
use crate::etcd_snapshot::{import_etcd, ImportOptions};
use crate::pb::authpb::permission::Type as PermType;
use crate::pb::authpb::Permission;
use crate::pb::etcdserverpb::{
    AuthRoleAddRequest, AuthRoleGrantPermissionRequest, AuthUserGrantRoleRequest, PutRequest,
};
use crate::{Store, StoreOptions};

fn run(store: &Store, kind: CommandKind) -> Result<CommandResponse, StoreError> {
    let mut r = store
        .apply(vec![Some(Command::new(kind))], b"meta".to_vec())
        .expect("apply");
    r.remove(0).map(|x| x.expect("a response"))
}

fn auth(store: &Store, user: &str, op: AuthOp) -> Result<CommandResponse, StoreError> {
    let revision = if user.is_empty() {
        0
    } else {
        store.auth().revision()
    };
    run(
        store,
        CommandKind::Auth(AuthCommand {
            username: user.into(),
            auth_revision: revision,
            op: Some(op),
        }),
    )
}

fn put(key: &str) -> CommandKind {
    CommandKind::Put(PutRequest {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Bytes::from_static(b"v"),
        ..Default::default()
    })
}

fn authed(user: &str, revision: u64, kind: CommandKind) -> CommandKind {
    CommandKind::Authed(AuthedCommand {
        username: user.into(),
        auth_revision: revision,
        command: Some(Box::new(Command::new(kind))),
    })
}

/// root (role root) and ro (READ on `/ro/` by prefix), auth enabled.
fn setup(store: &Store) {
    let add = |name: &str| {
        auth(
            store,
            "",
            AuthOp::UserAdd(UserAddOp {
                name: name.into(),
                hash: b"$2a$10$not-checked-at-apply".to_vec(),
                options: None,
            }),
        )
        .expect("user add");
    };
    add("root");
    add("ro");
    auth(
        store,
        "",
        AuthOp::RoleAdd(AuthRoleAddRequest { name: "ro".into() }),
    )
    .expect("role add");
    auth(
        store,
        "",
        AuthOp::RoleGrantPermission(AuthRoleGrantPermissionRequest {
            name: "ro".into(),
            perm: Some(Permission {
                perm_type: PermType::Read as i32,
                key: Bytes::from_static(b"/ro/"),
                range_end: Bytes::from_static(b"/ro0"),
            }),
        }),
    )
    .expect("grant permission");
    for (user, role) in [("root", "root"), ("ro", "ro")] {
        auth(
            store,
            "",
            AuthOp::UserGrantRole(AuthUserGrantRoleRequest {
                user: user.into(),
                role: role.into(),
            }),
        )
        .expect("grant role");
    }
    auth(store, "", AuthOp::Enable(pb::AuthEnableRequest {})).expect("enable");
}

fn open(dir: &std::path::Path) -> Arc<Store> {
    Store::open(dir, StoreOptions::default()).expect("open")
}

#[test]
fn enable_needs_root_and_writes_are_checked_when_applied() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = open(tmp.path());
    assert_eq!(
        auth(&store, "", AuthOp::Enable(pb::AuthEnableRequest {})).unwrap_err(),
        StoreError::RootUserNotExist
    );
    setup(&store);
    let rev = store.auth().revision();
    // The revision counts every change but enable: 1 + 2 users + role + grant + 2 grants.
    assert_eq!(rev, 7);
    assert!(store.auth().is_enabled());
    assert_eq!(
        run(&store, authed("", 0, put("/ro/a"))).unwrap_err(),
        StoreError::UserEmpty
    );
    assert_eq!(
        run(&store, authed("ro", rev, put("/ro/a"))).unwrap_err(),
        StoreError::PermissionDenied
    );
    run(&store, authed("root", rev, put("/ro/a"))).expect("root writes");
    // A write hidden in a nested Txn is checked too (etcd 3.4 let it through).
    let nested = CommandKind::Txn(pb::TxnRequest {
        success: vec![pb::RequestOp {
            request: Some(pb::request_op::Request::RequestTxn(pb::TxnRequest {
                success: vec![pb::RequestOp {
                    request: Some(pb::request_op::Request::RequestPut(PutRequest {
                        key: Bytes::from_static(b"/elsewhere"),
                        ..Default::default()
                    })),
                }],
                ..Default::default()
            })),
        }],
        ..Default::default()
    });
    assert_eq!(
        run(&store, authed("ro", rev, nested)).unwrap_err(),
        StoreError::PermissionDenied
    );
    // Plain commands (the Kubernetes API in process) are trusted.
    run(&store, put("/registry/x")).expect("trusted write");
    // A change of the auth store between the token lookup and the apply refuses the write.
    auth(
        &store,
        "root",
        AuthOp::RoleAdd(AuthRoleAddRequest { name: "x".into() }),
    )
    .expect("role add as root");
    assert_eq!(
        run(&store, authed("root", rev, put("/ro/a"))).unwrap_err(),
        StoreError::AuthOldRevision
    );
    // Auth changes need root while enabled.
    assert_eq!(
        auth(
            &store,
            "ro",
            AuthOp::RoleAdd(AuthRoleAddRequest { name: "y".into() })
        )
        .unwrap_err(),
        StoreError::PermissionDenied
    );
    let ai = AuthInfo {
        username: "ro".into(),
        revision: store.auth().revision(),
    };
    store
        .auth()
        .range_permitted(&ai, b"/ro/", b"/ro0")
        .expect("read in range");
    assert_eq!(
        store.auth().range_permitted(&ai, b"/x", b"").unwrap_err(),
        StoreError::PermissionDenied
    );
}

#[test]
fn auth_state_survives_reopen_keel_snapshots_and_the_etcd_format() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a");
    let before = {
        let store = open(&dir);
        setup(&store);
        store.flush().expect("flush");
        store.auth().export_buckets()
    };
    assert_eq!(before.users.len(), 2);
    assert_eq!(before.roles.len(), 1);
    assert!(before.auth.contains(&(ENABLED_KEY.to_vec(), vec![1])));

    let store = open(&dir);
    assert!(store.auth().is_enabled());
    assert_eq!(store.auth().export_buckets(), before);

    // keel's own snapshot carries the Meta entries.
    let mut snap = Vec::new();
    store.write_snapshot(&mut snap).expect("snapshot");
    let other = open(&tmp.path().join("b"));
    assert!(!other.auth().is_enabled());
    other
        .install_snapshot(&mut snap.as_slice(), 2)
        .expect("install");
    assert!(other.auth().is_enabled());
    assert_eq!(other.auth().export_buckets(), before);

    // The etcd-format file holds buckets auth, authUsers and authRoles; an import restores them.
    let file = tmp.path().join("etcd.db");
    store
        .export_etcd(&file, Vec::new(), 1, &|_| {})
        .expect("export");
    let reader = BoltReader::open(&file).expect("read");
    let users: Vec<_> = reader
        .bucket(b"authUsers")
        .expect("bucket")
        .expect("authUsers")
        .map(|r| r.expect("entry").0)
        .collect();
    assert_eq!(users, [b"ro".to_vec(), b"root".to_vec()]);
    let imported = tmp.path().join("c");
    import_etcd(&imported, &reader, &ImportOptions::default(), &|_| {}).expect("import");
    let restored = open(&imported);
    assert!(restored.auth().is_enabled());
    assert_eq!(restored.auth().export_buckets(), before);
}
