//! Timings of the API server's calls into the store (`etcd_request_duration_seconds`, `etcd_requests_total`,
//! `etcd_request_errors_total`), kept by [`super::Storage`] and exposed by the metrics module.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::exposition::{histogram, label, HistogramFamily};
use crate::resource::{Str, BUILTIN};

/// `etcd_request_duration_seconds` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    operation: &'static str,
    r#type: Str,
}

/// Timings of the API server's calls into the store (`etcd_request_duration_seconds`,
/// `etcd_requests_total`, `etcd_request_errors_total`), fed by [`super::Storage`].
#[derive(Debug, Clone)]
pub struct StoreCalls {
    duration: HistogramFamily<StoreLabels>,
    total: Family<StoreLabels, Counter>,
    errors: Family<StoreLabels, Counter>,
}

impl Default for StoreCalls {
    fn default() -> Self {
        StoreCalls {
            duration: Family::new_with_constructor(histogram),
            total: Family::default(),
            errors: Family::default(),
        }
    }
}

impl StoreCalls {
    /// Records one store call on `key` (`get`, `list`, `create`, `update`, `delete`) that began at `start`.
    pub fn record(&self, operation: &'static str, key: &[u8], start: Instant, ok: bool) {
        let labels = StoreLabels {
            operation,
            r#type: key_type(key),
        };
        self.duration
            .get_or_create(&labels)
            .observe(start.elapsed().as_secs_f64());
        self.total.get_or_create(&labels).inc();
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
    }

    /// Adds the three families to `r` (which ends each help text with a period).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "etcd_request_duration_seconds",
            "Etcd request latency in seconds for each operation and object type",
            self.duration.clone(),
        );
        r.register(
            "etcd_requests",
            "Etcd request counts for each operation and object type",
            self.total.clone(),
        );
        r.register(
            "etcd_request_errors",
            "Etcd failed request counts for each operation and object type",
            self.errors.clone(),
        );
    }
}

/// Built-in storage prefixes (`minions`, `services/specs`) to upstream's qualified resource names.
static STORAGE_TYPES: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
    let mut m = HashMap::new();
    for d in BUILTIN.iter() {
        if let Cow::Borrowed(s) = d.storage {
            m.entry(s).or_insert_with(|| d.qualified());
        }
    }
    m
});

/// The `type` label of a store key: the qualified resource of `/registry/<storage>/...` (custom
/// resources are `/registry/<group>/<plural>/...`), `other` for keel's own keys.
fn key_type(key: &[u8]) -> Str {
    let Some(rest) = key.strip_prefix(b"/registry/") else {
        return Cow::Borrowed("other");
    };
    let rest = String::from_utf8_lossy(rest);
    let mut parts = rest.splitn(3, '/');
    let first = parts.next().unwrap_or("");
    let second = parts.next();
    if let Some(second) = second {
        let two = format!("{first}/{second}");
        if let Some(t) = STORAGE_TYPES.get(two.as_str()) {
            return Cow::Borrowed(t.as_str());
        }
    }
    if let Some(t) = STORAGE_TYPES.get(first) {
        return Cow::Borrowed(t.as_str());
    }
    match second {
        // Custom resources: the group has a dot, the plural follows it.
        Some(plural) if first.contains('.') => label(Cow::Owned(format!("{plural}.{first}"))),
        _ => label(Cow::Owned(first.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keys_name_their_resource() {
        assert_eq!(key_type(b"/registry/pods/d/p"), "pods");
        assert_eq!(key_type(b"/registry/minions/n1"), "nodes");
        assert_eq!(key_type(b"/registry/services/specs/d/s"), "services");
        assert_eq!(key_type(b"/registry/services/endpoints/d/s"), "endpoints");
        assert_eq!(key_type(b"/registry/deployments/d/w"), "deployments.apps");
        assert_eq!(key_type(b"/registry/pods/"), "pods");
        assert_eq!(
            key_type(b"/registry/example.com/widgets/d/w"),
            "widgets.example.com"
        );
        assert_eq!(key_type(b"/keel/bootstrap/pki"), "other");
    }
}
