//! The protobuf form of `/openapi/v2`: gnostic's `openapi.v2` messages (github.com/google/gnostic-models,
//! `openapiv2/OpenAPIv2.proto`), which kube-apiserver serves to clients that ask for
//! `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` (kubectl's client-side validation,
//! `kubectl explain --output plaintext-openapiv2`).
//!
//! Only the messages a Kubernetes document uses are declared, with gnostic's names and field numbers; the
//! rest (security, XML, headers, examples, file schemas) is never sent. [`encode`] converts the JSON document
//! the way gnostic's parser does: every `x-` key becomes a `NamedAny` whose `yaml` is the value as YAML.

use prost::Message;
use serde_json::{Map, Value};

/// `Document`.
#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(string, tag = "3")]
    pub host: String,
    #[prost(string, tag = "4")]
    pub base_path: String,
    #[prost(string, repeated, tag = "5")]
    pub schemes: Vec<String>,
    #[prost(string, repeated, tag = "6")]
    pub consumes: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub produces: Vec<String>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
    #[prost(message, repeated, tag = "16")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `Info`.
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(message, repeated, tag = "7")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `Any`: a value as YAML text (its `google.protobuf.Any` field 1 is never set by gnostic's parser).
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// `NamedAny`: one vendor extension (or other map entry of arbitrary values).
#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// `Paths`.
#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "1")]
    pub vendor_extension: Vec<NamedAny>,
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

/// `NamedPathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

/// `PathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "6")]
    pub options: Option<Operation>,
    #[prost(message, optional, tag = "7")]
    pub head: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, repeated, tag = "10")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `Operation`.
#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    #[prost(string, tag = "2")]
    pub summary: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(string, repeated, tag = "10")]
    pub schemes: Vec<String>,
    #[prost(bool, tag = "11")]
    pub deprecated: bool,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `ParametersItem`: a parameter or a reference to one.
#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    #[prost(oneof = "parameters_item::Oneof", tags = "1, 2")]
    pub oneof: Option<parameters_item::Oneof>,
}

/// The alternatives of [`ParametersItem`].
pub mod parameters_item {
    /// `ParametersItem.oneof`.
    // Values live only while one document is encoded, so their size does not matter.
    #[allow(clippy::large_enum_variant)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Parameter(super::Parameter),
        #[prost(message, tag = "2")]
        JsonReference(super::JsonReference),
    }
}

/// `Parameter`: in the body, or elsewhere.
#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(oneof = "parameter::Oneof", tags = "1, 2")]
    pub oneof: Option<parameter::Oneof>,
}

/// The alternatives of [`Parameter`].
pub mod parameter {
    /// `Parameter.oneof`.
    // Values live only while one document is encoded, so their size does not matter.
    #[allow(clippy::large_enum_variant)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        BodyParameter(super::BodyParameter),
        #[prost(message, tag = "2")]
        NonBodyParameter(super::NonBodyParameter),
    }
}

/// `BodyParameter`.
#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
    #[prost(message, repeated, tag = "6")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `NonBodyParameter`: a header, form, query or path parameter.
#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    #[prost(oneof = "non_body_parameter::Oneof", tags = "1, 2, 3, 4")]
    pub oneof: Option<non_body_parameter::Oneof>,
}

/// The alternatives of [`NonBodyParameter`].
pub mod non_body_parameter {
    /// `NonBodyParameter.oneof`. gnostic's header and path sub-schemas have the same fields and numbers, as do
    /// its form-data and query ones, so one Rust type serves each pair.
    // The variants are named after gnostic's message fields, which all end the same way.
    #[allow(clippy::enum_variant_names)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        HeaderParameterSubSchema(super::PathParameterSubSchema),
        #[prost(message, tag = "2")]
        FormDataParameterSubSchema(super::QueryParameterSubSchema),
        #[prost(message, tag = "3")]
        QueryParameterSubSchema(super::QueryParameterSubSchema),
        #[prost(message, tag = "4")]
        PathParameterSubSchema(super::PathParameterSubSchema),
    }
}

/// `QueryParameterSubSchema` (and `FormDataParameterSubSchema`), without the validation keywords keel never
/// publishes.
#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(bool, tag = "5")]
    pub allow_empty_value: bool,
    #[prost(string, tag = "6")]
    pub r#type: String,
    #[prost(string, tag = "7")]
    pub format: String,
    #[prost(string, tag = "9")]
    pub collection_format: String,
    #[prost(message, optional, tag = "10")]
    pub default: Option<Any>,
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
    #[prost(message, repeated, tag = "21")]
    pub r#enum: Vec<Any>,
    #[prost(message, repeated, tag = "23")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `PathParameterSubSchema` (and `HeaderParameterSubSchema`), without the validation keywords keel never
