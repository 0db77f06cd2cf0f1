//! RollingUpdate: surge the new ReplicaSet up while keeping at least `replicas - maxUnavailable` pods
//! available, and scale the old ones down as the new pods become available.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::replicasets::{available, by_creation, new_and_old, scale_to, size};
use super::{history, status, Pass};
use crate::error::{Error, Result};

/// Resolves an int-or-percent against `total`, rounding a percentage up or down.
pub fn scaled(v: Option<&IntOrString>, default: &str, total: i32, round_up: bool) -> Result<i32> {
    let v = v
        .cloned()
        .unwrap_or_else(|| IntOrString::String(default.into()));
    match v {
        IntOrString::Int(i) => Ok(i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| Error::Invalid(format!("invalid value for IntOrString: {s:?}")))?;
            let x = pct * i64::from(total);
            let r = if round_up {
                (x + 99).div_euclid(100)
            } else {
                x.div_euclid(100)
            };
            Ok(i32::try_from(r).unwrap_or(i32::MAX))
        }
    }
}

fn rolling_params(s: &Pass<'_>) -> Option<(Option<IntOrString>, Option<IntOrString>)> {
    let strategy = s.d.spec.as_ref()?.strategy.as_ref();
    if strategy.and_then(|x| x.type_.as_deref()) == Some("Recreate") {
        return None;
    }
    let ru = strategy.and_then(|x| x.rolling_update.as_ref());
    Some((
        ru.and_then(|r| r.max_surge.clone()),
        ru.and_then(|r| r.max_unavailable.clone()),
    ))
}

/// (maxSurge, maxUnavailable) for the Deployment's replicas: surge rounds up, unavailable down, and both
/// zero makes unavailable 1.
pub fn fenceposts(s: &Pass<'_>) -> Result<(i32, i32)> {
    let Some((surge, unavailable)) = rolling_params(s) else {
        return Ok((0, 0));
    };
    let n = s.replicas();
    let surge = scaled(surge.as_ref(), "25%", n, true)?;
    let unavailable = scaled(unavailable.as_ref(), "25%", n, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

/// maxSurge (0 for Recreate).
pub fn max_surge(s: &Pass<'_>) -> Result<i32> {
    Ok(fenceposts(s)?.0)
}

/// maxUnavailable, at most the replicas (0 for Recreate or no replicas).
pub fn max_unavailable(s: &Pass<'_>) -> Result<i32> {
    if rolling_params(s).is_none() || s.replicas() == 0 {
        return Ok(0);
    }
    Ok(fenceposts(s)?.1.min(s.replicas()))
}

/// The size the new ReplicaSet may grow to now.
pub fn new_rs_new_replicas(s: &Pass<'_>, all: &[ReplicaSet], new: &ReplicaSet) -> Result<i32> {
    if rolling_params(s).is_none() {
        return Ok(s.replicas());
    }
    let current: i32 = all.iter().map(size).sum();
    let max_total = s.replicas() + max_surge(s)?;
    if current >= max_total {
        return Ok(size(new));
    }
    let up = (max_total - current).min(s.replicas() - size(new)).max(0);
    Ok(size(new) + up)
}

/// One RollingUpdate pass.
pub async fn rolling(s: &mut Pass<'_>, sets: Vec<ReplicaSet>) -> Result<()> {
    let (new, mut old) = new_and_old(s, sets, true).await?;
    let Some(mut new) = new else {
        return Ok(());
    };
    if reconcile_new(s, &old, &mut new).await? {
        return status::sync_rollout(s, Some(&new), &old).await;
    }
    if reconcile_old(s, &mut old, &new).await? {
        return status::sync_rollout(s, Some(&new), &old).await;
    }
    if status::complete(s, s.d.status.as_ref()) {
        history::cleanup(s, &old).await?;
    }
    status::sync_rollout(s, Some(&new), &old).await
}

async fn reconcile_new(s: &Pass<'_>, old: &[ReplicaSet], new: &mut ReplicaSet) -> Result<bool> {
    let want = s.replicas();
    if size(new) == want {
        return Ok(false);
    }
    if size(new) > want {
        return scale_to(s, new, want).await;
    }
    let mut all = old.to_vec();
    all.push(new.clone());
    let to = new_rs_new_replicas(s, &all, new)?;
    scale_to(s, new, to).await
}

async fn reconcile_old(s: &Pass<'_>, old: &mut [ReplicaSet], new: &ReplicaSet) -> Result<bool> {
    let old_pods: i32 = old.iter().map(size).sum();
    if old_pods == 0 {
        return Ok(false);
    }
    let all_pods = old_pods + size(new);
    let min_available = s.replicas() - max_unavailable(s)?;
    let new_unavailable = size(new) - available(new);
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Ok(false);
    }
    by_creation(old);
    // Unhealthy old pods go first: they cost no availability.
    let mut cleaned = 0;
    for rs in old.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        if size(rs) == 0 || size(rs) == available(rs) {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(size(rs) - available(rs));
        let to = size(rs) - n;
        scale_to(s, rs, to).await?;
        cleaned += n;
    }
    // Then healthy ones, as far as availability allows.
    let available_now: i32 = old.iter().map(available).sum::<i32>() + available(new);
    let mut scaled = 0;
    if available_now > min_available {
        let total = available_now - min_available;
        for rs in old.iter_mut() {
            if scaled >= total {
                break;
            }
            if size(rs) == 0 {
                continue;
            }
            let n = size(rs).min(total - scaled);
            let to = size(rs) - n;
            scale_to(s, rs, to).await?;
            scaled += n;
        }
    }
    Ok(cleaned + scaled > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_as_upstream() {
        let p = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled(Some(&p("25%")), "", 3, true).ok(), Some(1));
        assert_eq!(scaled(Some(&p("25%")), "", 3, false).ok(), Some(0));
        assert_eq!(scaled(Some(&p("25%")), "", 10, true).ok(), Some(3));
        assert_eq!(scaled(Some(&p("25%")), "", 10, false).ok(), Some(2));
        assert_eq!(
            scaled(Some(&IntOrString::Int(2)), "", 10, false).ok(),
            Some(2)
        );
        assert!(scaled(Some(&p("x")), "", 10, false).is_err());
    }
}
