//! The uid graph of ownerReferences the garbage collector keeps from its metadata watches (upstream's
//! GraphBuilder): every observed object, and for every owner uid the objects that name it. Each change
//! says which objects need a look (the work items).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::discovery::ApiResource;

/// The finalizer of a Foreground deletion: the dependents go first.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer of an Orphan deletion: the dependents lose their ownerReferences first.
pub const ORPHAN: &str = "orphan";

/// A resource type the collector watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kind {
    /// Its group, version, kind and plural.
    pub ar: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// One observed object.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its resource type.
    pub kind: Arc<Kind>,
    /// Its namespace (none when cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its ownerReferences.
    pub owners: Vec<OwnerReference>,
    /// Whether it has a deletionTimestamp.
    pub deleting: bool,
    /// Its finalizers.
    pub finalizers: Vec<String>,
}

impl Node {
    /// The node of an object's metadata (none without a uid or a name).
    pub fn of(kind: Arc<Kind>, meta: &ObjectMeta) -> Option<Node> {
        Some(Node {
            kind,
            namespace: meta.namespace.clone().filter(|n| !n.is_empty()),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            owners: meta.owner_references.clone().unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
        })
    }

    /// Whether it waits for its dependents to go (deleting with `foregroundDeletion`).
    pub fn deleting_dependents(&self) -> bool {
        self.deleting && self.finalizers.iter().any(|f| f == FOREGROUND)
    }

    /// Whether it waits for its dependents to be orphaned.
    pub fn orphaning(&self) -> bool {
        self.deleting && self.finalizers.iter().any(|f| f == ORPHAN)
    }

    /// Whether its reference to `owner` blocks the owner's foreground deletion.
    pub fn blocks(&self, owner: &str) -> bool {
        self.owners
            .iter()
            .any(|o| o.uid == owner && o.block_owner_deletion == Some(true))
    }

    /// Whether `r` names this node as seen from a dependent in `ns`.
    fn answers(&self, r: &OwnerReference, ns: Option<&str>) -> bool {
        self.name == r.name
            && self.kind.ar.kind == r.kind
            && (!self.kind.namespaced || self.namespace.as_deref() == ns)
    }
}

/// What the collector has to do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Work {
    /// Look at an object: delete it if its owners are gone, or finish its foreground deletion.
    Delete(String),
    /// Orphan an object's dependents, then remove its `orphan` finalizer.
    Orphan(String),
}

