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

mod apply;
pub mod command;
pub mod perms;
mod persist;
pub mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use prost::Message;

use crate::backend::{Backend, Space, WriteBatch};
use crate::command::CommandKind;
use crate::error::StoreError;
use crate::lease::{LeaseId, Lessor};
use crate::pb::authpb::{Role, User};
use crate::pb::etcdserverpb as pb;
pub use command::{
    stamp_log_index, AuthCommand, AuthOp, AuthResult, AuthResultKind, AuthedCommand,
    AuthenticateOp, ChangePasswordOp, UserAddOp,
};
use perms::{Need, UserPerms};
pub(crate) use persist::{import_key, AuthBuckets};
use persist::{load_state, meta_key, ENABLED_KEY, REVISION_KEY};
pub(crate) use persist::{META_AUTH_PREFIX, META_ROLES_PREFIX, META_USERS_PREFIX};
use tokens::SimpleTokens;

/// The user and the role that may do everything.
pub const ROOT: &str = "root";

/// Who sent a request, as far as auth is concerned: the token's user and the auth revision
/// when the token was looked up (0 = no user).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthInfo {
    pub username: String,
    pub revision: u64,
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
}

#[cfg(test)]
mod tests;
