//! `[]byte` fields as upstream's JSON decoder reads them: Go's `base64.StdEncoding` (standard alphabet,
//! padding required, `\r` and `\n` skipped anywhere, extra bits in the last digit allowed). Every built-in
//! kind's byte fields (Secret `data`, ConfigMap `binaryData`, `caBundle`s, a CSR's `request` and
//! `certificate`, …) are found once per kind from its `k8s-openapi` schema (`format: byte`), decoded with
//! these rules and written back in the canonical encoding, which is what upstream stores (the bytes) and
//! answers (Go's encoder writes them without line breaks). YAML bodies arrive here as JSON values, as
//! upstream converts YAML to JSON before decoding.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use base64::Engine;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// Go's `base64.CorruptInputError`: the offset of the first byte the decoder refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal base64 data at input byte {0}")]
pub struct CorruptInput(pub usize);

fn digit(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

fn is_newline(c: u8) -> bool {
    c == b'\n' || c == b'\r'
}

/// Decodes `s` as Go's `base64.StdEncoding.DecodeString` does, with its error offsets.
pub fn decode(s: &str) -> Result<Vec<u8>, CorruptInput> {
    let src = s.as_bytes();
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    loop {
        // One quantum: four digits, or fewer ended by padding. Newlines do not count as input.
        let mut quad = [0u8; 4];
        let mut j = 0;
        let mut trailing = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                // Padding is required, so a short final quantum is corrupt where it began.
                return Err(CorruptInput(si - j));
            }
            let c = src[si];
            si += 1;
            if let Some(d) = digit(c) {
                quad[j] = d;
                j += 1;
                continue;
            }
            if is_newline(c) {
                continue;
            }
            if c != b'=' || j < 2 {
                return Err(CorruptInput(si - 1));
            }
            if j == 2 {
                // A second `=` must follow (newlines between are skipped).
                while si < src.len() && is_newline(src[si]) {
                    si += 1;
                }
                if si == src.len() {
                    return Err(CorruptInput(src.len()));
                }
                if src[si] != b'=' {
                    return Err(CorruptInput(si - 1));
                }
                si += 1;
            }
            while si < src.len() && is_newline(src[si]) {
                si += 1;
            }
            if si < src.len() {
                trailing = Some(si);
            }
            break;
        }
        let val = quad.iter().fold(0u32, |acc, d| (acc << 6) | u32::from(*d));
        let bytes = [(val >> 16) as u8, (val >> 8) as u8, val as u8];
        out.extend_from_slice(&bytes[..j - 1]);
        if let Some(at) = trailing {
            return Err(CorruptInput(at));
        }
        if j < 4 {
            return Ok(out);
        }
    }
}

/// Where a kind's byte fields are: only branches that lead to one are kept.
#[derive(Debug, Default)]
struct Node {
    bytes: bool,
    props: Vec<(String, Arc<Node>)>,
    items: Option<Arc<Node>>,
    values: Option<Arc<Node>>,
}

/// Builds the byte-field tree of a schema; `memo` holds finished definitions and marks the ones being
/// built (`None`), which is how recursive types (a CRD's JSONSchemaProps) end.
fn build(
    s: &Value,
    defs: &Map<String, Value>,
    memo: &mut HashMap<String, Option<Arc<Node>>>,
) -> Option<Arc<Node>> {
    let m = s.as_object()?;
    if let Some(name) = m
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
    {
        if let Some(done) = memo.get(name) {
            return done.clone();
        }
        memo.insert(name.to_string(), None);
        let built = defs.get(name).and_then(|d| build(d, defs, memo));
        memo.insert(name.to_string(), built.clone());
        return built;
    }
    if m.get("format").and_then(Value::as_str) == Some("byte") {
        return Some(Arc::new(Node {
            bytes: true,
            ..Node::default()
        }));
    }
    if let Some(all) = m.get("allOf").and_then(Value::as_array) {
        return all.iter().find_map(|s| build(s, defs, memo));
    }
    let mut node = Node::default();
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            if let Some(n) = build(v, defs, memo) {
                node.props.push((k.clone(), n));
            }
        }
    }
    node.items = m.get("items").and_then(|i| build(i, defs, memo));
    node.values = m
        .get("additionalProperties")
        .and_then(|a| build(a, defs, memo));
    (!node.props.is_empty() || node.items.is_some() || node.values.is_some())
        .then(|| Arc::new(node))
}

type Trees = HashMap<(String, String), Option<Arc<Node>>>;

/// The byte-field tree of a built-in kind, computed on first use.
fn tree(group: &str, kind: &str) -> Option<Arc<Node>> {
    static TREES: LazyLock<Mutex<Trees>> = LazyLock::new(Mutex::default);
    let key = (group.to_string(), kind.to_string());
    if let Some(t) = TREES.lock().ok().and_then(|t| t.get(&key).cloned()) {
        return t;
    }
    let built = crate::types::with_builtin_type!(group, kind, T => {
        let mut settings = SchemaSettings::draft07();
        settings.definitions_path = "#/definitions/".into();
        let mut gen = settings.into_generator();
        let root = serde_json::to_value(gen.subschema_for::<T>()).unwrap_or(Value::Null);
        let defs = gen.take_definitions(true);
        build(&root, &defs, &mut HashMap::new())
    }, _ => None);
    if let Ok(mut t) = TREES.lock() {
        t.insert(key, built.clone());
    }
    built
}

