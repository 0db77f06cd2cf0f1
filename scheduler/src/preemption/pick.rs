//! pickOneNodeForPreemption: among the candidate nodes, each criterion in turn keeps the nodes that
//! score best on it, until one is left: fewest PodDisruptionBudget violations, lowest priority of the
//! most important victim, smallest sum of victim priorities, fewest victims, latest start among the
//! most important victims; then the first.

use super::victims::{start_time, Victims};

/// The index of the chosen candidate (None when there are none).
pub fn pick(candidates: &[(String, Victims)]) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    type Criterion = fn(&Victims) -> i64;
    let criteria: [Criterion; 5] = [
        |v| -(v.pdb_violations as i64),
        |v| -i64::from(v.pods.first().map_or(i32::MIN, |p| p.priority)),
        // Shifted by 2^31 so that pods of negative priority still add up to more than fewer of them.
        |v| {
            -v.pods
                .iter()
                .map(|p| i64::from(p.priority) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        },
        |v| -(v.pods.len() as i64),
        |v| {
            let top = v.pods.first().map_or(i32::MIN, |p| p.priority);
            v.pods
                .iter()
                .filter(|p| p.priority == top)
                .map(|p| start_time(p).as_nanosecond() as i64)
                .min()
                .unwrap_or(i64::MIN)
        },
    ];
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    for f in criteria {
        let best = left.iter().map(|&i| f(&candidates[i].1)).max()?;
        left.retain(|&i| f(&candidates[i].1) == best);
        if left.len() == 1 {
            break;
        }
    }
    left.first().copied()
}
