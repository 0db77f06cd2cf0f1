//! List-append transactions over small groups of keys (Jepsen's `append` workload, done as etcd clients do
//! it): read every key the transaction touches, then commit in one Txn guarded by each key's mod revision, so
//! the commit applies exactly when nothing it read has changed. Groups retire after a bounded number of
//! transactions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{bounded, Conn, Ctx, ERROR_BACKOFF};
use crate::checker::append::{Micro, Txn as AppendTxn, TxnReads};
use crate::history::{Op, Outcome, Recorder};

/// Keys per group.
pub const GROUP_KEYS: usize = 3;
/// Process number of the final reads.
pub const FINAL_READER: usize = 10_000;

/// One recorded transaction.
pub type AppendOp = Op<AppendTxn, TxnReads>;

struct Pool {
    active: Vec<(usize, usize)>,
    next: usize,
    txns_per_group: usize,
}

impl Pool {
    fn pick(&mut self, rng: &mut StdRng) -> usize {
        let i = rng.gen_range(0..self.active.len());
        let g = self.active[i].0;
        self.active[i].1 += 1;
        if self.active[i].1 >= self.txns_per_group {
            self.active[i] = (self.next, 0);
            self.next += 1;
        }
        g
    }
}

/// The list-append workload of one phase.
pub struct AppendWorkload {
    /// Every transaction of the phase.
    pub history: Arc<Recorder<AppendTxn, TxnReads>>,
    pool: Arc<Mutex<Pool>>,
    prefix: String,
}

fn key_of(prefix: &str, group: usize, k: usize) -> String {
    format!("{prefix}app/{group}/{k}")
}

fn group_name(prefix: &str, group: usize) -> String {
    format!("{prefix}app/{group}")
}

/// `"1 5 9"` → `[1, 5, 9]`; anything unparsable becomes a number no client appended.
fn parse_list(b: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(b)
        .split_whitespace()
        .map(|s| s.parse().unwrap_or(u64::MAX))
        .collect()
}

