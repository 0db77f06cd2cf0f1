//! Resource lists (`{"cpu": "1", "pods": "2"}`) and upstream's quota arithmetic on them.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::quantity::Quantity;

/// Quantities by resource name, in name order.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Reads a resource list from JSON; entries that are not quantities are left out (validation reports them).
pub fn from_value(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v.as_str()?)?)))
        .collect()
}

/// The JSON form of `list`.
pub fn to_value(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, q)| (k.clone(), Value::String(q.to_string())))
            .collect::<Map<_, _>>(),
    )
}

/// `a + b`, key by key (a key of only one side is kept as it is).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        let sum = match out.get(k) {
            Some(have) => have.plus(*q),
            None => *q,
        };
        out.insert(k.clone(), sum);
    }
    out
}

/// `a - b`, key by key (a key only in `b` is subtracted from zero).
pub fn subtract(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        let diff = match out.get(k) {
            Some(have) => have.minus(*q),
            None => Quantity::default().minus(*q),
        };
        out.insert(k.clone(), diff);
    }
    out
}

/// The larger of each key (a key of only one side is kept).
pub fn max(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        match out.get(k) {
            Some(have) if have >= q => {}
            _ => {
                out.insert(k.clone(), *q);
            }
        }
    }
    out
}

/// Only the entries of `list` named in `names`.
pub fn mask<'a>(list: &ResourceList, names: impl IntoIterator<Item = &'a String>) -> ResourceList {
    names
        .into_iter()
        .filter_map(|n| Some((n.clone(), *list.get(n)?)))
        .collect()
}

/// `list` without its zero entries.
pub fn remove_zeros(list: &ResourceList) -> ResourceList {
    list.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(k, q)| (k.clone(), *q))
        .collect()
}

/// Whether every entry of `a` that `b` also names is at most `b`'s; the names that exceed otherwise.
pub fn less_than_or_equal(a: &ResourceList, b: &ResourceList) -> (bool, Vec<String>) {
    let exceeded: Vec<String> = a
        .iter()
        .filter(|(k, q)| b.get(*k).is_some_and(|limit| *q > limit))
        .map(|(k, _)| k.clone())
        .collect();
    (exceeded.is_empty(), exceeded)
}

/// Whether `a` and `b` hold the same quantities under the same names.
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, q)| b.get(k) == Some(q))
}

/// `cpu=1,memory=1Gi`: upstream's form in quota messages.
pub fn pretty(list: &ResourceList) -> String {
    list.iter()
        .map(|(k, q)| format!("{k}={q}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l(v: Value) -> ResourceList {
        from_value(Some(&v))
    }

    #[test]
    fn arithmetic_follows_upstream() {
        let a = l(json!({"cpu": "500m", "memory": "1Gi"}));
        let b = l(json!({"cpu": "1", "pods": "1"}));
        assert_eq!(
            pretty(&add(&a, &b)),
            "cpu=1500m,memory=1Gi,pods=1".to_string()
        );
        assert_eq!(pretty(&subtract(&a, &b)), "cpu=-500m,memory=1Gi,pods=-1");
        assert_eq!(pretty(&max(&a, &b)), "cpu=1,memory=1Gi,pods=1");
        let names = ["cpu".to_string()];
        assert_eq!(pretty(&mask(&a, &names)), "cpu=500m");
        let (ok, over) = less_than_or_equal(&add(&a, &b), &l(json!({"cpu": "1", "memory": "2Gi"})));
        assert!(!ok);
        assert_eq!(over, vec!["cpu".to_string()]);
        assert!(equals(&a, &l(json!({"memory": "1024Mi", "cpu": "0.5"}))));
        assert_eq!(remove_zeros(&l(json!({"cpu": "0", "pods": "1"}))).len(), 1);
        assert_eq!(to_value(&a), json!({"cpu": "500m", "memory": "1Gi"}));
    }
}
