//! Group commit above openraft: proposals that arrive while earlier ones are being written
//! travel together in one log entry, so one `fdatasync` serves them all.
//!
//! openraft 0.9 waits for each append to be durable before it takes the next one, so batching
//! inside the log store alone cannot merge concurrent clients' writes; batching here can.
//! Every command in a batch still gets its own revision and its own answer. On the leader,
//! batches forwarded by followers join the same queue and are flattened into its entries.
//!
//! A member answers a write only once its own state machine has applied the entry that carried
//! it (etcd's receiving member does the same), so a client that reads from the member it wrote
//! through sees its write: a follower waits for the leader's index, the leader has applied it
//! already when openraft answers. The wait happens per client, outside the batching task, so it
//! holds no in-flight slot.

use std::sync::Arc;
use std::time::Duration;

use keel_store::command::{CommandBatch, CommandKind};
use keel_store::{Command, CommandResponse, StoreError};
use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;
use prost::Message;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::ProposeError;
use crate::metrics::{PendingProposal, RaftMetrics};
use crate::network::PeerApi;
use crate::types::{MemberNode, TypeConfig};

/// Most commands in one entry.
const MAX_BATCH: usize = 1024;
/// Stop adding to a batch past this many encoded bytes (one command may be up to 1.5 MiB).
const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Entries handed to openraft but not yet answered: one being written and applied, the next
/// queued behind it. Every entry costs a fixed amount of work whatever its size (an append, a
/// state-machine batch, a journal write), so fewer, fuller entries beat a deeper
/// pipeline (see docs/benchmarks.md for the measurement).
const MAX_IN_FLIGHT: usize = 2;

/// Pause before re-sending a write whose leader could not be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A proposal's result and the index of the log entry that carried it, when known (a write
/// that was committed, whether the store accepted the command or refused it).
#[derive(Debug, PartialEq)]
pub(crate) struct Answer {
    pub(crate) result: Result<CommandResponse, ProposeError>,
    pub(crate) index: Option<u64>,
}

impl Answer {
    pub(crate) fn err(e: ProposeError) -> Self {
        Answer {
            result: Err(e),
            index: None,
        }
    }
}

type Reply = oneshot::Sender<Answer>;

struct Pending {
    cmd: Command,
    reply: Reply,
    /// Forwarded by a follower (possibly a whole batch): written here or refused, never
    /// forwarded again (a second hop could loop during a leader change).
    here: bool,
}

/// Queues proposals and submits them in batches.
pub(crate) struct Proposer {
    tx: mpsc::Sender<Pending>,
    metrics: Arc<RaftMetrics>,
    /// This member's applied index: a forwarded write waits here for its entry.
    applied: crate::applied::AppliedIndex,
    timeout: Duration,
    /// UNSAFE (see `NodeConfig::unsafe_early_forwarded_answer`): answer before applying here.
    early_answer: bool,
}

impl Proposer {
    /// Starts the batching task for `raft`; each entry may wait `timeout` for its result.
    /// Pending and failed proposals of this member's clients are counted in `metrics`.
    /// With `early_answer`, a write forwarded to the leader is answered as soon as the leader
    /// answers, before this member applied it (unsafe; for the Jepsen checker only).
    pub(crate) fn start(
        raft: Raft<TypeConfig>,
        timeout: Duration,
        peers: PeerApi,
        metrics: Arc<RaftMetrics>,
        applied: crate::applied::AppliedIndex,
        early_answer: bool,
    ) -> Self {
        let (tx, rx) = mpsc::channel(8192);
        tokio::spawn(run(raft.clone(), rx, timeout, peers));
        Proposer {
            tx,
            applied,
            metrics,
            timeout,
            early_answer,
        }
    }

    /// Proposes a command (often a batch) forwarded by a follower. It joins the local queue, so
    /// the followers' batches and the leader's own clients share log entries, but it is never
    /// forwarded again: if this member does not lead, it fails with `NoLeader`.
    /// The answer carries the entry's index, which the follower waits to have applied.
    pub(crate) async fn propose_here(&self, cmd: Command) -> Answer {
        self.enqueue(cmd, true).await
    }

