//! Protobuf wire format → Kubernetes JSON, driven by [`super::schema`].
//!
//! Kubernetes' Go types marshal every non-pointer field, zero or not, so decoded objects carry zero values
//! Go's JSON encoding would omit (`namespace: ""`, `paused: false`). Those are dropped, except for fields
//! whose zero is a meaningful explicit value (`replicas: 0`, `runAsUser: 0`, ...), listed in
//! [`KEEP_ZERO`]. The well-known wrapper messages (Time, MicroTime, Quantity, IntOrString, RawExtension,
//! FieldsV1, Duration) become their JSON forms.

use base64::Engine;
use serde_json::{json, Map, Value};

use super::schema::{is_wrapper, messages, FieldType, Message};

/// Deepest nesting accepted (Kubernetes objects are far shallower).
const MAX_DEPTH: usize = 64;

/// Pointer fields whose zero value means something, so it is kept.
const KEEP_ZERO: &[&str] = &[
    "replicas",
    "automountServiceAccountToken",
    "completions",
    "parallelism",
    "backoffLimit",
    "backoffLimitPerIndex",
    "activeDeadlineSeconds",
    "terminationGracePeriodSeconds",
    "revisionHistoryLimit",
    "progressDeadlineSeconds",
    "successfulJobsHistoryLimit",
    "failedJobsHistoryLimit",
    "startingDeadlineSeconds",
    "ttlSecondsAfterFinished",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "runAsNonRoot",
    "readOnlyRootFilesystem",
    "allowPrivilegeEscalation",
    "privileged",
    "defaultMode",
    "mode",
    "optional",
    "expirationSeconds",
    "storageClassName",
    "exitCode",
    "partition",
    "maxUnavailable",
    "minAvailable",
    "leaseDurationSeconds",
    "leaseTransitions",
    "gracePeriodSeconds",
];

/// Why a payload does not decode.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("protobuf: {0}")]
pub struct DecodeError(pub String);

fn err(s: impl Into<String>) -> DecodeError {
    DecodeError(s.into())
}

fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut out = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or_else(|| err("truncated varint"))?;
        *buf = rest;
        out |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(err("varint too long"))
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if buf.len() < n {
        return Err(err("truncated field"));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// One field as it came off the wire.
enum Raw<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Fixed32([u8; 4]),
    Bytes(&'a [u8]),
}

fn next_field<'a>(buf: &mut &'a [u8]) -> Result<(u32, Raw<'a>), DecodeError> {
    let key = varint(buf)?;
    let tag = u32::try_from(key >> 3).map_err(|_| err("field number too large"))?;
    let raw = match key & 7 {
        0 => Raw::Varint(varint(buf)?),
        1 => Raw::Fixed64(take(buf, 8)?.try_into().map_err(|_| err("fixed64"))?),
        2 => {
            let n = usize::try_from(varint(buf)?).map_err(|_| err("length too large"))?;
            Raw::Bytes(take(buf, n)?)
        }
        5 => Raw::Fixed32(take(buf, 4)?.try_into().map_err(|_| err("fixed32"))?),
        wt => return Err(err(format!("unsupported wire type {wt}"))),
    };
    Ok((tag, raw))
}

fn go_duration(nanos: i64) -> String {
    let neg = nanos < 0;
    let mut n = nanos.unsigned_abs();
    let h = n / 3_600_000_000_000;
    n %= 3_600_000_000_000;
    let m = n / 60_000_000_000;
    n %= 60_000_000_000;
    let s = n as f64 / 1e9;
    let body = if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// Converts the decoded well-known wrapper messages to their JSON forms.
fn special(name: &str, obj: Map<String, Value>) -> Value {
    let int = |k: &str| obj.get(k).and_then(Value::as_i64).unwrap_or(0);
    match name {
        "apimachinery.pkg.apis.meta.v1.Time" | "apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let (secs, nanos) = (int("seconds"), int("nanos"));
            if secs == 0 && nanos == 0 {
                return Value::Null;
            }
            let Ok(t) = jiff::Timestamp::new(secs, nanos as i32) else {
                return Value::Null;
            };
            if name.ends_with("MicroTime") {
                json!(t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
            } else {
                json!(crate::object::timestamp(t))
            }
        }
        "apimachinery.pkg.apis.meta.v1.Duration" => json!(go_duration(int("duration"))),
        "apimachinery.pkg.api.resource.Quantity" => {
            obj.get("string").cloned().unwrap_or_else(|| json!("0"))
        }
        "apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                obj.get("strVal").cloned().unwrap_or_else(|| json!(""))
            } else {
                json!(int("intVal"))
            }
        }
        "apimachinery.pkg.runtime.RawExtension" | "apimachinery.pkg.apis.meta.v1.FieldsV1" => {
            let raw = obj
                .get("raw")
                .and_then(Value::as_str)
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .unwrap_or_default();
            serde_json::from_slice(&raw).unwrap_or(Value::Null)
        }
        _ => Value::Object(obj),
    }
}

