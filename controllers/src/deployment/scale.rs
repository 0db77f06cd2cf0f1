//! Scaling without a rollout: when only `replicas` changed (or the Deployment is paused), the ReplicaSets
//! are resized, in proportion to their sizes while a rollout is under way.

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::ResourceExt;

use super::history::{self, DESIRED_REPLICAS, MAX_REPLICAS};
use super::replicasets::{available, new_and_old, scale_to, size};
use super::{rollout, status, Pass};
use crate::error::Result;

fn annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.annotations().get(key).and_then(|v| v.parse().ok())
}

/// Whether some active ReplicaSet was last sized for a different `replicas` than the Deployment has now.
pub fn is_scaling_event(s: &Pass<'_>, sets: &[ReplicaSet]) -> bool {
    let (new, old) = super::replicasets::split(s, sets.to_vec());
    new.iter()
        .chain(old.iter())
        .filter(|rs| size(rs) > 0)
        .any(|rs| annotation(rs, DESIRED_REPLICAS).is_some_and(|d| d != s.replicas()))
}

/// Resizes the ReplicaSets to the Deployment's replicas, then reports status (no rollout step).
pub async fn sync(s: &mut Pass<'_>, sets: Vec<ReplicaSet>) -> Result<()> {
    let (mut new, mut old) = new_and_old(s, sets, false).await?;
    scale(s, new.as_mut(), &mut old).await?;
    let paused = s.d.spec.as_ref().and_then(|x| x.paused).unwrap_or(false);
    if paused {
        history::cleanup(s, &old).await?;
    }
    status::sync_status_only(s, new.as_ref(), &old).await
}

fn saturated(s: &Pass<'_>, rs: &ReplicaSet) -> bool {
    annotation(rs, DESIRED_REPLICAS) == Some(s.replicas())
        && size(rs) == s.replicas()
        && available(rs) == s.replicas()
}

async fn scale(
    s: &Pass<'_>,
    mut new: Option<&mut ReplicaSet>,
    old: &mut [ReplicaSet],
) -> Result<()> {
    // Only one active ReplicaSet (or none): it takes all the replicas.
    old.sort_by_key(|rs| std::cmp::Reverse(rs.metadata.creation_timestamp.as_ref().map(|t| t.0)));
    let active_old = old.iter().filter(|rs| size(rs) > 0).count();
    let new_active = new.as_ref().is_some_and(|n| size(n) > 0);
    match active_old + usize::from(new_active) {
        0 => {
            let target = match new.as_deref_mut() {
                Some(n) => Some(n),
                None => old.first_mut(),
            };
            if let Some(rs) = target {
                if size(rs) != s.replicas() {
                    scale_to(s, rs, s.replicas()).await?;
                }
            }
            return Ok(());
        }
        1 => {
            let target = match new.as_deref_mut() {
                Some(n) if size(n) > 0 => Some(n),
                _ => old.iter_mut().find(|rs| size(rs) > 0),
            };
            if let Some(rs) = target {
                if size(rs) != s.replicas() {
                    scale_to(s, rs, s.replicas()).await?;
                }
            }
            return Ok(());
        }
        _ => {}
    }
    if new.as_ref().is_some_and(|n| saturated(s, n)) {
        for rs in old.iter_mut().filter(|rs| size(rs) > 0) {
            scale_to(s, rs, 0).await?;
        }
        return Ok(());
    }
    if rollout::fenceposts(s).is_err() || max_is_recreate(s) {
        return Ok(());
    }
    let surge = rollout::max_surge(s)?;
    let mut all: Vec<&mut ReplicaSet> = old.iter_mut().filter(|rs| size(rs) > 0).collect();
    if let Some(n) = new {
        if size(n) > 0 {
            all.push(n);
        }
    }
    let current: i32 = all.iter().map(|rs| size(rs)).sum();
    let allowed = if s.replicas() > 0 {
        s.replicas() + surge
    } else {
        0
    };
    let to_add = allowed - current;
    let newer = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if to_add > 0 {
        // Larger first, newer first among equals.
        all.sort_by(|a, b| size(b).cmp(&size(a)).then_with(|| newer(b).cmp(&newer(a))));
    } else {
        // Larger first, older first among equals.
        all.sort_by(|a, b| size(b).cmp(&size(a)).then_with(|| newer(a).cmp(&newer(b))));
    }
    let mut added = 0;
    let mut sizes: Vec<i32> = Vec::with_capacity(all.len());
    for rs in all.iter() {
        let p = if to_add != 0 {
            proportion(s, rs, to_add, added, surge)
        } else {
            0
        };
        sizes.push(size(rs) + p);
        added += p;
    }
    // What rounding left over goes to the largest.
    if let Some(first) = sizes.first_mut() {
        *first = (*first + to_add - added).max(0);
    }
    for (rs, to) in all.into_iter().zip(sizes) {
        scale_to(s, rs, to).await?;
    }
    Ok(())
}

fn max_is_recreate(s: &Pass<'_>) -> bool {
    s.d.spec
        .as_ref()
        .and_then(|x| x.strategy.as_ref())
        .and_then(|x| x.type_.as_deref())
        == Some("Recreate")
}

/// How many replicas `rs` gains (or loses) of `to_add`, in proportion to its share when last sized.
fn proportion(s: &Pass<'_>, rs: &ReplicaSet, to_add: i32, added: i32, surge: i32) -> i32 {
    if size(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if s.replicas() == 0 {
        -size(rs)
    } else {
        let deploy_max = f64::from(s.replicas() + surge);
        let annotated = annotation(rs, MAX_REPLICAS)
            .unwrap_or_else(|| s.d.status.as_ref().and_then(|x| x.replicas).unwrap_or(0));
        if annotated == 0 {
            0
        } else {
            let new_size = f64::from(size(rs)) * deploy_max / f64::from(annotated);
            // Rounded to the nearest, as upstream's math.Round.
            #[allow(clippy::cast_possible_truncation)]
            let r = new_size.round() as i32;
            r - size(rs)
        }
    };
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}
