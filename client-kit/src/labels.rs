//! Label selectors as the API defines them: `matchLabels` and `matchExpressions` (In, NotIn, Exists,
//! DoesNotExist), all ANDed, and their text form (`app=web,tier in (a,b),!canary`). Shared by the
//! controllers and the node's network programmer.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A text selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub struct ParseError(String);

/// Splits on commas outside parentheses.
fn requirements(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn requirement(key: &str, op: &str, values: Vec<String>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: op.to_string(),
        values: (!values.is_empty()).then_some(values),
    }
}

/// Parses a selector's text form (what `labelSelector=` and a Scale's `status.selector` carry): `k=v`,
/// `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`, comma-separated. Empty selects all.
pub fn parse(s: &str) -> Result<LabelSelector, ParseError> {
    let mut exprs = Vec::new();
    if !s.trim().is_empty() {
        for raw in requirements(s) {
            let r = raw.trim();
            let bad = || ParseError(r.to_string());
            if r.is_empty() {
                return Err(bad());
            }
            if let Some(key) = r.strip_prefix('!') {
                exprs.push(requirement(key.trim(), "DoesNotExist", Vec::new()));
            } else if let Some((k, v)) = r.split_once("!=") {
                exprs.push(requirement(k.trim(), "NotIn", vec![v.trim().to_string()]));
            } else if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
                exprs.push(requirement(k.trim(), "In", vec![v.trim().to_string()]));
            } else if let Some(open) = r.find('(') {
                let close = r.rfind(')').filter(|c| *c > open).ok_or_else(bad)?;
                let mut head = r[..open].split_whitespace();
                let (Some(key), Some(op), None) = (head.next(), head.next(), head.next()) else {
                    return Err(bad());
                };
                let op = match op {
                    "in" => "In",
                    "notin" => "NotIn",
                    _ => return Err(bad()),
                };
                let values: Vec<String> = r[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                exprs.push(requirement(key, op, values));
            } else if r.split_whitespace().count() == 1 && !r.contains(')') {
                exprs.push(requirement(r, "Exists", Vec::new()));
            } else {
                return Err(bad());
            }
        }
    }
    Ok(LabelSelector {
        match_labels: None,
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// Whether `selector` selects an object with `labels`. An empty selector selects everything; an
/// unknown operator selects nothing.
pub fn matches(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let have = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_selectors_parse_to_requirements() {
        let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let sel = parse("app=web, tier in (a, b),!canary,zone!=x,track").expect("parses");
        assert!(matches(
            &sel,
            Some(&l(&[("app", "web"), ("tier", "b"), ("track", "1")]))
        ));
        assert!(!matches(
            &sel,
            Some(&l(&[("app", "web"), ("tier", "c"), ("track", "1")]))
        ));
        assert!(!matches(
            &sel,
            Some(&l(&[
                ("app", "web"),
                ("tier", "a"),
                ("track", "1"),
                ("canary", "y")
            ]))
        ));
        let zone_x = l(&[("app", "web"), ("tier", "a"), ("zone", "x"), ("track", "1")]);
        assert!(!matches(&sel, Some(&zone_x)));
        assert!(matches(&parse("").expect("empty"), None));
        assert!(parse("a b c").is_err());
        assert!(parse("a in b)").is_err());
        assert!(parse("a=b,,c").is_err());
    }
}
