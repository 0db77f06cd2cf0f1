//! Torn WAL tail: a follower is SIGKILLed and the end of its newest WAL segment is cut off, as if the last
//! write had been torn, before it restarts. keel must truncate the torn record on open and catch up from the
//! leader. (The leader is never chosen: cutting a record it already acknowledged would be a fault beyond a torn
//! write, able to lose a committed entry by construction.)

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::Rng;

use super::{Damage, Nemesis};
use keel_testkit::Kind;

/// Bytes at the start of a keel segment (its magic header), never cut.
const SEGMENT_HEADER: u64 = 8;

/// The newest WAL segment of a member's data directory.
pub fn last_segment(kind: Kind, data_dir: &Path) -> Option<PathBuf> {
    let dir = match kind {
        Kind::Keel => data_dir.join("wal"),
        Kind::Etcd => data_dir.join("member").join("wal"),
    };
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segs.sort();
    segs.pop()
}

/// Kills a random follower, truncates its newest WAL segment by 1–16 bytes, leaves it down for the hold.
pub fn torn_tail(n: &mut Nemesis) -> (Damage, String) {
    let leader = n.leader();
    let followers: Vec<usize> = n
        .cluster
        .live_voters()
        .into_iter()
        .filter(|&i| Some(i) != leader)
        .collect();
    let Some(&i) = followers.choose(&mut n.rng) else {
        return (Damage::Nothing, "no follower to tear".into());
    };
    n.cluster.kill9(i);
    let kind = n.cluster.kind();
    let data_dir = n.cluster.member(i).data_dir.clone();
    let cut: u64 = n.rng.gen_range(1..=16);
    let what = match last_segment(kind, &data_dir) {
        None => "no WAL segment found".to_string(),
        Some(seg) => match std::fs::metadata(&seg).map(|m| m.len()) {
            Ok(len) if len >= SEGMENT_HEADER + cut => {
                let f = std::fs::OpenOptions::new().write(true).open(&seg);
                match f.and_then(|f| f.set_len(len - cut)) {
                    Ok(()) => format!(
                        "cut {cut} bytes off {} ({len} bytes)",
                        seg.file_name().unwrap_or_default().to_string_lossy()
                    ),
                    Err(e) => format!("could not truncate {}: {e}", seg.display()),
                }
            }
            Ok(len) => format!("newest segment has only {len} bytes: left as is"),
            Err(e) => format!("cannot stat {}: {e}", seg.display()),
        },
    };
    (
        Damage::Killed(vec![i]),
        format!("killed follower {i}, {what}"),
    )
}
