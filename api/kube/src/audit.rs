//! The audit log (kube-apiserver's `--audit-log-path` and `--audit-policy-file`): one `audit.k8s.io/v1`
//! Event per request the policy selects, as a JSON line written when the answer is known
//! (`stage: ResponseComplete`). Without a policy file keel logs every write and every refused request
//! (401, 403) at level Metadata, and nothing else.
//!
//! Levels: `None` and `Metadata` as upstream. `Request` and `RequestResponse` are accepted and logged at
//! `Metadata` (keel does not copy bodies into the log yet); the line's `level` says what was written.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tracing::warn;

use crate::authn::Identity;
use crate::authz::attributes::Attributes;

/// The name of the object a create made (a response extension: the URL of a create names none).
#[derive(Debug, Clone)]
pub(crate) struct CreatedName(pub String);

tokio::task_local! {
    /// The audit annotations of the request this task serves (admission adds them).
    static ANNOTATIONS: std::sync::Mutex<Vec<(String, String)>>;
}

/// Adds an annotation to the audit event of the request being served (a key already set keeps its
/// first value, as upstream's AddAnnotation); nothing happens outside a logged request.
pub(crate) fn annotate(key: String, value: String) {
    let _ = ANNOTATIONS.try_with(|a| {
        if let Ok(mut a) = a.lock() {
            if !a.iter().any(|(k, _)| *k == key) {
                a.push((key, value));
            }
        }
    });
}

/// Runs `fut` collecting the annotations [`annotate`] adds meanwhile.
pub(crate) async fn collecting<F: std::future::Future>(
    fut: F,
) -> (F::Output, Vec<(String, String)>) {
    ANNOTATIONS
        .scope(std::sync::Mutex::new(Vec::new()), async move {
            let out = fut.await;
            let notes = ANNOTATIONS
                .try_with(|a| a.lock().map(|a| a.clone()).unwrap_or_default())
                .unwrap_or_default();
            (out, notes)
        })
        .await
}

/// Why a policy or log does not load.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: {1}")]
    Policy(String, String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct PolicyFile {
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
}

/// Which requests are logged.
#[derive(Debug)]
pub(crate) struct Policy {
    /// None: keel's default (writes and refusals at Metadata).
    rules: Option<Vec<Rule>>,
}

const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

impl Rule {
    /// Upstream's rule matching: every non-empty list must match; resource rules never match a
    /// non-resource request and the other way round.
    fn matches(&self, a: &Attributes) -> bool {
        if !self.users.is_empty() && !self.users.contains(&a.user.user) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !a.user.groups.iter().any(|g| self.user_groups.contains(g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&a.verb) {
            return false;
        }
        match &a.resource {
            Some(r) => {
                if !self.non_resource_urls.is_empty() {
                    return false;
                }
                if !self.namespaces.is_empty() && !self.namespaces.contains(&r.namespace) {
                    return false;
                }
                if self.resources.is_empty() {
                    return true;
                }
                let combined = match &r.subresource {
                    Some(s) => format!("{}/{s}", r.resource),
                    None => r.resource.clone(),
                };
                self.resources.iter().any(|g| {
                    g.group == r.group
                        && (g.resources.is_empty()
                            || g.resources.iter().any(|x| {
                                x == "*"
                                    || *x == combined
                                    || x == &format!("{}/*", r.resource)
                                    || (x.starts_with("*/")
                                        && r.subresource.as_deref() == Some(&x[2..]))
                            }))
                        && (g.resource_names.is_empty()
                            || r.name
                                .as_ref()
                                .is_some_and(|n| g.resource_names.contains(n)))
                })
            }
            None => {
                if !self.resources.is_empty() || !self.namespaces.is_empty() {
                    return false;
                }
                self.non_resource_urls.is_empty()
                    || self.non_resource_urls.iter().any(|u| {
                        u == "*"
                            || *u == a.path
                            || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
                    })
            }
        }
    }
}

impl Policy {
    /// keel's default: writes and refused requests.
    pub(crate) fn default_policy() -> Self {
        Policy { rules: None }
    }

    /// Reads an `audit.k8s.io/v1` Policy file.
    pub(crate) fn load(path: &Path) -> Result<Self, AuditError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| AuditError::Io(name.clone(), e))?;
        let file: PolicyFile = serde_yaml_ng::from_str(&text)
            .map_err(|e| AuditError::Policy(name.clone(), e.to_string()))?;
        if file.kind != "Policy" {
            return Err(AuditError::Policy(
                name,
                format!("kind is {:?}, expected Policy", file.kind),
            ));
        }
        Ok(Policy {
            rules: Some(file.rules),
        })
    }

    fn level(&self, a: &Attributes, code: u16) -> Level {
        match &self.rules {
            None if WRITES.contains(&a.verb.as_str()) || code == 401 || code == 403 => {
                Level::Metadata
            }
            None => Level::None,
            Some(rules) => rules
                .iter()
                .find(|r| r.matches(a))
                .map_or(Level::None, |r| r.level),
        }
    }
}

/// Where events go: a writer task appends each line to the file.
pub(crate) struct AuditLog {
    policy: Policy,
    tx: mpsc::Sender<String>,
}

/// What the log records about one request.
pub(crate) struct Entry<'a> {
    /// The authenticated user (None: anonymous).
    pub user: Option<&'a Identity>,
    /// Who the request acted as, when it impersonated.
    pub impersonated: Option<&'a Identity>,
    pub attrs: &'a Attributes,
    pub uri: &'a str,
    pub user_agent: &'a str,
    pub source: Option<std::net::SocketAddr>,
    pub code: u16,
    pub received: jiff::Timestamp,
    /// What admission added (webhooks' and policies' audit annotations).
    pub annotations: &'a [(String, String)],
}

