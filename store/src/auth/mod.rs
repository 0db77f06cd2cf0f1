//! etcd 3.4's auth store: users, roles, key-range permissions, the enabled flag and the auth
//! revision, replicated through the log like any write; plus the simple tokens each member
//! keeps in memory.
//!
//! Every change is an [`AuthCommand`] applied in log order, so all members agree, and is
//! persisted in the Meta space under `auth/`, `authUsers/` and `authRoles/` followed by the key
//! etcd uses in its bucket of the same name, with etcd's value bytes (`authpb.User`,
//! `authpb.Role`, the one-byte flag, the big-endian revision). The entries travel in keel's
//! snapshots with the rest of Meta, and the etcd-format export writes them to buckets `auth`,
//! `authUsers` and `authRoles` as they are.
//!
//! Permission checks follow etcd: reads are checked where they are served; writes carry the
//! caller's [`AuthInfo`] in an [`AuthedCommand`] and are checked when applied, so a change of
//! the auth state between request and apply refuses the write ("revision of auth store is
//! old"). Plain commands (the Kubernetes API in process, lease expiry) are trusted: only the
//! etcd client port wraps its writes. While auth is disabled nothing here is consulted but one
//! atomic flag.

pub mod perms;
pub mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use prost::Message;

use crate::backend::{Backend, Pair, Space, WriteBatch};
use crate::command::{Command, CommandKind};
use crate::error::StoreError;
use crate::lease::{LeaseId, Lessor};
use crate::mvcc::kv::header;
use crate::pb::authpb::{Permission, Role, User, UserAddOptions};
use crate::pb::etcdserverpb as pb;
use perms::{Need, UserPerms};
use tokens::SimpleTokens;

/// The user and the role that may do everything.
pub const ROOT: &str = "root";

/// Meta prefix of bucket `auth` entries.
pub(crate) const META_AUTH_PREFIX: &[u8] = b"auth/";
/// Meta prefix of bucket `authUsers` entries.
pub(crate) const META_USERS_PREFIX: &[u8] = b"authUsers/";
/// Meta prefix of bucket `authRoles` entries.
pub(crate) const META_ROLES_PREFIX: &[u8] = b"authRoles/";
const ENABLED_KEY: &[u8] = b"authEnabled";
const REVISION_KEY: &[u8] = b"authRevision";

/// Who sent a request, as far as auth is concerned: the token's user and the auth revision
/// when the token was looked up (0 = no user).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthInfo {
    pub username: String,
    pub revision: u64,
}

/// An auth-changing (or auth-reading) command with the caller's identity.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthCommand {
    /// The caller's user ("" = none).
    #[prost(string, tag = "1")]
    pub username: String,
    /// The auth revision when the caller's token was looked up.
    #[prost(uint64, tag = "2")]
    pub auth_revision: u64,
    #[prost(
        oneof = "AuthOp",
        tags = "3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18"
    )]
    pub op: Option<AuthOp>,
}

/// The operations of the Auth service, as applied.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AuthOp {
    #[prost(message, tag = "3")]
    Enable(pb::AuthEnableRequest),
    #[prost(message, tag = "4")]
    Disable(pb::AuthDisableRequest),
    #[prost(message, tag = "5")]
    Authenticate(AuthenticateOp),
    #[prost(message, tag = "6")]
    UserAdd(UserAddOp),
    #[prost(message, tag = "7")]
    UserGet(pb::AuthUserGetRequest),
    #[prost(message, tag = "8")]
    UserList(pb::AuthUserListRequest),
    #[prost(message, tag = "9")]
    UserDelete(pb::AuthUserDeleteRequest),
    #[prost(message, tag = "10")]
    UserChangePassword(ChangePasswordOp),
    #[prost(message, tag = "11")]
    UserGrantRole(pb::AuthUserGrantRoleRequest),
    #[prost(message, tag = "12")]
    UserRevokeRole(pb::AuthUserRevokeRoleRequest),
    #[prost(message, tag = "13")]
    RoleAdd(pb::AuthRoleAddRequest),
    #[prost(message, tag = "14")]
    RoleGet(pb::AuthRoleGetRequest),
    #[prost(message, tag = "15")]
    RoleList(pb::AuthRoleListRequest),
    #[prost(message, tag = "16")]
    RoleDelete(pb::AuthRoleDeleteRequest),
    #[prost(message, tag = "17")]
    RoleGrantPermission(pb::AuthRoleGrantPermissionRequest),
    #[prost(message, tag = "18")]
    RoleRevokePermission(pb::AuthRoleRevokePermissionRequest),
}