fn scalar(ty: &FieldType, raw: Raw<'_>, depth: usize) -> Result<Value, DecodeError> {
    Ok(match (ty, raw) {
        (FieldType::String, Raw::Bytes(b)) => {
            json!(std::str::from_utf8(b).map_err(|_| err("string is not UTF-8"))?)
        }
        (FieldType::Bytes, Raw::Bytes(b)) => {
            json!(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (FieldType::Bool, Raw::Varint(v)) => json!(v != 0),
        (FieldType::Int32, Raw::Varint(v)) => json!(v as i64 as i32),
        (FieldType::Int64, Raw::Varint(v)) => json!(v as i64),
        (FieldType::Double, Raw::Fixed64(b)) => json!(f64::from_le_bytes(b)),
        (FieldType::Float, Raw::Fixed32(b)) => json!(f32::from_le_bytes(b)),
        (FieldType::Message(name), Raw::Bytes(b)) => message(name, b, depth + 1)?,
        (FieldType::Map(_), _) => return Err(err("map value outside an entry")),
        _ => return Err(err("wire type does not match the field's type")),
    })
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        _ => false,
    }
}

fn decode_fields(
    msg: &Message,
    mut buf: &[u8],
    depth: usize,
) -> Result<Map<String, Value>, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(err("message nested too deeply"));
    }
    let mut out = Map::new();
    while !buf.is_empty() {
        let (tag, raw) = next_field(&mut buf)?;
        let Some(field) = msg.fields.get(&tag) else {
            continue;
        };
        match &field.ty {
            FieldType::Map(value_ty) => {
                let Raw::Bytes(mut entry) = raw else {
                    return Err(err("map entry is not length-delimited"));
                };
                let (mut key, mut value) = (String::new(), None);
                while !entry.is_empty() {
                    let (t, r) = next_field(&mut entry)?;
                    match t {
                        1 => {
                            if let Value::String(s) = scalar(&FieldType::String, r, depth)? {
                                key = s;
                            }
                        }
                        2 => value = Some(scalar(value_ty, r, depth)?),
                        _ => {}
                    }
                }
                let value = value.unwrap_or_else(|| match **value_ty {
                    FieldType::String | FieldType::Bytes => json!(""),
                    _ => Value::Null,
                });
                let m = out.entry(field.json.clone()).or_insert_with(|| json!({}));
                if let Some(m) = m.as_object_mut() {
                    m.insert(key, value);
                }
            }
            ty => {
                // Packed repeated numbers (not used by Kubernetes' Go encoder, but valid protobuf).
                if field.repeated
                    && matches!(ty, FieldType::Int32 | FieldType::Int64 | FieldType::Bool)
                {
                    if let Raw::Bytes(mut packed) = raw {
                        let arr = out.entry(field.json.clone()).or_insert_with(|| json!([]));
                        while !packed.is_empty() {
                            let v = scalar(ty, Raw::Varint(varint(&mut packed)?), depth)?;
                            if let Some(a) = arr.as_array_mut() {
                                a.push(v);
                            }
                        }
                        continue;
                    }
                }
                let v = scalar(ty, raw, depth)?;
                if field.inline {
                    // Go's `json:",inline"`: the message's fields belong to this object.
                    if let Value::Object(inner) = v {
                        out.extend(inner);
                    }
                    continue;
                }
                if field.repeated {
                    let arr = out.entry(field.json.clone()).or_insert_with(|| json!([]));
                    if let Some(a) = arr.as_array_mut() {
                        a.push(v);
                    }
                } else {
                    out.insert(field.json.clone(), v);
                }
            }
        }
    }
    out.retain(|k, v| !(is_zero(v) && (v.is_null() || !KEEP_ZERO.contains(&k.as_str()))));
    Ok(out)
}

fn message(name: &str, buf: &[u8], depth: usize) -> Result<Value, DecodeError> {
    let msg = messages()
        .get(name)
        .ok_or_else(|| err(format!("message {name} is not in keel's schema")))?;
    if is_wrapper(name) {
        // Wrappers keep their zero subfields (an IntOrString of 0 is a real 0).
        return Ok(special(name, decode_fields_all(msg, buf, depth)?));
    }
    Ok(Value::Object(decode_fields(msg, buf, depth)?))
}

/// Like [`decode_fields`] without dropping zero values (wrapper messages need them).
fn decode_fields_all(
    msg: &Message,
    mut buf: &[u8],
    depth: usize,
) -> Result<Map<String, Value>, DecodeError> {
    let mut out = Map::new();
    while !buf.is_empty() {
        let (tag, raw) = next_field(&mut buf)?;
        if let Some(field) = msg.fields.get(&tag) {
            if !matches!(field.ty, FieldType::Map(_)) && !field.repeated {
                out.insert(field.json.clone(), scalar(&field.ty, raw, depth)?);
            }
        }
    }
    Ok(out)
}