fn user_json(u: &Identity) -> Value {
    json!({"username": u.user, "groups": u.groups})
}

impl AuditLog {
    /// Opens `path` for appending (mode 0600) and starts the writer.
    pub(crate) fn open(path: PathBuf, policy: Policy) -> Result<Self, AuditError> {
        let name = path.display().to_string();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| AuditError::Io(name.clone(), e))?;
        let _ =
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600));
        let (tx, mut rx) = mpsc::channel::<String>(4096);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                while let Some(line) = rx.blocking_recv() {
                    if let Err(e) = file.write_all(line.as_bytes()) {
                        warn!(file = %name, error = %e, "audit log write failed");
                    }
                }
            })
            .map_err(|e| AuditError::Io(path.display().to_string(), e))?;
        Ok(AuditLog { policy, tx })
    }

    /// Logs one answered request if the policy selects it (never blocks the request: a full queue drops
    /// the line with a warning).
    pub(crate) fn record(&self, e: &Entry<'_>) {
        let level = self.policy.level(e.attrs, e.code);
        if level == Level::None {
            return;
        }
        let mut ev = Map::new();
        ev.insert("kind".into(), json!("Event"));
        ev.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        ev.insert("level".into(), json!("Metadata"));
        ev.insert("auditID".into(), json!(crate::object::new_uid()));
        ev.insert("stage".into(), json!("ResponseComplete"));
        ev.insert("requestURI".into(), json!(e.uri));
        ev.insert("verb".into(), json!(e.attrs.verb));
        ev.insert(
            "user".into(),
            e.user.map(user_json).unwrap_or_else(
                || json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]}),
            ),
        );
        if let Some(i) = e.impersonated {
            ev.insert("impersonatedUser".into(), user_json(i));
        }
        if let Some(s) = e.source {
            ev.insert("sourceIPs".into(), json!([s.ip().to_string()]));
        }
        if !e.user_agent.is_empty() {
            ev.insert("userAgent".into(), json!(e.user_agent));
        }
        if let Some(r) = &e.attrs.resource {
            let mut o = Map::new();
            o.insert("resource".into(), json!(r.resource));
            if !r.namespace.is_empty() {
                o.insert("namespace".into(), json!(r.namespace));
            }
            if let Some(n) = &r.name {
                o.insert("name".into(), json!(n));
            }
            if !r.group.is_empty() {
                o.insert("apiGroup".into(), json!(r.group));
            }
            o.insert("apiVersion".into(), json!(r.version));
            if let Some(s) = &r.subresource {
                o.insert("subresource".into(), json!(s));
            }
            ev.insert("objectRef".into(), Value::Object(o));
        }
        ev.insert(
            "responseStatus".into(),
            json!({"metadata": {}, "code": e.code}),
        );
        let stamp = |t: jiff::Timestamp| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        ev.insert("requestReceivedTimestamp".into(), json!(stamp(e.received)));
        ev.insert(
            "stageTimestamp".into(),
            json!(stamp(jiff::Timestamp::now())),
        );
        let decision = if e.code == 403 { "forbid" } else { "allow" };
        let mut notes = Map::new();
        notes.insert("authorization.k8s.io/decision".into(), json!(decision));
        for (k, v) in e.annotations {
            notes.entry(k.clone()).or_insert_with(|| json!(v));
        }
        ev.insert("annotations".into(), Value::Object(notes));
        let mut line = Value::Object(ev).to_string();
        line.push('\n');
        if self.tx.try_send(line).is_err() {
            warn!("audit log queue full; an event was dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn attrs(method: Method, path: &str) -> Attributes {
        Attributes::of(
            Identity {
                user: "alice".into(),
                groups: vec!["dev".into()],
            },
            &crate::request_info::RequestInfo::parse(&method, path, None),
        )
    }

    #[test]
    fn the_default_policy_and_a_policy_file() {
        let d = Policy::default_policy();
        assert_eq!(
            d.level(&attrs(Method::POST, "/api/v1/namespaces/x/pods"), 201),
            Level::Metadata
        );
        assert_eq!(
            d.level(&attrs(Method::GET, "/api/v1/namespaces/x/pods"), 200),
            Level::None
        );
        assert_eq!(
            d.level(&attrs(Method::GET, "/api/v1/namespaces/x/secrets"), 403),
            Level::Metadata
        );
        let p = Policy {
            rules: Some(
                serde_yaml_ng::from_str::<PolicyFile>(
                    "kind: Policy\nrules:\n- level: None\n  resources: [{group: \"\", resources: [events]}]\n\
                     - level: Metadata\n  userGroups: [dev]\n  namespaces: [x]\n- level: None\n",
                )
                .expect("policy")
                .rules,
            ),
        };
        assert_eq!(
            p.level(&attrs(Method::POST, "/api/v1/namespaces/x/events"), 201),
            Level::None
        );
        assert_eq!(
            p.level(&attrs(Method::GET, "/api/v1/namespaces/x/pods"), 200),
            Level::Metadata
        );
        assert_eq!(
            p.level(&attrs(Method::GET, "/api/v1/namespaces/y/pods"), 200),
            Level::None
        );
        assert_eq!(p.level(&attrs(Method::GET, "/healthz"), 200), Level::None);
    }
}
