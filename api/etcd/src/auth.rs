//! The Auth service (etcd 3.4's `etcdserver/api/v3rpc/auth.go` and the auth half of
//! `v3_server.go`), and [`AuthGate`], which the other services use to learn who is calling.
//!
//! Every Auth RPC goes through the log as an auth command carrying the caller's identity,
//! as in etcd (reads of users and roles too, so they are linearizable). Passwords are checked
//! and hashed here, off the async runtime (bcrypt is slow on purpose), never in the apply.

use std::sync::Arc;

use keel_raft::node::Node;
use keel_store::auth::{
    tokens::token_index, AuthCommand, AuthInfo, AuthOp, AuthResultKind, AuthStore, AuthedCommand,
    AuthenticateOp, ChangePasswordOp, UserAddOp,
};
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::*;
use keel_store::{Command, CommandResponse, StoreError};
use rand::Rng;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::error::{propose_status, store_status};
use super::header::HeaderSource;
use super::pb::auth_server::Auth;

/// etcd's bcrypt cost (`--bcrypt-cost` default, Go's `bcrypt.DefaultCost`).
pub const BCRYPT_COST: u32 = 10;
/// Length of a simple token's random part.
const TOKEN_PREFIX_LEN: usize = 16;

/// Finds the caller's identity for a request and checks it, as etcd's `AuthInfoFromCtx` and
/// permission checks do. While auth is disabled and the request carries no token, every
/// method returns at once after one atomic load.
#[derive(Clone)]
pub struct AuthGate {
    node: Arc<Node>,
}

/// The token a request carries (gRPC metadata `token`; `authorization` from the gateway).
fn token_of(md: &MetadataMap) -> Option<&str> {
    md.get("token")
        .or_else(|| md.get("authorization"))
        .and_then(|v| v.to_str().ok())
}

impl AuthGate {
    /// A gate over `node`'s auth store.
    pub fn new(node: Arc<Node>) -> Self {
        AuthGate { node }
    }

    fn store(&self) -> &AuthStore {
        self.node.store().auth()
    }

    /// True when nothing needs checking: auth disabled and no token sent.
    pub fn idle(&self, md: &MetadataMap) -> bool {
        !self.store().is_enabled() && token_of(md).is_none()
    }

    /// The caller's identity (`None` without a token); an unknown token is refused with
    /// "invalid auth token". A token this member has not learnt yet (its Authenticate entry is
    /// committed but not applied here) is looked up again after catching up with the leader,
    /// as etcd waits for the token's index.
    pub async fn info(&self, md: &MetadataMap) -> Result<Option<AuthInfo>, Status> {
        let Some(token) = token_of(md) else {
            return Ok(None);
        };
        if let Some(ai) = self.store().info_from_token(token) {
            return Ok(Some(ai));
        }
        if token_index(token).is_some() && self.node.read_barrier().await.is_ok() {
            if let Some(ai) = self.store().info_from_token(token) {
                return Ok(Some(ai));
            }
        }
        Err(store_status(&StoreError::InvalidAuthToken))
    }

    /// etcd's `doSerialize` first half: the caller's identity, checked by `chk` (no user = an
    /// empty identity). `None` when the gate is idle.
    pub async fn check_read(
        &self,
        md: &MetadataMap,
        chk: impl FnOnce(&AuthStore, &AuthInfo) -> Result<(), StoreError>,
    ) -> Result<Option<AuthInfo>, Status> {
        if self.idle(md) {
            return Ok(None);
        }
        let ai = self.info(md).await?.unwrap_or_default();
        chk(self.store(), &ai).map_err(|e| store_status(&e))?;
        Ok(Some(ai))
    }

    /// etcd's `doSerialize` second half: a read served while the auth store changed is
    /// refused, so a revoked permission never leaks data.
    pub fn recheck(&self, ai: Option<AuthInfo>) -> Result<(), Status> {
        match ai {
            Some(ai) if ai.revision != 0 && ai.revision != self.store().revision() => {
                Err(store_status(&StoreError::AuthOldRevision))
            }
            _ => Ok(()),
        }
    }

