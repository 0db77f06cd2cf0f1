//! The versioned key space: reads at any retained revision, and the write transaction that
//! turns one command into one new main revision.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use prost::Message;

use super::key_index::{KeyAt, KeyIndex};
use super::range::KeyRange;
use super::revision::{Revision, REV_KEY_LEN};
use crate::backend::{Backend, Space, WriteBatch};
use crate::error::StoreError;
use crate::lease::{LeaseId, Lessor};
use crate::pb::etcdserverpb::{
    compare, range_request, request_op, response_op, Compare, DeleteRangeRequest,
    DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp,
    ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use crate::pb::mvccpb::{event::EventType, Event, KeyValue};

/// The in-memory part of the key space.
#[derive(Debug, Default)]
pub struct KvState {
    /// Key → its generations.
    pub index: BTreeMap<Bytes, KeyIndex>,
    /// Latest main revision.
    pub current: i64,
    /// Revision of the last compaction (0 = never).
    pub compacted: i64,
}

/// Where a revision's stored `KeyValue` is read from.
pub trait Values {
    /// The record written at `rev`.
    fn kv(&self, rev: Revision) -> Result<KeyValue, StoreError>;

    /// The records written at `revs`, in the order asked.
    fn kvs(&self, revs: &[Revision]) -> Result<Vec<KeyValue>, StoreError> {
        revs.iter().map(|r| self.kv(*r)).collect()
    }
}

/// A batched read keeps scanning past this many records it does not want before it gives up
/// the scan and seeks afresh: a few skipped records cost less than one point lookup, which
/// searches every level of the backend.
const MAX_SKIPPED: usize = 16;

/// Reads values straight from the backend.
pub struct BackendValues<'a>(pub &'a dyn Backend);

impl Values for BackendValues<'_> {
    fn kv(&self, rev: Revision) -> Result<KeyValue, StoreError> {
        match self.0.get(Space::Kv, &rev.to_bytes())? {
            Some(b) => Ok(KeyValue::decode(b)?),
            None => Err(missing(rev)),
        }
    }

    /// Keys created or updated together (one Txn, one bulk load, one controller's burst) have
    /// neighbouring revisions, so the wanted records are read in revision order with range
    /// scans that each serve a run of them, seeking afresh across wide gaps.
    fn kvs(&self, revs: &[Revision]) -> Result<Vec<KeyValue>, StoreError> {
        let mut order: Vec<usize> = (0..revs.len()).collect();
        order.sort_unstable_by_key(|&i| revs[i]);
        let wanted: Vec<[u8; REV_KEY_LEN]> = order.iter().map(|&i| revs[i].to_bytes()).collect();
        let mut found: Vec<Option<KeyValue>> = vec![None; revs.len()];
        let Some(&last) = order.last().map(|&i| &revs[i]) else {
            return Ok(Vec::new());
        };
        let end = Revision::new(last.main, last.sub.saturating_add(1)).to_bytes();
        let mut next = 0;
        while next < wanted.len() {
            let started = next;
            let mut skipped = 0;
            for pair in self.0.scan_shared(Space::Kv, &wanted[next], Some(&end)) {
                let (k, v) = pair?;
                if k.as_ref() == wanted[next].as_slice() {
                    found[order[next]] = Some(KeyValue::decode(v)?);
                    next += 1;
                    skipped = 0;
                    if next == wanted.len() {
                        break;
                    }
                } else if k.as_ref() > wanted[next].as_slice() {
                    return Err(missing(revs[order[next]]));
                } else {
                    skipped += 1;
                    if skipped > MAX_SKIPPED {
                        break;
                    }
                }
            }
            if next == started {
                // The scan ended or gave up before the record it started at.
                return Err(missing(revs[order[next]]));
            }
        }
        found
            .into_iter()
            .zip(revs)
            .map(|(kv, rev)| kv.ok_or_else(|| missing(*rev)))
            .collect()
    }
}

fn missing(rev: Revision) -> StoreError {
    StoreError::Corrupt(format!("missing value for revision {rev}"))
}

/// Header carrying only a revision; the front door fills in the member fields.
pub fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..Default::default()
    })
}

