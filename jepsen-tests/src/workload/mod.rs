//! Client workloads. Each runs a few workers (tokio tasks), each bound to one member like a Jepsen client (so a
//! partitioned member's clients see what that member serves), recording every operation in a history.

pub mod append;
pub mod register;
pub mod session;
pub mod watch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

/// Client endpoints (`host:port`) of the members by member index; `None` once a member is removed.
#[derive(Clone, Default)]
pub struct Endpoints(Arc<RwLock<Vec<Option<String>>>>);

impl Endpoints {
    /// The endpoints of members `0..eps.len()`.
    pub fn new(eps: Vec<String>) -> Endpoints {
        Endpoints(Arc::new(RwLock::new(eps.into_iter().map(Some).collect())))
    }

    /// Sets member `i`'s endpoint (`None`: removed), growing the table for a new member.
    pub fn set(&self, i: usize, ep: Option<String>) {
        let mut v = self.0.write();
        if v.len() <= i {
            v.resize(i + 1, None);
        }
        v[i] = ep;
    }

    /// The endpoint a worker with home member `home` should use: its home, or the next member not removed.
    pub fn for_home(&self, home: usize) -> Option<(usize, String)> {
        let v = self.0.read();
        let n = v.len();
        (0..n)
            .map(|k| (home + k) % n)
            .find_map(|i| v[i].clone().map(|e| (i, e)))
    }

    /// Number of member slots (removed members included).
    pub fn len(&self) -> usize {
        self.0.read().len()
    }

    /// True when no member was ever known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What every worker shares: where to connect, when to stop, how long one operation may take.
#[derive(Clone)]
pub struct Ctx {
    /// Where the members are.
    pub endpoints: Endpoints,
    /// Set when the phase ends.
    pub stop: Arc<AtomicBool>,
    /// After this long without an answer an operation is indeterminate.
    pub op_timeout: Duration,
    /// Source of unique written values.
    pub values: Arc<AtomicU64>,
    /// Prefix of every key this phase uses (`/jepsen/<run>/<phase>/`).
    pub prefix: String,
}

impl Ctx {
    /// True once the phase asked its workers to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A value never written before in this run.
    pub fn fresh_value(&self) -> u64 {
        self.values.fetch_add(1, Ordering::SeqCst)
    }
}

/// A connected client for one member, reconnected after failures.
pub struct Conn {
    home: usize,
    member: Option<usize>,
    client: Option<etcd_client::Client>,
}

impl Conn {
    /// A connection for a worker whose home member is `home` (connects lazily).
    pub fn new(home: usize) -> Conn {
        Conn {
            home,
            member: None,
            client: None,
        }
    }

    /// The client, connecting (to the home member, or the next one left) if needed.
    pub async fn get(&mut self, ctx: &Ctx) -> Option<&mut etcd_client::Client> {
        let (i, ep) = ctx.endpoints.for_home(self.home)?;
        if self.member != Some(i) {
            self.client = None;
        }
        if self.client.is_none() {
            let opts = etcd_client::ConnectOptions::new()
                .with_connect_timeout(ctx.op_timeout)
                .with_timeout(ctx.op_timeout);
            let c = tokio::time::timeout(
                ctx.op_timeout,
                etcd_client::Client::connect([format!("http://{ep}")], Some(opts)),
            )
            .await
            .ok()?
            .ok()?;
            self.client = Some(c);
            self.member = Some(i);
        }
        self.client.as_mut()
    }

    /// Forgets the client after an error (the next [`Conn::get`] reconnects; a member restarted after a kill
    /// is reached again).
    pub fn reset(&mut self) {
        self.client = None;
        self.member = None;
    }

    /// The member the current client talks to.
    pub fn member(&self) -> Option<usize> {
        self.member
    }
}

/// Runs `f` with the op timeout: `Ok(Ok(v))` answered, `Ok(Err(e))` error, `Err(())` timed out.
pub async fn bounded<T, F>(ctx: &Ctx, f: F) -> Result<Result<T, etcd_client::Error>, ()>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    tokio::time::timeout(ctx.op_timeout, f)
        .await
        .map_err(|_| ())
}

/// Pause after a failed operation so that a dead member's clients do not spin.
pub const ERROR_BACKOFF: Duration = Duration::from_millis(200);
