//! Every error the Kubernetes API answers, and its one translation into a `metav1.Status` object.
//!
//! Handlers return [`ApiError`]; [`ApiError::into_response`] is the only place a status code, reason and
//! message shape are decided, so kubectl's `Error from server (<Reason>): <message>` lines match upstream.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Which object an error is about, as `Status.details` names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// API group ("" for core).
    pub group: String,
    /// `details.kind`: the plural resource for most errors, the Kind for `Invalid`.
    pub kind: String,
    /// Object name, if any.
    pub name: String,
}

impl Target {
    /// A target naming a resource (plural) of a group.
    pub fn new(group: &str, resource: &str, name: &str) -> Self {
        Target {
            group: group.to_string(),
            kind: resource.to_string(),
            name: name.to_string(),
        }
    }

    /// `pods "x"` or `deployments.apps "x"`: how upstream names an object in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// One field-level problem of an `Invalid` (422) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// Human text, e.g. `Invalid value: "A": a lowercase RFC 1123 ...`.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A `FieldValueRequired` cause.
    pub fn required(field: &str) -> Self {
        Cause {
            reason: "FieldValueRequired",
            message: "Required value".to_string(),
            field: field.to_string(),
        }
    }

    /// A `FieldValueRequired` cause that says why.
    pub fn required_because(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueRequired",
            message: format!("Required value: {detail}"),
            field: field.to_string(),
        }
    }

    /// A `FieldValueTooLong` cause.
    pub fn too_long(field: &str, max: usize) -> Self {
        Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max} bytes"),
            field: field.to_string(),
        }
    }

    /// A `FieldValueInvalid` cause for `value`, with the rule it breaks.
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {detail}", go_value(value)),
            field: field.to_string(),
        }
    }

    /// A `FieldValueInvalid` cause whose value is already printed as Go's `%#v` would (a `[]string{..}`
    /// that JSON cannot spell).
    pub fn invalid_printed(field: &str, printed: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {printed}: {detail}"),
            field: field.to_string(),
        }
    }

    /// A `FieldValueNotSupported` cause listing the allowed values.
    pub fn not_supported(field: &str, value: &Value, allowed: &[&str]) -> Self {
        let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_value(value),
                list.join(", ")
            ),
            field: field.to_string(),
        }
    }

    /// A `FieldValueForbidden` cause.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.to_string(),
        }
    }

    /// A `FieldValueDuplicate` cause.
    pub fn duplicate(field: &str, value: &Value) -> Self {
        Cause {
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {}", go_value(value)),
            field: field.to_string(),
        }
    }

    /// `field: message`, as upstream joins causes into the Status message.
    fn line(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// A list of strings printed as Go's `%#v` prints a `[]string`: `[]string{"a", "b"}`.
pub fn go_strings(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Values in messages printed as Go's `%#v` would: strings quoted, numbers bare.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// An error answered by the Kubernetes API.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// 400 BadRequest with a free message.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no or unknown credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 Forbidden with a full message.
    #[error("{message}")]
    Forbidden { target: Target, message: String },
    /// 404 for an object.
    #[error("{} \"{}\" not found", .0.qualified(), .0.name)]
    NotFound(Target),
    /// 404 for a path that serves nothing.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// 405: the resource does not support the verb.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed(Target),
    /// 405 with its own message (e.g. creating objects of a terminating CRD).
    #[error("{message}")]
    NotAllowed { target: Target, message: String },
    /// 406: nothing in Accept can be produced.
    #[error("{0}")]
    NotAcceptable(String),
    /// 409 AlreadyExists.
    #[error("{} \"{}\" already exists", .0.qualified(), .0.name)]
    AlreadyExists(Target),
    /// 409 AlreadyExists of a create that carried `generateName` (upstream's `NewGenerateNameConflict`).
    #[error("{} \"{}\" already exists, the server was not able to generate a unique name for the object", .0.qualified(), .0.name)]
    GenerateNameConflict(Target),
    /// 409 Conflict: stale resourceVersion or failed precondition.
    #[error("Operation cannot be fulfilled on {} \"{}\": {detail}", .target.qualified(), .target.name)]
    Conflict { target: Target, detail: String },
    /// 409 Conflict of a server-side apply with other field managers (details carry only the causes).
    #[error("{message}")]
    ApplyConflict { message: String, causes: Vec<Cause> },
    /// 410 Expired: too old resourceVersion or continue token.
    #[error("{0}")]
    Expired(String),
    /// 413: the body is larger than the server accepts.
    #[error("Request entity too large: {0}")]
    TooLarge(String),
    /// 415: unknown Content-Type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422 Invalid with field causes; `target.kind` is the Kind here.
    #[error("{} \"{}\" is invalid: {}", qualified_kind(.target), .target.name, join_causes(.causes))]
    Invalid { target: Target, causes: Vec<Cause> },
    /// 429 TooManyRequests: retry later (an eviction a disruption budget refuses); causes in details.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after: i64,
        causes: Vec<Cause>,
    },
    /// 500.
    #[error("{0}")]
    Internal(String),
    /// 500 with no reason: what upstream answers for an error storage passes through unchanged
    /// (etcd's "database space exceeded").
    #[error("{0}")]
    Unknown(String),
    /// 503: no quorum, store unavailable.
    #[error("{0}")]
    Unavailable(String),
    /// 504: the store did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// A refusal answered with a Status another party chose (an admission webhook's): its code (at
    /// least 400), reason and details pass through as sent.
    #[error("{message}")]
    Refused {
        code: u16,
        reason: String,
        message: String,
        details: Option<Value>,
    },
}