impl KvState {
    /// Keys of `range` live at revision `at`, in key order.
    pub fn keys_at(&self, range: &KeyRange, at: i64) -> Vec<(&Bytes, KeyAt)> {
        if *range == KeyRange::Empty {
            return Vec::new();
        }
        self.index
            .range::<[u8], _>(range.bounds())
            .filter_map(|(k, ki)| ki.get(at).map(|a| (k, a)))
            .collect()
    }

    /// Checks a read revision against the retained window `[compacted, view]`.
    pub fn check_rev(&self, rev: i64, view: i64) -> Result<(), StoreError> {
        if rev > view {
            return Err(StoreError::FutureRev);
        }
        if rev > 0 && rev < self.compacted {
            return Err(StoreError::Compacted);
        }
        Ok(())
    }

    /// Serves a Range as of view revision `view` (the store's current revision outside a Txn).
    pub fn range(
        &self,
        r: &RangeRequest,
        view: i64,
        values: &dyn Values,
    ) -> Result<RangeResponse, StoreError> {
        if r.key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        self.check_rev(r.revision, view)?;
        let at = if r.revision > 0 { r.revision } else { view };
        let keys = self.keys_at(&KeyRange::new(&r.key, &r.range_end), at);
        let count = keys.len() as i64;
        let mut resp = RangeResponse {
            header: header(view),
            count,
            ..Default::default()
        };
        if r.count_only {
            return Ok(resp);
        }
        let order = range_request::SortOrder::try_from(r.sort_order)
            .unwrap_or(range_request::SortOrder::None);
        let target = range_request::SortTarget::try_from(r.sort_target)
            .unwrap_or(range_request::SortTarget::Key);
        let filtered = r.min_mod_revision != 0
            || r.max_mod_revision != 0
            || r.min_create_revision != 0
            || r.max_create_revision != 0;
        // etcd fetches everything when it must sort or filter, else limit+1 to learn `more`.
        let fetch = if order != range_request::SortOrder::None || filtered || r.limit <= 0 {
            keys.len()
        } else {
            keys.len().min(r.limit as usize + 1)
        };
        let revs: Vec<Revision> = keys.iter().take(fetch).map(|(_, a)| a.modified).collect();
        let mut kvs = values.kvs(&revs)?;
        if filtered {
            kvs.retain(|kv| {
                (r.max_mod_revision == 0 || kv.mod_revision <= r.max_mod_revision)
                    && (r.min_mod_revision == 0 || kv.mod_revision >= r.min_mod_revision)
                    && (r.max_create_revision == 0 || kv.create_revision <= r.max_create_revision)
                    && (r.min_create_revision == 0 || kv.create_revision >= r.min_create_revision)
            });
        }
        let order = if target != range_request::SortTarget::Key
            && order == range_request::SortOrder::None
        {
            range_request::SortOrder::Ascend
        } else {
            order
        };
        if order != range_request::SortOrder::None {
            use range_request::SortTarget as T;
            let desc = order == range_request::SortOrder::Descend;
            // Stable sorts over key order: ties stay in ascending key order either way, as
            // etcd's small-range sorts leave them.
            let by = |a: &KeyValue, b: &KeyValue| -> std::cmp::Ordering {
                let o = match target {
                    T::Key => a.key.cmp(&b.key),
                    T::Version => a.version.cmp(&b.version),
                    T::Create => a.create_revision.cmp(&b.create_revision),
                    T::Mod => a.mod_revision.cmp(&b.mod_revision),
                    T::Value => a.value.cmp(&b.value),
                };
                if desc {
                    o.reverse()
                } else {
                    o
                }
            };
            kvs.sort_by(by);
        }
        if r.limit > 0 && kvs.len() > r.limit as usize {
            kvs.truncate(r.limit as usize);
            resp.more = true;
        }
        if r.keys_only {
            for kv in &mut kvs {
                kv.value = Bytes::new();
            }
        }
        resp.kvs = kvs;
        Ok(resp)
    }

