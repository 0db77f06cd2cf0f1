//! Network partitions through the harness's namespaces and nftables rules (real dropped packets).

use rand::seq::SliceRandom;

use super::{Damage, Nemesis};

/// Isolates the current leader from every other member.
pub fn leader(n: &mut Nemesis) -> (Damage, String) {
    let Some(l) = n.leader() else {
        return (Damage::Nothing, "no agreed leader to isolate".into());
    };
    let others: Vec<usize> = n
        .cluster
        .live_voters()
        .into_iter()
        .filter(|&i| i != l)
        .collect();
    n.cluster.net_mut().partition(&[&[l], &others]);
    (
        Damage::Partition,
        format!("isolated leader {l} from {others:?}"),
    )
}

/// Splits the live members into a random minority and majority.
pub fn halves(n: &mut Nemesis) -> (Damage, String) {
    let mut live = n.cluster.live_voters();
    live.shuffle(&mut n.rng);
    let (minority, majority) = live.split_at(live.len() / 2);
    let (minority, majority) = (minority.to_vec(), majority.to_vec());
    n.cluster.net_mut().partition(&[&minority, &majority]);
    (
        Damage::Partition,
        format!("split into minority {minority:?} and majority {majority:?}"),
    )
}

/// Two sides that cannot reach each other and one bridge member that reaches both (a non-transitive network).
pub fn bridge(n: &mut Nemesis) -> (Damage, String) {
    let mut live = n.cluster.live_voters();
    if live.len() < 3 {
        return (
            Damage::Nothing,
            format!("only {} live members: no bridge", live.len()),
        );
    }
    live.shuffle(&mut n.rng);
    let b = live[0];
    let rest = &live[1..];
    let (left, right) = rest.split_at(rest.len() / 2);
    let net = n.cluster.net_mut();
    net.heal();
    for &a in left {
        for &c in right {
            net.block(a, c);
            net.block(c, a);
        }
    }
    (
        Damage::Partition,
        format!("bridge {b} between {left:?} and {right:?}"),
    )
}