    /// Proposes one command and waits for its result.
    pub(crate) async fn propose(&self, cmd: Command) -> Result<CommandResponse, ProposeError> {
        // Counted here, where this member's clients propose, not where forwarded batches land.
        let _pending = PendingProposal::new(&self.metrics);
        let started = tokio::time::Instant::now();
        let answer = self.enqueue(cmd, false).await;
        let res = match answer.index {
            Some(index) if !self.early_answer => {
                let left = self.timeout.saturating_sub(started.elapsed());
                match self.applied_here(index, left).await {
                    Ok(()) => answer.result,
                    Err(e) => Err(e),
                }
            }
            _ => answer.result,
        };
        // A command the store refused was committed all the same.
        if matches!(
            res,
            Err(ProposeError::NoLeader
                | ProposeError::NotLeader
                | ProposeError::Timeout
                | ProposeError::Stopped)
        ) {
            self.metrics.proposals_failed.inc();
        }
        res
    }

    /// Waits up to `timeout` for this member's state machine to apply `index`.
    async fn applied_here(&self, index: u64, timeout: Duration) -> Result<(), ProposeError> {
        self.applied.wait_for(index, timeout).await
    }

    async fn enqueue(&self, cmd: Command, here: bool) -> Answer {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Pending { cmd, reply, here }).await.is_err() {
            return Answer::err(ProposeError::Stopped);
        }
        rx.await
            .unwrap_or_else(|_| Answer::err(ProposeError::Stopped))
    }
}

async fn run(
    raft: Raft<TypeConfig>,
    mut rx: mpsc::Receiver<Pending>,
    timeout: Duration,
    peers: PeerApi,
) {
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
        let peers = peers.clone();
        tokio::spawn(async move {
            submit(&raft, batch, timeout, &peers).await;
            drop(permit);
        });
    }
}

async fn submit(raft: &Raft<TypeConfig>, batch: Vec<Pending>, timeout: Duration, peers: &PeerApi) {
    let (here, local): (Vec<Pending>, Vec<Pending>) = batch.into_iter().partition(|p| p.here);
    if here.is_empty() {
        write_group(raft, local, timeout, Some(peers)).await;
        return;
    }
    if raft.metrics().borrow().state == openraft::ServerState::Leader {
        // Followers' batches and local proposals in one entry. Written without forwarding:
        // had leadership moved, a local proposal gets `NoLeader` as it would have anyway.
        let mut all = here;
        all.extend(local);
        write_group(raft, all, timeout, None).await;
        return;
    }
    for p in here {
        let _ = p.reply.send(Answer::err(ProposeError::NoLeader));
    }
    if !local.is_empty() {
        write_group(raft, local, timeout, Some(peers)).await;
    }
}

