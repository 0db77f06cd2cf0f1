//! Cluster membership as etcd exposes it: member and cluster IDs, the initial cluster, and the
//! changes behind `etcdctl member add/remove/update/promote`, done with openraft's joint
//! consensus on the leader.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, Raft};
use tracing::{info, warn};

use crate::error::{InitialClusterError, MembershipError, ProposeError};
use crate::types::{MemberChange, MemberChangeResult, MemberInfo, MemberNode, NodeId, TypeConfig};

/// One `name=url` entry of `--initial-cluster` (several URLs per name allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialMember {
    pub name: String,
    pub peer_urls: Vec<String>,
}

/// `--initial-cluster-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterState {
    /// Bootstrap a new cluster from `--initial-cluster`.
    #[default]
    New,
    /// Join a running cluster that already added this member.
    Existing,
}

/// FNV-1a 64: stable IDs from names and URLs without extra dependencies.
pub(crate) fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// A member's ID, as etcd derives it: from its sorted peer URLs and the cluster token, so every
/// member computes the same IDs for the initial cluster.
pub fn member_id(peer_urls: &[String], token: &str) -> NodeId {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort();
    urls.push(token);
    fnv64(&urls).max(1)
}

/// The cluster's ID: from the cluster token, so a member started with another token is refused.
pub fn cluster_id(token: &str) -> u64 {
    fnv64(&["keel-cluster-id", token])
}

/// True for `http://host:port` or `https://host:port` with a numeric port.
pub(crate) fn valid_peer_url(u: &str) -> bool {
    let Some(rest) = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
    else {
        return false;
    };
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}

/// Parses `n1=http://a:2380,n2=http://b:2380` (a name may repeat to list several URLs).
pub fn parse_initial_cluster(s: &str) -> Result<Vec<InitialMember>, InitialClusterError> {
    let mut out: Vec<InitialMember> = Vec::new();
    let mut seen_urls = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = part
            .split_once('=')
            .ok_or_else(|| InitialClusterError::Malformed(part.into()))?;
        if name.is_empty() || !valid_peer_url(url) {
            return Err(InitialClusterError::Malformed(part.into()));
        }
        if !seen_urls.insert(url.to_string()) {
            return Err(InitialClusterError::DuplicateUrl(url.into()));
        }
        match out.iter_mut().find(|m| m.name == name) {
            Some(m) => m.peer_urls.push(url.to_string()),
            None => out.push(InitialMember {
                name: name.into(),
                peer_urls: vec![url.to_string()],
            }),
        }
    }
    Ok(out)
}

/// Checks that this member appears in the initial cluster with its own peer URLs.
pub fn check_self(
    members: &[InitialMember],
    name: &str,
    own_urls: &[String],
) -> Result<(), InitialClusterError> {
    let me = members
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| InitialClusterError::MissingSelf(name.into()))?;
    let mut a = me.peer_urls.clone();
    let mut b = own_urls.to_vec();
    a.sort();
    b.sort();
    if a != b && b.iter().all(|u| a.contains(u)) {
        // The name also stands for URLs that are not ours: another member already uses it.
        return Err(InitialClusterError::DuplicateName(name.into()));
    }
    if a != b {
        return Err(InitialClusterError::UrlMismatch {
            name: name.into(),
            listed: me.peer_urls.clone(),
            own: own_urls.to_vec(),
        });
    }
    Ok(())
}

/// Every member of the current (effective) membership.
pub(crate) fn members_of(raft: &Raft<TypeConfig>) -> Vec<MemberInfo> {
    let m = raft.metrics().borrow().clone();
    let mem = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = mem.voter_ids().collect();
    let mut v: Vec<MemberInfo> = mem
        .nodes()
        .map(|(id, n)| MemberInfo {
            id: *id,
            node: n.clone(),
            is_learner: !voters.contains(id),
        })
        .collect();
    v.sort_by_key(|m| m.id);
    v
}

fn raft_err(e: RaftError<NodeId, ClientWriteError<NodeId, MemberNode>>) -> ProposeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) if f.leader_id.is_some() => {
            ProposeError::NotLeader
        }
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => ProposeError::NoLeader,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            warn!(%e, "membership change refused by raft");
            ProposeError::Membership(MembershipError::NotEnoughStarted)
        }
        RaftError::Fatal(_) => ProposeError::Stopped,
    }
}

/// How far a learner may lag (in log entries) and still be promoted (etcd: within 10%).
fn caught_up(matched: u64, leader_last: u64) -> bool {
    matched + leader_last / 10 + 16 >= leader_last
}

