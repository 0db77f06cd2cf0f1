//! Matching pods per topology domain over every node, kept from one cycle to the next. Counting every
//! pod of every node in each cycle would make a benchmark's thousands of ReplicaSet pods (all spread by
//! the default constraints) quadratic; instead each pod *shape* (see `shape_key`) keeps every node's
//! contribution with a weak reference to the NodeInfo it was counted from, and a cycle recounts only
//! the nodes whose NodeInfo is a different allocation. That is sound because the cache changes a
//! NodeInfo only through `Arc::make_mut`, which moves it to a new allocation while the snapshot (or
//! this weak reference) still points at the old one, and a weak reference keeps its allocation from
//! being reused.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use super::constraints::{has_all_keys, included, Constraint, Selector};
use crate::cache::NodeInfo;
use crate::pod_info::PodInfo;

/// A node's slot for a constraint it does not count for.
const NONE: u32 = u32::MAX;
/// How many pod shapes are remembered (least recently used first out). Each weak reference keeps a
/// replaced NodeInfo's allocation (not its pods) until the shape recounts that node: at most this
/// many × nodes × a few hundred bytes.
const MAX_SHAPES: usize = 16;

/// One constraint's domains: the nodes counted in each and the matching pods on them.
#[derive(Debug, Clone, Default)]
pub(super) struct DomainCounts {
    names: Vec<String>,
    ids: HashMap<String, u32>,
    nodes: Vec<u32>,
    pods: Vec<i64>,
    /// Matching-pod count → how many domains hold exactly that many (keeps the minimum exact).
    at_count: BTreeMap<i64, u32>,
    live: usize,
}

impl DomainCounts {
    /// The matching pods in domain `value`, None when no counted node is in it.
    pub(super) fn get(&self, value: &str) -> Option<i64> {
        let id = *self.ids.get(value)? as usize;
        match self.nodes.get(id) {
            Some(n) if *n > 0 => self.pods.get(id).copied(),
            _ => None,
        }
    }

    /// The smallest count of any domain (None without domains).
    pub(super) fn min(&self) -> Option<i64> {
        self.at_count.keys().next().copied()
    }

    /// (count, how many domains hold it), smallest count first.
    pub(super) fn by_count(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.at_count.iter().map(|(c, n)| (*c, *n))
    }

    /// How many domains have a counted node.
    pub(super) fn domains(&self) -> usize {
        self.live
    }

    fn intern(&mut self, value: &str) -> u32 {
        if let Some(id) = self.ids.get(value) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(NONE - 1);
        self.names.push(value.to_string());
        self.ids.insert(value.to_string(), id);
        self.nodes.push(0);
        self.pods.push(0);
        id
    }

    fn change(&mut self, id: u32, node: bool, pods: i64) {
        let id = id as usize;
        let (Some(n), Some(p)) = (self.nodes.get_mut(id), self.pods.get_mut(id)) else {
            return;
        };
        let (was_live, old) = (*n > 0, *p);
        if node {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
        }
        *p += pods;
        let (is_live, new) = (*n > 0, *p);
        if was_live {
            if let Some(k) = self.at_count.get_mut(&old) {
                *k -= 1;
                if *k == 0 {
                    self.at_count.remove(&old);
                }
            }
            self.live -= 1;
        }
        if is_live {
            *self.at_count.entry(new).or_insert(0) += 1;
            self.live += 1;
        }
    }

    /// Whether departed domains (nodes deleted) outnumber the live ones enough to start over.
    fn bloated(&self) -> bool {
        self.names.len() > 2 * self.live + 64
    }
}

/// Per constraint, the domain counts over every node.
pub(super) type Counts = Arc<Vec<DomainCounts>>;

/// What the counts are of.
pub(super) struct Input<'a> {
    /// The incoming pod (its namespace, node affinity and tolerations).
    pub(super) pod: &'a PodInfo,
    /// The constraints.
    pub(super) constraints: &'a [Constraint],
    /// Whether a node lacking any constraint's key counts for none (always but for the defaults).
    pub(super) require_all: bool,
}

/// One pod shape's counts and the nodes they were counted from.
struct Shape {
    seen: Vec<Weak<NodeInfo>>,
    /// `seen.len() × constraints` (domain id, matching pods).
    slots: Vec<(u32, u32)>,
    counts: Counts,
    used: u64,
}

impl Shape {
    fn new(constraints: usize) -> Shape {
        Shape {
            seen: Vec::new(),
            slots: Vec::new(),
            counts: Arc::new(vec![DomainCounts::default(); constraints]),
            used: 0,
        }
    }