    /// Evaluates one Txn compare against the state at `view`.
    pub fn compare(&self, c: &Compare, view: i64, values: &dyn Values) -> Result<bool, StoreError> {
        let target =
            compare::CompareTarget::try_from(c.target).unwrap_or(compare::CompareTarget::Version);
        let keys = self.keys_at(&KeyRange::new(&c.key, &c.range_end), view);
        if keys.is_empty() {
            if target == compare::CompareTarget::Value {
                return Ok(false);
            }
            return Ok(compare_kv(c, &KeyValue::default()));
        }
        for (k, a) in keys {
            let kv = if target == compare::CompareTarget::Value
                || target == compare::CompareTarget::Lease
            {
                values.kv(a.modified)?
            } else {
                KeyValue {
                    key: k.clone(),
                    create_revision: a.created.main,
                    mod_revision: a.modified.main,
                    version: a.version,
                    ..Default::default()
                }
            };
            if !compare_kv(c, &kv) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    use compare::{CompareResult as R, CompareTarget as T, TargetUnion as U};
    let ord = match T::try_from(c.target).unwrap_or(T::Version) {
        T::Value => {
            let want: &[u8] = match &c.target_union {
                Some(U::Value(v)) => v,
                _ => &[],
            };
            kv.value.as_ref().cmp(want)
        }
        T::Version => kv.version.cmp(&match c.target_union {
            Some(U::Version(v)) => v,
            _ => 0,
        }),
        T::Create => kv.create_revision.cmp(&match c.target_union {
            Some(U::CreateRevision(v)) => v,
            _ => 0,
        }),
        T::Mod => kv.mod_revision.cmp(&match c.target_union {
            Some(U::ModRevision(v)) => v,
            _ => 0,
        }),
        T::Lease => kv.lease.cmp(&match c.target_union {
            Some(U::Lease(v)) => v,
            _ => 0,
        }),
    };
    use std::cmp::Ordering::*;
    match R::try_from(c.result).unwrap_or(R::Equal) {
        R::Equal => ord == Equal,
        R::Greater => ord == Greater,
        R::Less => ord == Less,
        R::NotEqual => ord != Equal,
    }
}

/// One command being applied: every write gets `(main, sub)` with `sub` counting up.
pub struct WriteTxn<'a> {
    pub kv: &'a mut KvState,
    pub lessor: &'a mut Lessor,
    pub backend: &'a dyn Backend,
    pub batch: &'a mut WriteBatch,
    /// Values written earlier in the same apply batch (not yet in the backend).
    pub overlay: &'a mut HashMap<Revision, KeyValue>,
    pub events: &'a mut Vec<Event>,
    /// Revision before this command.
    pub begin: i64,
    /// Writes made so far in this command.
    pub sub: i64,
}

impl Values for WriteTxn<'_> {
    fn kv(&self, rev: Revision) -> Result<KeyValue, StoreError> {
        match self.overlay.get(&rev) {
            Some(kv) => Ok(kv.clone()),
            None => BackendValues(self.backend).kv(rev),
        }
    }
}