/// The log index each follower/learner has acknowledged (leader only).
pub(crate) fn matched(raft: &Raft<TypeConfig>, id: NodeId) -> Option<u64> {
    let m = raft.metrics().borrow().clone();
    let rep = m.replication.as_ref()?;
    rep.get(&id).and_then(|l| l.as_ref().map(|l| l.index))
}

/// Refuses malformed peer URLs and URLs another member (other than `except`) already has.
fn check_new_urls(
    current: &[MemberInfo],
    except: Option<NodeId>,
    peer_urls: &[String],
) -> Result<(), MembershipError> {
    if peer_urls.is_empty() || !peer_urls.iter().all(|u| valid_peer_url(u)) {
        return Err(MembershipError::InvalidUrls);
    }
    let taken = current
        .iter()
        .any(|o| Some(o.id) != except && o.node.peer_urls.iter().any(|u| peer_urls.contains(u)));
    if taken {
        return Err(MembershipError::PeerUrlExists);
    }
    Ok(())
}

/// Replaces one member's node record (name and URLs) in the membership.
async fn set_node(
    raft: &Raft<TypeConfig>,
    timeout: Duration,
    id: NodeId,
    node: MemberNode,
) -> Result<(), ProposeError> {
    bounded(
        timeout,
        raft.change_membership(ChangeMembers::SetNodes(BTreeMap::from([(id, node)])), false),
    )
    .await
    .map(|_| ())
}

/// Performs a membership change on the leader, holding `changing`, the member's lock that keeps it apart
/// from [`finish_joint`].
pub(crate) async fn change(
    raft: &Raft<TypeConfig>,
    changing: &tokio::sync::Mutex<()>,
    token: &str,
    change: MemberChange,
    timeout: Duration,
) -> Result<MemberChangeResult, ProposeError> {
    let _changing = changing.lock().await;
    let current = members_of(raft);
    let find = |id: NodeId| current.iter().find(|m| m.id == id).cloned();
    let member = match change {
        MemberChange::Add { peer_urls, learner } => {
            check_new_urls(&current, None, &peer_urls)?;
            let id = member_id(&peer_urls, token);
            if find(id).is_some() {
                return Err(MembershipError::IdExists.into());
            }
            if learner && current.iter().filter(|m| m.is_learner).count() >= 1 {
                return Err(MembershipError::TooManyLearners.into());
            }
            let node = MemberNode {
                name: String::new(),
                peer_urls: peer_urls.clone(),
                client_urls: Vec::new(),
            };
            raft.add_learner(id, node.clone(), false)
                .await
                .map_err(raft_err)?;
            info!(member = %format!("{id:x}"), ?peer_urls, learner, "member added as learner");
            if !learner {
                // Promote once it has caught up (by log or snapshot), as a background task.
                let raft = raft.clone();
                tokio::spawn(async move {
                    promote_when_caught_up(raft, id, Duration::from_secs(600)).await
                });
            }
            Some(MemberInfo {
                id,
                node,
                is_learner: learner,
            })
        }
        MemberChange::Remove { id } => {
            let m = find(id).ok_or(MembershipError::NotFound)?;
            if m.is_learner {
                bounded(
                    timeout,
                    raft.change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false),
                )
                .await?;
            } else {
                let voters = current.iter().filter(|m| !m.is_learner).count();
                if voters <= 1 {
                    return Err(MembershipError::NotEnoughStarted.into());
                }
                bounded(
                    timeout,
                    raft.change_membership(
                        ChangeMembers::RemoveVoters(BTreeSet::from([id])),
                        false,
                    ),
                )
                .await?;
            }
            info!(member = %format!("{id:x}"), "member removed");
            None
        }
        MemberChange::Update { id, peer_urls } => {
            let mut m = find(id).ok_or(MembershipError::NotFound)?;
            check_new_urls(&current, Some(id), &peer_urls)?;
            m.node.peer_urls = peer_urls;
            set_node(raft, timeout, id, m.node).await?;
            None
        }
        MemberChange::Promote { id } => {
            let m = find(id).ok_or(MembershipError::NotFound)?;
            if !m.is_learner {
                return Err(MembershipError::NotLearner.into());
            }
            let last = raft.metrics().borrow().last_log_index.unwrap_or(0);
            if !caught_up(matched(raft, id).unwrap_or(0), last) {
                return Err(MembershipError::LearnerNotReady.into());
            }
            bounded(
                timeout,
                raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false),
            )
            .await?;
            info!(member = %format!("{id:x}"), "learner promoted");
            None
        }
        MemberChange::Publish {
            id,
            name,
            client_urls,
        } => {
            let mut m = find(id).ok_or(MembershipError::NotFound)?;
            if current.iter().any(|o| o.id != id && o.node.name == name) {
                return Err(MembershipError::NameInUse.into());
            }
            if m.node.name != name || m.node.client_urls != client_urls {
                m.node.name = name;
                m.node.client_urls = client_urls;
                set_node(raft, timeout, id, m.node).await?;
            }
            None
        }
    };
    Ok(MemberChangeResult {
        member,
        members: members_of(raft),
    })
}