/// Authenticate as applied: the password was checked before proposing; the token is
/// `prefix.index`, where the state machine fills in the entry's log index.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateOp {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub prefix: String,
    #[prost(uint64, tag = "3")]
    pub index: u64,
}

/// UserAdd as applied: the bcrypt hash is computed once, before proposing.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UserAddOp {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub hash: Vec<u8>,
    #[prost(message, optional, tag = "3")]
    pub options: Option<UserAddOptions>,
}

/// UserChangePassword as applied (hash computed before proposing).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChangePasswordOp {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub hash: Vec<u8>,
}

/// A key-space command from the etcd client port while auth is on, checked against the
/// caller's permissions when applied.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthedCommand {
    #[prost(string, tag = "1")]
    pub username: String,
    #[prost(uint64, tag = "2")]
    pub auth_revision: u64,
    #[prost(message, optional, boxed, tag = "3")]
    pub command: Option<Box<Command>>,
}

/// The answer to an [`AuthCommand`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthResult {
    #[prost(
        oneof = "AuthResultKind",
        tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16"
    )]
    pub kind: Option<AuthResultKind>,
}

/// The response types of the Auth service.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AuthResultKind {
    #[prost(message, tag = "1")]
    Enable(pb::AuthEnableResponse),
    #[prost(message, tag = "2")]
    Disable(pb::AuthDisableResponse),
    #[prost(message, tag = "3")]
    Authenticate(pb::AuthenticateResponse),
    #[prost(message, tag = "4")]
    UserAdd(pb::AuthUserAddResponse),
    #[prost(message, tag = "5")]
    UserGet(pb::AuthUserGetResponse),
    #[prost(message, tag = "6")]
    UserList(pb::AuthUserListResponse),
    #[prost(message, tag = "7")]
    UserDelete(pb::AuthUserDeleteResponse),
    #[prost(message, tag = "8")]
    UserChangePassword(pb::AuthUserChangePasswordResponse),
    #[prost(message, tag = "9")]
    UserGrantRole(pb::AuthUserGrantRoleResponse),
    #[prost(message, tag = "10")]
    UserRevokeRole(pb::AuthUserRevokeRoleResponse),
    #[prost(message, tag = "11")]
    RoleAdd(pb::AuthRoleAddResponse),
    #[prost(message, tag = "12")]
    RoleGet(pb::AuthRoleGetResponse),
    #[prost(message, tag = "13")]
    RoleList(pb::AuthRoleListResponse),
    #[prost(message, tag = "14")]
    RoleDelete(pb::AuthRoleDeleteResponse),
    #[prost(message, tag = "15")]
    RoleGrantPermission(pb::AuthRoleGrantPermissionResponse),
    #[prost(message, tag = "16")]
    RoleRevokePermission(pb::AuthRoleRevokePermissionResponse),
}

/// Sets the log index of every Authenticate in `cmd` (the state machine calls it per entry,
/// so every member mints the same token).
pub fn stamp_log_index(cmd: &mut Command, index: u64) {
    match &mut cmd.kind {
        Some(CommandKind::Auth(AuthCommand {
            op: Some(AuthOp::Authenticate(a)),
            ..
        })) => a.index = index,
        Some(CommandKind::Batch(b)) => {
            for c in &mut b.commands {
                stamp_log_index(c, index);
            }
        }
        _ => {}
    }
}

/// The replicated part of the auth store.
#[derive(Debug, Clone)]
struct AuthState {
    enabled: bool,
    /// True once the enabled flag was written (etcd writes it on the first enable or disable).
    flag_written: bool,
    /// etcd's authRevision: 1 on a new store, +1 on every change but enable.
    revision: u64,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    /// Merged permissions per user, rebuilt on every change.
    perms: HashMap<String, UserPerms>,
}

impl Default for AuthState {
    fn default() -> Self {
        AuthState {
            enabled: false,
            flag_written: false,
            revision: 1,
            users: BTreeMap::new(),
            roles: BTreeMap::new(),
            perms: HashMap::new(),
        }
    }
}

fn has_root_role(u: &User) -> bool {
    u.roles.iter().any(|r| r == ROOT)
}

fn meta_key(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(key);
    k
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut e = prefix.to_vec();
    if let Some(last) = e.last_mut() {
        *last += 1;
    }
    e
}