/// Decodes one object of message type `name` from protobuf bytes into JSON.
pub fn decode(name: &str, buf: &[u8]) -> Result<Value, DecodeError> {
    message(name, buf, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(tag: u32, wt: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((tag << 3) | wt as u32) as u8];
        if wt == 2 {
            out.push(payload.len() as u8);
        }
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn configmap_with_zero_values_and_map() {
        // ObjectMeta{name:"c1", namespace:""} ; data{"a":"b"}
        let mut meta = field(1, 2, b"c1");
        meta.extend(field(3, 2, b""));
        let mut entry = field(1, 2, b"a");
        entry.extend(field(2, 2, b"b"));
        let mut cm = field(1, 2, &meta);
        cm.extend(field(2, 2, &entry));
        let v = decode("api.core.v1.ConfigMap", &cm).expect("decode");
        assert_eq!(v, json!({"metadata": {"name": "c1"}, "data": {"a": "b"}}));
    }

    #[test]
    fn inlined_messages_merge_into_their_object() {
        // Volume{name:"v", volumeSource{emptyDir{}}}: Go inlines VolumeSource into Volume.
        let mut v = field(1, 2, b"v");
        v.extend(field(2, 2, &field(2, 2, b"")));
        assert_eq!(
            decode("api.core.v1.Volume", &v).expect("decode"),
            json!({"name": "v", "emptyDir": {}})
        );
        // Volume{name:"c", volumeSource{configMap{localObjectReference{name:"cm"}}}}: two levels.
        let mut c = field(1, 2, b"c");
        let cm = field(1, 2, &field(1, 2, b"cm"));
        // Field 19's key is two varint bytes, beyond what `field` writes.
        let mut config_map = vec![0x9a, 0x01, cm.len() as u8];
        config_map.extend(cm);
        c.extend(field(2, 2, &config_map));
        assert_eq!(
            decode("api.core.v1.Volume", &c).expect("decode"),
            json!({"name": "c", "configMap": {"name": "cm"}})
        );
    }

    #[test]
    fn explicit_zero_replicas_survive() {
        // DeploymentSpec{replicas: 0, paused: false}
        let mut spec = field(1, 0, &[0]);
        spec.extend(field(7, 0, &[0]));
        let mut d = field(2, 2, &spec);
        d.extend(field(1, 2, &field(1, 2, b"web")));
        let v = decode("api.apps.v1.Deployment", &d).expect("decode");
        assert_eq!(v["spec"], json!({"replicas": 0}));
    }

    #[test]
    fn wrappers() {
        // IntOrString{type:0,intVal:8080}
        let mut ios = field(1, 0, &[0]);
        ios.extend(field(2, 0, &[0x90, 0x3f]));
        assert_eq!(
            decode("apimachinery.pkg.util.intstr.IntOrString", &ios).expect("ios"),
            json!(8080)
        );
        let t = field(1, 0, &[0x80, 0xa0, 0x9e, 0xb7, 0x06]);
        let ts = decode("apimachinery.pkg.apis.meta.v1.Time", &t).expect("time");
        assert!(ts.as_str().is_some_and(|s| s.ends_with('Z')));
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    }

    #[test]
    fn storage_kinds_decode() {
        // PersistentVolumeClaim{metadata{name:"data"}, spec{accessModes:["ReadWriteOnce"], storageClassName:"local-path"}}
        let mut spec = field(1, 2, b"ReadWriteOnce");
        spec.extend(field(5, 2, b"local-path"));
        let mut pvc = field(1, 2, &field(1, 2, b"data"));
        pvc.extend(field(2, 2, &spec));
        assert_eq!(
            decode("api.core.v1.PersistentVolumeClaim", &pvc).expect("decode"),
            json!({"metadata": {"name": "data"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path"}})
        );
        // StorageClass{metadata{name:"fast"}, provisioner:"keel.io/local-path", allowVolumeExpansion:true}
        let mut sc = field(1, 2, &field(1, 2, b"fast"));
        sc.extend(field(2, 2, b"keel.io/local-path"));
        sc.extend(field(6, 0, &[1]));
        assert_eq!(
            decode("api.storage.v1.StorageClass", &sc).expect("decode"),
            json!({"metadata": {"name": "fast"}, "provisioner": "keel.io/local-path",
                   "allowVolumeExpansion": true})
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode("api.core.v1.Pod", &[0x0a, 0x05, 0x01]).is_err());
        assert!(decode("api.core.v1.Pod", &[0xff; 12]).is_err());
        assert!(decode("api.core.v1.Pod", &[0x0b]).is_err());
    }
}
