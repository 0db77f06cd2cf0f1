//! `metadata.managedFields`: who owns which fields, kept on every write.
//!
//! Updates (create, PUT, non-apply PATCH) take ownership of the fields they change and never conflict;
//! an apply owns exactly the fields of its configuration, drops what it applied before and no longer
//! does (unless someone else owns it), and conflicts with other owners of fields it changes.

use serde_json::{json, Map, Value};

use super::diff::{self, Diff};
use super::fieldset::{self, FieldSet, FieldSetError};
use super::merge;
use super::shape::Shape;
use crate::object;

/// Upstream keeps at most this many `Update` entries; older ones merge into `ancient-changes`.
const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager name older update entries are merged into.
const ANCIENT: &str = "ancient-changes";

/// Metadata fields no manager owns.
const UNOWNED_META: &[&str] = &[
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Create, update or non-apply patch.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The field manager's name.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The API version the manager wrote in.
    pub api_version: String,
    /// When the manager last changed the object (RFC 3339, whole seconds).
    pub time: Option<String>,
    /// The subresource written through ("" for the object itself).
    pub subresource: String,
    /// The fields the manager owns.
    pub set: FieldSet,
}

/// Who is writing: the manager name, the API version it writes in, and the subresource ("" for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The field manager's name.
    pub manager: String,
    /// The API version of the request.
    pub api_version: String,
    /// The subresource of the request ("" for none).
    pub subresource: String,
}

impl Owner {
    /// Whether `e` is this writer's entry for an operation (appliers are one entry across API versions).
    fn is(&self, e: &Entry, op: Operation) -> bool {
        e.operation == op
            && e.manager == self.manager
            && e.subresource == self.subresource
            && (op == Operation::Apply || e.api_version == self.api_version)
    }
}

/// One field another manager owns that an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager as upstream prints it: `"a"`, `"kubectl" with subresource "scale" using apps/v1`.
    pub manager: String,
    /// `.spec.replicas`.
    pub path: String,
}

/// Why `metadata.managedFields` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedError {
    /// `managedFields` is not a JSON list.
    #[error("managedFields is not a list")]
    NotList,
    /// An entry is not a JSON object.
    #[error("managedFields entry {0} is not an object")]
    NotObject(usize),
    /// An operation other than Apply or Update.
    #[error("managedFields entry {0}: unsupported operation {1:?}")]
    Operation(usize, String),
    /// A fieldsType other than FieldsV1.
    #[error("managedFields entry {0}: unsupported fieldsType {1:?}")]
    FieldsType(usize, String),
    /// An unreadable fieldsV1 document.
    #[error("managedFields entry {0}: {1}")]
    Fields(usize, FieldSetError),
}

/// The `managedFields` of an object; `None` when it has none.
pub fn decode(obj: &Value) -> Result<Option<Vec<Entry>>, ManagedError> {
    let Some(list) = object::path(obj, "metadata.managedFields") else {
        return Ok(None);
    };
    if list.is_null() {
        return Ok(None);
    }
    let items = list.as_array().ok_or(ManagedError::NotList)?;
    let mut out: Vec<Entry> = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let m = it.as_object().ok_or(ManagedError::NotObject(i))?;
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = match s("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(ManagedError::Operation(i, other.to_string())),
        };
        let ft = s("fieldsType");
        if ft != "FieldsV1" {
            return Err(ManagedError::FieldsType(i, ft));
        }
        let set = match m.get("fieldsV1") {
            Some(v) => FieldSet::from_json(v).map_err(|e| ManagedError::Fields(i, e))?,
            None => FieldSet::new(),
        };
        let time = m.get("time").and_then(Value::as_str).map(str::to_string);
        let e = Entry {
            manager: s("manager"),
            operation,
            api_version: s("apiVersion"),
            time,
            subresource: s("subresource"),
            set,
        };
        // Two entries for one owner (a client edited the list) become one.
        let owner = Owner {
            manager: e.manager.clone(),
            api_version: e.api_version.clone(),
            subresource: e.subresource.clone(),
        };
        match out.iter_mut().find(|x| owner.is(x, e.operation)) {
            Some(x) => x.set.union_with(&e.set),
            None => out.push(e),
        }
    }
    Ok(Some(out))
}