impl AuthState {
    fn rebuild_perms(&mut self) {
        self.perms = self
            .users
            .iter()
            .map(|(n, u)| (n.clone(), UserPerms::of_user(u, &self.roles)))
            .collect();
    }

    /// etcd's `isOpPermitted`.
    fn op_permitted(
        &self,
        ai: &AuthInfo,
        need: Need,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), StoreError> {
        if !self.enabled {
            return Ok(());
        }
        if ai.revision == 0 {
            return Err(StoreError::UserEmpty);
        }
        if ai.revision < self.revision {
            return Err(StoreError::AuthOldRevision);
        }
        let Some(user) = self.users.get(&ai.username) else {
            return Err(StoreError::PermissionDenied);
        };
        if has_root_role(user) {
            return Ok(());
        }
        match self.perms.get(&ai.username) {
            Some(p) if p.allows(need, key, range_end) => Ok(()),
            _ => Err(StoreError::PermissionDenied),
        }
    }

    /// etcd's `IsAdminPermitted` (`None` = no token).
    fn admin_permitted(&self, ai: Option<&AuthInfo>) -> Result<(), StoreError> {
        if !self.enabled {
            return Ok(());
        }
        let Some(ai) = ai.filter(|a| !a.username.is_empty()) else {
            return Err(StoreError::UserEmpty);
        };
        match self.users.get(&ai.username) {
            None => Err(StoreError::UserNotFound),
            Some(u) if has_root_role(u) => Ok(()),
            Some(_) => Err(StoreError::PermissionDenied),
        }
    }

    fn txn_permitted(&self, ai: &AuthInfo, t: &pb::TxnRequest) -> Result<(), StoreError> {
        for c in &t.compare {
            self.op_permitted(ai, Need::Read, &c.key, &c.range_end)?;
        }
        for op in t.success.iter().chain(t.failure.iter()) {
            use pb::request_op::Request;
            match &op.request {
                Some(Request::RequestRange(r)) => {
                    self.op_permitted(ai, Need::Read, &r.key, &r.range_end)?
                }
                Some(Request::RequestPut(p)) => self.op_permitted(ai, Need::Write, &p.key, &[])?,
                Some(Request::RequestDeleteRange(d)) => {
                    if d.prev_kv {
                        self.op_permitted(ai, Need::Read, &d.key, &d.range_end)?;
                    }
                    self.op_permitted(ai, Need::Write, &d.key, &d.range_end)?;
                }
                // etcd 3.4 checks nothing inside a nested Txn, which lets any user write anywhere;
                // later etcd releases check nested Txns as keel does.
                Some(Request::RequestTxn(nt)) => self.txn_permitted(ai, nt)?,
                None => {}
            }
        }
        Ok(())
    }

    /// etcd's `checkLeasePuts`: every key attached to the lease must be writable.
    fn lease_keys_permitted(
        &self,
        ai: &AuthInfo,
        lessor: &Lessor,
        id: i64,
    ) -> Result<(), StoreError> {
        if let Some(l) = lessor.get(LeaseId(id)) {
            for k in &l.keys {
                self.op_permitted(ai, Need::Write, k, &[])?;
            }
        }
        Ok(())
    }

    fn commit_revision(&mut self, batch: &mut WriteBatch) {
        self.revision += 1;
        batch.put(
            Space::Meta,
            meta_key(META_AUTH_PREFIX, REVISION_KEY),
            self.revision.to_be_bytes().to_vec(),
        );
    }

    fn put_user(&mut self, u: User, batch: &mut WriteBatch) {
        batch.put(
            Space::Meta,
            meta_key(META_USERS_PREFIX, &u.name),
            u.encode_to_vec(),
        );
        self.users
            .insert(String::from_utf8_lossy(&u.name).into_owned(), u);
    }

    fn put_role(&mut self, r: Role, batch: &mut WriteBatch) {
        batch.put(
            Space::Meta,
            meta_key(META_ROLES_PREFIX, &r.name),
            r.encode_to_vec(),
        );
        self.roles
            .insert(String::from_utf8_lossy(&r.name).into_owned(), r);
    }
}

/// The auth store of one member: replicated state plus this member's tokens.
#[derive(Debug)]
pub struct AuthStore {
    /// Mirrors `state.enabled` so the disabled path takes no lock.
    enabled: AtomicBool,
    state: RwLock<AuthState>,
    tokens: SimpleTokens,
}