fn walk(node: &Node, v: &mut Value) -> Result<(), CorruptInput> {
    if node.bytes {
        // Other shapes than a string are the type check's to refuse.
        if let Value::String(s) = v {
            let raw = decode(s)?;
            *s = base64::engine::general_purpose::STANDARD.encode(raw);
        }
        return Ok(());
    }
    match v {
        Value::Object(m) => {
            for (k, n) in &node.props {
                if let Some(child) = m.get_mut(k) {
                    walk(n, child)?;
                }
            }
            if let Some(n) = &node.values {
                for child in m.values_mut() {
                    walk(n, child)?;
                }
            }
        }
        Value::Array(a) => {
            if let Some(n) = &node.items {
                for child in a {
                    walk(n, child)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Decodes every byte field of `obj` (a built-in kind by `group` and `kind`) with Go's rules and writes
/// it back canonically; the first value Go refuses is the error. Other kinds are left alone.
pub fn canonicalize(group: &str, kind: &str, obj: &mut Value) -> Result<(), CorruptInput> {
    match tree(group, kind) {
        Some(t) => walk(&t, obj),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> Result<String, CorruptInput> {
        decode(s).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn go_rules() {
        assert_eq!(text(""), Ok(String::new()));
        assert_eq!(text("\r\n"), Ok(String::new()));
        assert_eq!(text("YWJjZGVm"), Ok("abcdef".into()));
        assert_eq!(text("YW\nJj\r\nZGVm\n"), Ok("abcdef".into()));
        assert_eq!(text("YQ=="), Ok("a".into()));
        assert_eq!(text("YQ=\n="), Ok("a".into()));
        assert_eq!(text("YWI="), Ok("ab".into()));
        // Go's StdEncoding is not strict: extra bits in the last digit are dropped.
        assert_eq!(text("YR=="), Ok("a".into()));
        // Padding is required; a short quantum is refused where it starts.
        assert_eq!(text("YWJ"), Err(CorruptInput(0)));
        assert_eq!(text("YWJjZA"), Err(CorruptInput(4)));
        assert_eq!(text("YWJj\nZA"), Err(CorruptInput(5)));
        assert_eq!(text("YQ="), Err(CorruptInput(3)));
        assert_eq!(text("YQ=x"), Err(CorruptInput(2)));
        assert_eq!(text("Y==="), Err(CorruptInput(1)));
        assert_eq!(text("=YWJ"), Err(CorruptInput(0)));
        // Other alphabets and characters.
        assert_eq!(text("YWJj!"), Err(CorruptInput(4)));
        assert_eq!(text("YW-j"), Err(CorruptInput(2)));
        assert_eq!(text("YWJj ZGVm"), Err(CorruptInput(4)));
        // Nothing may follow the padding.
        assert_eq!(text("YQ==YQ=="), Err(CorruptInput(4)));
        assert_eq!(text("YQ==\n\nx"), Err(CorruptInput(6)));
        assert_eq!(
            CorruptInput(76).to_string(),
            "illegal base64 data at input byte 76"
        );
    }

    #[test]
    fn wrapped_at_76_columns_round_trips() {
        let raw: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        let one_line = base64::engine::general_purpose::STANDARD.encode(&raw);
        let wrapped: String = one_line
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
            .collect();
        assert_eq!(decode(&wrapped), Ok(raw));
    }

    #[test]
    fn every_byte_field_of_a_kind_is_canonicalized() {
        let mut secret =
            json!({"data": {"a": "YW\nJj\n", "b": "YR=="}, "stringData": {"c": "x\ny"}});
        canonicalize("", "Secret", &mut secret).expect("secret");
        assert_eq!(
            secret,
            json!({"data": {"a": "YWJj", "b": "YQ=="}, "stringData": {"c": "x\ny"}})
        );
        let mut cm = json!({"data": {"a": "not base64"}, "binaryData": {"b": "YQ=\r\n="}});
        canonicalize("", "ConfigMap", &mut cm).expect("configmap");
        assert_eq!(cm["data"]["a"], "not base64");
        assert_eq!(cm["binaryData"]["b"], "YQ==");
        let mut csr = json!({"spec": {"request": "YWJ"}});
        assert_eq!(
            canonicalize("certificates.k8s.io", "CertificateSigningRequest", &mut csr),
            Err(CorruptInput(0))
        );
        let mut api = json!({"spec": {"caBundle": "YW\nJj"}});
        canonicalize("apiregistration.k8s.io", "APIService", &mut api).expect("apiservice");
        assert_eq!(api["spec"]["caBundle"], "YWJj");
        let mut crd =
            json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": "YW\nJj"}}}}});
        canonicalize("apiextensions.k8s.io", "CustomResourceDefinition", &mut crd).expect("crd");
        assert_eq!(
            crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
            "YWJj"
        );
        let mut pod = json!({"spec": {"containers": [{"name": "YWJ"}]}});
        canonicalize("", "Pod", &mut pod).expect("pods have no byte fields");
    }
}
