//! The log entries of the auth store: the Auth service's operations as applied, the wrapper
//! that carries a client's identity with a key-space write, and the results.

use crate::command::{Command, CommandKind};
use crate::pb::authpb::UserAddOptions;
use crate::pb::etcdserverpb as pb;

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
