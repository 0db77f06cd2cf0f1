//! The pod-template-hash: FNV-32a over a canonical serialization of the pod template (and the collision
//! count, when there is one), written in upstream's "safe" alphabet so it never spells words and is a valid
//! label value and name suffix.

use k8s_openapi::api::core::v1::PodTemplateSpec;

/// Upstream's `rand.SafeEncodeString` alphabet: no vowels, no look-alike characters.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv32a(bytes: &[u8], mut h: u32) -> u32 {
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

/// Maps each byte of `s` into the safe alphabet.
pub fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The hash of `template` (without its pod-template-hash label) and `collision_count`.
pub fn compute(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    // k8s-openapi serializes fields in a fixed order and maps sorted: the same template, the same bytes.
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    let mut h = fnv32a(&bytes, 2_166_136_261);
    if let Some(c) = collision_count {
        h = fnv32a(&c.to_le_bytes(), h);
    }
    safe_encode(&h.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv32a(b"", 2_166_136_261), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a", 2_166_136_261), 0xe40c_292c);
        assert_eq!(fnv32a(b"foobar", 2_166_136_261), 0xbf9c_f968);
    }

    #[test]
    fn the_collision_count_changes_the_hash_and_the_alphabet_is_safe() {
        let t = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            }),
            spec: None,
        };
        let a = compute(&t, None);
        assert_eq!(a, compute(&t, None));
        assert_ne!(a, compute(&t, Some(1)));
        assert!(a.bytes().all(|b| ALPHANUMS.contains(&b)), "{a}");
        // Decimal digits map to fixed characters: '0' (48) -> 48 % 27 = 21 -> '4'.
        assert_eq!(safe_encode("0123"), "4567");
    }
}
