//! JSON bodies as upstream's encoder writes them: Go's struct field order (`kind`, `apiVersion`,
//! `metadata`, `spec`, `status`; a Status's `status, message, reason, details, code`; a watch event's
//! `type` then `object`), the zero values of fields without `omitempty` (a new DaemonSet's
//! `status.currentNumberScheduled: 0`, a template's `creationTimestamp: null`), empty `omitempty`
//! fields left out, map keys sorted, times in UTC as `metav1.Time` (to the second) and `MicroTime` (to the
//! microsecond) write them, numbers as Go writes an `int64` or a `float64`, Go's string escaping, and a
//! newline after every body.
//!
//! [`as_stored`] gives a written object the empty values upstream's storage gives back.
//!
//! Objects whose apiVersion and kind [`layout`] does not know (custom resources) are written as
//! upstream writes unstructured objects: keys sorted. Fields an object has beyond its layout are kept,
//! after the known ones.

pub mod layout;

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

use layout::{Field, Layout, Type};

/// The JSON body of `v` as upstream writes it, with its trailing newline.
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    raw(&mut out, v);
    out.push(b'\n');
    out
}

/// One watch event (`{"type":…,"object":…}`), without the newline that ends its line.
pub fn watch_event(kind: &str, object: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"{\"type\":");
    string(&mut out, kind);
    out.extend_from_slice(b",\"object\":");
    raw(&mut out, object);
    out.push(b'}');
    out
}

/// Gives a written object of a built-in kind the empty values upstream's storage gives back: its protobuf
/// encoding has no empty list or map, so one in a field without `omitempty` comes back nil and is written
/// `null` (a Role created with `rules: []` answers `rules: null`). Upstream's dry runs go through the same
/// encoding. Kinds without a layout (custom resources, stored as JSON upstream) are left as they are.
pub fn as_stored(api_version: &str, kind: &str, obj: &mut Value) {
    if let (Some(root), Value::Object(m)) = (Layout::get().root(api_version, kind), obj) {
        nil_empty(root, m);
    }
}

fn nil_empty(name: &str, m: &mut Map<String, Value>) {
    let Some(fields) = Layout::get().fields(name) else {
        return;
    };
    for f in fields {
        match f {
            Field::Inline(s) => nil_empty(s, m),
            Field::Named { name, ty, omit } => {
                if let Some(v) = m.get_mut(name.as_str()) {
                    nil_empty_value(ty, *omit, v);
                }
            }
        }
    }
}

fn nil_empty_value(ty: &Type, omit: bool, v: &mut Value) {
    match (ty, &mut *v) {
        // An empty `omitempty` field is left out either way.
        (Type::Slice(_), Value::Array(a)) if a.is_empty() && !omit => *v = Value::Null,
        (Type::Map(_), Value::Object(m)) if m.is_empty() && !omit => *v = Value::Null,
        (Type::Struct(s), Value::Object(m)) => nil_empty(s, m),
        (Type::Pointer(inner), _) => nil_empty_value(inner, omit, v),
        (Type::Slice(inner), Value::Array(a)) if matches!(**inner, Type::Struct(_)) => {
            for e in a {
                nil_empty_value(inner, false, e);
            }
        }
        (Type::Map(inner), Value::Object(m)) if matches!(**inner, Type::Struct(_)) => {
            for e in m.values_mut() {
                nil_empty_value(inner, false, e);
            }
        }
        _ => {}
    }
}

/// A value whose type is not known from a parent: an object with a known apiVersion and kind gets its
/// kind's layout, anything else is written plainly.
fn raw(out: &mut Vec<u8>, v: &Value) {
    if let Value::Object(m) = v {
        let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
        let av = m.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if !kind.is_empty() {
            if let Some(root) = Layout::get().root(av, kind) {
                structure(out, root, Some(m));
                return;
            }
        }
    }
    plain(out, v);
}