/// The graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// The node of `uid`, when observed.
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// The observed objects that name `uid` as an owner.
    pub fn dependents(&self, uid: &str) -> Vec<Node> {
        self.dependents
            .get(uid)
            .map(|d| {
                d.iter()
                    .filter_map(|u| self.nodes.get(u).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The uids of every observed object of `kind`.
    pub fn uids_of(&self, kind: &Kind) -> Vec<String> {
        self.nodes
            .values()
            .filter(|n| *n.kind == *kind)
            .map(|n| n.uid.clone())
            .collect()
    }

    /// An object was added or changed.
    pub fn apply(&mut self, node: Node) -> Vec<Work> {
        let mut work = Vec::new();
        let uid = node.uid.clone();
        let old = self
            .nodes
            .get(&uid)
            .map(|o| o.owners.clone())
            .unwrap_or_default();
        for o in &old {
            let kept = node
                .owners
                .iter()
                .any(|n| n.uid == o.uid && n.block_owner_deletion == o.block_owner_deletion);
            if !kept {
                self.unlink(&o.uid, &uid);
                // An owner waiting on this reference may be free now.
                if self
                    .nodes
                    .get(&o.uid)
                    .is_some_and(Node::deleting_dependents)
                {
                    work.push(Work::Delete(o.uid.clone()));
                }
            }
        }
        let mut check = false;
        for o in &node.owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.clone());
            match self.nodes.get(&o.uid) {
                Some(owner) if owner.answers(o, node.namespace.as_deref()) => {
                    if owner.deleting_dependents() {
                        check = true;
                        work.push(Work::Delete(owner.uid.clone()));
                    }
                }
                // Not observed (yet), or the uid is another object: a live look decides.
                _ => check = true,
            }
        }
        if check {
            work.push(Work::Delete(uid.clone()));
        }
        if node.deleting_dependents() {
            work.push(Work::Delete(uid.clone()));
            work.extend(
                self.dependents(&uid)
                    .into_iter()
                    .map(|d| Work::Delete(d.uid)),
            );
        }
        if node.orphaning() {
            work.push(Work::Orphan(uid.clone()));
        }
        self.nodes.insert(uid, node);
        work
    }

    /// Forgets that `dependent` names `owner`.
    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    /// An object was deleted.
    pub fn delete(&mut self, uid: &str) -> Vec<Work> {
        let mut work = Vec::new();
        if let Some(node) = self.nodes.remove(uid) {
            for o in &node.owners {
                self.unlink(&o.uid, uid);
                if self
                    .nodes
                    .get(&o.uid)
                    .is_some_and(Node::deleting_dependents)
                {
                    work.push(Work::Delete(o.uid.clone()));
                }
            }
        }
        work.extend(
            self.dependents(uid)
                .into_iter()
                .map(|d| Work::Delete(d.uid)),
        );
        work
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kind() -> Arc<Kind> {
        Arc::new(Kind {
            ar: ApiResource {
                group: String::new(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                plural: "configmaps".into(),
            },
            namespaced: true,
        })
    }

    fn node(name: &str, owners: &[(&str, bool)]) -> Node {
        Node {
            kind: kind(),
            namespace: Some("ns".into()),
            name: name.into(),
            uid: format!("u-{name}"),
            owners: owners
                .iter()
                .map(|(o, block)| OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: o.to_string(),
                    uid: format!("u-{o}"),
                    block_owner_deletion: Some(*block),
                    controller: None,
                })
                .collect(),
            deleting: false,
            finalizers: vec![],
        }
    }

    #[test]
    fn an_unobserved_owner_makes_the_dependent_looked_at() {
        let mut g = Graph::default();
        assert_eq!(
            g.apply(node("d", &[("o", true)])),
            vec![Work::Delete("u-d".into())]
        );
        assert!(g.apply(node("o", &[])).is_empty());
        assert!(g.apply(node("d", &[("o", true)])).is_empty());
    }

    #[test]
    fn a_deleted_owner_makes_its_dependents_looked_at() {
        let mut g = Graph::default();
        g.apply(node("o", &[]));
        g.apply(node("d", &[("o", true)]));
        assert_eq!(g.delete("u-o"), vec![Work::Delete("u-d".into())]);
    }

    #[test]
    fn a_foreground_owner_is_looked_at_again_as_its_blocking_dependents_go() {
        let mut g = Graph::default();
        g.apply(node("o", &[]));
        g.apply(node("d", &[("o", true)]));
        let mut o = node("o", &[]);
        o.deleting = true;
        o.finalizers = vec![FOREGROUND.into()];
        let w = g.apply(o);
        assert!(w.contains(&Work::Delete("u-o".into())));
        assert!(w.contains(&Work::Delete("u-d".into())));
        assert_eq!(
            g.dependents("u-o")
                .iter()
                .filter(|d| d.blocks("u-o"))
                .count(),
            1
        );
        assert_eq!(g.delete("u-d"), vec![Work::Delete("u-o".into())]);
        assert!(g.dependents("u-o").is_empty());
    }

    #[test]
    fn an_orphaning_owner_is_queued_for_orphaning() {
        let mut g = Graph::default();
        let mut o = node("o", &[]);
        o.deleting = true;
        o.finalizers = vec![ORPHAN.into()];
        assert_eq!(g.apply(o), vec![Work::Orphan("u-o".into())]);
    }
}
