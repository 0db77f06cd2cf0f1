//! A StatefulSet pod's identity: its name `<set>-<ordinal>`, its identity labels, its stable hostname
//! under the governing Service, and the template of the revision it runs.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::{Resource, ResourceExt};

/// The pod's name label.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod's ordinal label.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The revision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The ordinal of a pod of `set`, from its name.
pub fn ordinal(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

/// The pod with `ordinal` of `set`, from `template`, labelled with `revision`.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, ordinal: i32, revision: &str) -> Pod {
    let set_name = set.name_any();
    let name = format!("{set_name}-{ordinal}");
    let mut meta = template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = meta.labels.take().unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    meta.labels = Some(labels);
    meta.name = Some(name.clone());
    meta.generate_name = None;
    meta.namespace = set.namespace();
    meta.owner_references = set.controller_owner_ref(&()).map(|r| vec![r]);
    let mut spec = template.spec.clone().unwrap_or_default();
    super::claims::mount_claims(set, &mut spec, ordinal);
    spec.hostname = Some(name);
    spec.subdomain = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

/// The revision label of a pod.
pub fn revision_of(pod: &Pod) -> Option<&str> {
    pod.labels().get(REVISION_LABEL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_parse_only_own_names() {
        assert_eq!(ordinal("web", "web-3"), Some(3));
        assert_eq!(ordinal("web", "web-x"), None);
        assert_eq!(ordinal("web", "webby-1"), None);
        assert_eq!(ordinal("web", "web-1-2"), None);
    }
}