/// Whether a written object asks for its managedFields to be cleared (`[]` or `[{}]`, as upstream).
pub fn asks_reset(obj: &Value) -> bool {
    match object::path(obj, "metadata.managedFields").and_then(Value::as_array) {
        Some(a) => a.is_empty() || (a.len() == 1 && a[0].as_object().is_some_and(Map::is_empty)),
        None => false,
    }
}

fn seconds(t: &Option<String>) -> i64 {
    t.as_deref()
        .and_then(object::parse_time)
        .map(|t| t.as_second())
        .unwrap_or(0)
}

/// Writes entries into `metadata.managedFields` in upstream's order (Apply first, then by time, manager,
/// API version, subresource); no entries removes the field.
pub fn encode(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (
            a.operation,
            seconds(&a.time),
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                seconds(&b.time),
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let meta = object::meta_mut(obj);
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut m = Map::new();
            m.insert("manager".into(), json!(e.manager));
            m.insert("operation".into(), json!(e.operation.as_str()));
            m.insert("apiVersion".into(), json!(e.api_version));
            if let Some(t) = &e.time {
                m.insert("time".into(), json!(t));
            }
            m.insert("fieldsType".into(), json!("FieldsV1"));
            m.insert("fieldsV1".into(), e.set.to_json());
            if !e.subresource.is_empty() {
                m.insert("subresource".into(), json!(e.subresource));
            }
            Value::Object(m)
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(list));
}

/// What a write to `subresource` may own: never the server's metadata; the main resource of a kind with a
/// status subresource not its status; the status subresource only its status.
pub fn filter(mut set: FieldSet, subresource: &str, has_status: bool) -> FieldSet {
    set.children.remove("f:apiVersion");
    set.children.remove("f:kind");
    if let Some(meta) = set.children.get_mut("f:metadata") {
        meta.member = false;
        for f in UNOWNED_META {
            meta.children.remove(&fieldset::field(f));
        }
        if meta.is_empty() {
            set.children.remove("f:metadata");
        }
    }
    match subresource {
        "status" => set.children.retain(|k, _| k == "f:status"),
        _ if has_status => {
            set.children.remove("f:status");
        }
        _ => {}
    }
    set
}

/// Gives the writer the fields of `diff`: every entry loses what changed or went away, the writer's own
/// update entry gains what changed (and gets a new time).
fn take_over(entries: &mut Vec<Entry>, diff: &Diff, owner: &Owner) {
    if diff.is_empty() {
        return;
    }
    for e in entries.iter_mut() {
        if e.set.intersects(&diff.changed) {
            e.set = e.set.difference(&diff.changed);
        }
        if e.set.intersects(&diff.removed) {
            e.set = e.set.difference(&diff.removed);
        }
    }
    if !diff.changed.is_empty() {
        let now = Some(object::now_rfc3339());
        match entries.iter_mut().find(|e| owner.is(e, Operation::Update)) {
            Some(e) => {
                e.set.union_with(&diff.changed);
                e.time = now;
            }
            None => entries.push(Entry {
                manager: owner.manager.clone(),
                operation: Operation::Update,
                api_version: owner.api_version.clone(),
                time: now,
                subresource: owner.subresource.clone(),
                set: diff.changed.clone(),
            }),
        }
    }
    entries.retain(|e| !e.set.is_empty());
    cap_updaters(entries);
}

