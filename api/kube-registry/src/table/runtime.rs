//! Columns and cells of PodTemplates, RuntimeClasses and the admission webhook configurations, as
//! upstream's printers compute them.

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
        _ => Vec::new(),
    }
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