impl AuthStore {
    /// Loads the persisted auth state from the backend's Meta space.
    pub(crate) fn load(backend: &dyn Backend, token_ttl: Duration) -> Result<Self, StoreError> {
        let st = load_state(backend)?;
        Ok(AuthStore {
            enabled: AtomicBool::new(st.enabled),
            state: RwLock::new(st),
            tokens: SimpleTokens::new(token_ttl),
        })
    }

    /// Replaces the state with the backend's (after a snapshot was installed).
    pub(crate) fn reload(&self, backend: &dyn Backend) -> Result<(), StoreError> {
        let st = load_state(backend)?;
        let mut cur = self.state.write();
        self.enabled.store(st.enabled, Ordering::Release);
        if !st.enabled {
            self.tokens.clear();
        }
        *cur = st;
        Ok(())
    }

    /// True while auth is enabled (one atomic load).
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// The auth revision.
    pub fn revision(&self) -> u64 {
        self.state.read().revision
    }

    /// The identity a token stands for, with the current auth revision, or `None` if this
    /// member does not know the token (never issued, expired, or its user changed).
    pub fn info_from_token(&self, token: &str) -> Option<AuthInfo> {
        let username = self.tokens.user(token)?;
        Some(AuthInfo {
            username,
            revision: self.revision(),
        })
    }

    /// The first half of etcd's `CheckPassword`: the stored bcrypt hash of `name` and the auth
    /// revision it was read at. The caller compares the password off the async runtime.
    pub fn password_hash(&self, name: &str) -> Result<(Vec<u8>, u64), StoreError> {
        let st = self.state.read();
        if !st.enabled {
            return Err(StoreError::AuthNotEnabled);
        }
        let u = st.users.get(name).ok_or(StoreError::AuthFailed)?;
        if u.options.as_ref().is_some_and(|o| o.no_password) {
            return Err(StoreError::NoPasswordUser);
        }
        Ok((u.password.to_vec(), st.revision))
    }

    /// etcd's `IsRangePermitted`.
    pub fn range_permitted(
        &self,
        ai: &AuthInfo,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), StoreError> {
        if !self.is_enabled() {
            return Ok(());
        }
        self.state
            .read()
            .op_permitted(ai, Need::Read, key, range_end)
    }

    /// etcd's `checkTxnAuth` (for read-only Txns served without the log).
    pub fn txn_permitted(&self, ai: &AuthInfo, t: &pb::TxnRequest) -> Result<(), StoreError> {
        if !self.is_enabled() {
            return Ok(());
        }
        self.state.read().txn_permitted(ai, t)
    }

    /// etcd's `IsAdminPermitted` (`None` = no token).
    pub fn admin_permitted(&self, ai: Option<&AuthInfo>) -> Result<(), StoreError> {
        if !self.is_enabled() {
            return Ok(());
        }
        self.state.read().admin_permitted(ai)
    }

    /// The permission check of an [`AuthedCommand`] when it is applied (etcd's authApplier).
    pub(crate) fn check_authed(
        &self,
        ai: &AuthInfo,
        kind: &CommandKind,
        lessor: &Lessor,
    ) -> Result<(), StoreError> {
        let st = self.state.read();
        if !st.enabled {
            return Ok(());
        }
        match kind {
            CommandKind::Put(p) => {
                st.op_permitted(ai, Need::Write, &p.key, &[])?;
                st.lease_keys_permitted(ai, lessor, p.lease)?;
                if p.prev_kv {
                    st.op_permitted(ai, Need::Read, &p.key, &[])?;
                }
                Ok(())
            }
            CommandKind::DeleteRange(d) => {
                st.op_permitted(ai, Need::Write, &d.key, &d.range_end)?;
                if d.prev_kv {
                    st.op_permitted(ai, Need::Read, &d.key, &d.range_end)?;
                }
                Ok(())
            }
            CommandKind::Txn(t) => st.txn_permitted(ai, t),
            CommandKind::LeaseRevoke(r) => st.lease_keys_permitted(ai, lessor, r.id),
            // etcd 3.4 checks neither compactions, lease grants nor alarms.
            CommandKind::Compaction(_) | CommandKind::LeaseGrant(_) | CommandKind::Alarm(_) => {
                Ok(())
            }
            CommandKind::Batch(_) | CommandKind::Auth(_) | CommandKind::Authed(_) => Err(
                StoreError::Corrupt("batch or auth command inside an authed command".into()),
            ),
        }
    }

