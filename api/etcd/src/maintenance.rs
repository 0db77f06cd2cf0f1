//! The Maintenance service: status, alarms, hashes, leader moves, defragment.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_raft::node::Node;
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{
    alarm_request, AlarmMember, AlarmRequest, AlarmResponse, AlarmType, DefragmentRequest,
    DefragmentResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse,
    MoveLeaderRequest, MoveLeaderResponse, SnapshotRequest, SnapshotResponse, StatusRequest,
    StatusResponse,
};
use keel_store::{Command, CommandResponse};
use tonic::{Request, Response, Status};

use super::error::{propose_status, store_status};
use super::header::HeaderSource;
use super::pb::maintenance_server::Maintenance;
use super::ETCD_VERSION;

/// Serves the Maintenance service from a member.
pub struct MaintenanceService {
    node: Arc<Node>,
    hdr: HeaderSource,
    gate: crate::auth::AuthGate,
}

impl MaintenanceService {
    /// A Maintenance service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        MaintenanceService {
            hdr: HeaderSource::new(node.clone()),
            gate: crate::auth::AuthGate::new(node.clone()),
            node,
        }
    }

    fn header(&self) -> Option<keel_store::pb::etcdserverpb::ResponseHeader> {
        Some(self.hdr.header(self.node.store().revision()))
    }
}