async fn bounded<F, T>(timeout: Duration, f: F) -> Result<T, ProposeError>
where
    F: std::future::Future<
        Output = Result<T, RaftError<NodeId, ClientWriteError<NodeId, MemberNode>>>,
    >,
{
    match tokio::time::timeout(timeout, f).await {
        Err(_) => Err(ProposeError::Timeout),
        Ok(r) => r.map_err(raft_err),
    }
}

/// Promotes learner `id` to voter once it has caught up with the leader's log.
async fn promote_when_caught_up(raft: Raft<TypeConfig>, id: NodeId, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let m = raft.metrics().borrow().clone();
        if m.state != openraft::ServerState::Leader {
            warn!(member = %format!("{id:x}"), "leadership lost before promoting the new member; promote it with `etcdctl member promote`");
            return;
        }
        let still_learner = !m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id);
        let known = m
            .membership_config
            .membership()
            .nodes()
            .any(|(n, _)| *n == id);
        if !known || !still_learner {
            return;
        }
        let last = m.last_log_index.unwrap_or(0);
        if matched(&raft, id).is_some_and(|mi| caught_up(mi, last)) {
            match raft
                .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await
            {
                Ok(_) => {
                    info!(member = %format!("{id:x}"), "new member caught up and promoted to voter");
                    return;
                }
                Err(e) => warn!(member = %format!("{id:x}"), %e, "promotion failed; retrying"),
            }
        }
    }
    warn!(member = %format!("{id:x}"), "new member did not catch up in time; it stays a learner");
}

/// Finishes a joint configuration left behind by a leader change (leader only). Skipped while this
/// member is itself in the middle of a change, which finishes its own joint configuration.
pub(crate) async fn finish_joint(
    raft: &Raft<TypeConfig>,
    changing: &tokio::sync::Mutex<()>,
    timeout: Duration,
) {
    let Ok(_changing) = changing.try_lock() else {
        return;
    };
    let m = raft.metrics().borrow().clone();
    let configs = m.membership_config.membership().get_joint_config().clone();
    if configs.len() < 2 {
        return;
    }
    let Some(target) = configs.last().cloned() else {
        return;
    };
    info!(
        ?target,
        "finishing a joint membership change left by a previous leader"
    );
    if let Err(e) = bounded(
        timeout,
        raft.change_membership(ChangeMembers::ReplaceAllVoters(target), false),
    )
    .await
    {
        warn!(%e, "could not finish the joint membership change; will retry");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_cluster_parsing_and_ids() {
        let m =
            parse_initial_cluster("a=http://127.0.0.1:1,b=http://127.0.0.1:2,a=http://10.0.0.1:1")
                .unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].peer_urls.len(), 2);
        assert!(matches!(
            parse_initial_cluster("a=foo"),
            Err(InitialClusterError::Malformed(_))
        ));
        assert!(matches!(
            parse_initial_cluster("a=http://h:1,b=http://h:1"),
            Err(InitialClusterError::DuplicateUrl(_))
        ));
        assert!(check_self(&m, "b", &["http://127.0.0.1:2".into()]).is_ok());
        assert!(valid_peer_url("https://127.0.0.1:2380"));
        assert!(!valid_peer_url("ftp://127.0.0.1:2380"));
        assert!(!valid_peer_url("https://127.0.0.1"));
        assert!(check_self(&m, "c", &["http://127.0.0.1:2".into()]).is_err());
        assert!(check_self(&m, "b", &["http://127.0.0.1:3".into()]).is_err());
        let x = member_id(&["http://b:1".into(), "http://a:1".into()], "t");
        assert_eq!(
            x,
            member_id(&["http://a:1".into(), "http://b:1".into()], "t")
        );
        assert_ne!(
            x,
            member_id(&["http://a:1".into(), "http://b:1".into()], "u")
        );
        assert_ne!(cluster_id("t"), cluster_id("u"));
        assert!(caught_up(95, 100) && !caught_up(10, 1000));
    }
}
