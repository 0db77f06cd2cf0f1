//! One RBAC `PolicyRule` and upstream's matching of a request against it (`rbac.RuleAllows`), plus the
//! compact form escalation errors print.

use serde_json::Value;

use super::attributes::Attributes;

/// A `rules[]` entry of a Role or ClusterRole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// Matches everything in a verb, group or resource list.
pub(crate) const ALL: &str = "*";

fn strings(v: &Value, field: &str) -> Vec<String> {
    crate::object::strings(v.get(field))
}

impl PolicyRule {
    /// Reads one rule from its JSON form (fields missing or of the wrong type read as empty).
    pub fn from_json(v: &Value) -> Self {
        PolicyRule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// Every rule of a role object (`rules`).
    pub fn all_of(role: &Value) -> Vec<Self> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|rs| rs.iter().map(Self::from_json).collect())
            .unwrap_or_default()
    }

    /// The rule as JSON, omitting empty lists as upstream's `omitempty` does (verbs always written).
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("verbs".into(), serde_json::json!(self.verbs));
        for (k, v) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !v.is_empty() {
                m.insert(k.into(), serde_json::json!(v));
            }
        }
        Value::Object(m)
    }

    /// Whether this rule allows the request (upstream's `RuleAllows`).
    pub fn allows(&self, a: &Attributes) -> bool {
        if !verb_matches(&self.verbs, &a.verb) {
            return false;
        }
        match &a.resource {
            Some(r) => {
                let combined = match &r.subresource {
                    Some(s) => format!("{}/{s}", r.resource),
                    None => r.resource.clone(),
                };
                group_matches(&self.api_groups, &r.group)
                    && resource_matches(&self.resources, &combined, r.subresource.as_deref())
                    && name_matches(&self.resource_names, r.name.as_deref())
            }
            None => url_matches(&self.non_resource_urls, &a.path),
        }
    }

    /// Upstream's `CompactString`: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`, each
    /// list as Go's `%q` writes a `[]string`.
    pub fn compact(&self) -> String {
        let mut parts = Vec::new();
        for (label, list) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label}:{}", go_quoted_list(list)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub(crate) fn go_quoted_list(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Go's `%q` of a string (printable ASCII kept, quotes and backslashes escaped).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A verb list allows `verb` when it holds it or `*`.
pub(crate) fn verb_matches(verbs: &[String], verb: &str) -> bool {
    verbs.iter().any(|v| v == ALL || v == verb)
}

/// A group list allows `group` when it holds it or `*`.
pub(crate) fn group_matches(groups: &[String], group: &str) -> bool {
    groups.iter().any(|g| g == ALL || g == group)
}

/// `*` matches every resource and subresource; `*/scale` every resource's scale subresource;
/// otherwise the exact `resource` or `resource/subresource`.
pub(crate) fn resource_matches(
    resources: &[String],
    combined: &str,
    subresource: Option<&str>,
) -> bool {
    resources.iter().any(|r| {
        r == ALL
            || r == combined
            || subresource
                .is_some_and(|s| r.len() == s.len() + 2 && r.starts_with("*/") && &r[2..] == s)
    })
}

/// No names allow every name; otherwise only a named request with one of them.
pub(crate) fn name_matches(names: &[String], name: Option<&str>) -> bool {
    names.is_empty() || name.is_some_and(|n| names.iter().any(|x| x == n))
}

/// `*` matches every path; a trailing `*` matches by prefix; otherwise the exact path.
pub(crate) fn url_matches(urls: &[String], path: &str) -> bool {
    urls.iter().any(|u| {
        u == ALL
            || u == path
            || u.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::Identity;
    use crate::authz::attributes::ResourceAttributes;
    use serde_json::json;

    fn req(
        verb: &str,
        group: &str,
        resource: &str,
        sub: Option<&str>,
        name: Option<&str>,
    ) -> Attributes {
        Attributes {
            user: Identity {
                user: "alice".into(),
                groups: vec![],
            },
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: sub.map(str::to_string),
                namespace: "default".into(),
                name: name.map(str::to_string),
            }),
            path: String::new(),
        }
    }

    #[test]
    fn resources_subresources_and_names() {
        let r = PolicyRule::from_json(&json!({
            "verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/scale"]
        }));
        assert!(r.allows(&req("get", "", "pods", None, Some("p"))));
        assert!(r.allows(&req("list", "", "pods", None, None)));
        assert!(!r.allows(&req("delete", "", "pods", None, Some("p"))));
        assert!(!r.allows(&req("get", "apps", "pods", None, None)));
        assert!(!r.allows(&req("get", "", "pods", Some("log"), Some("p"))));
        assert!(r.allows(&req(
            "get",
            "",
            "replicationcontrollers",
            Some("scale"),
            Some("x")
        )));
        let named = PolicyRule::from_json(&json!({
            "verbs": ["*"], "apiGroups": ["*"], "resources": ["configmaps"], "resourceNames": ["a"]
        }));
        assert!(named.allows(&req("update", "", "configmaps", None, Some("a"))));
        assert!(!named.allows(&req("update", "", "configmaps", None, Some("b"))));
        assert!(!named.allows(&req("list", "", "configmaps", None, None)));
    }

    #[test]
    fn non_resource_urls() {
        let r = PolicyRule::from_json(
            &json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}),
        );
        let mut a = req("get", "", "", None, None);
        a.resource = None;
        a.path = "/healthz".into();
        assert!(r.allows(&a));
        a.path = "/api/v1".into();
        assert!(r.allows(&a));
        a.path = "/metrics".into();
        assert!(!r.allows(&a));
        assert!(!r.allows(&req("get", "", "healthz", None, None)));
    }

    #[test]
    fn compact_form_as_upstream_prints_it() {
        let r = PolicyRule::from_json(
            &json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}),
        );
        assert_eq!(
            r.compact(),
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}"#
        );
    }
}