    /// A write from this port: unchanged while the gate is idle, otherwise wrapped with the
    /// caller's identity for the check at apply time.
    pub async fn wrap(&self, md: &MetadataMap, kind: CommandKind) -> Result<CommandKind, Status> {
        if self.idle(md) {
            return Ok(kind);
        }
        let ai = self.info(md).await?.unwrap_or_default();
        Ok(CommandKind::Authed(AuthedCommand {
            username: ai.username,
            auth_revision: ai.revision,
            command: Some(Box::new(Command::new(kind))),
        }))
    }

    /// etcd's admin check of the Maintenance service (Snapshot, Defragment, Hash, HashKV).
    /// etcd 3.4 returns the auth package's errors there unconverted, so clients see gRPC code
    /// Unknown with the package's own texts; so do keel's.
    pub async fn check_admin(&self, md: &MetadataMap) -> Result<(), Status> {
        if self.idle(md) {
            return Ok(());
        }
        let ai = match self.info(md).await {
            Ok(ai) => ai,
            Err(_) => return Err(Status::unknown("auth: invalid auth token")),
        };
        self.store()
            .admin_permitted(ai.as_ref())
            .map_err(|e| Status::unknown(auth_package_text(&e)))
    }
}

/// The text etcd's auth package gives an error before the gRPC layer converts it.
fn auth_package_text(e: &StoreError) -> String {
    match e {
        StoreError::UserEmpty => "auth: user name is empty".into(),
        StoreError::UserNotFound => "auth: user not found".into(),
        StoreError::PermissionDenied => "auth: permission denied".into(),
        other => other.to_string(),
    }
}

/// The `etcdserverpb.Auth` gRPC service.
pub struct AuthService {
    node: Arc<Node>,
    gate: AuthGate,
    hdr: HeaderSource,
}

fn random_prefix() -> String {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut rng = rand::thread_rng();
    (0..TOKEN_PREFIX_LEN)
        .map(|_| LETTERS[rng.gen_range(0..LETTERS.len())] as char)
        .collect()
}

/// Hashes a password off the runtime, in the `$2a$` form etcd's Go bcrypt writes.
async fn hash_password(password: String) -> Result<Vec<u8>, Status> {
    tokio::task::spawn_blocking(move || {
        bcrypt::hash_with_result(password, BCRYPT_COST)
            .map(|h| h.format_for_version(bcrypt::Version::TwoA).into_bytes())
    })
    .await
    .map_err(|e| Status::internal(format!("keel: password hashing: {e}")))?
    .map_err(|e| Status::internal(format!("keel: password hashing: {e}")))
}

/// Compares a password with a stored hash off the runtime; a malformed hash never matches.
async fn password_matches(password: String, hash: Vec<u8>) -> Result<bool, Status> {
    tokio::task::spawn_blocking(move || {
        std::str::from_utf8(&hash)
            .ok()
            .and_then(|h| bcrypt::verify(password, h).ok())
            .unwrap_or(false)
    })
    .await
    .map_err(|e| Status::internal(format!("keel: password check: {e}")))
}

