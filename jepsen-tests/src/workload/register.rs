//! Per-key registers: linearizable reads, puts and compare-and-set transactions over a rolling set of keys
//! (each key retires after a bounded number of operations, which keeps every partition of the check small).

use std::sync::Arc;
use std::time::Instant;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{bounded, Conn, Ctx, ERROR_BACKOFF};
use crate::checker::register::{RegisterInput, RegisterOutput};
use crate::history::{Op, Outcome, Recorder};

/// One recorded register operation.
pub type RegisterOp = Op<RegisterInput, RegisterOutput>;

/// Process number of the final reads.
pub const FINAL_READER: usize = 10_000;

struct Slot {
    key: String,
    ops: usize,
    /// The last value seen or written (a likely current value, for CAS).
    last: Option<u64>,
}

struct Pool {
    active: Vec<Slot>,
    next: usize,
    used: Vec<String>,
    ops_per_key: usize,
    prefix: String,
}

impl Pool {
    fn new_key(&mut self) -> Slot {
        let key = format!("{}reg/{}", self.prefix, self.next);
        self.next += 1;
        self.used.push(key.clone());
        Slot {
            key,
            ops: 0,
            last: None,
        }
    }

    /// A key to operate on (retiring it once it had its share of operations) and its last known value.
    fn pick(&mut self, rng: &mut StdRng) -> (String, Option<u64>) {
        let i = rng.gen_range(0..self.active.len());
        self.active[i].ops += 1;
        let picked = (self.active[i].key.clone(), self.active[i].last);
        if self.active[i].ops >= self.ops_per_key {
            self.active[i] = self.new_key();
        }
        picked
    }

    fn saw(&mut self, key: &str, v: Option<u64>) {
        if let Some(s) = self.active.iter_mut().find(|s| s.key == key) {
            s.last = v;
        }
    }
}

/// The register workload of one phase.
pub struct RegisterWorkload {
    /// Every operation of the phase.
    pub history: Arc<Recorder<RegisterInput, RegisterOutput>>,
    pool: Arc<Mutex<Pool>>,
}

impl RegisterWorkload {
    /// `keys` keys in use at a time under `ctx.prefix`, each retired after `ops_per_key` operations.
    pub fn new(ctx: &Ctx, start: Instant, keys: usize, ops_per_key: usize) -> RegisterWorkload {
        let mut pool = Pool {
            active: Vec::new(),
            next: 0,
            used: Vec::new(),
            ops_per_key,
            prefix: ctx.prefix.clone(),
        };
        for _ in 0..keys.max(1) {
            let s = pool.new_key();
            pool.active.push(s);
        }
        RegisterWorkload {
            history: Recorder::new(start),
            pool: Arc::new(Mutex::new(pool)),
        }
    }

    /// Starts `workers` workers (worker `w` bound to member `w % members`).
    pub fn spawn(
        &self,
        rt: &tokio::runtime::Handle,
        ctx: &Ctx,
        workers: usize,
        seed: u64,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let members = ctx.endpoints.len().max(1);
        (0..workers)
            .map(|w| {
                let ctx = ctx.clone();
                let hist = self.history.clone();
                let pool = self.pool.clone();
                let rng = StdRng::seed_from_u64(seed.wrapping_add(w as u64 * 7919));
                rt.spawn(worker(ctx, hist, pool, w, w % members, rng))
            })
            .collect()
    }

    /// After the phase: one linearizable read of every key used, through any member (retried a few times),
    /// until `deadline` (reads left out only make the check less strict).
    pub async fn final_reads(&self, ctx: &Ctx, deadline: std::time::Instant) {
        let keys = self.pool.lock().used.clone();
        let mut conn = Conn::new(0);
        for key in keys {
            if std::time::Instant::now() > deadline {
                break;
            }
            for _attempt in 0..5 {
                let call = self.history.now();
                let Some(c) = conn.get(ctx).await else {
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    continue;
                };
                match bounded(ctx, c.get(key.as_str(), None)).await {
                    Ok(Ok(r)) => {
                        let v = r.kvs().first().map(|kv| parse_value(kv.value()));
                        self.history.push(Op {
                            process: FINAL_READER,
                            key: key.clone(),
                            call,
                            ret: self.history.now(),
                            input: RegisterInput::Read,
                            outcome: Outcome::Ok(RegisterOutput::Read(v)),
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

/// A stored value: our decimal numbers; anything else maps to a number no client wrote (so the check fails).
fn parse_value(b: &[u8]) -> u64 {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

async fn worker(
    ctx: Ctx,
    hist: Arc<Recorder<RegisterInput, RegisterOutput>>,
    pool: Arc<Mutex<Pool>>,
    process: usize,
    home: usize,
    mut rng: StdRng,
) {
    let mut conn = Conn::new(home);
    while !ctx.stopped() {
        let (key, last) = pool.lock().pick(&mut rng);
        let r: f64 = rng.gen();
        let input = if r < 0.4 {
            RegisterInput::Read
        } else if r < 0.7 {
            RegisterInput::Write(ctx.fresh_value())
        } else {
            RegisterInput::Cas(last.unwrap_or(0), ctx.fresh_value())
        };
        let call = hist.now();
        let Some(c) = conn.get(&ctx).await else {
            // Nothing was sent: not an operation.
            tokio::time::sleep(ERROR_BACKOFF).await;
            continue;
        };
        let outcome = match &input {
            RegisterInput::Read => match bounded(&ctx, c.get(key.as_str(), None)).await {
                Ok(Ok(r)) => {
                    let v = r.kvs().first().map(|kv| parse_value(kv.value()));
                    pool.lock().saw(&key, v);
                    Outcome::Ok(RegisterOutput::Read(v))
                }
                // A read that failed changed nothing.
                _ => Outcome::Fail,
            },
            RegisterInput::Write(v) => {
                match bounded(&ctx, c.put(key.as_str(), v.to_string(), None)).await {
                    Ok(Ok(_)) => {
                        pool.lock().saw(&key, Some(*v));
                        Outcome::Ok(RegisterOutput::Written)
                    }
                    _ => Outcome::Info,
                }
            }
            RegisterInput::Cas(from, to) => {
                let txn = Txn::new()
                    .when([Compare::value(
                        key.as_str(),
                        CompareOp::Equal,
                        from.to_string(),
                    )])
                    .and_then([TxnOp::put(key.as_str(), to.to_string(), None)]);
                match bounded(&ctx, c.txn(txn)).await {
                    Ok(Ok(r)) => {
                        if r.succeeded() {
                            pool.lock().saw(&key, Some(*to));
                        }
                        Outcome::Ok(RegisterOutput::Cas(r.succeeded()))
                    }
                    _ => Outcome::Info,
                }
            }
        };
        let failed = !matches!(outcome, Outcome::Ok(_));
        hist.push(Op {
            process,
            key,
            call,
            ret: hist.now(),
            input,
            outcome,
        });
        if failed {
            conn.reset();
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
    }
}