/// publishes.
#[derive(Clone, PartialEq, Message)]
pub struct PathParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub r#type: String,
    #[prost(string, tag = "6")]
    pub format: String,
    #[prost(string, tag = "8")]
    pub collection_format: String,
    #[prost(message, optional, tag = "9")]
    pub default: Option<Any>,
    #[prost(bool, tag = "19")]
    pub unique_items: bool,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, repeated, tag = "22")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `JsonReference`.
#[derive(Clone, PartialEq, Message)]
pub struct JsonReference {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub description: String,
}

/// `Responses`.
#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
    #[prost(message, repeated, tag = "2")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `NamedResponseValue`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

/// `ResponseValue`: a response or a reference to one.
#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    #[prost(oneof = "response_value::Oneof", tags = "1, 2")]
    pub oneof: Option<response_value::Oneof>,
}

/// The alternatives of [`ResponseValue`].
pub mod response_value {
    /// `ResponseValue.oneof`.
    // Values live only while one document is encoded, so their size does not matter.
    #[allow(clippy::large_enum_variant)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Response(super::Response),
        #[prost(message, tag = "2")]
        JsonReference(super::JsonReference),
    }
}

/// `Response`.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
    #[prost(message, repeated, tag = "5")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `SchemaItem`: a schema (gnostic's other alternative, a file schema, is never published by keel).
#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

/// `Definitions`.
#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `NamedSchema`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

/// `Properties`.
#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `TypeItem`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `ItemsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

/// `AdditionalPropertiesItem`: a schema or a boolean.
#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

/// The alternatives of [`AdditionalPropertiesItem`].
pub mod additional_properties_item {
    /// `AdditionalPropertiesItem.oneof`.
    // Values live only while one document is encoded, so their size does not matter.
    #[allow(clippy::large_enum_variant)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Schema(super::Schema),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

/// `ExternalDocs`.
#[derive(Clone, PartialEq, Message)]
pub struct ExternalDocs {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub url: String,
    #[prost(message, repeated, tag = "3")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `Schema` (without `xml`, which keel never publishes).
#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    #[prost(string, tag = "13")]
    pub pattern: String,
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    // Boxed: the schema alternative of `additionalProperties` holds a Schema.
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(string, tag = "26")]
    pub discriminator: String,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, optional, tag = "29")]
    pub external_docs: Option<ExternalDocs>,
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

/// The protobuf encoding of a Swagger 2.0 JSON document. Keys the messages have no field for are left out
/// (gnostic's parser would refuse the document); keel's v2 document is made Swagger 2.0 before this.
pub fn encode(doc: &Value) -> Vec<u8> {
    document(doc).encode_to_vec()
}

fn document(v: &Value) -> Document {
    Document {
        swagger: string(v, "swagger"),
        info: v.get("info").map(|i| Info {
            title: string(i, "title"),
            version: string(i, "version"),
            description: string(i, "description"),
            vendor_extension: extensions(i),
        }),
        host: string(v, "host"),
        base_path: string(v, "basePath"),
        schemes: strings(v, "schemes"),
        consumes: strings(v, "consumes"),
        produces: strings(v, "produces"),
        paths: v.get("paths").and_then(Value::as_object).map(|m| Paths {
            vendor_extension: extensions_of(m),
            path: m
                .iter()
                .filter(|(k, _)| k.starts_with('/'))
                .map(|(name, item)| NamedPathItem {
                    name: name.clone(),
                    value: Some(path_item(item)),
                })
                .collect(),
        }),
        definitions: v
            .get("definitions")
            .and_then(Value::as_object)
            .map(|m| Definitions {
                additional_properties: named_schemas(m),
            }),
        vendor_extension: extensions(v),
    }
}

fn path_item(v: &Value) -> PathItem {
    let op = |k: &str| v.get(k).map(operation);
    PathItem {
        r#ref: string(v, "$ref"),
        get: op("get"),
        put: op("put"),
        post: op("post"),
        delete: op("delete"),
        options: op("options"),
        head: op("head"),
        patch: op("patch"),
        parameters: parameters(v),
        vendor_extension: extensions(v),
    }
}

fn operation(v: &Value) -> Operation {
    Operation {
        tags: strings(v, "tags"),
        summary: string(v, "summary"),
        description: string(v, "description"),
        operation_id: string(v, "operationId"),
        produces: strings(v, "produces"),
        consumes: strings(v, "consumes"),
        parameters: parameters(v),
        responses: v
            .get("responses")
            .and_then(Value::as_object)
            .map(|m| Responses {
                response_code: m
                    .iter()
                    .filter(|(k, _)| !k.starts_with("x-"))
                    .map(|(code, r)| NamedResponseValue {
                        name: code.clone(),
                        value: Some(response(r)),
                    })
                    .collect(),
                vendor_extension: extensions_of(m),
            }),
        schemes: strings(v, "schemes"),
        deprecated: boolean(v, "deprecated"),
        vendor_extension: extensions(v),
    }
}

