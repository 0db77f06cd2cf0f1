//! Columns and cells of PodTemplates, RuntimeClasses, the admission webhook configurations and the
//! admission policies, as upstream's printers compute them.

use serde_json::{json, Value};

use super::column::{col, Column, AGE, NAME};
use crate::age::since;
use crate::object::path;
use crate::resource::Printer;

fn arr<'a>(o: &'a Value, p: &str) -> &'a [Value] {
    path(o, p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn age(o: &Value) -> Value {
    json!(since(path(o, "metadata.creationTimestamp")))
}

/// Labels as `k=v,k2=v2` in key order, `<none>` when there are none.
fn labels(o: &Value, p: &str) -> String {
    let Some(m) = path(o, p)
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
    else {
        return "<none>".into();
    };
    let mut pairs: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// The columns of these printers.
pub fn columns(p: Printer) -> Vec<Column> {
    match p {
        Printer::PodTemplate => vec![
            NAME,
            col(
                "Containers",
                "string",
                0,
                "Names of each container in the template.",
            ),
            col(
                "Images",
                "string",
                0,
                "Images referenced by each container in the template.",
            ),
            col(
                "Pod Labels",
                "string",
                0,
                "The labels for the pod template.",
            ),
        ],
        Printer::RuntimeClass => vec![
            NAME,
            // Upstream looks its description up under a key ObjectMeta lacks, so it is empty.
            col("Handler", "string", 0, ""),
            AGE,
        ],
        Printer::WebhookConfiguration => vec![
            NAME,
            col(
                "Webhooks",
                "integer",
                0,
                "Webhooks indicates the number of webhooks registered in this configuration",
            ),
            AGE,
        ],
        Printer::ValidatingAdmissionPolicy => vec![
            NAME,
            col(
                "Validations",
                "integer",
                0,
                "Validations indicates the number of validation rules defined in this configuration",
            ),
            col(
                "ParamKind",
                "string",
                0,
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ],
        Printer::ValidatingAdmissionPolicyBinding => vec![
            NAME,
            col(
                "PolicyName",
                "string",
                0,
                "PolicyName indicates the policy definition which the policy binding binded to",
            ),
            col(
                "ParamRef",
                "string",
                0,
                "ParamRef indicates the param resource which sets the configration param",
            ),
            AGE,
        ],
        _ => Vec::new(),
    }
}

/// A policy's paramKind as `apiVersion/Kind`, `<unset>` without one.
fn param_kind(o: &Value) -> String {
    match path(o, "spec.paramKind") {
        Some(k) if k.is_object() => format!(
            "{}/{}",
            k.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            k.get("kind").and_then(Value::as_str).unwrap_or("")
        ),
        _ => "<unset>".into(),
    }
}

/// A binding's paramRef as upstream prints it: `namespace/name` (`*/name` without a namespace), the
/// selector as Go prints a LabelSelector, or `<unset>`.
fn param_ref(o: &Value) -> String {
    let Some(r) = path(o, "spec.paramRef").filter(|r| r.is_object()) else {
        return "<unset>".into();
    };
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    if !s("name").is_empty() {
        let ns = if s("namespace").is_empty() {
            "*"
        } else {
            s("namespace")
        };
        return format!("{ns}/{}", s("name"));
    }
    match r.get("selector").filter(|v| v.is_object()) {
        Some(sel) => go_selector(sel),
        None => "<unset>".into(),
    }
}

/// A LabelSelector as Go's generated `String()` writes it.
fn go_selector(sel: &Value) -> String {
    let mut labels: Vec<(String, String)> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    labels.sort();
    let labels: String = labels.iter().map(|(k, v)| format!("{k}: {v},")).collect();
    let exprs: String = arr(sel, "matchExpressions")
        .iter()
        .map(|e| {
            let vals: Vec<&str> = arr(e, "values").iter().filter_map(Value::as_str).collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.get("key").and_then(Value::as_str).unwrap_or(""),
                e.get("operator").and_then(Value::as_str).unwrap_or(""),
                vals.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

/// The cells of one object for these printers.
pub fn cells(p: Printer, o: &Value) -> Vec<Value> {
    let name = json!(path(o, "metadata.name")
        .and_then(Value::as_str)
        .unwrap_or(""));
    match p {
        Printer::PodTemplate => {
            let containers = arr(o, "template.spec.containers");
            let field = |k: &str| -> Value {
                let v: Vec<&str> = containers
                    .iter()
                    .map(|c| c.get(k).and_then(Value::as_str).unwrap_or(""))
                    .collect();
                json!(v.join(","))
            };
            vec![
                name,
                field("name"),
                field("image"),
                json!(labels(o, "template.metadata.labels")),
            ]
        }
        Printer::RuntimeClass => vec![
            name,
            json!(path(o, "handler").and_then(Value::as_str).unwrap_or("")),
            age(o),
        ],
        Printer::WebhookConfiguration => vec![name, json!(arr(o, "webhooks").len()), age(o)],
        Printer::ValidatingAdmissionPolicy => vec![
            name,
            json!(arr(o, "spec.validations").len()),
            json!(param_kind(o)),
            age(o),
        ],
        Printer::ValidatingAdmissionPolicyBinding => vec![
            name,
            json!(path(o, "spec.policyName")
                .and_then(Value::as_str)
                .unwrap_or("")),
            json!(param_ref(o)),
            age(o),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_templates_list_containers_images_and_labels() {
        let t = json!({"metadata": {"name": "t"}, "template": {"metadata": {"labels": {"b": "2", "a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}, {"name": "d", "image": "nginx"}]}}});
        assert_eq!(
            cells(Printer::PodTemplate, &t),
            vec![
                json!("t"),
                json!("c,d"),
                json!("busybox,nginx"),
                json!("a=1,b=2")
            ]
        );
        let w = json!({"metadata": {"name": "w"}, "webhooks": [{}, {}]});
        assert_eq!(cells(Printer::WebhookConfiguration, &w)[1], json!(2));
    }
}
