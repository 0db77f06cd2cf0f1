//! Group commit above openraft: proposals that arrive while earlier ones are being written
//! travel together in one log entry, so one `fdatasync` serves them all.
//!
//! openraft 0.9 waits for each append to be durable before it takes the next one, so batching
//! inside the log store alone cannot merge concurrent clients' writes; batching here can.
//! Every command in a batch still gets its own revision and its own answer.

use std::sync::Arc;
use std::time::Duration;

use keel_store::command::{CommandBatch, CommandKind};
use keel_store::{Command, CommandResponse, StoreError};
use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;
use prost::Message;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::node::ProposeError;
use crate::types::TypeConfig;

/// Most commands in one entry.
const MAX_BATCH: usize = 1024;
/// Stop adding to a batch past this many encoded bytes (one command may be up to 1.5 MiB).
const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Entries handed to openraft but not yet answered: one being made durable, the next queued
/// behind it, one being applied.
const MAX_IN_FLIGHT: usize = 3;

type Reply = oneshot::Sender<Result<CommandResponse, ProposeError>>;

struct Pending {
    cmd: Command,
    reply: Reply,
}

/// Queues proposals and submits them in batches.
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
}

impl Proposer {
    /// Starts the batching task for `raft`; each entry may wait `timeout` for its result.
    pub fn start(raft: Raft<TypeConfig>, timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel(8192);
        tokio::spawn(run(raft, rx, timeout));
        Proposer { tx }
    }

    /// Proposes one command and waits for its result.
    pub async fn propose(&self, cmd: Command) -> Result<CommandResponse, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending { cmd, reply })
            .await
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }
}

async fn run(raft: Raft<TypeConfig>, mut rx: mpsc::Receiver<Pending>, timeout: Duration) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // Waiting for a slot is what lets the next batch grow.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.cmd.encoded_len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += p.cmd.encoded_len();
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            submit(&raft, batch, timeout).await;
            drop(permit);
        });
    }
}

async fn submit(raft: &Raft<TypeConfig>, mut batch: Vec<Pending>, timeout: Duration) {
    if batch.len() == 1 {
        if let Some(p) = batch.pop() {
            let _ = p.reply.send(write(raft, p.cmd, timeout).await);
        }
        return;
    }
    let (cmds, replies): (Vec<Command>, Vec<Reply>) =
        batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    let cmd = Command::new(CommandKind::Batch(CommandBatch { commands: cmds }));
    match write(raft, cmd, timeout).await {
        Ok(CommandResponse::Batch(results)) if results.len() == replies.len() => {
            for (reply, r) in replies.into_iter().zip(results) {
                let _ = reply.send(r.map_err(ProposeError::Store));
            }
        }
        Ok(other) => {
            let e = ProposeError::Store(StoreError::Corrupt(format!(
                "batch answered with {other:?}"
            )));
            replies
                .into_iter()
                .for_each(|r| drop(r.send(Err(e.clone()))));
        }
        Err(e) => replies
            .into_iter()
            .for_each(|r| drop(r.send(Err(e.clone())))),
    }
}

/// One openraft write with etcd's error mapping.
async fn write(
    raft: &Raft<TypeConfig>,
    cmd: Command,
    timeout: Duration,
) -> Result<CommandResponse, ProposeError> {
    let res = match tokio::time::timeout(timeout, raft.client_write(cmd)).await {
        Err(_) => return Err(ProposeError::Timeout),
        Ok(r) => r,
    };
    match res {
        Ok(resp) => match resp.data.0 {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(ProposeError::Store(StoreError::Corrupt(
                "command produced no response".into(),
            ))),
            Err(e) => Err(ProposeError::Store(e)),
        },
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            if f.leader_id.is_some() {
                Err(ProposeError::NotLeader)
            } else {
                Err(ProposeError::NoLeader)
            }
        }
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Err(ProposeError::Store(StoreError::Backend(e.to_string())))
        }
        Err(RaftError::Fatal(_)) => Err(ProposeError::Stopped),
    }
}
