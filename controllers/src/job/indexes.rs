//! Sets of completion indexes in upstream's text form: sorted intervals such as `1,3-5,7`
//! (`status.completedIndexes`, `status.failedIndexes`).

use std::collections::BTreeSet;

/// Parses `1,3-5,7`; malformed parts and indexes at or past `completions` are dropped, as upstream does.
pub fn parse(s: Option<&str>, completions: i32) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        if let (Ok(a), Ok(b)) = (a, b) {
            for i in a.max(0)..=b.min(completions.saturating_sub(1)) {
                out.insert(i);
            }
        }
    }
    out
}

/// Formats a set as sorted intervals; `None` when empty (the field is then left out).
pub fn format(set: &BTreeSet<i32>) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_intervals() {
        let s = parse(Some("0,2-4,6"), 10);
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![0, 2, 3, 4, 6]);
        assert_eq!(format(&s).as_deref(), Some("0,2-4,6"));
        assert_eq!(format(&parse(Some("x,1-2,9"), 3)).as_deref(), Some("1-2"));
        assert_eq!(format(&BTreeSet::new()), None);
    }
}
