//! Field selectors: `f=v`, `f==v`, `f!=v` joined by commas; only the fields a resource declares.

use serde_json::Value;

use crate::object;
use crate::resource::ResourceDef;

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    field: String,
    value: String,
    negated: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<Term>,
}

/// Why a field selector is refused (the text becomes a 400).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FieldError {
    #[error("invalid selector: '{0}'; can't understand '{0}'")]
    Syntax(String),
    #[error("field label not supported: {0}")]
    Unsupported(String),
}

impl FieldSelector {
    /// Parses and checks every field against what `def` supports.
    pub fn parse(s: &str, def: &ResourceDef) -> Result<Self, FieldError> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(FieldError::Syntax(part.to_string()));
            };
            let field = field.trim();
            let supported = field == "metadata.name"
                || (field == "metadata.namespace" && def.namespaced)
                || def.fields.contains(&field)
                || def
                    .custom
                    .as_ref()
                    .is_some_and(|c| c.selectable.iter().any(|f| f == field));
            if !supported {
                return Err(FieldError::Unsupported(field.to_string()));
            }
            terms.push(Term {
                field: field.to_string(),
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// Whether nothing is selected on (matches all).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The exact name this selector pins, if any (`metadata.name=x`), so a list can read one key.
    pub fn exact_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == "metadata.name" && !t.negated)
            .map(|t| t.value.as_str())
    }

    /// Whether `obj` satisfies every term.
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let v = field_value(obj, &t.field);
            (v == t.value) != t.negated
        })
    }
}

/// The string value of a selectable field (upstream renders bools as "true"/"false", missing as "").
fn field_value(obj: &Value, field: &str) -> String {
    let raw = match field {
        // Events' `source` selects on the reporting component.
        "source" => object::path(obj, "source.component"),
        "spec.hostNetwork" => {
            return object::path(obj, field)
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string()
        }
        "spec.unschedulable" => {
            return object::path(obj, field)
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string()
        }
        _ => object::path(obj, field),
    };
    match raw {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;
    use serde_json::json;

    #[test]
    fn pod_fields() {
        let pods = &resource::find("", "v1", "pods").expect("pods");
        let pod = json!({"metadata": {"name": "a", "namespace": "d"}, "spec": {"nodeName": "n1"},
                         "status": {"phase": "Running"}});
        let sel =
            FieldSelector::parse("status.phase=Running,spec.nodeName!=n2", pods).expect("parse");
        assert!(sel.matches(&pod));
        let sel = FieldSelector::parse("metadata.name=b", pods).expect("parse");
        assert!(!sel.matches(&pod));
        assert_eq!(sel.exact_name(), Some("b"));
        assert_eq!(
            FieldSelector::parse("spec.foo=x", pods).expect_err("unsupported"),
            FieldError::Unsupported("spec.foo".into())
        );
        let ns = &resource::find("", "v1", "namespaces").expect("ns");
        assert!(FieldSelector::parse("metadata.namespace=x", ns).is_err());
    }
}
