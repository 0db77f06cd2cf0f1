//! Process faults: SIGKILL (with restart on the same data directory) and SIGSTOP/SIGCONT.

use rand::Rng;

use super::{Damage, Nemesis};

/// SIGKILLs a random live member.
pub fn kill_random(n: &mut Nemesis) -> (Damage, String) {
    let Some(i) = n.random_member() else {
        return (Damage::Nothing, "no live member".into());
    };
    n.cluster.kill9(i);
    (Damage::Killed(vec![i]), format!("killed member {i}"))
}

/// SIGKILLs the leader.
pub fn kill_leader(n: &mut Nemesis) -> (Damage, String) {
    let Some(l) = n.leader() else {
        return kill_random(n);
    };
    n.cluster.kill9(l);
    (Damage::Killed(vec![l]), format!("killed leader {l}"))
}

/// SIGKILLs every live member.
pub fn kill_all(n: &mut Nemesis) -> (Damage, String) {
    let live = n.cluster.live_voters();
    for &i in &live {
        n.cluster.kill9(i);
    }
    (
        Damage::Killed(live.clone()),
        format!("killed all members {live:?}"),
    )
}

/// Restarts killed members on their data directories and waits until they are ready (bounded by the harness).
pub fn restart(n: &mut Nemesis, set: &[usize]) -> String {
    n.cluster.restart_all(set);
    format!("restarted {set:?}")
}

/// SIGSTOPs the leader or a random member.
pub fn pause(n: &mut Nemesis) -> (Damage, String) {
    let target = if n.rng.gen_bool(0.5) {
        n.leader().map(|l| (l, "leader"))
    } else {
        None
    };
    let Some((i, what)) = target.or_else(|| n.random_member().map(|i| (i, "member"))) else {
        return (Damage::Nothing, "no live member".into());
    };
    let Some(pid) = n.cluster.member(i).pid() else {
        return (Damage::Nothing, format!("member {i} has no process"));
    };
    signal(pid, libc::SIGSTOP);
    (Damage::Paused(i), format!("paused {what} {i} (SIGSTOP)"))
}

/// SIGCONTs a paused member.
pub fn resume(n: &mut Nemesis, i: usize) -> String {
    if let Some(pid) = n.cluster.member(i).pid() {
        signal(pid, libc::SIGCONT);
    }
    format!("resumed member {i} (SIGCONT)")
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a member process the harness started and has not reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}
