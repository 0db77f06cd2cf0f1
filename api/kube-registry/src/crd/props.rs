//! Navigation over a structural schema's nodes (`JSONSchemaProps`): an array's items, a map's values, and
//! the `x-kubernetes-*` extensions that change how a node is pruned, defaulted and validated.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// The schema of an array's items (the one-schema form; tuple forms are refused by the structural check).
pub fn items(s: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match s.items.as_ref()? {
        JSONSchemaPropsOrArray::Schema(b) => Some(b),
        JSONSchemaPropsOrArray::Schemas(v) => v.first(),
    }
}

/// The schema of a map's values (`additionalProperties`), if the node is a map.
pub fn additional(s: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match s.additional_properties.as_ref()? {
        JSONSchemaPropsOrBool::Schema(b) => Some(b),
        JSONSchemaPropsOrBool::Bool(_) => None,
    }
}

/// `additionalProperties: true` (any value kept).
pub fn additional_any(s: &JSONSchemaProps) -> bool {
    matches!(
        s.additional_properties,
        Some(JSONSchemaPropsOrBool::Bool(true))
    )
}

/// `x-kubernetes-preserve-unknown-fields: true`.
pub fn preserves(s: &JSONSchemaProps) -> bool {
    s.x_kubernetes_preserve_unknown_fields == Some(true)
}

/// `x-kubernetes-int-or-string: true`.
pub fn int_or_string(s: &JSONSchemaProps) -> bool {
    s.x_kubernetes_int_or_string == Some(true)
}

/// `x-kubernetes-embedded-resource: true`.
pub fn embedded(s: &JSONSchemaProps) -> bool {
    s.x_kubernetes_embedded_resource == Some(true)
}
