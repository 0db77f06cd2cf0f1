//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, joined by commas (AND).

use serde_json::{Map, Value};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Why a selector does not parse (the text becomes a 400).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("unable to parse requirement: {0}")]
pub struct ParseError(String);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
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

fn check_key(k: &str) -> Result<String, ParseError> {
    let valid = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(k.to_string())
    } else {
        Err(ParseError(format!("invalid label key \"{k}\"")))
    }
}

fn check_value(v: &str) -> Result<String, ParseError> {
    let valid = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(v.to_string())
    } else {
        Err(ParseError(format!("invalid label value: \"{v}\"")))
    }
}

fn parse_set(rest: &str) -> Result<Vec<String>, ParseError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ParseError(format!("expected a parenthesised set, found \"{rest}\"")))?;
    inner
        .split(',')
        .map(|v| check_value(v.trim()))
        .collect::<Result<Vec<_>, _>>()
}

fn parse_one(part: &str) -> Result<Requirement, ParseError> {
    let p = part.trim();
    if let Some(k) = p.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(check_key(k.trim())?));
    }
    if let Some((k, v)) = p.split_once("!=") {
        return Ok(Requirement::NotEquals(
            check_key(k.trim())?,
            check_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = p.split_once("==") {
        return Ok(Requirement::Equals(
            check_key(k.trim())?,
            check_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = p.split_once('=') {
        return Ok(Requirement::Equals(
            check_key(k.trim())?,
            check_value(v.trim())?,
        ));
    }
    let words: Vec<&str> = p.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let key = check_key(words[0])?;
        let rest = words[1].trim_start();
        if let Some(set) = rest.strip_prefix("notin") {
            return Ok(Requirement::NotIn(key, parse_set(set)?));
        }
        if let Some(set) = rest.strip_prefix("in") {
            return Ok(Requirement::In(key, parse_set(set)?));
        }
        return Err(ParseError(format!("unknown operator in \"{p}\"")));
    }
    Ok(Requirement::Exists(check_key(p)?))
}

impl LabelSelector {
    /// Parses the query-parameter form.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        let reqs = split_top(s)
            .into_iter()
            .map(parse_one)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LabelSelector { reqs })
    }

    /// The selector of a plain label map (`{"app": "web"}`, a ReplicationController's or a Service's).
    pub fn from_map(map: &Value) -> Self {
        LabelSelector::from_object(&serde_json::json!({ "matchLabels": map }))
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub fn from_object(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::Equals(
                    k.clone(),
                    v.as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                match e
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "In" => reqs.push(Requirement::In(key, values)),
                    "NotIn" => reqs.push(Requirement::NotIn(key, values)),
                    "Exists" => reqs.push(Requirement::Exists(key)),
                    "DoesNotExist" => reqs.push(Requirement::DoesNotExist(key)),
                    _ => {}
                }
            }
        }
        LabelSelector { reqs }
    }

    /// Whether this selector selects nothing in particular (matches all).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }

    /// The string form (`app=web,tier in (a,b)`), as `Scale.status.selector` carries it.
    pub fn to_query(&self) -> String {
        let parts: Vec<String> = self
            .reqs
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
            })
            .collect();
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn every_operator() {
        let l = labels(json!({"app": "web", "tier": "fe"}));
        let ok = |s: &str| LabelSelector::parse(s).expect(s).matches(Some(&l));
        assert!(ok("app=web"));
        assert!(ok("app==web,tier=fe"));
        assert!(!ok("app!=web"));
        assert!(ok("tier in (fe, be)"));
        assert!(!ok("tier notin (fe)"));
        assert!(ok("app"));
        assert!(ok("!missing"));
        assert!(!ok("!app"));
        assert!(ok("x notin (a)"));
        assert!(ok(""));
    }

    #[test]
    fn bad_selectors_are_errors() {
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn from_object_and_back() {
        let s = LabelSelector::from_object(&json!({"matchLabels": {"app": "web"}}));
        assert_eq!(s.to_query(), "app=web");
    }
}