    /// Entries of buckets `auth`, `authUsers` and `authRoles` as etcd would hold them.
    pub(crate) fn export_buckets(&self) -> AuthBuckets {
        let st = self.state.read();
        let mut auth = vec![(REVISION_KEY.to_vec(), st.revision.to_be_bytes().to_vec())];
        if st.flag_written {
            auth.push((ENABLED_KEY.to_vec(), vec![u8::from(st.enabled)]));
        }
        AuthBuckets {
            auth,
            users: st
                .users
                .values()
                .map(|u| (u.name.to_vec(), u.encode_to_vec()))
                .collect(),
            roles: st
                .roles
                .values()
                .map(|r| (r.name.to_vec(), r.encode_to_vec()))
                .collect(),
        }
    }

    /// Applies an auth command (etcd's applier plus its authApplier checks). State changes
    /// only on success; persistence goes to `batch`; `revision` is the store's, for headers.
    pub(crate) fn apply(
        &self,
        cmd: AuthCommand,
        revision: i64,
        batch: &mut WriteBatch,
    ) -> Result<AuthResult, StoreError> {
        let mut st = self.state.write();
        let ai = AuthInfo {
            username: cmd.username,
            revision: cmd.auth_revision,
        };
        let ai_opt = (!ai.username.is_empty()).then_some(&ai);
        let op = cmd
            .op
            .ok_or_else(|| StoreError::Corrupt("auth command without an operation".into()))?;
        match &op {
            AuthOp::Authenticate(_) => {}
            AuthOp::UserGet(r) => {
                if r.name != ai.username {
                    st.admin_permitted(ai_opt)?;
                }
            }
            AuthOp::RoleGet(r) => {
                if let Err(e) = st.admin_permitted(ai_opt) {
                    let holds = st
                        .users
                        .get(&ai.username)
                        .is_some_and(|u| u.roles.contains(&r.role));
                    if !holds {
                        return Err(e);
                    }
                }
            }
            _ => st.admin_permitted(ai_opt)?,
        }
        let h = header(revision);
        use AuthResultKind as K;
        let kind = match op {
            AuthOp::Enable(_) => {
                if !st.enabled {
                    let root = st.users.get(ROOT).ok_or(StoreError::RootUserNotExist)?;
                    if !has_root_role(root) {
                        return Err(StoreError::RootRoleNotExist);
                    }
                    st.enabled = true;
                    st.flag_written = true;
                    batch.put(
                        Space::Meta,
                        meta_key(META_AUTH_PREFIX, ENABLED_KEY),
                        vec![1],
                    );
                    self.enabled.store(true, Ordering::Release);
                }
                K::Enable(pb::AuthEnableResponse { header: h })
            }
            AuthOp::Disable(_) => {
                if st.enabled {
                    st.enabled = false;
                    st.flag_written = true;
                    batch.put(
                        Space::Meta,
                        meta_key(META_AUTH_PREFIX, ENABLED_KEY),
                        vec![0],
                    );
                    st.commit_revision(batch);
                    self.enabled.store(false, Ordering::Release);
                    self.tokens.clear();
                }
                K::Disable(pb::AuthDisableResponse { header: h })
            }
            AuthOp::Authenticate(a) => {
                if !st.enabled {
                    return Err(StoreError::AuthNotEnabled);
                }
                let u = st.users.get(&a.name).ok_or(StoreError::AuthFailed)?;
                if u.options.as_ref().is_some_and(|o| o.no_password) {
                    return Err(StoreError::AuthFailed);
                }
                let token = format!("{}.{}", a.prefix, a.index);
                self.tokens.assign(token.clone(), a.name);
                K::Authenticate(pb::AuthenticateResponse { header: h, token })
            }
            AuthOp::UserAdd(r) => {
                if r.name.is_empty() {
                    return Err(StoreError::UserEmpty);
                }
                if st.users.contains_key(&r.name) {
                    return Err(StoreError::UserAlreadyExist);
                }
                let u = User {
                    name: r.name.into_bytes().into(),
                    password: r.hash.into(),
                    roles: Vec::new(),
                    options: Some(r.options.unwrap_or_default()),
                };
                st.put_user(u, batch);
                st.commit_revision(batch);
                K::UserAdd(pb::AuthUserAddResponse { header: h })
            }
            AuthOp::UserGet(r) => {
                let u = st.users.get(&r.name).ok_or(StoreError::UserNotFound)?;
                K::UserGet(pb::AuthUserGetResponse {
                    header: h,
                    roles: u.roles.clone(),
                })
            }
            AuthOp::UserList(_) => K::UserList(pb::AuthUserListResponse {
                header: h,
                users: st.users.keys().cloned().collect(),
            }),
            AuthOp::UserDelete(r) => {
                if st.enabled && r.name == ROOT {
                    return Err(StoreError::InvalidAuthMgmt);
                }
                if st.users.remove(&r.name).is_none() {
                    return Err(StoreError::UserNotFound);
                }
                batch.delete(Space::Meta, meta_key(META_USERS_PREFIX, r.name.as_bytes()));
                st.commit_revision(batch);
                self.tokens.invalidate_user(&r.name);
                K::UserDelete(pb::AuthUserDeleteResponse { header: h })
            }
            AuthOp::UserChangePassword(r) => {
                let mut u = st
                    .users
                    .get(&r.name)
                    .cloned()
                    .ok_or(StoreError::UserNotFound)?;
                u.password = r.hash.into();
                st.put_user(u, batch);
                st.commit_revision(batch);
                self.tokens.invalidate_user(&r.name);
                K::UserChangePassword(pb::AuthUserChangePasswordResponse { header: h })
            }
            AuthOp::UserGrantRole(r) => {
                let mut u = st
                    .users
                    .get(&r.user)
                    .cloned()
                    .ok_or(StoreError::UserNotFound)?;
                if r.role != ROOT && !st.roles.contains_key(&r.role) {
                    return Err(StoreError::RoleNotFound);
                }
                if let Err(at) = u.roles.binary_search(&r.role) {
                    u.roles.insert(at, r.role);
                    st.put_user(u, batch);
                    st.commit_revision(batch);
                }
                K::UserGrantRole(pb::AuthUserGrantRoleResponse { header: h })
            }
            AuthOp::UserRevokeRole(r) => {
                if st.enabled && r.name == ROOT && r.role == ROOT {
                    return Err(StoreError::InvalidAuthMgmt);
                }
                let mut u = st
                    .users
                    .get(&r.name)
                    .cloned()
                    .ok_or(StoreError::UserNotFound)?;
                let before = u.roles.len();
                u.roles.retain(|x| *x != r.role);
                if u.roles.len() == before {
                    return Err(StoreError::RoleNotGranted);
                }
                st.put_user(u, batch);
                st.commit_revision(batch);
                K::UserRevokeRole(pb::AuthUserRevokeRoleResponse { header: h })
            }
            AuthOp::RoleAdd(r) => {
                if r.name.is_empty() {
                    return Err(StoreError::RoleEmpty);
                }
                if st.roles.contains_key(&r.name) {
                    return Err(StoreError::RoleAlreadyExist);
                }
                st.put_role(
                    Role {
                        name: r.name.into_bytes().into(),
                        key_permission: Vec::new(),
                    },
                    batch,
                );
                st.commit_revision(batch);
                K::RoleAdd(pb::AuthRoleAddResponse { header: h })
            }
            AuthOp::RoleGet(r) => {
                let role = st.roles.get(&r.role).ok_or(StoreError::RoleNotFound)?;
                K::RoleGet(pb::AuthRoleGetResponse {
                    header: h,
                    perm: role.key_permission.clone(),
                })
            }
            AuthOp::RoleList(_) => K::RoleList(pb::AuthRoleListResponse {
                header: h,
                roles: st.roles.keys().cloned().collect(),
            }),
            AuthOp::RoleDelete(r) => {
                if st.enabled && r.role == ROOT {
                    return Err(StoreError::InvalidAuthMgmt);
                }
                if st.roles.remove(&r.role).is_none() {
                    return Err(StoreError::RoleNotFound);
                }
                batch.delete(Space::Meta, meta_key(META_ROLES_PREFIX, r.role.as_bytes()));
                let holders: Vec<User> = st
                    .users
                    .values()
                    .filter(|u| u.roles.contains(&r.role))
                    .cloned()
                    .collect();
                for mut u in holders {
                    u.roles.retain(|x| *x != r.role);
                    st.put_user(u, batch);
                }
                st.commit_revision(batch);
                K::RoleDelete(pb::AuthRoleDeleteResponse { header: h })
            }
            AuthOp::RoleGrantPermission(r) => {
                let perm = r.perm.ok_or(StoreError::PermissionNotGiven)?;
                let mut role = st
                    .roles
                    .get(&r.name)
                    .cloned()
                    .ok_or(StoreError::RoleNotFound)?;
                let at = role
                    .key_permission
                    .partition_point(|p| p.key[..] < perm.key[..]);
                match role.key_permission.get_mut(at) {
                    Some(p) if p.key == perm.key && p.range_end == perm.range_end => {
                        p.perm_type = perm.perm_type;
                    }
                    _ => {
                        role.key_permission.push(Permission {
                            perm_type: perm.perm_type,
                            key: perm.key,
                            range_end: perm.range_end,
                        });
                        role.key_permission.sort_by(|a, b| a.key.cmp(&b.key));
                    }
                }
                st.put_role(role, batch);
                st.commit_revision(batch);
                K::RoleGrantPermission(pb::AuthRoleGrantPermissionResponse { header: h })
            }
            AuthOp::RoleRevokePermission(r) => {
                let mut role = st
                    .roles
                    .get(&r.role)
                    .cloned()
                    .ok_or(StoreError::RoleNotFound)?;
                let before = role.key_permission.len();
                role.key_permission
                    .retain(|p| p.key != r.key || p.range_end != r.range_end);
                if role.key_permission.len() == before {
                    return Err(StoreError::PermissionNotGranted);
                }
                st.put_role(role, batch);
                st.commit_revision(batch);
                K::RoleRevokePermission(pb::AuthRoleRevokePermissionResponse { header: h })
            }
        };
        st.rebuild_perms();
        Ok(AuthResult { kind: Some(kind) })
    }
}