fn response(v: &Value) -> ResponseValue {
    let oneof = if v.get("$ref").is_some() {
        response_value::Oneof::JsonReference(reference(v))
    } else {
        response_value::Oneof::Response(Response {
            description: string(v, "description"),
            schema: v.get("schema").map(|s| SchemaItem {
                schema: Some(schema(s)),
            }),
            vendor_extension: extensions(v),
        })
    };
    ResponseValue { oneof: Some(oneof) }
}

fn reference(v: &Value) -> JsonReference {
    JsonReference {
        r#ref: string(v, "$ref"),
        description: string(v, "description"),
    }
}

fn parameters(v: &Value) -> Vec<ParametersItem> {
    let Some(list) = v.get("parameters").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|p| {
            let oneof = if p.get("$ref").is_some() {
                parameters_item::Oneof::JsonReference(reference(p))
            } else {
                parameters_item::Oneof::Parameter(parameter(p))
            };
            ParametersItem { oneof: Some(oneof) }
        })
        .collect()
}

fn parameter(v: &Value) -> Parameter {
    use non_body_parameter::Oneof as N;
    let query = || QueryParameterSubSchema {
        required: boolean(v, "required"),
        r#in: string(v, "in"),
        description: string(v, "description"),
        name: string(v, "name"),
        allow_empty_value: boolean(v, "allowEmptyValue"),
        r#type: string(v, "type"),
        format: string(v, "format"),
        collection_format: string(v, "collectionFormat"),
        default: v.get("default").map(any),
        unique_items: boolean(v, "uniqueItems"),
        r#enum: anys(v, "enum"),
        vendor_extension: extensions(v),
    };
    let path = || PathParameterSubSchema {
        required: boolean(v, "required"),
        r#in: string(v, "in"),
        description: string(v, "description"),
        name: string(v, "name"),
        r#type: string(v, "type"),
        format: string(v, "format"),
        collection_format: string(v, "collectionFormat"),
        default: v.get("default").map(any),
        unique_items: boolean(v, "uniqueItems"),
        r#enum: anys(v, "enum"),
        vendor_extension: extensions(v),
    };
    let non_body = match v.get("in").and_then(Value::as_str) {
        Some("body") => {
            return Parameter {
                oneof: Some(parameter::Oneof::BodyParameter(BodyParameter {
                    description: string(v, "description"),
                    name: string(v, "name"),
                    r#in: string(v, "in"),
                    required: boolean(v, "required"),
                    schema: v.get("schema").map(schema),
                    vendor_extension: extensions(v),
                })),
            }
        }
        Some("header") => N::HeaderParameterSubSchema(path()),
        Some("formData") => N::FormDataParameterSubSchema(query()),
        Some("path") => N::PathParameterSubSchema(path()),
        _ => N::QueryParameterSubSchema(query()),
    };
    Parameter {
        oneof: Some(parameter::Oneof::NonBodyParameter(NonBodyParameter {
            oneof: Some(non_body),
        })),
    }
}

fn named_schemas(m: &Map<String, Value>) -> Vec<NamedSchema> {
    m.iter()
        .map(|(name, s)| NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

/// A JSON schema as gnostic's `Schema`; `type` and `items` may be one value or a list, as in JSON.
pub fn schema(v: &Value) -> Schema {
    let list_or_one = |k: &str| -> Vec<&Value> {
        match v.get(k) {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(x) => vec![x],
            None => Vec::new(),
        }
    };
    let additional = v.get("additionalProperties").map(|a| {
        let oneof = match a {
            Value::Bool(b) => additional_properties_item::Oneof::Boolean(*b),
            s => additional_properties_item::Oneof::Schema(schema(s)),
        };
        Box::new(AdditionalPropertiesItem { oneof: Some(oneof) })
    });
    Schema {
        r#ref: string(v, "$ref"),
        format: string(v, "format"),
        title: string(v, "title"),
        description: string(v, "description"),
        default: v.get("default").map(any),
        multiple_of: number(v, "multipleOf"),
        maximum: number(v, "maximum"),
        exclusive_maximum: boolean(v, "exclusiveMaximum"),
        minimum: number(v, "minimum"),
        exclusive_minimum: boolean(v, "exclusiveMinimum"),
        max_length: integer(v, "maxLength"),
        min_length: integer(v, "minLength"),
        pattern: string(v, "pattern"),
        max_items: integer(v, "maxItems"),
        min_items: integer(v, "minItems"),
        unique_items: boolean(v, "uniqueItems"),
        max_properties: integer(v, "maxProperties"),
        min_properties: integer(v, "minProperties"),
        required: strings(v, "required"),
        r#enum: anys(v, "enum"),
        additional_properties: additional,
        r#type: v.get("type").map(|_| TypeItem {
            value: list_or_one("type")
                .into_iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        }),
        items: v.get("items").map(|_| ItemsItem {
            schema: list_or_one("items").into_iter().map(schema).collect(),
        }),
        all_of: v
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(schema).collect())
            .unwrap_or_default(),
        properties: v
            .get("properties")
            .and_then(Value::as_object)
            .map(|m| Properties {
                additional_properties: named_schemas(m),
            }),
        discriminator: string(v, "discriminator"),
        read_only: boolean(v, "readOnly"),
        external_docs: v.get("externalDocs").map(|d| ExternalDocs {
            description: string(d, "description"),
            url: string(d, "url"),
            vendor_extension: extensions(d),
        }),
        example: v.get("example").map(any),
        vendor_extension: extensions(v),
    }
}