/// A value written as Go writes a `map[string]interface{}`: keys sorted.
fn plain(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => number(out, n),
        Value::String(s) => string(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                plain(out, e);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            out.push(b'{');
            for (i, (k, e)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, k);
                out.push(b':');
                plain(out, e);
            }
            out.push(b'}');
        }
    }
}

/// A struct by its layout; without a layout, plainly.
fn structure(out: &mut Vec<u8>, name: &str, obj: Option<&Map<String, Value>>) {
    let Some(fields) = Layout::get().fields(name) else {
        match obj {
            Some(m) => plain(out, &Value::Object(m.clone())),
            None => out.extend_from_slice(b"{}"),
        }
        return;
    };
    out.push(b'{');
    let mut first = true;
    let mut known: Vec<&str> = Vec::with_capacity(fields.len());
    write_fields(out, fields, obj, &mut first, &mut known);
    if let Some(m) = obj {
        for (k, v) in m {
            if known.contains(&k.as_str()) {
                continue;
            }
            comma(out, &mut first);
            string(out, k);
            out.push(b':');
            plain(out, v);
        }
    }
    out.push(b'}');
}

fn comma(out: &mut Vec<u8>, first: &mut bool) {
    if !*first {
        out.push(b',');
    }
    *first = false;
}

fn write_fields<'a>(
    out: &mut Vec<u8>,
    fields: &'a [Field],
    obj: Option<&Map<String, Value>>,
    first: &mut bool,
    known: &mut Vec<&'a str>,
) {
    for f in fields {
        match f {
            Field::Inline(s) => {
                if let Some(inner) = Layout::get().fields(s) {
                    write_fields(out, inner, obj, first, known);
                }
            }
            Field::Named { name, ty, omit } => {
                known.push(name);
                let v = obj.and_then(|m| m.get(name));
                if left_out(ty, *omit, v) {
                    continue;
                }
                comma(out, first);
                string(out, name);
                out.push(b':');
                value(out, ty, v);
            }
        }
    }
}

/// Whether Go leaves the field out: only with `omitempty`, only for an empty value, and never for a
/// struct value (Go does not consider structs empty, so `metav1.Time` is written as `null`).
fn left_out(ty: &Type, omit: bool, v: Option<&Value>) -> bool {
    if !omit {
        return false;
    }
    let v = match v {
        None | Some(Value::Null) => {
            return !matches!(
                ty,
                Type::Struct(_)
                    | Type::Time
                    | Type::MicroTime
                    | Type::Quantity
                    | Type::IntOrString
                    | Type::Raw
            )
        }
        Some(v) => v,
    };
    match ty {
        Type::String => v.as_str() == Some(""),
        Type::Number => v.as_f64() == Some(0.0),
        Type::Bool => v.as_bool() == Some(false),
        Type::Slice(_) => v.as_array().is_some_and(Vec::is_empty),
        Type::Map(_) => v.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// A field's value by its type; a missing or null value is the type's zero.
fn value(out: &mut Vec<u8>, ty: &Type, v: Option<&Value>) {
    let v = v.filter(|v| !v.is_null());
    match (ty, v) {
        (Type::String, None) => out.extend_from_slice(b"\"\""),
        (Type::Number | Type::IntOrString, None) => out.push(b'0'),
        (Type::Bool, None) => out.extend_from_slice(b"false"),
        (Type::Quantity, None) => out.extend_from_slice(b"\"0\""),
        (
            Type::Time
            | Type::MicroTime
            | Type::Raw
            | Type::Pointer(_)
            | Type::Slice(_)
            | Type::Map(_),
            None,
        ) => out.extend_from_slice(b"null"),
        (Type::Time, Some(Value::String(s))) => string(out, &go_time(s, false)),
        (Type::MicroTime, Some(Value::String(s))) => string(out, &go_time(s, true)),
        (Type::Struct(s), None) => structure(out, s, None),
        (Type::Struct(s), Some(Value::Object(m))) => structure(out, s, Some(m)),
        (Type::Raw, Some(v)) => raw(out, v),
        (Type::Pointer(inner), Some(v)) => value(out, inner, Some(v)),
        (Type::Slice(inner), Some(Value::Array(a))) => {
            out.push(b'[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(out, inner, Some(e));
            }
            out.push(b']');
        }
        (Type::Map(inner), Some(Value::Object(m))) => {
            out.push(b'{');
            for (i, (k, e)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, k);
                out.push(b':');
                value(out, inner, Some(e));
            }
            out.push(b'}');
        }
        // A value of another shape than the type says (not from a decoded object): as it is.
        (_, Some(v)) => plain(out, v),
    }
}

/// A time as `metav1.Time` (`micro` false: whole seconds) or `metav1.MicroTime` writes it: in UTC, with
/// `Z`, the fraction cut (not rounded) as Go's formatting does. A value that is not a time stays as it is.
fn go_time(s: &str, micro: bool) -> Cow<'_, str> {
    let b = s.as_bytes();
    // Most times are already written so (keel writes its own that way): no parse for them.
    let len = if micro { 27 } else { 20 };
    if b.len() == len && b[10] == b'T' && b[len - 1] == b'Z' && (!micro || b[19] == b'.') {
        return Cow::Borrowed(s);
    }
    let Ok(t) = s.parse::<jiff::Timestamp>() else {
        return Cow::Borrowed(s);
    };
    let mut text = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if micro {
        let nanos = t.as_nanosecond().rem_euclid(1_000_000_000);
        text.push_str(&format!(".{:06}", nanos / 1000));
    }
    text.push('Z');
    Cow::Owned(text)
}

