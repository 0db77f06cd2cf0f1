//! What this controller has just written about a job's pods and its cache may not show yet: pods created,
//! pods deleted, finalizers removed. Until the cache catches up no more pods are created or deleted for
//! that job (a stale cache never over-creates), and a pod whose finalizer was removed is not counted twice.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::pods::TRACKING_FINALIZER;

/// After this long an unmet expectation is given up (upstream's 5 minutes): the cache is trusted again.
const EXPIRE: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Pending {
    created: HashSet<String>,
    deleted: HashSet<String>,
    unfinalized: HashSet<String>,
    since: Option<Instant>,
}

/// Pending writes per job key (`namespace/name`).
#[derive(Default)]
pub struct Expectations {
    by_job: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    /// Remembers a pod created by name.
    pub fn created(&self, job: &str, pod: &str) {
        self.with(job, |p| {
            p.created.insert(pod.to_string());
        });
    }

    /// Remembers a pod deleted, by uid.
    pub fn deleted(&self, job: &str, uid: &str) {
        self.with(job, |p| {
            p.deleted.insert(uid.to_string());
        });
    }

    /// Remembers a pod whose tracking finalizer was removed (it has been counted), by uid.
    pub fn unfinalized(&self, job: &str, uid: &str) {
        self.with(job, |p| {
            p.unfinalized.insert(uid.to_string());
        });
    }

    /// Forgets what the cached `pods` of the job now show; returns whether nothing is pending and the uids
    /// whose finalizer removal the cache does not show yet.
    pub fn observe(&self, job: &str, pods: &[&Pod]) -> (bool, HashSet<String>) {
        let Ok(mut map) = self.by_job.lock() else {
            return (true, HashSet::new());
        };
        let Some(p) = map.get_mut(job) else {
            return (true, HashSet::new());
        };
        if p.since.is_some_and(|t| t.elapsed() > EXPIRE) {
            map.remove(job);
            return (true, HashSet::new());
        }
        let by_uid: HashMap<&str, &Pod> = pods
            .iter()
            .filter_map(|pod| pod.metadata.uid.as_deref().map(|u| (u, *pod)))
            .collect();
        let names: HashSet<&str> = pods
            .iter()
            .filter_map(|pod| pod.metadata.name.as_deref())
            .collect();
        p.created.retain(|n| !names.contains(n.as_str()));
        p.deleted.retain(|u| {
            by_uid
                .get(u.as_str())
                .is_some_and(|pod| pod.metadata.deletion_timestamp.is_none())
        });
        p.unfinalized.retain(|u| {
            by_uid.get(u.as_str()).is_some_and(|pod| {
                pod.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
            })
        });
        let satisfied = p.created.is_empty() && p.deleted.is_empty();
        let unfinalized = p.unfinalized.clone();
        if satisfied && unfinalized.is_empty() {
            map.remove(job);
        }
        (satisfied, unfinalized)
    }

    /// Drops everything about `job` (it is gone).
    pub fn forget(&self, job: &str) {
        if let Ok(mut map) = self.by_job.lock() {
            map.remove(job);
        }
    }

    fn with(&self, job: &str, f: impl FnOnce(&mut Pending)) {
        if let Ok(mut map) = self.by_job.lock() {
            let p = map.entry(job.to_string()).or_default();
            p.since.get_or_insert_with(Instant::now);
            f(p);
        }
    }
}