/// Merges the oldest update entries into `ancient-changes` while there are too many.
fn cap_updaters(entries: &mut Vec<Entry>) {
    loop {
        let updaters = entries
            .iter()
            .filter(|e| e.operation == Operation::Update)
            .count();
        if updaters <= MAX_UPDATE_MANAGERS {
            return;
        }
        let oldest = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.operation == Operation::Update && e.manager != ANCIENT)
            .min_by_key(|(_, e)| seconds(&e.time))
            .map(|(i, _)| i);
        let Some(i) = oldest else { return };
        let old = entries.remove(i);
        match entries
            .iter_mut()
            .find(|e| e.manager == ANCIENT && e.api_version == old.api_version)
        {
            Some(a) => a.set.union_with(&old.set),
            None => entries.push(Entry {
                manager: ANCIENT.into(),
                subresource: String::new(),
                ..old
            }),
        }
    }
}

/// Records a create by `owner` in `obj` (the defaulted object about to be stored). Entries the client
/// sent are kept as the starting point, as upstream does.
pub fn record_create(obj: &mut Value, shape: Shape, owner: &Owner, has_status: bool) {
    let mut entries = if asks_reset(obj) {
        Vec::new()
    } else {
        decode(obj).ok().flatten().unwrap_or_default()
    };
    let d = diff::compare(&shape.zero_object(), obj, shape);
    let d = Diff {
        changed: filter(d.changed, &owner.subresource, has_status),
        removed: FieldSet::new(),
    };
    take_over(&mut entries, &d, owner);
    encode(obj, entries);
}

/// Records an update by `owner` from `old` to `new` in `new`'s managedFields.
///
/// The starting entries are the ones `new` carries when a client edited them (`[]` or `[{}]` resets), else
/// `old`'s; an object that tracks nothing stays untracked, as upstream. An unchanged write neither decodes
/// nor re-encodes anything.
pub fn record_update(old: &Value, new: &mut Value, shape: Shape, owner: &Owner, has_status: bool) {
    let old_mf = object::path(old, "metadata.managedFields");
    let new_mf = object::path(new, "metadata.managedFields");
    let edited = owner.subresource.is_empty() && new_mf.is_some() && new_mf != old_mf;
    if !edited {
        let Some(mf) = old_mf.cloned() else {
            object::meta_mut(new).remove("managedFields");
            return;
        };
        object::meta_mut(new).insert("managedFields".into(), mf);
    }
    let d = diff::compare(old, new, shape);
    let d = Diff {
        changed: filter(d.changed, &owner.subresource, has_status),
        removed: filter(d.removed, &owner.subresource, has_status),
    };
    if d.is_empty() && !edited {
        return;
    }
    let from_old = || match decode(old) {
        Ok(e) => e.unwrap_or_default(),
        Err(err) => {
            tracing::warn!(error = %err, "stored managedFields cannot be read; starting afresh");
            Vec::new()
        }
    };
    let mut entries = if !edited {
        from_old()
    } else if asks_reset(new) {
        Vec::new()
    } else {
        match decode(new) {
            Ok(Some(e)) if !e.is_empty() => e,
            _ => from_old(),
        }
    };
    if entries.is_empty() {
        object::meta_mut(new).remove("managedFields");
        return;
    }
    take_over(&mut entries, &d, owner);
    encode(new, entries);
}

/// How upstream names a manager in conflict messages.
fn printed(e: &Entry) -> String {
    let mut s = format!("{:?}", e.manager);
    if !e.subresource.is_empty() {
        s.push_str(&format!(" with subresource {:?}", e.subresource));
    }
    if e.operation == Operation::Update {
        s.push_str(&format!(" using {}", e.api_version));
    }
    s
}

/// What an apply is asked to do besides merging its configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions<'a> {
    /// Take conflicting fields from their owners.
    pub force: bool,
    /// The kind has a status subresource (the main resource does not own status).
    pub has_status: bool,
    /// Conflicts on these paths do not stop the apply (fields client-side apply set and nobody changed
    /// since); any other conflict still does.
    pub allowed: Option<&'a FieldSet>,
}