fn format_list(l: &[u64]) -> String {
    l.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

impl AppendWorkload {
    /// `groups` groups in use at a time, each retired after `txns_per_group` transactions.
    pub fn new(ctx: &Ctx, start: Instant, groups: usize, txns_per_group: usize) -> AppendWorkload {
        let groups = groups.max(1);
        AppendWorkload {
            history: Recorder::new(start),
            pool: Arc::new(Mutex::new(Pool {
                active: (0..groups).map(|g| (g, 0)).collect(),
                next: groups,
                txns_per_group,
            })),
            prefix: ctx.prefix.clone(),
        }
    }

    /// Starts `workers` workers (worker `w` bound to member `w % members`); process numbers start at `base`.
    pub fn spawn(
        &self,
        rt: &tokio::runtime::Handle,
        ctx: &Ctx,
        workers: usize,
        base: usize,
        seed: u64,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let members = ctx.endpoints.len().max(1);
        (0..workers)
            .map(|w| {
                let ctx = ctx.clone();
                let hist = self.history.clone();
                let pool = self.pool.clone();
                let rng = StdRng::seed_from_u64(seed.wrapping_add(w as u64 * 104_729));
                rt.spawn(worker(ctx, hist, pool, base + w, (w + 1) % members, rng))
            })
            .collect()
    }

    /// After the phase: one read-only transaction over each group used, until `deadline`.
    pub async fn final_reads(&self, ctx: &Ctx, deadline: Instant) {
        let groups = self.pool.lock().next;
        let mut conn = Conn::new(0);
        for g in 0..groups {
            if Instant::now() > deadline {
                break;
            }
            let txn: AppendTxn = (0..GROUP_KEYS).map(Micro::Read).collect();
            for _attempt in 0..5 {
                let call = self.history.now();
                match run_txn(ctx, &mut conn, &self.prefix, g, &txn).await {
                    Some((Outcome::Ok(reads), _)) => {
                        self.history.push(Op {
                            process: FINAL_READER,
                            key: group_name(&self.prefix, g),
                            call,
                            ret: self.history.now(),
                            input: txn.clone(),
                            outcome: Outcome::Ok(reads),
                        });
                        break;
                    }
                    _ => {
                        conn.reset();
                        tokio::time::sleep(ERROR_BACKOFF).await;
                    }
                }
            }
        }
    }
}

/// Runs one transaction: its outcome and whether an RPC failed, or `None` if no member could be reached
/// (nothing sent).
async fn run_txn(
    ctx: &Ctx,
    conn: &mut Conn,
    prefix: &str,
    group: usize,
    txn: &AppendTxn,
) -> Option<(Outcome<TxnReads>, bool)> {
    let c = conn.get(ctx).await?;
    let touched: Vec<usize> = {
        let mut t: Vec<usize> = txn
            .iter()
            .map(|m| match m {
                Micro::Append(k, _) | Micro::Read(k) => *k,
            })
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    };
    // 1. Read every touched key in one (linearizable, read-only) transaction.
    let read = Txn::new().and_then(
        touched
            .iter()
            .map(|&k| TxnOp::get(key_of(prefix, group, k), None))
            .collect::<Vec<_>>(),
    );
    let resp = match bounded(ctx, c.txn(read)).await {
        Ok(Ok(r)) => r,
        _ => return Some((Outcome::Fail, true)),
    };
    let mut current: BTreeMap<usize, (Vec<u64>, i64)> = BTreeMap::new();
    for (&k, r) in touched.iter().zip(resp.op_responses()) {
        let (list, rev) = match r {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| (parse_list(kv.value()), kv.mod_revision()))
                .unwrap_or((Vec::new(), 0)),
            _ => (Vec::new(), 0),
        };
        current.insert(k, (list, rev));
    }
    let revs: BTreeMap<usize, i64> = current.iter().map(|(k, (_, r))| (*k, *r)).collect();
    // 2. Apply the steps to the lists read.
    let mut reads = Vec::new();
    let mut appended = false;
    for m in txn {
        match m {
            Micro::Append(k, v) => {
                if let Some((l, _)) = current.get_mut(k) {
                    l.push(*v);
                }
                appended = true;
            }
            Micro::Read(k) => {
                reads.push(current.get(k).map(|(l, _)| l.clone()).unwrap_or_default())
            }
        }
    }
    if !appended {
        return Some((Outcome::Ok(reads), false));
    }
    // 3. Commit iff no touched key changed since it was read (mod revision 0: the key still does not exist).
    let compares: Vec<Compare> = revs
        .iter()
        .map(|(&k, &r)| Compare::mod_revision(key_of(prefix, group, k), CompareOp::Equal, r))
        .collect();
    let puts: Vec<TxnOp> = txn
        .iter()
        .filter_map(|m| match m {
            Micro::Append(k, _) => Some(*k),
            Micro::Read(_) => None,
        })
        .collect::<std::collections::BTreeSet<usize>>()
        .into_iter()
        .map(|k| TxnOp::put(key_of(prefix, group, k), format_list(&current[&k].0), None))
        .collect();
    let commit = Txn::new().when(compares).and_then(puts);
    Some(match bounded(ctx, c.txn(commit)).await {
        Ok(Ok(r)) if r.succeeded() => (Outcome::Ok(reads), false),
        Ok(Ok(_)) => (Outcome::Fail, false),
        _ => (Outcome::Info, true),
    })
}

async fn worker(
    ctx: Ctx,
    hist: Arc<Recorder<AppendTxn, TxnReads>>,
    pool: Arc<Mutex<Pool>>,
    process: usize,
    home: usize,
    mut rng: StdRng,
) {
    let mut conn = Conn::new(home);
    let prefix = ctx.prefix.clone();
    while !ctx.stopped() {
        let group = pool.lock().pick(&mut rng);
        let len = rng.gen_range(1..=3);
        let txn: AppendTxn = (0..len)
            .map(|_| {
                let k = rng.gen_range(0..GROUP_KEYS);
                if rng.gen_bool(0.5) {
                    Micro::Append(k, ctx.fresh_value())
                } else {
                    Micro::Read(k)
                }
            })
            .collect();
        let call = hist.now();
        let Some((outcome, errored)) = run_txn(&ctx, &mut conn, &prefix, group, &txn).await else {
            tokio::time::sleep(ERROR_BACKOFF).await;
            continue;
        };
        hist.push(Op {
            process,
            key: group_name(&prefix, group),
            call,
            ret: hist.now(),
            input: txn,
            outcome,
        });
        if errored {
            conn.reset();
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
    }
}
