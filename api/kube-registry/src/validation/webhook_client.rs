//! A webhook's `clientConfig` (admission webhooks, CRD conversion webhooks): exactly one of a `url` and a
//! `service` reference, with upstream's checks and messages.

use serde_json::{json, Value};

use super::names::{self, NameRule};
use crate::status::Cause;

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Checks a clientConfig at `at`: exactly one of `url` (https, a host, no user, query or fragment) and `service` (a namespace, a name,
/// a port in range, a path starting with `/`).
pub fn check_client_config(cc: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    let url = cc.and_then(|c| c.get("url")).and_then(Value::as_str);
    let svc = cc.and_then(|c| c.get("service")).filter(|v| !v.is_null());
    match (url, svc) {
        (Some(_), Some(_)) | (None, None) => causes.push(Cause::required_because(
            at,
            "exactly one of url or service is required",
        )),
        (Some(u), None) => check_url(u, &format!("{at}.url"), causes),
        (None, Some(svc)) => check_service(svc, &format!("{at}.service"), causes),
    }
}

/// How upstream ends its URL messages.
const URL_FORM: &str = "; desired format: https://host[/path]";

fn check_url(u: &str, at: &str, causes: &mut Vec<Cause>) {
    let parsed = match url::Url::parse(u) {
        Ok(p) => p,
        Err(e) => {
            causes.push(Cause::required_because(
                at,
                &format!("url must be a valid URL: {e}{URL_FORM}"),
            ));
            return;
        }
    };
    if parsed.scheme() != "https" {
        causes.push(Cause::invalid(
            at,
            &json!(parsed.scheme()),
            &format!("'https' is the only allowed URL scheme{URL_FORM}"),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        causes.push(Cause::invalid(
            at,
            &json!(u),
            &format!("host must be specified{URL_FORM}"),
        ));
    }
    let problems = [
        (
            !parsed.username().is_empty() || parsed.password().is_some(),
            "user information is not permitted in the URL",
        ),
        (
            parsed.fragment().is_some(),
            "fragments are not permitted in the URL",
        ),
        (
            parsed.query().is_some(),
            "query parameters are not permitted in the URL",
        ),
    ];
    for (bad, msg) in problems {
        if bad {
            causes.push(Cause::invalid(at, &json!(u), msg));
        }
    }
}

fn check_service(svc: &Value, at: &str, causes: &mut Vec<Cause>) {
    for key in ["name", "namespace"] {
        if s(svc, key).unwrap_or("").is_empty() {
            causes.push(Cause::required_because(
                &format!("{at}.{key}"),
                &format!("service {key} is required"),
            ));
        }
    }
    if let Some(p) = svc.get("port").and_then(Value::as_i64) {
        if !(1..=65535).contains(&p) {
            causes.push(Cause::invalid(
                &format!("{at}.port"),
                &json!(p),
                "port is not valid: must be between 1 and 65535, inclusive",
            ));
        }
    }
    let p = s(svc, "path").unwrap_or("");
    if p.is_empty() || p == "/" {
        return;
    }
    let f = format!("{at}.path");
    if p == "//" {
        causes.push(Cause::invalid(&f, &json!(p), "segment[0] may not be empty"));
        return;
    }
    let Some(rest) = p.strip_prefix('/') else {
        causes.push(Cause::invalid(&f, &json!(p), "must start with a '/'"));
        return;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    for (i, seg) in rest.split('/').enumerate() {
        if seg.is_empty() {
            causes.push(Cause::invalid(
                &f,
                &json!(p),
                &format!("segment[{i}] may not be empty"),
            ));
        } else if let Err(e) = names::check(NameRule::Subdomain, seg) {
            causes.push(Cause::invalid(&f, &json!(p), &format!("segment[{i}]: {e}")));
        }
    }
}
