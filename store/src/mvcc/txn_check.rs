//! Checks a request's shape before it is proposed: what etcd refuses at its gRPC layer.

use std::collections::HashSet;

use super::range::KeyRange;
use crate::error::StoreError;
use crate::pb::etcdserverpb::{request_op, PutRequest, RequestOp, TxnRequest};

/// Refuses puts etcd refuses before proposing: empty key, value or lease given with `ignore_*`.
pub fn validate_put(p: &PutRequest) -> Result<(), StoreError> {
    if p.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if p.ignore_value && !p.value.is_empty() {
        return Err(StoreError::ValueProvided);
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(StoreError::LeaseProvided);
    }
    Ok(())
}

/// Refuses Txns with too many ops in a list, empty keys, or a key written twice in one branch.
pub fn validate_txn(t: &TxnRequest, max_ops: usize) -> Result<(), StoreError> {
    check_shape(t, max_ops)?;
    intervals(&t.success)?;
    intervals(&t.failure)?;
    Ok(())
}

fn check_shape(t: &TxnRequest, max_ops: usize) -> Result<(), StoreError> {
    if t.compare.len() > max_ops || t.success.len() > max_ops || t.failure.len() > max_ops {
        return Err(StoreError::TooManyOps);
    }
    if t.compare.iter().any(|c| c.key.is_empty()) {
        return Err(StoreError::EmptyKey);
    }
    for op in t.success.iter().chain(t.failure.iter()) {
        match &op.request {
            Some(request_op::Request::RequestRange(r)) if r.key.is_empty() => {
                return Err(StoreError::EmptyKey)
            }
            Some(request_op::Request::RequestPut(p)) => validate_put(p)?,
            Some(request_op::Request::RequestDeleteRange(d)) if d.key.is_empty() => {
                return Err(StoreError::EmptyKey)
            }
            Some(request_op::Request::RequestTxn(nt)) => check_shape(nt, max_ops)?,
            _ => {}
        }
    }
    Ok(())
}

/// Collects the keys a branch puts and the ranges it deletes, refusing overlaps.
fn intervals(ops: &[RequestOp]) -> Result<(HashSet<Vec<u8>>, Vec<KeyRange>), StoreError> {
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    let mut dels = Vec::new();
    for op in ops {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) if !puts.insert(p.key.to_vec()) => {
                return Err(StoreError::DuplicateKey);
            }
            Some(request_op::Request::RequestDeleteRange(d)) => {
                dels.push(KeyRange::new(&d.key, &d.range_end))
            }
            Some(request_op::Request::RequestTxn(nt)) => {
                let (sp, sd) = intervals(&nt.success)?;
                let (fp, fd) = intervals(&nt.failure)?;
                // The two branches of a nested Txn never both run, so they may share keys.
                let nested: HashSet<Vec<u8>> = sp.union(&fp).cloned().collect();
                for k in nested {
                    if !puts.insert(k) {
                        return Err(StoreError::DuplicateKey);
                    }
                }
                dels.extend(sd);
                dels.extend(fd);
            }
            _ => {}
        }
    }
    for k in &puts {
        if dels.iter().any(|d| d.contains(k)) {
            return Err(StoreError::DuplicateKey);
        }
    }
    Ok((puts, dels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::etcdserverpb::{DeleteRangeRequest, PutRequest};

    fn put(k: &str) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: k.as_bytes().to_vec().into(),
                ..Default::default()
            })),
        }
    }

    fn del(k: &str, end: &str) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: k.as_bytes().to_vec().into(),
                    range_end: end.as_bytes().to_vec().into(),
                    ..Default::default()
                },
            )),
        }
    }

    #[test]
    fn limits_and_duplicates() {
        let t = |success: Vec<RequestOp>| TxnRequest {
            success,
            ..Default::default()
        };
        assert_eq!(
            validate_txn(&t(vec![put("a"); 129]), 128),
            Err(StoreError::TooManyOps)
        );
        assert_eq!(
            validate_txn(&t(vec![put("a"), put("a")]), 128),
            Err(StoreError::DuplicateKey)
        );
        assert_eq!(
            validate_txn(&t(vec![put("b"), del("a", "c")]), 128),
            Err(StoreError::DuplicateKey)
        );
        assert_eq!(
            validate_txn(&t(vec![del("a", "c"), del("b", "d")]), 128),
            Ok(())
        );
        assert_eq!(validate_txn(&t(vec![put("a"), put("b")]), 128), Ok(()));
        assert_eq!(
            validate_txn(&t(vec![put("")]), 128),
            Err(StoreError::EmptyKey)
        );
    }
}