/// An alarm as etcd prints it (protobuf compact text: zero fields left out, a space after
/// each field), in Status `errors` and in `etcdctl alarm list`.
pub fn alarm_text(m: &AlarmMember) -> String {
    let mut s = String::new();
    if m.member_id != 0 {
        s.push_str(&format!("memberID:{} ", m.member_id));
    }
    if m.alarm != 0 {
        match AlarmType::try_from(m.alarm) {
            Ok(t) => s.push_str(&format!("alarm:{} ", t.as_str_name())),
            Err(_) => s.push_str(&format!("alarm:{} ", m.alarm)),
        }
    }
    s
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, req: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        let r = req.into_inner();
        if alarm_request::AlarmAction::try_from(r.action).is_err() {
            return Err(Status::invalid_argument("etcdserver: unknown alarm action"));
        }
        // As etcd, every action (GET too) goes through the log, so the answer is the
        // cluster's, in order with the writes before it. The member ID is taken as given: 0
        // names no member and is not expanded (etcd's client expands a disarm of everything).
        // etcd answers alarm requests without a header.
        match self
            .node
            .propose(Command::new(CommandKind::Alarm(r)))
            .await
            .map_err(|e| propose_status(&e))?
        {
            CommandResponse::Alarm(r) => Ok(Response::new(r)),
            other => Err(Status::internal(format!(
                "keel: unexpected apply result {other:?}"
            ))),
        }
    }

    async fn status(
        &self,
        _req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let st = self.node.status();
        let db = self.node.store().db_size() as i64;
        let mut errors = Vec::new();
        if st.leader.is_none() {
            errors.push("etcdserver: no leader".to_string());
        }
        errors.extend(self.node.store().alarms().iter().map(alarm_text));
        Ok(Response::new(StatusResponse {
            header: self.header(),
            version: ETCD_VERSION.to_string(),
            db_size: db,
            leader: st.leader.unwrap_or(0),
            raft_index: st.last_log_index,
            raft_term: st.term,
            raft_applied_index: st.applied_index,
            errors,
            db_size_in_use: db,
            is_learner: st.is_learner,
        }))
    }

    async fn defragment(
        &self,
        req: Request<DefragmentRequest>,
    ) -> Result<Response<DefragmentResponse>, Status> {
        // As etcd 3.4: Defragment, Hash, HashKV and Snapshot need the root role when auth is on.
        self.gate.check_admin(req.metadata()).await?;
        // The backend reclaims space on its own, eventually; defragment makes it happen now
        // (memtable flushed, tables rewritten without deleted entries, journal released) and
        // fsyncs, so that `compact` + `defrag` shrinks the store as on etcd.
        let store = self.node.store().clone();
        tokio::task::spawn_blocking(move || store.defragment())
            .await
            .map_err(|e| Status::internal(format!("keel: defragment task failed: {e}")))?
            .map_err(|e| store_status(&e))?;
        // etcd 3.4 answers Defragment without a header.
        Ok(Response::new(DefragmentResponse { header: None }))
    }

    async fn hash(&self, req: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        self.gate.check_admin(req.metadata()).await?;
        let (hash, _, _) = self.node.store().hash_kv(0).map_err(|e| store_status(&e))?;
        Ok(Response::new(HashResponse {
            header: self.header(),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        req: Request<HashKvRequest>,
    ) -> Result<Response<HashKvResponse>, Status> {
        self.gate.check_admin(req.metadata()).await?;
        let r = req.into_inner();
        let (hash, compact_revision, _) = self
            .node
            .store()
            .hash_kv(r.revision)
            .map_err(|e| store_status(&e))?;
        Ok(Response::new(HashKvResponse {
            header: self.header(),
            hash,
            compact_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        req: Request<SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        self.gate.check_admin(req.metadata()).await?;
        // A few messages of read-ahead: enough to keep the connection busy, little memory.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(snapshot_export::produce(self.node.clone(), tx));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn move_leader(
        &self,
        req: Request<MoveLeaderRequest>,
    ) -> Result<Response<MoveLeaderResponse>, Status> {
        let r = req.into_inner();
        self.node
            .move_leader(r.target_id)
            .await
            .map_err(|e| propose_status(&e))?;
        // etcd 3.4 answers MoveLeader without a header.
        Ok(Response::new(MoveLeaderResponse { header: None }))
    }
}

/// Maintenance.Snapshot: the store is exported to a temporary etcd-format file in the
/// member's `snap/` directory, which is then streamed as etcd streams its bbolt file: 32 KiB
/// messages with `remaining_bytes = total - sent`, then one message with the SHA-256 of
/// everything sent. The file is removed when the stream ends, fails, or the client goes away.
mod snapshot_export {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use bytes::Bytes;
    use keel_raft::node::Node;
    use keel_store::bbolt::EtcdMember;
    use keel_store::etcd_snapshot::SnapshotDigest;
    use keel_store::pb::etcdserverpb::SnapshotResponse;
    use tokio::io::AsyncReadExt;
    use tokio::sync::mpsc::Sender;
    use tonic::Status;
    use tracing::{info, warn};

    /// etcd's snapshot message size.
    const CHUNK: usize = 32 * 1024;
    /// Prefix of the temporary export files in `snap/`.
    const PREFIX: &str = "etcd-export-";

    /// Numbers concurrent exports of this process apart.
    static SEQ: AtomicU64 = AtomicU64::new(0);

    /// Deletes the export file however the stream ends.
    struct TempFile(PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            if let Err(e) = std::fs::remove_file(&self.0) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn!(path = %self.0.display(), %e, "could not remove snapshot export file");
                }
            }
        }
    }

    /// Streams one snapshot into `tx`; errors go to the client as the stream's status.
    pub(super) async fn produce(node: Arc<Node>, tx: Sender<Result<SnapshotResponse, Status>>) {
        if let Err(status) = stream(node, &tx).await {
            // The client may be gone already; then nobody needs the status either.
            let _ = tx.send(Err(status)).await;
        }
    }

    async fn stream(
        node: Arc<Node>,
        tx: &Sender<Result<SnapshotResponse, Status>>,
    ) -> Result<(), Status> {
        let dir = node.config().data_dir.join("snap");
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| internal(&dir, e))?;
        remove_stale(&dir).await;
        let path = dir.join(format!(
            "{PREFIX}{}-{}.db",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _cleanup = TempFile(path.clone());

        let members: Vec<EtcdMember> = node
            .members()
            .into_iter()
            .map(|m| EtcdMember {
                id: m.id,
                name: m.node.name,
                peer_urls: m.node.peer_urls,
                client_urls: m.node.client_urls,
                is_learner: m.is_learner,
            })
            .collect();
        // etcd records the index it applied; etcd's restore replaces it, so "about the
        // exported revision" is precise enough.
        let consistent_index = node.status().applied_index;
        let store = node.store().clone();
        let export_path = path.clone();
        // Backend reads block: keep them off the async workers.
        let summary = tokio::task::spawn_blocking(move || {
            store.export_etcd(&export_path, members, consistent_index, &|_| {})
        })
        .await
        .map_err(|e| Status::internal(format!("keel: snapshot export task failed: {e}")))?
        .map_err(|e| Status::internal(format!("keel: snapshot export failed: {e}")))?;
        info!(
            revision = summary.revision,
            size = summary.total_size,
            "streaming snapshot"
        );

        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| internal(&path, e))?;
        let total = summary.total_size;
        let mut sent = 0u64;
        let mut digest = SnapshotDigest::new();
        let mut buf = vec![0u8; CHUNK];
        while sent < total {
            let n = (total - sent).min(CHUNK as u64) as usize;
            file.read_exact(&mut buf[..n])
                .await
                .map_err(|e| internal(&path, e))?;
            digest.update(&buf[..n]);
            sent += n as u64;
            let msg = SnapshotResponse {
                header: None,
                remaining_bytes: total - sent,
                blob: Bytes::copy_from_slice(&buf[..n]),
            };
            if tx.send(Ok(msg)).await.is_err() {
                info!(sent, total, "snapshot client went away");
                return Ok(());
            }
        }
        let last = SnapshotResponse {
            header: None,
            remaining_bytes: 0,
            blob: Bytes::copy_from_slice(&digest.finish()),
        };
        // Nothing to do if the client left just before the digest.
        let _ = tx.send(Ok(last)).await;
        Ok(())
    }

    fn internal(path: &Path, e: std::io::Error) -> Status {
        Status::internal(format!("keel: snapshot file {}: {e}", path.display()))
    }

    /// Removes export files an earlier process left behind (it was killed mid-stream); files
    /// of this process belong to streams still running.
    async fn remove_stale(dir: &Path) {
        let own = format!("{PREFIX}{}-", std::process::id());
        let Ok(mut rd) = tokio::fs::read_dir(dir).await else {
            return;
        };
        while let Ok(Some(e)) = rd.next_entry().await {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(PREFIX) && !name.starts_with(&own) && name.ends_with(".db") {
                let _ = tokio::fs::remove_file(e.path()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarms_print_as_etcd_prints_them() {
        let m = |member_id, t: AlarmType| AlarmMember {
            member_id,
            alarm: t as i32,
        };
        assert_eq!(
            alarm_text(&m(10276657743932975437, AlarmType::Nospace)),
            "memberID:10276657743932975437 alarm:NOSPACE "
        );
        assert_eq!(alarm_text(&m(0, AlarmType::Corrupt)), "alarm:CORRUPT ");
        assert_eq!(alarm_text(&m(5, AlarmType::None)), "memberID:5 ");
    }
}