fn qualified_kind(t: &Target) -> String {
    if t.group.is_empty() {
        t.kind.clone()
    } else {
        format!("{}.{}", t.kind, t.group)
    }
}

fn join_causes(causes: &[Cause]) -> String {
    let lines: Vec<String> = causes.iter().map(Cause::line).collect();
    if lines.len() == 1 {
        lines.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", lines.join(", "))
    }
}

impl ApiError {
    /// HTTP status and `Status.reason`.
    pub fn code_reason(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::Forbidden { .. } => (StatusCode::FORBIDDEN, "Forbidden"),
            ApiError::NotFound(_) | ApiError::NoRoute => (StatusCode::NOT_FOUND, "NotFound"),
            ApiError::MethodNotAllowed(_) | ApiError::NotAllowed { .. } => {
                (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed")
            }
            ApiError::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, "NotAcceptable"),
            ApiError::AlreadyExists(_) | ApiError::GenerateNameConflict(_) => {
                (StatusCode::CONFLICT, "AlreadyExists")
            }
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => {
                (StatusCode::CONFLICT, "Conflict")
            }
            ApiError::Expired(_) => (StatusCode::GONE, "Expired"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
            ApiError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType")
            }
            ApiError::Invalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
            ApiError::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            ApiError::Unknown(_) => (StatusCode::INTERNAL_SERVER_ERROR, ""),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
            ApiError::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "Timeout"),
            ApiError::Refused { code, .. } => (
                StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_REQUEST),
                "",
            ),
        }
    }

    /// The `metav1.Status` object for this error.
    pub fn status(&self) -> Value {
        let (code, reason) = self.code_reason();
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "code": code.as_u16(),
        });
        let details = match self {
            ApiError::NotFound(t)
            | ApiError::AlreadyExists(t)
            | ApiError::MethodNotAllowed(t)
            | ApiError::NotAllowed { target: t, .. }
            | ApiError::Forbidden { target: t, .. }
            | ApiError::Conflict { target: t, .. } => Some(details(t, &[])),
            ApiError::Invalid { target, causes } => Some(details(target, causes)),
            ApiError::GenerateNameConflict(t) => {
                let mut d = details(t, &[]);
                d["retryAfterSeconds"] = json!(1);
                Some(d)
            }
            ApiError::ApplyConflict { causes, .. } => Some(details(&Target::default(), causes)),
            ApiError::TooManyRequests {
                retry_after,
                causes,
                ..
            } => {
                let mut d = details(&Target::default(), causes);
                if *retry_after > 0 {
                    d["retryAfterSeconds"] = json!(retry_after);
                }
                Some(d)
            }
            _ => None,
        };
        if let Some(d) = details {
            s["details"] = d;
        }
        if let ApiError::Refused {
            reason, details, ..
        } = self
        {
            s["reason"] = json!(reason);
            if let Some(d) = details {
                s["details"] = d.clone();
            }
        }
        if s["reason"] == "" {
            // StatusReasonUnknown is "", which upstream's JSON leaves out.
            s.as_object_mut().map(|o| o.remove("reason"));
        }
        if matches!(self, ApiError::Unauthorized | ApiError::NoRoute) {
            // Upstream leaves `reason` out of these two generic answers' details but keeps it set.
            s["details"] = json!({});
            if matches!(self, ApiError::NoRoute) {
                s.as_object_mut().map(|o| o.remove("details"));
            }
        }
        s
    }
}

fn details(t: &Target, causes: &[Cause]) -> Value {
    let mut d = serde_json::Map::new();
    if !t.name.is_empty() {
        d.insert("name".into(), Value::String(t.name.clone()));
    }
    if !t.group.is_empty() {
        d.insert("group".into(), Value::String(t.group.clone()));
    }
    if !t.kind.is_empty() {
        d.insert("kind".into(), Value::String(t.kind.clone()));
    }
    if !causes.is_empty() {
        let list: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        d.insert("causes".into(), Value::Array(list));
    }
    Value::Object(d)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, _) = self.code_reason();
        let body = crate::encode::to_vec(&self.status());
        let mut resp = (code, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// The Status a successful delete of a gone object answers.
pub fn delete_success(group: &str, resource: &str, name: &str, uid: &str) -> Value {
    let mut d = json!({"name": name, "kind": resource});
    if !group.is_empty() {
        d["group"] = Value::String(group.to_string());
    }
    if !uid.is_empty() {
        d["uid"] = Value::String(uid.to_string());
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_message_names_group() {
        let e = ApiError::NotFound(Target::new("apps", "deployments", "web"));
        assert_eq!(e.to_string(), "deployments.apps \"web\" not found");
        let s = e.status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "deployments");
        let core = ApiError::NotFound(Target::new("", "pods", "x"));
        assert_eq!(core.to_string(), "pods \"x\" not found");
    }

    #[test]
    fn invalid_joins_causes() {
        let e = ApiError::Invalid {
            target: Target::new("", "ConfigMap", "A"),
            causes: vec![Cause::invalid(
                "metadata.name",
                &json!("A"),
                "a lowercase RFC 1123 subdomain",
            )],
        };
        assert_eq!(
            e.to_string(),
            "ConfigMap \"A\" is invalid: metadata.name: Invalid value: \"A\": a lowercase RFC 1123 subdomain"
        );
        assert_eq!(e.status()["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(e.code_reason().0, StatusCode::UNPROCESSABLE_ENTITY);
    }
}