impl WriteTxn<'_> {
    /// The revision reads inside this command see (includes its own writes).
    pub fn view(&self) -> i64 {
        if self.sub > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }

    /// Revision after this command: the new one only if something changed.
    pub fn end(&self) -> i64 {
        self.view()
    }

    fn next_rev(&mut self) -> Revision {
        let r = Revision::new(self.begin + 1, self.sub);
        self.sub += 1;
        r
    }

    fn current_kv(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.kv.index.get(key).and_then(|ki| ki.current()) {
            Some(a) => Ok(Some(self.kv(a.modified)?)),
            None => Ok(None),
        }
    }

    /// Checks what etcd checks before a put runs (so a failing Txn changes nothing).
    pub fn check_put(&self, p: &PutRequest) -> Result<(), StoreError> {
        if p.key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        if p.ignore_value || p.ignore_lease {
            let live = self
                .kv
                .index
                .get(&p.key[..])
                .and_then(|k| k.current())
                .is_some();
            if !live {
                return Err(StoreError::KeyNotFound);
            }
        }
        if p.lease != 0 && !p.ignore_lease && !self.lessor.contains(LeaseId(p.lease)) {
            return Err(StoreError::LeaseNotFound);
        }
        Ok(())
    }

    /// Applies a put.
    pub fn put(&mut self, p: &PutRequest) -> Result<PutResponse, StoreError> {
        self.check_put(p)?;
        let prev = self.current_kv(&p.key)?;
        let (value, lease) = match &prev {
            Some(pk) => (
                if p.ignore_value {
                    pk.value.clone()
                } else {
                    p.value.clone()
                },
                if p.ignore_lease { pk.lease } else { p.lease },
            ),
            None => (p.value.clone(), p.lease),
        };
        let rev = self.next_rev();
        // A new key gets its own allocation: the request's key is a slice of the buffer the
        // whole request (or Raft entry) was decoded from, which the index would otherwise pin
        // for as long as the key lives.
        let key = match self.kv.index.get_key_value(&p.key) {
            Some((k, _)) => k.clone(),
            None => Bytes::copy_from_slice(&p.key),
        };
        let ki = self.kv.index.entry(key.clone()).or_default();
        let (created, version) = match ki.current() {
            Some(a) => (a.created.main, a.version + 1),
            None => (rev.main, 1),
        };
        ki.put(rev);
        let old_lease = std::mem::replace(&mut ki.lease, lease);
        if old_lease != 0 && old_lease != lease {
            self.lessor.detach(LeaseId(old_lease), &p.key);
        }
        if lease != 0 {
            self.lessor.attach(LeaseId(lease), key);
        }
        let kv = KeyValue {
            key: p.key.clone(),
            create_revision: created,
            mod_revision: rev.main,
            version,
            value,
            lease,
        };
        self.batch
            .put(Space::Kv, rev.to_key(false), kv.encode_to_vec());
        self.events.push(Event {
            r#type: EventType::Put as i32,
            kv: Some(kv.clone()),
            prev_kv: None,
        });
        self.overlay.insert(rev, kv);
        Ok(PutResponse {
            header: header(rev.main),
            prev_kv: if p.prev_kv { prev } else { None },
        })
    }

    /// Deletes one live key at the next sub-revision; returns its previous value.
    pub fn delete_key(&mut self, key: &Bytes) -> Result<KeyValue, StoreError> {
        let prev = self
            .current_kv(key)?
            .ok_or_else(|| StoreError::Corrupt("deleting a key that is not live".into()))?;
        let rev = self.next_rev();
        if let Some(ki) = self.kv.index.get_mut(key) {
            ki.tombstone(rev);
            let lease = std::mem::take(&mut ki.lease);
            if lease != 0 {
                self.lessor.detach(LeaseId(lease), key);
            }
        }
        let tomb = KeyValue {
            key: key.clone(),
            ..Default::default()
        };
        self.batch
            .put(Space::Kv, rev.to_key(true), tomb.encode_to_vec());
        self.events.push(Event {
            r#type: EventType::Delete as i32,
            kv: Some(KeyValue {
                key: key.clone(),
                mod_revision: rev.main,
                ..Default::default()
            }),
            prev_kv: None,
        });
        Ok(prev)
    }

    /// Applies a delete-range.
    pub fn delete_range(
        &mut self,
        d: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StoreError> {
        if d.key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let view = self.view();
        let keys: Vec<Bytes> = self
            .kv
            .keys_at(&KeyRange::new(&d.key, &d.range_end), view)
            .into_iter()
            .map(|(k, _)| k.clone())
            .collect();
        let mut prev_kvs = Vec::new();
        for k in &keys {
            let prev = self.delete_key(k)?;
            if d.prev_kv {
                prev_kvs.push(prev);
            }
        }
        Ok(DeleteRangeResponse {
            header: header(self.view()),
            deleted: keys.len() as i64,
            prev_kvs,
        })
    }

    /// Applies a Txn: compares against the state before it, then runs one branch in order.
    pub fn txn(&mut self, t: &TxnRequest) -> Result<TxnResponse, StoreError> {
        // etcd decides every branch of every nested Txn before running anything.
        let path = self.decide(t)?;
        self.check_path(t, &path, &mut 0)?;
        let mut pos = 0;
        let resp = self.run(t, &path, &mut pos)?;
        Ok(TxnResponse {
            header: header(self.end()),
            ..resp
        })
    }

    fn decide(&self, t: &TxnRequest) -> Result<Vec<bool>, StoreError> {
        let mut path = Vec::new();
        self.decide_into(t, &mut path)?;
        Ok(path)
    }

    fn decide_into(&self, t: &TxnRequest, path: &mut Vec<bool>) -> Result<(), StoreError> {
        let view = self.view();
        let mut ok = true;
        for c in &t.compare {
            if !self.kv.compare(c, view, self)? {
                ok = false;
                break;
            }
        }
        path.push(ok);
        let ops = if ok { &t.success } else { &t.failure };
        for op in ops {
            if let Some(request_op::Request::RequestTxn(nt)) = &op.request {
                self.decide_into(nt, path)?;
            }
        }
        Ok(())
    }

    fn check_path(&self, t: &TxnRequest, path: &[bool], pos: &mut usize) -> Result<(), StoreError> {
        let ok = path.get(*pos).copied().unwrap_or(false);
        *pos += 1;
        let view = self.view();
        for op in if ok { &t.success } else { &t.failure } {
            match &op.request {
                Some(request_op::Request::RequestRange(r)) => {
                    self.kv.check_rev(r.revision, view)?
                }
                Some(request_op::Request::RequestPut(p)) => self.check_put(p)?,
                Some(request_op::Request::RequestDeleteRange(d)) if d.key.is_empty() => {
                    return Err(StoreError::EmptyKey)
                }
                Some(request_op::Request::RequestTxn(nt)) => self.check_path(nt, path, pos)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn run(
        &mut self,
        t: &TxnRequest,
        path: &[bool],
        pos: &mut usize,
    ) -> Result<TxnResponse, StoreError> {
        let ok = path.get(*pos).copied().unwrap_or(false);
        *pos += 1;
        let ops: &[RequestOp] = if ok { &t.success } else { &t.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            let resp = match &op.request {
                Some(request_op::Request::RequestRange(r)) => {
                    let view = self.view();
                    response_op::Response::ResponseRange(self.kv.range(r, view, &*self)?)
                }
                Some(request_op::Request::RequestPut(p)) => {
                    response_op::Response::ResponsePut(self.put(p)?)
                }
                Some(request_op::Request::RequestDeleteRange(d)) => {
                    response_op::Response::ResponseDeleteRange(self.delete_range(d)?)
                }
                Some(request_op::Request::RequestTxn(nt)) => {
                    let mut r = self.run(nt, path, pos)?;
                    r.header = Some(ResponseHeader::default());
                    response_op::Response::ResponseTxn(r)
                }
                None => continue,
            };
            responses.push(ResponseOp {
                response: Some(resp),
            });
        }
        Ok(TxnResponse {
            header: None,
            succeeded: ok,
            responses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fjall_backend::FjallBackend;
    use crate::backend::WriteBatch;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    fn record(rev: Revision) -> KeyValue {
        KeyValue {
            key: Bytes::from(format!("k{}-{}", rev.main, rev.sub)),
            value: Bytes::from(vec![rev.sub as u8; 40]),
            mod_revision: rev.main,
            ..Default::default()
        }
    }

    #[test]
    fn batched_reads_match_point_reads_in_any_order_and_report_holes() {
        let dir = tempfile::tempdir().unwrap();
        let backend = FjallBackend::open(dir.path()).unwrap();
        let mut all = Vec::new();
        let mut batch = WriteBatch::default();
        // Dense runs (one Txn of many puts), sparse singles, and tombstones in between.
        for main in 1..400i64 {
            let subs = if main % 50 == 0 { 300 } else { 1 + main % 3 };
            for sub in 0..subs {
                let rev = Revision::new(main, sub);
                let tomb = main % 7 == 0 && sub == 0;
                batch.put(Space::Kv, rev.to_key(tomb), record(rev).encode_to_vec());
                if !tomb {
                    all.push(rev);
                }
            }
        }
        backend.write(batch).unwrap();
        let values = BackendValues(&backend);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..50 {
            let n = rng.gen_range(0..all.len().min(600));
            let mut revs: Vec<Revision> = all.choose_multiple(&mut rng, n).copied().collect();
            revs.shuffle(&mut rng);
            let got = values.kvs(&revs).unwrap();
            let want: Vec<KeyValue> = revs.iter().map(|r| values.kv(*r).unwrap()).collect();
            assert_eq!(got, want);
            assert!(got.iter().zip(&revs).all(|(kv, r)| *kv == record(*r)));
        }
        // A revision that was never written, or only as a tombstone, is an error either way.
        for hole in [
            Revision::new(7, 0),
            Revision::new(1000, 0),
            Revision::new(50, 300),
        ] {
            let revs = [Revision::new(1, 0), hole, Revision::new(399, 0)];
            assert!(matches!(values.kvs(&revs), Err(StoreError::Corrupt(_))));
            assert!(values.kv(hole).is_err());
        }
    }
}
