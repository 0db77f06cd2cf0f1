//! Faults (the nemesis): partitions of several shapes, SIGKILL, SIGSTOP/SIGCONT, member replacement and torn
//! WAL tails, each injected and later healed on a real cluster.

pub mod membership;
pub mod partition;
pub mod process;
pub mod wal;

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::workload::Endpoints;
use keel_testkit::cluster::Cluster;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Cut the leader off from every other member.
    PartitionLeader,
    /// Split the members into a majority and a minority.
    PartitionHalves,
    /// Two sides that cannot hear each other and one member that hears both.
    PartitionBridge,
    /// SIGKILL a random member, restart it later.
    KillRandom,
    /// SIGKILL the leader, restart it later.
    KillLeader,
    /// SIGKILL every member, restart them all later.
    KillAll,
    /// SIGSTOP a member (the leader half of the time), SIGCONT it later.
    Pause,
    /// Remove a member under load, later add a fresh one in its place.
    MemberReplace,
    /// SIGKILL a follower, cut a few bytes off its last WAL segment, restart it.
    TornWal,
}

impl Fault {
    /// Every fault, in campaign order.
    pub const ALL: [Fault; 9] = [
        Fault::PartitionLeader,
        Fault::PartitionHalves,
        Fault::PartitionBridge,
        Fault::KillRandom,
        Fault::KillLeader,
        Fault::KillAll,
        Fault::Pause,
        Fault::MemberReplace,
        Fault::TornWal,
    ];

    /// Its command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Fault::PartitionLeader => "partition-leader",
            Fault::PartitionHalves => "partition-halves",
            Fault::PartitionBridge => "partition-bridge",
            Fault::KillRandom => "kill-random",
            Fault::KillLeader => "kill-leader",
            Fault::KillAll => "kill-all",
            Fault::Pause => "pause",
            Fault::MemberReplace => "member-replace",
            Fault::TornWal => "torn-wal",
        }
    }

    /// The fault with this command-line name.
    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an injected fault left broken, for [`Nemesis::heal`].
#[derive(Debug)]
pub enum Damage {
    /// Links are cut.
    Partition,
    /// These members were SIGKILLed.
    Killed(Vec<usize>),
    /// This member is SIGSTOPped.
    Paused(usize),
    /// This member was removed; a fresh one must be added.
    Removed(usize),
    /// Nothing (the fault could not be injected this time).
    Nothing,
}

/// Injects and heals faults on one cluster, with choices drawn from a seeded generator.
pub struct Nemesis<'a> {
    /// The cluster under test.
    pub cluster: &'a mut Cluster,
    /// The clients' endpoint table (updated on membership changes).
    pub endpoints: Endpoints,
    /// Source of every choice (target, shape).
    pub rng: StdRng,
    /// Members added so far (names `j1`, `j2`, …).
    pub added: usize,
}

impl Nemesis<'_> {
    /// The leader every live voter agrees on, asked a few times (`None` while there is none).
    pub fn leader(&mut self) -> Option<usize> {
        for _ in 0..10 {
            if let Some(l) = self.cluster.leader() {
                return Some(l);
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        None
    }

    /// A random live voter.
    pub fn random_member(&mut self) -> Option<usize> {
        let live = self.cluster.live_voters();
        live.choose(&mut self.rng).copied()
    }

    /// Injects `fault`; returns what to heal and a description.
    pub fn inject(&mut self, fault: Fault) -> (Damage, String) {
        match fault {
            Fault::PartitionLeader => partition::leader(self),
            Fault::PartitionHalves => partition::halves(self),
            Fault::PartitionBridge => partition::bridge(self),
            Fault::KillRandom => process::kill_random(self),
            Fault::KillLeader => process::kill_leader(self),
            Fault::KillAll => process::kill_all(self),
            Fault::Pause => process::pause(self),
            Fault::MemberReplace => membership::remove(self),
            Fault::TornWal => wal::torn_tail(self),
        }
    }

    /// Undoes `damage`; returns a description.
    pub fn heal(&mut self, damage: Damage) -> String {
        match damage {
            Damage::Partition => {
                self.cluster.net_mut().heal();
                "healed the network".into()
            }
            Damage::Killed(set) => process::restart(self, &set),
            Damage::Paused(i) => process::resume(self, i),
            Damage::Removed(i) => membership::add_replacement(self, i),
            Damage::Nothing => "nothing to heal".into(),
        }
    }
}