    fn refresh(&mut self, input: &Input<'_>, nodes: &[Arc<NodeInfo>]) {
        let same = |w: &Weak<NodeInfo>, a: &Arc<NodeInfo>| std::ptr::eq(w.as_ptr(), Arc::as_ptr(a));
        let unchanged =
            self.seen.len() == nodes.len() && self.seen.iter().zip(nodes).all(|(w, a)| same(w, a));
        if unchanged {
            return;
        }
        let width = input.constraints.len();
        // Constraints sharing the previous one's selector (the defaults do) reuse its count.
        let shares: Vec<bool> = input
            .constraints
            .iter()
            .enumerate()
            .map(|(i, c)| i > 0 && input.constraints[i - 1].selector == c.selector)
            .collect();
        let counts = Arc::make_mut(&mut self.counts);
        for pos in nodes.len()..self.seen.len() {
            withdraw(counts, &self.slots[pos * width..(pos + 1) * width]);
        }
        self.seen.truncate(nodes.len());
        self.slots.truncate(nodes.len() * width);
        for (pos, node) in nodes.iter().enumerate() {
            if pos < self.seen.len() {
                if same(&self.seen[pos], node) {
                    continue;
                }
                withdraw(counts, &self.slots[pos * width..(pos + 1) * width]);
                self.seen[pos] = Arc::downgrade(node);
            } else {
                self.seen.push(Arc::downgrade(node));
                self.slots.resize((pos + 1) * width, (NONE, 0));
            }
            let out = &mut self.slots[pos * width..(pos + 1) * width];
            contribute(input, &shares, node, counts, out);
        }
    }
}

fn withdraw(counts: &mut [DomainCounts], slots: &[(u32, u32)]) {
    for (dc, (id, pods)) in counts.iter_mut().zip(slots) {
        if *id != NONE {
            dc.change(*id, false, -i64::from(*pods));
        }
    }
}

/// Adds the node's pods to the counts and records what was added in `out`.
fn contribute(
    input: &Input<'_>,
    shares: &[bool],
    node: &NodeInfo,
    counts: &mut [DomainCounts],
    out: &mut [(u32, u32)],
) {
    out.fill((NONE, 0));
    if node.node.is_none() {
        return;
    }
    let labels = node.labels();
    if input.require_all && !has_all_keys(labels, input.constraints) {
        return;
    }
    let ns = input.pod.namespace();
    let mut previous = None;
    for (i, c) in input.constraints.iter().enumerate() {
        if !included(c, input.pod, node) {
            previous = None;
            continue;
        }
        let matching = match previous {
            Some(m) if shares[i] => m,
            _ => count_matching(&node.pods, &c.selector, ns),
        };
        previous = Some(matching);
        // Only the defaults get here without the key; upstream files such nodes under "".
        let value = labels.get(&c.topology_key).map_or("", String::as_str);
        let (Some(dc), Some(slot)) = (counts.get_mut(i), out.get_mut(i)) else {
            continue;
        };
        let id = dc.intern(value);
        dc.change(id, true, i64::from(matching));
        *slot = (id, matching);
    }
}

/// The pods in `ns`, not being deleted, that `selector` counts.
pub(super) fn count_matching(pods: &[PodInfo], selector: &Selector, ns: &str) -> u32 {
    let n = pods
        .iter()
        .filter(|p| {
            p.pod.metadata.deletion_timestamp.is_none()
                && p.namespace() == ns
                && selector.counts(p.pod.metadata.labels.as_ref())
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The remembered shapes.
#[derive(Default)]
pub(super) struct Memo {
    shapes: HashMap<String, Shape>,
    tick: u64,
}

impl Memo {
    /// The counts of shape `key` over `nodes` (the snapshot's nodes).
    pub(super) fn counts(
        &mut self,
        key: String,
        input: &Input<'_>,
        nodes: &[Arc<NodeInfo>],
    ) -> Counts {
        self.tick += 1;
        let width = input.constraints.len();
        let shape = self.shapes.entry(key).or_insert_with(|| Shape::new(width));
        if shape.counts.len() != width || shape.counts.iter().any(DomainCounts::bloated) {
            *shape = Shape::new(width);
        }
        shape.used = self.tick;
        shape.refresh(input, nodes);
        let counts = shape.counts.clone();
        while self.shapes.len() > MAX_SHAPES {
            let oldest = self
                .shapes
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.shapes.remove(&k),
                None => break,
            };
        }
        counts
    }
}
