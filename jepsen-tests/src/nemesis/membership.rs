//! Membership changes under load: remove a member, later add a fresh one (new name, empty data directory, its
//! own namespace) so that the cluster keeps its size.

use super::{Damage, Nemesis};

/// Removes a random live voter (`member remove` through another member).
pub fn remove(n: &mut Nemesis) -> (Damage, String) {
    let Some(i) = n.random_member() else {
        return (Damage::Nothing, "no live member".into());
    };
    if n.cluster.live_voters().len() < 3 {
        return (Damage::Nothing, "fewer than 3 voters: not removing".into());
    }
    let leader = n.leader();
    n.cluster.remove_member(i);
    n.endpoints.set(i, None);
    let what = if leader == Some(i) {
        "leader"
    } else {
        "member"
    };
    (Damage::Removed(i), format!("removed {what} {i}"))
}

/// Adds a fresh member in place of removed member `removed` and points clients at it.
pub fn add_replacement(n: &mut Nemesis, removed: usize) -> String {
    n.added += 1;
    let name = format!("j{}", n.added);
    let i = n.cluster.add_member(&name, false);
    n.endpoints.set(i, Some(n.cluster.endpoint(i)));
    format!("added member {i} ({name}) in place of {removed}")
}