/// Applies `config` for `owner` to `live` (an empty object when creating): the merged object, with its
/// managedFields, or the conflicts that stop it unless forced.
pub fn apply(
    live: &Value,
    config: &Value,
    shape: Shape,
    owner: &Owner,
    opts: ApplyOptions<'_>,
) -> Result<Value, Vec<Conflict>> {
    let has_status = opts.has_status;
    let mut entries = decode(live).ok().flatten().unwrap_or_default();
    let mut live = live.clone();
    object::meta_mut(&mut live).remove("managedFields");
    let mut merged = merge::merge(&live, config, shape);
    let mine = filter(diff::owned(config, shape), &owner.subresource, has_status);
    let pos = entries.iter().position(|e| owner.is(e, Operation::Apply));
    let last = pos.map(|i| std::mem::take(&mut entries[i].set));
    let now = Some(object::now_rfc3339());
    let me = match pos {
        Some(i) => {
            entries[i].set = mine.clone();
            entries[i].api_version = owner.api_version.clone();
            i
        }
        None => {
            entries.push(Entry {
                manager: owner.manager.clone(),
                operation: Operation::Apply,
                api_version: owner.api_version.clone(),
                time: now.clone(),
                subresource: owner.subresource.clone(),
                set: mine.clone(),
            });
            entries.len() - 1
        }
    };
    if let Some(last) = last.filter(|l| !l.is_empty()) {
        let mut managed = FieldSet::new();
        for e in &entries {
            managed.union_with(&e.set);
        }
        let gone = last
            .with_named_fields()
            .difference(&managed.with_named_fields());
        merge::remove_items(&mut merged, &gone, shape);
    }
    let d = diff::compare(&live, &merged, shape);
    let d = Diff {
        changed: filter(d.changed, &owner.subresource, has_status),
        removed: filter(d.removed, &owner.subresource, has_status),
    };
    if !opts.force {
        let mut conflicts = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            if i == me {
                continue;
            }
            let mut c = e.set.intersection(&d.changed);
            if let Some(allowed) = opts.allowed {
                c = c.difference(allowed);
            }
            let who = printed(e);
            conflicts.extend(c.paths().into_iter().map(|p| Conflict {
                manager: who.clone(),
                path: fieldset::path_string(&p),
            }));
        }
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
    }
    for (i, e) in entries.iter_mut().enumerate() {
        if i == me {
            continue;
        }
        for gone in [&d.changed, &d.removed] {
            if e.set.intersects(gone) {
                e.set = e.set.difference(gone);
            }
        }
    }
    if !d.is_empty() {
        entries[me].time = now;
    }
    encode(&mut merged, entries);
    Ok(merged)
}

