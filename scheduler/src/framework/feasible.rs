//! percentageOfNodesToScore: once this many feasible nodes are found the scheduler stops filtering (and
//! scores only those), so large clusters cost less per pod. Adaptive by default, as upstream.

/// Below this many nodes every node is checked, and at least this many feasible nodes are looked for.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;

/// How many feasible nodes to look for among `all` nodes with `percentage` (0 = adaptive:
/// `max(50 - all/125, 5)` percent, at least 100 nodes).
pub fn num_feasible_nodes_to_find(percentage: i64, all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return all;
    }
    let n = i64::try_from(all).unwrap_or(i64::MAX);
    let pct = if percentage <= 0 {
        (50 - n / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    } else {
        percentage
    };
    let found = usize::try_from(n.saturating_mul(pct) / 100).unwrap_or(all);
    found.max(MIN_FEASIBLE_NODES_TO_FIND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_examples() {
        assert_eq!(num_feasible_nodes_to_find(0, 3), 3);
        assert_eq!(num_feasible_nodes_to_find(0, 99), 99);
        assert_eq!(num_feasible_nodes_to_find(0, 500), 230);
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(0, 3000), 780);
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        assert_eq!(num_feasible_nodes_to_find(0, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(0, 150), 100);
        assert_eq!(num_feasible_nodes_to_find(100, 5000), 5000);
        assert_eq!(num_feasible_nodes_to_find(1, 5000), 100);
    }
}