/// Writes `group` as one log entry (forwarding it when `peers` is given and this member does
/// not lead) and answers every proposal; a forwarded batch is flattened into the entry and
/// answered with its own slice of results.
async fn write_group(
    raft: &Raft<TypeConfig>,
    mut group: Vec<Pending>,
    timeout: Duration,
    peers: Option<&PeerApi>,
) {
    if group.len() == 1 {
        if let Some(p) = group.pop() {
            let _ = p.reply.send(write(raft, p.cmd, timeout, peers).await);
        }
        return;
    }
    let mut cmds = Vec::with_capacity(group.len());
    // (reply, commands it contributed, whether it was a batch itself)
    let mut slots = Vec::with_capacity(group.len());
    for p in group {
        match p.cmd.kind {
            Some(CommandKind::Batch(b)) => {
                slots.push((p.reply, b.commands.len(), true));
                cmds.extend(b.commands);
            }
            kind => {
                slots.push((p.reply, 1, false));
                cmds.push(Command { kind });
            }
        }
    }
    let total = cmds.len();
    let cmd = Command::new(CommandKind::Batch(CommandBatch { commands: cmds }));
    let Answer { result, index } = write(raft, cmd, timeout, peers).await;
    let answer = |result| Answer { result, index };
    match result {
        Ok(CommandResponse::Batch(results)) if results.len() == total => {
            let mut results = results.into_iter();
            for (reply, n, was_batch) in slots {
                let part: Vec<_> = results.by_ref().take(n).collect();
                let answer = if was_batch {
                    Ok(CommandResponse::Batch(part))
                } else {
                    match part.into_iter().next() {
                        Some(r) => r.map_err(ProposeError::Store),
                        None => Err(ProposeError::Store(StoreError::Corrupt(
                            "batch answered with too few results".into(),
                        ))),
                    }
                };
                let _ = reply.send(Answer {
                    result: answer,
                    index,
                });
            }
        }
        Ok(other) => {
            let e = ProposeError::Store(StoreError::Corrupt(format!(
                "batch answered with {other:?}"
            )));
            slots
                .into_iter()
                .for_each(|(r, _, _)| drop(r.send(answer(Err(e.clone())))));
        }
        Err(e) => slots
            .into_iter()
            .for_each(|(r, _, _)| drop(r.send(answer(Err(e.clone()))))),
    }
}

/// One openraft write with etcd's error mapping; on a follower, forwarded to the leader when
/// `peers` is given. The answer carries the index of the entry written.
async fn write(
    raft: &Raft<TypeConfig>,
    cmd: Command,
    timeout: Duration,
    peers: Option<&PeerApi>,
) -> Answer {
    let started = tokio::time::Instant::now();
    if let Some(peers) = peers {
        // Not the leader: send it to the leader, waiting out an election (as etcd does) and
        // retrying while a dead leader is still believed to lead. A forwarded write whose
        // leader could not be reached was not applied by it, so sending it again is safe.
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let leader = match leader_or_wait(raft, left).await {
                Ok(l) => l,
                Err(e) => return Answer::err(e),
            };
            match leader {
                None => break,
                Some(leader) => {
                    let answer = peers.forward_propose(&leader, cmd.clone(), left).await;
                    match answer.result {
                        Err(ProposeError::NoLeader)
                            if started.elapsed() + RETRY_PAUSE < timeout =>
                        {
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        _ => return answer,
                    }
                }
            }
        }
    }
    let left = timeout.saturating_sub(started.elapsed());
    let res = match tokio::time::timeout(left, raft.client_write(cmd)).await {
        Err(_) => return Answer::err(ProposeError::Timeout),
        Ok(r) => r,
    };
    let result = match res {
        Ok(resp) => {
            let result = match resp.data.0 {
                Ok(Some(r)) => Ok(r),
                Ok(None) => Err(ProposeError::Store(StoreError::Corrupt(
                    "command produced no response".into(),
                ))),
                Err(e) => Err(ProposeError::Store(e)),
            };
            return Answer {
                result,
                index: Some(resp.log_id.index),
            };
        }
        // Leadership moved between the check and the write: the client retries elsewhere.
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
            Err(ProposeError::NoLeader)
        }
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Err(ProposeError::Store(StoreError::Backend(e.to_string())))
        }
        Err(RaftError::Fatal(_)) => Err(ProposeError::Stopped),
    };
    Answer {
        result,
        index: None,
    }
}

/// `None` if this member leads; the leader's node if another member does; waits up to `timeout`
/// while there is no leader.
async fn leader_or_wait(
    raft: &Raft<TypeConfig>,
    timeout: Duration,
) -> Result<Option<MemberNode>, ProposeError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let m = raft.metrics().borrow().clone();
        if m.state == openraft::ServerState::Leader {
            return Ok(None);
        }
        if let Some(id) = m.current_leader {
            if let Some((_, n)) = m
                .membership_config
                .membership()
                .nodes()
                .find(|(n, _)| **n == id)
            {
                return Ok(Some(n.clone()));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ProposeError::NoLeader);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
