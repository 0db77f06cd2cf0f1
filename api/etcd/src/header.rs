//! Response headers: which cluster and member answered, at which revision and term.

use std::sync::Arc;

use keel_raft::node::Node;
use keel_store::pb::etcdserverpb::ResponseHeader;

/// Fills the member fields of response headers.
#[derive(Clone)]
pub struct HeaderSource {
    node: Arc<Node>,
}

impl HeaderSource {
    /// Headers for answers from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        HeaderSource { node }
    }

    /// A header at `revision`.
    pub fn header(&self, revision: i64) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.node.cluster_id(),
            member_id: self.node.member_id(),
            revision,
            raft_term: self.node.term(),
        }
    }

    /// Completes a header the store produced: a missing or zero revision becomes the current one.
    pub fn fill(&self, h: Option<ResponseHeader>) -> Option<ResponseHeader> {
        let rev = match h {
            Some(h) if h.revision != 0 => h.revision,
            _ => self.node.store().revision(),
        };
        Some(self.header(rev))
    }
}