/// The raw entries of etcd's three auth buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AuthBuckets {
    pub auth: Vec<Pair>,
    pub users: Vec<Pair>,
    pub roles: Vec<Pair>,
}

/// Where an etcd auth bucket's entries live in the Meta space.
pub(crate) fn bucket_prefix(bucket: &[u8]) -> Option<&'static [u8]> {
    match bucket {
        b"auth" => Some(META_AUTH_PREFIX),
        b"authUsers" => Some(META_USERS_PREFIX),
        b"authRoles" => Some(META_ROLES_PREFIX),
        _ => None,
    }
}

/// Checks one entry of an etcd auth bucket before it is imported; returns the Meta key.
pub(crate) fn import_key(bucket: &[u8], key: &[u8], value: &[u8]) -> Result<Vec<u8>, String> {
    let prefix = bucket_prefix(bucket).ok_or("not an auth bucket")?;
    match bucket {
        b"authUsers" => {
            User::decode(value).map_err(|e| format!("value is not an authpb.User: {e}"))?;
        }
        b"authRoles" => {
            Role::decode(value).map_err(|e| format!("value is not an authpb.Role: {e}"))?;
        }
        _ => {}
    }
    Ok(meta_key(prefix, key))
}

fn scan_prefix(backend: &dyn Backend, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
    let end = prefix_end(prefix);
    backend
        .scan(Space::Meta, prefix, Some(&end))
        .map(|r| r.map(|(k, v)| (k[prefix.len()..].to_vec(), v)))
        .collect()
}

fn load_state(backend: &dyn Backend) -> Result<AuthState, StoreError> {
    let mut st = AuthState::default();
    for (k, v) in scan_prefix(backend, META_AUTH_PREFIX)? {
        match k.as_slice() {
            ENABLED_KEY => {
                st.enabled = v.as_slice() == [1];
                st.flag_written = true;
            }
            REVISION_KEY => {
                let b: [u8; 8] = v.as_slice().try_into().map_err(|_| {
                    StoreError::Corrupt(format!("auth revision has {} bytes", v.len()))
                })?;
                st.revision = u64::from_be_bytes(b);
            }
            _ => {}
        }
    }
    for (_, v) in scan_prefix(backend, META_USERS_PREFIX)? {
        let u = User::decode(v.as_slice())?;
        st.users
            .insert(String::from_utf8_lossy(&u.name).into_owned(), u);
    }
    for (_, v) in scan_prefix(backend, META_ROLES_PREFIX)? {
        let r = Role::decode(v.as_slice())?;
        st.roles
            .insert(String::from_utf8_lossy(&r.name).into_owned(), r);
    }
    st.rebuild_perms();
    Ok(st)
}

#[cfg(test)]
mod tests;