/// A number as Go writes what its JSON decoder made of it: an `int64` when it is an integer that fits,
/// otherwise a `float64` (so `2.0` is `2`, `1e21` is `1e+21`).
fn number(out: &mut Vec<u8>, n: &Number) {
    if n.is_i64() {
        out.extend_from_slice(n.to_string().as_bytes());
        return;
    }
    let Some(f) = n.as_f64() else {
        out.extend_from_slice(n.to_string().as_bytes());
        return;
    };
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go's exponent form: a sign always, and no leading zero (`1e+21`, `1e-7`).
        let text = format!("{f:e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let sign = if exp.starts_with('-') { "" } else { "+" };
        out.extend_from_slice(format!("{mantissa}e{sign}{exp}").as_bytes());
    } else {
        // Rust's shortest round-trip digits are Go's (`'f'`, precision -1), without a `.0`.
        out.extend_from_slice(format!("{f}").as_bytes());
    }
}

/// A JSON string as Go's encoder escapes it (HTML characters and U+2028/U+2029 included).
fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let mut start = 0;
    let bytes = s.as_bytes();
    for (i, ch) in s.char_indices() {
        let esc: Option<&[u8]> = match ch {
            '"' => Some(b"\\\""),
            '\\' => Some(b"\\\\"),
            '\n' => Some(b"\\n"),
            '\r' => Some(b"\\r"),
            '\t' => Some(b"\\t"),
            '\u{8}' => Some(b"\\b"),
            '\u{c}' => Some(b"\\f"),
            _ => None,
        };
        let hex = matches!(ch, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') || (ch as u32) < 0x20;
        if esc.is_none() && !hex {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(format!("\\u{:04x}", ch as u32).as_bytes()),
        }
        start = i + ch.len_utf8();
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> String {
        String::from_utf8(to_vec(v)).unwrap_or_default()
    }

    #[test]
    fn objects_have_gos_field_order_and_zero_values() {
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
                        "spec": {"selector": {"matchLabels": {"a": "b"}}}});
        assert_eq!(
            text(&ds),
            concat!(
                r#"{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{"name":"d","creationTimestamp":null},"#,
                r#""spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":null}},"updateStrategy":{}},"#,
                r#""status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}}"#,
                "\n"
            )
        );
    }

    #[test]
    fn a_status_is_written_in_upstreams_order() {
        let s = json!({"apiVersion": "v1", "code": 409, "details": {"kind": "pods", "name": "p"},
                       "kind": "Status", "message": "m", "metadata": {}, "reason": "AlreadyExists",
                       "status": "Failure"});
        assert_eq!(
            text(&s),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"m\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"p\",\"kind\":\"pods\"},\"code\":409}\n"
        );
    }

    #[test]
    fn watch_events_put_the_type_first_and_unknown_kinds_stay_sorted() {
        let cr = json!({"apiVersion": "x.io/v1", "kind": "Thing", "spec": {"b": 1, "a": 2}});
        assert_eq!(
            String::from_utf8(watch_event("ADDED", &cr)).unwrap_or_default(),
            r#"{"type":"ADDED","object":{"apiVersion":"x.io/v1","kind":"Thing","spec":{"a":2,"b":1}}}"#
        );
    }

    #[test]
    fn times_are_written_in_utc_to_their_precision() {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "l", "creationTimestamp": "2024-05-01T12:00:00.9+02:00"},
                           "spec": {"acquireTime": "2024-05-01T10:00:00.000000Z",
                                    "renewTime": "2024-05-01T12:00:05.1234567+02:00"}});
        assert_eq!(
            text(&lease),
            concat!(
                r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l","#,
                r#""creationTimestamp":"2024-05-01T10:00:00Z"},"spec":{"acquireTime":"2024-05-01T10:00:00.000000Z","#,
                r#""renewTime":"2024-05-01T10:00:05.123456Z"}}"#,
                "\n"
            )
        );
        let mut out = Vec::new();
        value(&mut out, &Type::Time, Some(&json!("yesterday")));
        assert_eq!(out, b"\"yesterday\"");
    }

    #[test]
    fn numbers_are_written_as_go_writes_int64_and_float64() {
        let cases = [
            (json!(3), "3"),
            (json!(-7), "-7"),
            (json!(2.0), "2"),
            (json!(1.5), "1.5"),
            (json!(-0.0), "-0"),
            (json!(1e20), "100000000000000000000"),
            (json!(1e21), "1e+21"),
            (json!(1.5e-7), "1.5e-7"),
            (json!(0.000001), "0.000001"),
            (json!(u64::MAX), "18446744073709552000"),
        ];
        for (v, want) in cases {
            let mut out = Vec::new();
            plain(&mut out, &v);
            assert_eq!(String::from_utf8(out).unwrap_or_default(), want, "{v}");
        }
    }

    #[test]
    fn stored_objects_have_nil_for_empty_lists_without_omitempty() {
        let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                              "metadata": {"name": "r", "finalizers": []}, "rules": []});
        as_stored("rbac.authorization.k8s.io/v1", "Role", &mut role);
        assert_eq!(role["rules"], Value::Null);
        // An omitempty list is left out when written, whatever it holds.
        assert_eq!(role["metadata"]["finalizers"], json!([]));
        let mut slice =
            json!({"addressType": "IPv4", "endpoints": [{"addresses": []}], "ports": []});
        as_stored("discovery.k8s.io/v1", "EndpointSlice", &mut slice);
        assert_eq!(
            slice,
            json!({"addressType": "IPv4", "endpoints": [{"addresses": null}], "ports": null})
        );
        let mut custom = json!({"spec": {"list": []}});
        as_stored("x.io/v1", "Thing", &mut custom);
        assert_eq!(custom, json!({"spec": {"list": []}}));
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = Vec::new();
        string(&mut out, "a<b>&\"\n\u{1}\u{2028}é");
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            r#""a\u003cb\u003e\u0026\"\n\u0001\u2028é""#
        );
    }

    #[test]
    fn fields_beyond_the_layout_are_kept_after_the_known_ones() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "zzz": 1, "data": {"k": "v"},
                        "metadata": {"name": "c"}});
        assert_eq!(
            text(&cm),
            "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"c\",\"creationTimestamp\":null},\"data\":{\"k\":\"v\"},\"zzz\":1}\n"
        );
    }
}