fn string(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    crate::object::strings(v.get(field))
}

fn boolean(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn number(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn integer(v: &Value, k: &str) -> i64 {
    v.get(k).and_then(Value::as_i64).unwrap_or(0)
}

fn anys(v: &Value, k: &str) -> Vec<Any> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(any).collect())
        .unwrap_or_default()
}

fn any(v: &Value) -> Any {
    Any { yaml: yaml(v) }
}

fn extensions(v: &Value) -> Vec<NamedAny> {
    v.as_object().map(extensions_of).unwrap_or_default()
}

/// The `x-` keys of an object, in key order.
fn extensions_of(m: &Map<String, Value>) -> Vec<NamedAny> {
    m.iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

/// A value as block YAML. Strings are plain only when no YAML reader can take them for anything else
/// (clients read these with YAML 1.1 parsers, where `on`, `yes` or `n` are booleans); the others are
/// double-quoted, whose escapes are JSON's.
pub fn yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => write_block(&mut out, v, 0),
        Value::Array(a) if !a.is_empty() => write_block(&mut out, v, 0),
        _ => {
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
    out
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

/// Writes a non-empty mapping or sequence, each line indented by `indent` spaces.
fn write_block(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                out.push_str(&pad);
                out.push_str(&string_scalar(k));
                out.push(':');
                if is_block(child) {
                    out.push('\n');
                    write_block(out, child, indent + 2);
                } else {
                    out.push(' ');
                    out.push_str(&scalar(child));
                    out.push('\n');
                }
            }
        }
        Value::Array(a) => {
            for child in a {
                if is_block(child) {
                    // The child's first line starts right after the dash, the rest line up with it.
                    let mut nested = String::new();
                    write_block(&mut nested, child, indent + 2);
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&nested[indent + 2..]);
                } else {
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&scalar(child));
                    out.push('\n');
                }
            }
        }
        _ => {}
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => string_scalar(s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => other.to_string(),
    }
}

fn string_scalar(s: &str) -> String {
    const WORDS: [&str; 10] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan",
    ];
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/'))
        && !WORDS.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_quotes_what_a_yaml_reader_would_retype() {
        assert_eq!(
            yaml(&json!([{"group": "", "kind": "Pod", "version": "v1"}])),
            "- group: \"\"\n  kind: Pod\n  version: v1\n"
        );
        assert_eq!(yaml(&json!("merge")), "merge\n");
        assert_eq!(
            yaml(&json!(["on", "No", "1.0", "a: b", "x\ny", "apps.k8s.io/v1", 3, true, null])),
            "- \"on\"\n- \"No\"\n- \"1.0\"\n- \"a: b\"\n- \"x\\ny\"\n- apps.k8s.io/v1\n- 3\n- true\n- null\n"
        );
        assert_eq!(
            yaml(&json!({"a": {"b": [[1, 2], {}], "c": []}})),
            "a:\n  b:\n    - - 1\n      - 2\n    - {}\n  c: []\n"
        );
    }

    #[test]
    fn schema_keeps_type_items_and_additional_properties() {
        let s = schema(&json!({
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "required": ["a"],
            "properties": {},
        }));
        assert_eq!(s.r#type.map(|t| t.value), Some(vec!["object".to_string()]));
        assert!(s
            .properties
            .is_some_and(|p| p.additional_properties.is_empty()));
        let Some(additional_properties_item::Oneof::Schema(inner)) =
            s.additional_properties.and_then(|a| a.oneof)
        else {
            panic!("additionalProperties is not a schema");
        };
        assert_eq!(
            inner.items.map(|i| i.schema[0].r#type.clone()),
            Some(Some(TypeItem {
                value: vec!["string".into()]
            }))
        );
        let b = schema(&json!({"additionalProperties": false}));
        assert_eq!(
            b.additional_properties.and_then(|a| a.oneof),
            Some(additional_properties_item::Oneof::Boolean(false))
        );
    }
}
