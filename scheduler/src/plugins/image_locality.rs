//! ImageLocality (weight 1): prefers nodes that already have the pod's container images. Each image
//! present counts its size scaled by its spread (the share of nodes that have it, so one node holding
//! a popular image does not draw every pod); the sum is clamped between 23 MiB and 1000 MiB per
//! container and scaled to 0..=100. Not normalised further, as upstream.
//!
//! Image names compare in one normal form: a name without tag or digest means `:latest` (upstream's
//! rule), and a name without registry is on `docker.io`, under `library/` when it has no path
//! (upstream leaves that to a TODO, so `nginx` there misses a node reporting
//! `docker.io/library/nginx:latest`; keel matches them).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Plugin, MAX_NODE_SCORE};
use crate::pod_info::PodInfo;

const MB: i64 = 1024 * 1024;
/// Below this sum a node scores 0 (upstream's minThreshold).
pub const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, above this sum a node scores 100 (upstream's maxContainerThreshold).
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Where PreScore leaves the pod's images.
const PRE_SCORE_KEY: &str = "PreScoreImageLocality";

/// The normal form of an image reference (see the module doc).
pub fn normalized_image_name(name: &str) -> String {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, rest)
        }
        _ => ("docker.io", name),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let mut full = if domain == "docker.io" && !path.contains('/') {
        format!("{domain}/library/{path}")
    } else {
        format!("{domain}/{path}")
    };
    let last_colon = full.rfind(':');
    if last_colon <= full.rfind('/') {
        full.push_str(":latest");
    }
    full
}

/// The node's images by normalised name, with their sizes (from `status.images`).
pub fn node_images(node: &Node) -> HashMap<String, i64> {
    let mut images = HashMap::new();
    let listed = node.status.as_ref().and_then(|s| s.images.as_ref());
    for image in listed.into_iter().flatten() {
        for name in image.names.iter().flatten() {
            images
                .entry(normalized_image_name(name))
                .or_insert(image.size_bytes.unwrap_or(0));
        }
    }
    images
}

/// What PreScore keeps: the pod's images with how many nodes have each, and the node count.
#[derive(Debug, Clone, Default)]
struct PreScoreState {
    images: Vec<(String, usize)>,
    containers: usize,
    total_nodes: usize,
}

/// Upstream's calculatePriority: the clamped sum scaled to 0..=100.
pub fn calculate_priority(sum: i64, containers: usize) -> i64 {
    let max_threshold =
        MAX_CONTAINER_THRESHOLD.saturating_mul(i64::try_from(containers).unwrap_or(i64::MAX));
    let clamped = sum.max(MIN_THRESHOLD).min(max_threshold.max(MIN_THRESHOLD));
    let range = max_threshold - MIN_THRESHOLD;
    if range <= 0 {
        return 0;
    }
    MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / range
}

/// The ImageLocality score.
pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        "ImageLocality"
    }

    fn scores(&self) -> bool {
        true
    }

    /// Normalises the pod's image names once and looks up how many nodes have each (the cache keeps
    /// that count per image), instead of once per node.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        _nodes: &[&NodeInfo],
    ) {
        let spec = pod.pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or(&[]);
        let app = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
        let images = init
            .iter()
            .chain(app)
            .filter_map(|c| c.image.as_deref().filter(|i| !i.is_empty()))
            .map(normalized_image_name)
            .filter_map(|name| {
                let n = snap.image_node_counts.get(&name).copied().unwrap_or(0);
                (n > 0).then_some((name, n))
            })
            .collect();
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                images,
                containers: init.len() + app.len(),
                total_nodes: snap.nodes.len(),
            },
        );
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return 0;
        };
        if s.total_nodes == 0 {
            return 0;
        }
        let sum: i64 = s
            .images
            .iter()
            .filter_map(|(name, with)| {
                let size = node.images.get(name)?;
                let spread = *with as f64 / s.total_nodes as f64;
                Some((*size as f64 * spread) as i64)
            })
            .sum();
        calculate_priority(sum, s.containers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::schedule::Algorithm;
    use crate::framework::Framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;

    #[test]
    fn names_normalise_to_registry_path_and_tag() {
        for (given, want) in [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:1.25", "docker.io/library/nginx:1.25"),
            ("library/nginx:1.25", "docker.io/library/nginx:1.25"),
            ("docker.io/nginx", "docker.io/library/nginx:latest"),
            (
                "index.docker.io/library/nginx",
                "docker.io/library/nginx:latest",
            ),
            ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
            ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
            ("localhost:5000/app", "localhost:5000/app:latest"),
            ("localhost/app:v1", "localhost/app:v1"),
            ("quay.io/x/y@sha256:abcd", "quay.io/x/y@sha256:abcd"),
        ] {
            assert_eq!(normalized_image_name(given), want, "{given}");
        }
    }

    #[test]
    fn priority_is_clamped_per_container() {
        assert_eq!(calculate_priority(0, 1), 0);
        assert_eq!(calculate_priority(MIN_THRESHOLD, 1), 0);
        assert_eq!(calculate_priority(2000 * MB, 1), 100);
        assert_eq!(calculate_priority(2000 * MB, 2), 100);
        assert_eq!(calculate_priority(1000 * MB, 2), 49);
        assert_eq!(calculate_priority(500 * MB, 1), 48);
    }

    fn with_images(name: &str, images: serde_json::Value) -> NodeInfo {
        node(name, "4", "8Gi", json!({"status": {"images": images}}))
    }

    #[test]
    fn the_node_with_the_image_scores_higher() {
        let big = json!([{"names": ["docker.io/library/postgres:16", "docker.io/library/postgres@sha256:1"],
                          "sizeBytes": 400 * MB}]);
        let snap = snapshot(
            vec![
                with_images("has", big.clone()),
                with_images("also", big),
                with_images("bare", json!([])),
                with_images(
                    "other",
                    json!([{"names": ["busybox"], "sizeBytes": 5 * MB}]),
                ),
            ],
            vec![],
        );
        assert_eq!(
            snap.image_node_counts
                .get("docker.io/library/postgres:16")
                .copied(),
            Some(2)
        );
        let p = pod(
            "db",
            None,
            None,
            json!({"spec": {"containers": [{"name": "c", "image": "postgres:16"}]}}),
        );
        let mut state = CycleState::default();
        let nodes: Vec<&NodeInfo> = snap.nodes.iter().map(|n| &**n).collect();
        ImageLocality.pre_score(&mut state, &p, &snap, &nodes);
        let got: Vec<(&str, i64)> = nodes
            .iter()
            .map(|n| (n.name(), ImageLocality.score(&state, &p, n)))
            .collect();
        // 400 MiB spread over 2 of 4 nodes = 200 MiB: 100 * (200 - 23) / (1000 - 23) = 18.
        assert_eq!(
            got,
            vec![("also", 18), ("bare", 0), ("has", 18), ("other", 0)]
        );
        let fw = Framework::new(vec![(Box::new(ImageLocality), 1)]);
        let mut alg = Algorithm::seeded(2);
        for _ in 0..5 {
            let d = alg
                .schedule(&fw, &mut CycleState::default(), &snap, &p)
                .unwrap();
            assert!(d.node == "has" || d.node == "also", "{}", d.node);
        }
    }
}
