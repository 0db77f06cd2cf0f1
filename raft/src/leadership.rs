//! Leadership as a stream: whether this member is the Raft leader, published on a
//! `tokio::sync::watch` channel whenever it changes.
//!
//! The source is openraft's metrics watch, which changes on every Raft event (each append, each
//! apply); a task follows it and publishes a new [`Leadership`] only when the member becomes
//! leader, stops being leader, or leads again in a new term. Receivers therefore wake only for
//! those changes, never poll, and always see the latest value (a watch keeps no history: a member
//! that lost and regained leadership between two looks shows up as a leader of a later term).
//! When Raft shuts down the stream says [`Leadership::NotLeader`] one last time and its sender
//! goes away.

use openraft::{Raft, RaftMetrics, ServerState};
use tokio::sync::watch;

use crate::types::{Leadership, MemberNode, NodeId, TypeConfig};

impl Leadership {
    /// What `metrics` says about this member.
    pub(crate) fn of(metrics: &RaftMetrics<NodeId, MemberNode>) -> Self {
        if metrics.state == ServerState::Leader {
            Leadership::Leader {
                term: metrics.current_term,
            }
        } else {
            Leadership::NotLeader
        }
    }
}

/// Starts following `raft`'s metrics; the task ends when Raft shuts down or every receiver is
/// gone.
pub(crate) fn follow(raft: &Raft<TypeConfig>) -> watch::Receiver<Leadership> {
    let mut metrics = raft.metrics();
    let now = Leadership::of(&metrics.borrow_and_update());
    let (tx, rx) = watch::channel(now);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                changed = metrics.changed() => match changed {
                    Ok(()) => Some(Leadership::of(&metrics.borrow_and_update())),
                    // Raft stopped: it leads no more.
                    Err(_) => None,
                },
                () = tx.closed() => return,
            };
            let value = next.unwrap_or(Leadership::NotLeader);
            tx.send_if_modified(|current| {
                let changed = *current != value;
                *current = value;
                changed
            });
            if next.is_none() {
                return;
            }
        }
    });
    rx
}
