//! Election timing: how etcd's two knobs (`--heartbeat-interval`, `--election-timeout`) become
//! openraft 0.9's three (`heartbeat_interval`, `election_timeout_min`, `election_timeout_max`).
//!
//! What openraft 0.9.25 does with them (`engine_config.rs`, `raft_core.rs::handle_tick_election`,
//! `engine_impl.rs::handle_vote_req`):
//! - every member draws one election timeout `t` from `[min, max)` when it starts, and keeps it;
//! - the *leader lease* is `max`: for that long after a member last heard from a leader it
//!   refuses vote requests (as etcd's check-quorum followers ignore them while the leader is
//!   alive);
//! - a follower stands for election once it has heard nothing for `lease + t`, i.e. `max + t`,
//!   anywhere in `[min + max, 2 × max)`. A member whose vote is not a leader's (a candidate, or
//!   one just restarted after leading) waits `t` alone; a candidate that saw a longer log than its
//!   own waits `2 × max` more before its next try;
//! - elections are checked, and heartbeats sent, on a tick of 1.5 × `heartbeat_interval`, so a
//!   follower hears from an idle leader every 150 ms with etcd's 100 ms heartbeat, and stands up
//!   to one tick after its timeout passed.
//!
//! etcd (`raft.go`: `tickElection`, `resetRandomizedElectionTimeout`) counts ticks of one
//! heartbeat interval since it last heard from the leader and campaigns when the count reaches a
//! number drawn from `[E, 2E)` (in ticks) for election timeout `E`, drawn again at every reset.
//! The first tick comes anywhere within one heartbeat after the leader's message, so an etcd
//! follower stands after a silence in `[E - hb, 2E - hb)`: 0.9 to 1.9 s with its defaults
//! (the shortest etcd failover measured here: 906 ms). keel takes `min + max = E - hb` and `max - min = E / 5` (350 and
//! 550 ms by default): a follower stands after a silence in `[E - hb, E - hb + E/5)` plus up to
//! one openraft tick, 0.9 to 1.25 s. The shortest silence that starts an election is etcd's
//! own, so a loaded machine's late heartbeats start no more elections than they would under
//! etcd; the longest is about 1.25 s instead of 1.9 s, so a dead leader is replaced sooner.
//! (Before: `min = 0.75 E`, `max = E`, a silence in `[1.75 E, 2 E)`; measured failover 1.8 to 2.0 s
//! against etcd's 1.0 to 2.7 s. See docs/benchmarks.md, "Failover".)
//!
//! A member that led before it stopped restarts with a vote that is not a leader's (see
//! `LogStore::step_down_after_restart`), so it would stand after `t` = 0.35–0.55 E, before the
//! leader's next contact: the leader retries a member that was down every 500 ms. That early
//! candidacy either raises the term and unseats a working leader, or is refused (the others
//! still hold the lease) and, having seen a longer log in the answers, the member waits `2 × max`
//! (1.1 E) more at its next real candidacy (measured before this hold-off: about one failover in
//! five took 2.3 s instead of 1.1 s). So keel holds its elections off for
//! [`RaftTimers::restart_hold_off`], as long as a follower waits.
//!
//! None of this touches safety. openraft 0.9 uses the leader lease only to refuse votes (on the
//! leader it is a metric, `millis_since_quorum_ack`); keel's linearizable reads confirm
//! leadership with a quorum round every time (ReadIndex, see `read_index.rs` and
//! `Node::read_barrier`), and commits need a quorum whatever the clocks do. A leader id is (term,
//! member id), totally ordered in openraft 0.9's default mode, so two members that stand at the
//! same moment do not split the vote: the one with the greater id gets the other's vote unless
//! its log is behind.

use std::time::Duration;

/// openraft's timer settings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RaftTimers {
    /// Leader heartbeat interval.
    pub(crate) heartbeat_ms: u64,
    /// Lower bound of openraft's election timeout.
    pub(crate) election_min_ms: u64,
    /// Upper bound of openraft's election timeout, which is also its leader lease.
    pub(crate) election_max_ms: u64,
}

impl RaftTimers {
    /// The settings for etcd's `heartbeat` and `election` timeout (see the module doc). They
    /// always pass openraft's validation (`heartbeat < min < max`), also for timeouts etcd would
    /// refuse as too short for the heartbeat.
    pub(crate) fn for_etcd(heartbeat: Duration, election: Duration) -> Self {
        let heartbeat_ms = u64::try_from(heartbeat.as_millis())
            .unwrap_or(u64::MAX / 4)
            .max(1);
        let election_ms = u64::try_from(election.as_millis()).unwrap_or(u64::MAX / 4);
        // The shortest silence that starts an election, min + max, is etcd's: E less one
        // heartbeat tick. The window above it, max - min, is a fifth of E.
        let floor = election_ms.saturating_sub(heartbeat_ms);
        let spread = election_ms / 5;
        let election_max_ms = (floor + spread) / 2;
        let election_min_ms = floor.saturating_sub(election_max_ms).max(heartbeat_ms + 1);
        let election_max_ms = election_max_ms.max(election_min_ms + 1);
        RaftTimers {
            heartbeat_ms,
            election_min_ms,
            election_max_ms,
        }
    }

    /// How long a member that led before it restarted waits before it may stand for election:
    /// the shortest silence after which a follower stands. (Its restored vote is not a leader's,
    /// so openraft alone would let it stand after `min..max`, sooner than any follower.)
    pub(crate) fn restart_hold_off(&self) -> Duration {
        Duration::from_millis(self.election_min_ms + self.election_max_ms)
    }

    /// The shortest and (exclusive) longest silence after which a follower stands for election.
    #[cfg(test)]
    fn campaign_after_ms(&self) -> (u64, u64) {
        (
            self.election_max_ms + self.election_min_ms,
            2 * self.election_max_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn etcd_defaults_campaign_after_etcds_shortest_silence_and_at_most_a_fifth_more() {
        let t = RaftTimers::for_etcd(ms(100), ms(1000));
        assert_eq!(
            t,
            RaftTimers {
                heartbeat_ms: 100,
                election_min_ms: 350,
                election_max_ms: 550,
            }
        );
        assert_eq!(t.campaign_after_ms(), (900, 1100));
        assert_eq!(t.restart_hold_off(), ms(900));
    }

    #[test]
    fn every_setting_passes_openrafts_validation() {
        for (hb, el) in [
            (100, 1000),
            (50, 300),
            (10, 50),
            (100, 100),
            (100, 0),
            (0, 0),
            (5000, 50_000),
            (100, 1001),
            (100, 1234),
        ] {
            let t = RaftTimers::for_etcd(ms(hb), ms(el));
            let cfg = openraft::Config {
                heartbeat_interval: t.heartbeat_ms,
                election_timeout_min: t.election_min_ms,
                election_timeout_max: t.election_max_ms,
                ..Default::default()
            };
            assert!(cfg.validate().is_ok(), "{hb} ms / {el} ms gave {t:?}");
            // Never sooner than etcd could campaign (E less one heartbeat tick), and at most a
            // fifth of E later than that, once etcd's own rule (E >= 5 heartbeats) holds.
            if el >= 5 * hb && el > 0 {
                let (first, last) = t.campaign_after_ms();
                assert!(first >= el - hb, "{hb} ms / {el} ms gave {t:?}");
                assert!(last <= el - hb + el / 5 + 1, "{hb} ms / {el} ms gave {t:?}");
            }
        }
    }
}