macro_rules! answer {
    ($self:ident, $req:ident, $op:expr, $kind:ident) => {{
        let md = $req.metadata().clone();
        let op = $op;
        match $self.run(&md, op).await? {
            AuthResultKind::$kind(mut r) => {
                r.header = $self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            other => Err(Status::internal(format!(
                "keel: unexpected auth result {other:?}"
            ))),
        }
    }};
}

impl AuthService {
    /// An Auth service for `node`.
    pub fn new(node: Arc<Node>) -> Self {
        AuthService {
            gate: AuthGate::new(node.clone()),
            hdr: HeaderSource::new(node.clone()),
            node,
        }
    }

    /// Proposes an auth operation with the caller's identity and returns its result.
    async fn run(&self, md: &MetadataMap, op: AuthOp) -> Result<AuthResultKind, Status> {
        let ai = self.gate.info(md).await?.unwrap_or_default();
        let cmd = Command::new(CommandKind::Auth(AuthCommand {
            username: ai.username,
            auth_revision: ai.revision,
            op: Some(op),
        }));
        match self.node.propose(cmd).await {
            Ok(CommandResponse::Auth(r)) => r
                .kind
                .ok_or_else(|| Status::internal("keel: empty auth result")),
            Ok(other) => Err(Status::internal(format!(
                "keel: unexpected apply result {other:?}"
            ))),
            Err(e) => Err(propose_status(&e)),
        }
    }
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        req: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        answer!(self, req, AuthOp::Enable(AuthEnableRequest {}), Enable)
    }

    async fn auth_disable(
        &self,
        req: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        answer!(self, req, AuthOp::Disable(AuthDisableRequest {}), Disable)
    }

    async fn authenticate(
        &self,
        req: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let r = req.into_inner();
        self.node
            .read_barrier()
            .await
            .map_err(|e| propose_status(&e))?;
        let auth = self.node.store().auth();
        // As etcd: if the auth store changed while the password was being checked, check again.
        loop {
            let (hash, checked_at) = auth.password_hash(&r.name).map_err(|e| store_status(&e))?;
            if !password_matches(r.password.clone(), hash).await? {
                return Err(store_status(&StoreError::AuthFailed));
            }
            let op = AuthOp::Authenticate(AuthenticateOp {
                name: r.name.clone(),
                prefix: random_prefix(),
                index: 0,
            });
            let res = self.run(&MetadataMap::new(), op).await;
            if checked_at != auth.revision() {
                continue;
            }
            return match res? {
                AuthResultKind::Authenticate(mut a) => {
                    a.header = self.hdr.fill(a.header);
                    Ok(Response::new(a))
                }
                other => Err(Status::internal(format!(
                    "keel: unexpected auth result {other:?}"
                ))),
            };
        }
    }

    async fn user_add(
        &self,
        req: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        let r = req.get_ref().clone();
        let no_password = r.options.as_ref().is_some_and(|o| o.no_password);
        let hash = if no_password || r.name.is_empty() {
            Vec::new()
        } else {
            hash_password(r.password).await?
        };
        let op = AuthOp::UserAdd(UserAddOp {
            name: r.name,
            hash,
            options: r.options,
        });
        answer!(self, req, op, UserAdd)
    }

    async fn user_get(
        &self,
        req: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        let op = AuthOp::UserGet(req.get_ref().clone());
        answer!(self, req, op, UserGet)
    }

    async fn user_list(
        &self,
        req: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        answer!(
            self,
            req,
            AuthOp::UserList(AuthUserListRequest {}),
            UserList
        )
    }

    async fn user_delete(
        &self,
        req: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        let op = AuthOp::UserDelete(req.get_ref().clone());
        answer!(self, req, op, UserDelete)
    }

    async fn user_change_password(
        &self,
        req: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        let r = req.get_ref().clone();
        let op = AuthOp::UserChangePassword(ChangePasswordOp {
            hash: hash_password(r.password).await?,
            name: r.name,
        });
        answer!(self, req, op, UserChangePassword)
    }

    async fn user_grant_role(
        &self,
        req: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        let op = AuthOp::UserGrantRole(req.get_ref().clone());
        answer!(self, req, op, UserGrantRole)
    }

    async fn user_revoke_role(
        &self,
        req: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        let op = AuthOp::UserRevokeRole(req.get_ref().clone());
        answer!(self, req, op, UserRevokeRole)
    }

    async fn role_add(
        &self,
        req: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        let op = AuthOp::RoleAdd(req.get_ref().clone());
        answer!(self, req, op, RoleAdd)
    }

    async fn role_get(
        &self,
        req: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        let op = AuthOp::RoleGet(req.get_ref().clone());
        answer!(self, req, op, RoleGet)
    }

    async fn role_list(
        &self,
        req: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        answer!(
            self,
            req,
            AuthOp::RoleList(AuthRoleListRequest {}),
            RoleList
        )
    }

    async fn role_delete(
        &self,
        req: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        let op = AuthOp::RoleDelete(req.get_ref().clone());
        answer!(self, req, op, RoleDelete)
    }

    async fn role_grant_permission(
        &self,
        req: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        let op = AuthOp::RoleGrantPermission(req.get_ref().clone());
        answer!(self, req, op, RoleGrantPermission)
    }

    async fn role_revoke_permission(
        &self,
        req: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        let op = AuthOp::RoleRevokePermission(req.get_ref().clone());
        answer!(self, req, op, RoleRevokePermission)
    }
}