/// Upstream's 409 message for apply conflicts.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager, one.path
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort_unstable();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        for c in conflicts.iter().filter(|c| c.manager == m) {
            lines.push(format!("- {}", c.path));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy() -> Shape {
        Shape::of_kind("apps/v1", "Deployment")
    }

    fn owner(m: &str) -> Owner {
        Owner {
            manager: m.into(),
            api_version: "apps/v1".into(),
            subresource: String::new(),
        }
    }

    fn opts(force: bool) -> ApplyOptions<'static> {
        ApplyOptions {
            force,
            has_status: true,
            allowed: None,
        }
    }

    fn dep(replicas: i64, labels: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "labels": labels},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    }

    fn managers(obj: &Value) -> Vec<(String, String)> {
        decode(obj)
            .ok()
            .flatten()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.manager, e.operation.as_str().to_string()))
            .collect()
    }

    #[test]
    fn apply_then_conflict_then_force() {
        let live = apply(
            &json!({}),
            &dep(1, json!({"a": "1"})),
            deploy(),
            &owner("a"),
            opts(false),
        )
        .expect("first apply");
        assert_eq!(
            managers(&live),
            vec![("a".to_string(), "Apply".to_string())]
        );
        let err = apply(
            &live,
            &dep(3, json!({"a": "1"})),
            deploy(),
            &owner("b"),
            opts(false),
        )
        .expect_err("conflict");
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
        );
        // Same values: shared ownership, no conflict.
        let shared = apply(
            &live,
            &dep(1, json!({"a": "1"})),
            deploy(),
            &owner("b"),
            opts(false),
        )
        .expect("shared");
        assert_eq!(managers(&shared).len(), 2);
        let forced = apply(
            &live,
            &dep(3, json!({"a": "1"})),
            deploy(),
            &owner("b"),
            opts(true),
        )
        .expect("forced");
        let e = decode(&forced).ok().flatten().unwrap_or_default();
        let a = e
            .iter()
            .find(|e| e.manager == "a")
            .expect("a keeps the rest");
        assert!(!a.set.has(&["f:spec", "f:replicas"]));
        let b = e.iter().find(|e| e.manager == "b").expect("b");
        assert!(b.set.has(&["f:spec", "f:replicas"]));
        assert_eq!(forced["spec"]["replicas"], 3);
    }

    #[test]
    fn dropped_fields_are_removed_unless_someone_else_owns_them() {
        let live = apply(
            &json!({}),
            &dep(1, json!({"x": "1", "y": "2"})),
            deploy(),
            &owner("a"),
            opts(false),
        )
        .expect("apply a");
        let live = apply(
            &live,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"y": "2"}}}),
            deploy(),
            &owner("b"),
            opts(false),
        )
        .expect("apply b");
        let out = apply(
            &live,
            &dep(1, json!({})),
            deploy(),
            &owner("a"),
            opts(false),
        )
        .expect("drop labels");
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        // Dropping every label removes the map itself when nobody owns anything in it.
        let solo = apply(
            &json!({}),
            &dep(1, json!({"x": "1"})),
            deploy(),
            &owner("a"),
            opts(false),
        )
        .expect("apply");
        let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1}});
        let out = apply(&solo, &cfg, deploy(), &owner("a"), opts(false)).expect("drop");
        assert!(out["metadata"].get("labels").is_none(), "{out}");
        assert!(out["spec"].get("template").is_none(), "{out}");
    }

    #[test]
    fn updates_take_ownership_and_never_conflict() {
        let live = apply(
            &json!({}),
            &dep(1, json!({})),
            deploy(),
            &owner("a"),
            opts(false),
        )
        .expect("apply");
        let mut new = live.clone();
        new["spec"]["replicas"] = json!(5);
        record_update(&live, &mut new, deploy(), &owner("kubectl"), true);
        let e = decode(&new).ok().flatten().unwrap_or_default();
        assert_eq!(e.len(), 2);
        assert!(!e[0].set.has(&["f:spec", "f:replicas"]));
        assert_eq!(e[1].operation, Operation::Update);
        assert!(e[1].set.has(&["f:spec", "f:replicas"]));
        let err = apply(&new, &dep(1, json!({})), deploy(), &owner("a"), opts(false))
            .expect_err("re-apply conflicts");
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
        );
        // An unchanged write keeps managedFields as they were.
        let mut same = new.clone();
        record_update(&new, &mut same, deploy(), &owner("other"), true);
        assert_eq!(same, new);
        // `[]` resets, and an untracked object stays untracked.
        let mut reset = new.clone();
        reset["metadata"]["managedFields"] = json!([]);
        reset["spec"]["replicas"] = json!(7);
        record_update(&new, &mut reset, deploy(), &owner("other"), true);
        assert!(reset["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn create_records_the_creator_without_server_fields() {
        let mut obj = dep(1, json!({"app": "x"}));
        obj["metadata"]["uid"] = json!("u");
        obj["status"] = json!({"replicas": 0});
        record_create(&mut obj, deploy(), &owner("kubectl-create"), true);
        let e = decode(&obj).ok().flatten().unwrap_or_default();
        assert_eq!(e.len(), 1);
        let j = e[0].set.to_json();
        assert_eq!(j["f:metadata"], json!({"f:labels": {".": {}, "f:app": {}}}));
        assert!(j.get("f:status").is_none() && j.get("f:apiVersion").is_none());
        assert!(e[0].time.is_some());
    }

    /// `kubectl create deployment made --image=nginx`, stored and defaulted: the entry upstream records.
    #[test]
    fn create_entry_matches_upstream_for_a_created_deployment() {
        let mut obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "made", "namespace": "default", "uid": "u", "generation": 1,
                "creationTimestamp": "2026-12-02T16:47:55Z", "labels": {"app": "made"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "made"}},
                "progressDeadlineSeconds": 600, "revisionHistoryLimit": 10,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": {"metadata": {"labels": {"app": "made"}}, "spec": {
                    "containers": [{"name": "nginx", "image": "nginx", "imagePullPolicy": "Always",
                        "resources": {}, "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File"}],
                    "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                    "schedulerName": "default-scheduler", "securityContext": {},
                    "terminationGracePeriodSeconds": 30}}},
            "status": {}});
        record_create(&mut obj, deploy(), &owner("kubectl-create"), true);
        let upstream = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:progressDeadlineSeconds": {}, "f:replicas": {}, "f:revisionHistoryLimit": {},
                "f:selector": {},
                "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                    "f:type": {}},
                "f:template": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {},
                        "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {},
                        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                        "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                        "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}}
        });
        let e = &obj["metadata"]["managedFields"][0];
        assert_eq!(e["fieldsV1"], upstream);
        assert_eq!(e["manager"], "kubectl-create");
        assert_eq!(e["operation"], "Update");
        assert_eq!(e["apiVersion"], "apps/v1");
        assert_eq!(e["fieldsType"], "FieldsV1");
    }

    #[test]
    fn unreadable_client_entries_fall_back_to_the_stored_ones() {
        let live = apply(
            &json!({}),
            &dep(1, json!({})),
            deploy(),
            &owner("a"),
            opts(false),
        )
        .expect("apply");
        for bad in [
            json!("text"),
            json!([1, 2]),
            json!([{"manager": "x", "operation": "Delete", "fieldsType": "FieldsV1"}]),
            json!([{"manager": "x", "operation": "Update", "fieldsType": "FieldsV2"}]),
            json!([{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"q:x": {}}}]),
            json!([{"manager": "x", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": 7}]),
        ] {
            let mut new = live.clone();
            new["metadata"]["managedFields"] = bad.clone();
            new["spec"]["replicas"] = json!(2);
            record_update(&live, &mut new, deploy(), &owner("u"), true);
            let names: Vec<String> = decode(&new)
                .ok()
                .flatten()
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.manager)
                .collect();
            assert_eq!(names, vec!["a", "u"], "{bad}");
        }
        assert!(decode(&json!({"metadata": {"managedFields": "x"}})).is_err());
    }

    #[test]
    fn old_update_entries_merge_into_ancient_changes() {
        let mut obj =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {}});
        let cm = Shape::of_kind("v1", "ConfigMap");
        let o = |i: usize| Owner {
            manager: format!("m{i}"),
            api_version: "v1".into(),
            subresource: String::new(),
        };
        record_create(&mut obj, cm, &o(0), false);
        for i in 1..=12 {
            let mut next = obj.clone();
            next["data"][format!("k{i}")] = json!("v");
            record_update(&obj, &mut next, cm, &o(i), false);
            obj = next;
        }
        let e = decode(&obj).ok().flatten().unwrap_or_default();
        assert_eq!(e.len(), MAX_UPDATE_MANAGERS, "{obj}");
        let ancient = e
            .iter()
            .find(|e| e.manager == ANCIENT)
            .expect("ancient-changes");
        assert!(ancient.set.has(&["f:data", "f:k1"]));
        assert!(e.iter().any(|e| e.manager == "m12"));
    }

    #[test]
    fn many_conflicts_are_grouped_by_manager() {
        let c = |m: &str, p: &str| Conflict {
            manager: m.into(),
            path: p.into(),
        };
        let msg = conflict_message(&[c("\"b\"", ".x"), c("\"a\"", ".y"), c("\"b\"", ".z")]);
        assert_eq!(
            msg,
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .y\nconflicts with \"b\":\n- .x\n- .z"
        );
    }
}
