//! Sessions through one member: each worker stays on its member and puts its own keys, reads them and other
//! workers' keys back with serializable Ranges, and compares their `mod_revision` in transactions without
//! operations (both served from the member's local state). `checker/session.rs` checks read-your-writes and
//! monotonic reads per session.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, Txn};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{bounded, Conn, Ctx, ERROR_BACKOFF};
use crate::checker::session::{Session, Step};
use crate::history::Counts;

/// Keys each worker writes.
const KEYS_PER_WORKER: usize = 3;

/// The session workload of one phase.
#[derive(Default)]
pub struct SessionWorkload {
    sessions: Arc<Mutex<Vec<Session>>>,
    counts: Arc<Mutex<Counts>>,
}

impl SessionWorkload {
    /// An empty workload.
    pub fn new() -> SessionWorkload {
        SessionWorkload::default()
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
                let sessions = self.sessions.clone();
                let counts = self.counts.clone();
                let rng = StdRng::seed_from_u64(seed.wrapping_add(w as u64 * 104_729));
                rt.spawn(worker(ctx, sessions, counts, w, workers, w % members, rng))
            })
            .collect()
    }

    /// Every finished session (call after the workers stopped).
    pub fn take(&self) -> Vec<Session> {
        std::mem::take(&mut *self.sessions.lock())
    }

    /// Operations by outcome.
    pub fn counts(&self) -> Counts {
        *self.counts.lock()
    }
}

fn key(ctx: &Ctx, worker: usize, k: usize) -> String {
    format!("{}ryw/w{worker}/{k}", ctx.prefix)
}

fn header_rev(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.map_or(0, |h| h.revision())
}

async fn worker(
    ctx: Ctx,
    sessions: Arc<Mutex<Vec<Session>>>,
    counts: Arc<Mutex<Counts>>,
    me: usize,
    workers: usize,
    home: usize,
    mut rng: StdRng,
) {
    let mut conn = Conn::new(home);
    let mut cur: Option<Session> = None;
    // Own key -> revision of this session's last put of it.
    let mut puts: Vec<Option<i64>> = vec![None; KEYS_PER_WORKER];
    let end = |cur: &mut Option<Session>, puts: &mut Vec<Option<i64>>| {
        if let Some(s) = cur.take() {
            if !s.steps.is_empty() {
                sessions.lock().push(s);
            }
        }
        puts.iter_mut().for_each(|p| *p = None);
    };
    while !ctx.stopped() {
        if conn.get(&ctx).await.is_none() {
            end(&mut cur, &mut puts);
            tokio::time::sleep(ERROR_BACKOFF).await;
            continue;
        }
        // A new member (the home one was removed) is a new session.
        let member = conn.member().unwrap_or(home);
        if cur.as_ref().is_some_and(|s| s.member != member) {
            end(&mut cur, &mut puts);
        }
        let Some(c) = conn.get(&ctx).await else {
            continue;
        };
        let session = cur.get_or_insert_with(|| Session {
            worker: me,
            member,
            steps: Vec::new(),
        });
        let k = rng.gen_range(0..KEYS_PER_WORKER);
        let own = key(&ctx, me, k);
        let r: f64 = rng.gen();
        let step = if puts[k].is_none() || r < 0.3 {
            match bounded(
                &ctx,
                c.put(own.as_str(), ctx.fresh_value().to_string(), None),
            )
            .await
            {
                Ok(Ok(resp)) => {
                    let revision = header_rev(resp.header());
                    puts[k] = Some(revision);
                    Some(Step::Put { key: own, revision })
                }
                _ => {
                    counts.lock().info += 1;
                    None
                }
            }
        } else if r < 0.8 {
            let target = if r < 0.6 {
                own
            } else {
                key(
                    &ctx,
                    rng.gen_range(0..workers),
                    rng.gen_range(0..KEYS_PER_WORKER),
                )
            };
            let opts = GetOptions::new().with_serializable();
            match bounded(&ctx, c.get(target.as_str(), Some(opts))).await {
                Ok(Ok(resp)) => Some(Step::Get {
                    header: header_rev(resp.header()),
                    mod_revision: resp.kvs().first().map(|kv| kv.mod_revision()),
                    key: target,
                }),
                _ => {
                    counts.lock().fail += 1;
                    None
                }
            }
        } else {
            let expected = puts[k].unwrap_or(0);
            // `>=`, not `==`: an indeterminate put of an earlier session may land after this session's.
            let txn = Txn::new().when([Compare::mod_revision(
                own.as_str(),
                CompareOp::Greater,
                expected - 1,
            )]);
            match bounded(&ctx, c.txn(txn)).await {
                Ok(Ok(resp)) => Some(Step::CompareOnly {
                    header: header_rev(resp.header()),
                    succeeded: resp.succeeded(),
                    key: own,
                    expected,
                }),
                _ => {
                    counts.lock().fail += 1;
                    None
                }
            }
        };
        match step {
            Some(s) => {
                counts.lock().ok += 1;
                session.steps.push(s);
            }
            None => {
                // A failure ends the session: the next one starts from what its member serves then.
                end(&mut cur, &mut puts);
                conn.reset();
                tokio::time::sleep(ERROR_BACKOFF).await;
            }
        }
    }
    end(&mut cur, &mut puts);
}
