//! LimitRanges (upstream's `ValidateLimitRange`): each limit's amounts are quantities, a Pod limit has no
//! defaults, and per resource min ≤ default request ≤ default ≤ max, with a limit/request ratio of at least
//! 1 that max/min can reach.

use std::collections::BTreeSet;

use keel_client_kit::quantity::Quantity;
use serde_json::{json, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct LimitRange;

impl Strategy for LimitRange {
    /// Upstream's defaults of a Container limit: `default` from `max`, then `defaultRequest` from
    /// `default`, then from `min`.
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(limits) = obj
            .pointer_mut("/spec/limits")
            .and_then(Value::as_array_mut)
        else {
            return;
        };
        for l in limits {
            if l.get("type").and_then(Value::as_str) != Some("Container") {
                continue;
            }
            let Some(l) = l.as_object_mut() else {
                continue;
            };
            for (from, to) in [
                ("max", "default"),
                ("default", "defaultRequest"),
                ("min", "defaultRequest"),
            ] {
                let source = l
                    .get(from)
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let target = l.entry(to).or_insert_with(|| json!({}));
                if let Some(target) = target.as_object_mut() {
                    for (k, v) in source {
                        target.entry(k).or_insert(v);
                    }
                }
            }
            for f in ["default", "defaultRequest"] {
                if l.get(f)
                    .and_then(Value::as_object)
                    .is_some_and(|m| m.is_empty())
                {
                    l.remove(f);
                }
            }
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let limits = obj.pointer("/spec/limits").and_then(Value::as_array);
        for (i, limit) in limits.into_iter().flatten().enumerate() {
            item(limit, &format!("spec.limits[{i}]"), &mut causes);
        }
        causes
    }
}

fn item(limit: &Value, at: &str, causes: &mut Vec<Cause>) {
    let kind = limit.get("type").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        causes.push(Cause::required(&format!("{at}.type")));
    }
    if kind == "Pod" {
        for f in ["default", "defaultRequest"] {
            if limit
                .get(f)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
            {
                causes.push(Cause::forbidden(
                    &format!("{at}.{f}"),
                    "may not be specified when `type` is 'Pod'",
                ));
            }
        }
    }
    let read = |f: &str, causes: &mut Vec<Cause>| -> Vec<(String, Quantity)> {
        let mut out = Vec::new();
        for (k, v) in limit
            .get(f)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            match v.as_str().and_then(Quantity::parse) {
                Some(q) if q.is_negative() => causes.push(Cause::invalid(
                    &format!("{at}.{f}[{k}]"),
                    &json!(q.to_string()),
                    "must be greater than or equal to 0",
                )),
                Some(q) => out.push((k.clone(), q)),
                None => causes.push(Cause::invalid(
                    &format!("{at}.{f}[{k}]"),
                    v,
                    "must be a quantity",
                )),
            }
        }
        out
    };
    let max = read("max", causes);
    let min = read("min", causes);
    let default = read("default", causes);
    let default_request = read("defaultRequest", causes);
    let ratio = read("maxLimitRequestRatio", causes);
    let get = |l: &[(String, Quantity)], k: &str| l.iter().find(|(n, _)| n == k).map(|(_, q)| *q);
    let keys: BTreeSet<&String> = [&max, &min, &default, &default_request, &ratio]
        .into_iter()
        .flat_map(|l| l.iter().map(|(k, _)| k))
        .collect();
    for k in keys {
        let (mx, mn, d, dr, r) = (
            get(&max, k),
            get(&min, k),
            get(&default, k),
            get(&default_request, k),
            get(&ratio, k),
        );
        let invalid = |f: &str, v: Quantity, detail: String| {
            Cause::invalid(&format!("{at}.{f}[{k}]"), &json!(v.to_string()), &detail)
        };
        if let (Some(mn), Some(mx)) = (mn, mx) {
            if mn > mx {
                causes.push(invalid(
                    "min",
                    mn,
                    format!("min value {mn} is greater than max value {mx}"),
                ));
            }
        }
        if let (Some(dr), Some(mn)) = (dr, mn) {
            if mn > dr {
                causes.push(invalid(
                    "defaultRequest",
                    dr,
                    format!("min value {mn} is greater than default request value {dr}"),
                ));
            }
        }
        if let (Some(dr), Some(mx)) = (dr, mx) {
            if dr > mx {
                causes.push(invalid(
                    "defaultRequest",
                    dr,
                    format!("default request value {dr} is greater than max value {mx}"),
                ));
            }
        }
        if let (Some(dr), Some(d)) = (dr, d) {
            if dr > d {
                causes.push(invalid(
                    "defaultRequest",
                    dr,
                    format!("default request value {dr} is greater than default limit value {d}"),
                ));
            }
        }
        if let (Some(d), Some(mn)) = (d, mn) {
            if mn > d {
                causes.push(invalid(
                    "default",
                    mn,
                    format!("min value {mn} is greater than default value {d}"),
                ));
            }
        }
        if let (Some(d), Some(mx)) = (d, mx) {
            if d > mx {
                causes.push(invalid(
                    "default",
                    mx,
                    format!("default value {d} is greater than max value {mx}"),
                ));
            }
        }
        if let Some(r) = r {
            if r < Quantity::count(1) {
                causes.push(invalid(
                    "maxLimitRequestRatio",
                    r,
                    format!("ratio {r} is less than 1"),
                ));
            }
            if let (Some(mn), Some(mx)) = (mn, mx) {
                if mn.milli() > 0 {
                    let most = mx.milli() as f64 / mn.milli() as f64;
                    if (r.milli() as f64 / 1000.0) > most {
                        causes.push(invalid(
                            "maxLimitRequestRatio",
                            r,
                            format!("ratio {r} is greater than max/min = {most:.6}"),
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn check(v: Value) -> Vec<String> {
        let def = resource::find("", "v1", "limitranges").expect("def");
        LimitRange
            .validate(&def, &v)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn container_defaults_follow_max_and_min() {
        let def = resource::find("", "v1", "limitranges").expect("def");
        let mut v = json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"}}]}});
        LimitRange.set_defaults(&def, &mut v);
        assert_eq!(
            v["spec"]["limits"][0],
            json!({"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"},
                   "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1", "memory": "64Mi"}})
        );
    }

    #[test]
    fn ordering_of_min_defaults_and_max() {
        assert!(check(json!({"spec": {"limits": [{"type": "Container",
            "min": {"cpu": "100m"}, "defaultRequest": {"cpu": "200m"}, "default": {"cpu": "500m"}, "max": {"cpu": "1"}}]}})).is_empty());
        assert_eq!(
            check(json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "2Gi"}, "max": {"memory": "1Gi"}}]}})),
            vec!["spec.limits[0].default[memory]: Invalid value: \"1Gi\": default value 2Gi is greater than max value 1Gi"]
        );
        assert_eq!(
            check(json!({"spec": {"limits": [{"type": "Pod", "default": {"cpu": "1"}}]}})),
            vec!["spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'"]
        );
        assert_eq!(
            check(json!({"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}}]}})),
            vec!["spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: \"500m\": ratio 500m is less than 1"]
        );
    }
}
