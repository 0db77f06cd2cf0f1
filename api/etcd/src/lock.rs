//! etcd's lock service (`v3lockpb.Lock`): a mutex over a key prefix held by the waiter whose key
//! was created first (see `recipes.rs`).

use std::sync::Arc;

use bytes::Bytes;
use keel_raft::node::Node;
use tonic::{Request, Response, Status};

use super::recipes::{keys, range_at, CleanupGuard, Recipes};
use super::v3lockpb::lock_server::Lock;
use super::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};

/// etcd 3.5's answer when the waiter's own key is gone by the time the keys before it are
/// (its lease expired while it waited); etcd 3.4 answered success there (its issue 11456).
const SESSION_EXPIRED: &str = "mutex: session is expired";

/// Serves `Lock` and `Unlock` from a member.
pub struct LockService {
    recipes: Arc<Recipes>,
}

impl LockService {
    /// A lock service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        LockService {
            recipes: Recipes::new(node),
        }
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn lock(&self, req: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let lease = self.recipes.session_lease(&md, r.lease).await?;
        let (prefix, key) = keys(&r.name, lease);
        let entered = self
            .recipes
            .enter(&md, &prefix, &key, lease, Bytes::new(), true)
            .await?;
        let owner = range_at(&entered.txn, 1).and_then(|o| o.kvs.first());
        if owner.is_none_or(|o| o.create_revision == entered.rev) {
            return Ok(Response::new(LockResponse {
                header: entered.txn.header,
                key,
            }));
        }
        // Removed again if the client gives up while waiting.
        let mut guard = CleanupGuard::new(self.recipes.clone(), &md, key.clone());
        let waited = self
            .recipes
            .wait_deletes(&md, &prefix, entered.rev - 1)
            .await;
        guard.disarm();
        if let Err(e) = waited {
            let _ = self.recipes.delete(&md, key).await;
            return Err(e);
        }
        // The holder's keys are gone; ours must still be there (not deleted with its lease).
        let mine = match self
            .recipes
            .range(
                &md,
                keel_store::pb::etcdserverpb::RangeRequest {
                    key: key.clone(),
                    ..Default::default()
                },
            )
            .await
        {
            Ok(m) => m,
            Err(e) => {
                let _ = self.recipes.delete(&md, key).await;
                return Err(e);
            }
        };
        if mine.kvs.is_empty() {
            return Err(Status::unknown(SESSION_EXPIRED));
        }
        Ok(Response::new(LockResponse {
            header: mine.header,
            key,
        }))
    }

    async fn unlock(
        &self,
        req: Request<UnlockRequest>,
    ) -> Result<Response<UnlockResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let d = self.recipes.delete(&md, r.key).await?;
        Ok(Response::new(UnlockResponse { header: d.header }))
    }
}
