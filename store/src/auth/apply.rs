//! Applying auth commands, in log order on every member: etcd's auth applier (who may run
//! what) followed by the auth store's own rules, with persistence queued in the apply batch.

use std::sync::atomic::Ordering;

use super::persist::{
    meta_key, ENABLED_KEY, META_AUTH_PREFIX, META_ROLES_PREFIX, META_USERS_PREFIX,
};
use super::{
    has_root_role, AuthCommand, AuthInfo, AuthOp, AuthResult, AuthResultKind, AuthStore, ROOT,
};
use crate::backend::{Space, WriteBatch};
use crate::error::StoreError;
use crate::mvcc::kv::header;
use crate::pb::authpb::{Permission, Role, User};
use crate::pb::etcdserverpb as pb;

impl AuthStore {
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
