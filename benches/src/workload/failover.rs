//! Failover: SIGKILL the leader of a running cluster and time how long until a client's write
//! succeeds again on a surviving member; restart the killed member on its data, let the cluster
//! settle, and do it again.
//!
//! The clock starts just before the kill. Every [`PROBE_EVERY`] a new put is sent to one of the
//! survivors (in turn, on connections opened before the kill), and the first put that succeeds
//! stops the clock; the puts still outstanding are dropped. A put cannot succeed before a new
//! leader has committed it, so the figure is the outage a client sees: failure detection, the
//! election, and the new leader's first commit. Probes overlap, so a put that hangs during the
//! election does not delay the one sent after it.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::task::JoinSet;

use crate::error::{BenchError, Result};
use crate::target::{Binaries, Cluster, Kind};

/// How often a probe put is sent while the cluster has no leader.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// How long one probe put may take before it is counted as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// A cluster with no leader for this long makes the step fail.
const NO_LEADER_LIMIT: Duration = Duration::from_secs(60);
/// Quiet time after the killed member is back, before the next kill: it catches up, and the
/// followers hear the leader's heartbeats for a while, as in a steady cluster.
const SETTLE: Duration = Duration::from_secs(3);

/// Runs `kills` kill-and-restart rounds on a fresh `members`-member cluster of `kind`; returns
/// the time to the first successful write after each kill.
pub(crate) async fn run(
    kind: Kind,
    members: usize,
    root: &Path,
    bins: &Binaries,
    kills: usize,
) -> Result<Vec<Duration>> {
    let mut cluster = Cluster::start(kind, members, &root.join("failover"), bins).await?;
    tokio::time::sleep(SETTLE).await;
    let mut times = Vec::with_capacity(kills);
    for round in 0..kills {
        let leader = cluster.leader().await?;
        let survivors: Vec<usize> = (0..members).filter(|&i| i != leader).collect();
        let mut clients = Vec::new();
        for &i in &survivors {
            clients.push(Client::connect([&cluster.urls[i]], None).await?);
        }
        let start = Instant::now();
        cluster.kill(leader)?;
        let outage =
            first_write(&clients, round, start)
                .await
                .map_err(|last| BenchError::NoProgress {
                    workload: format!("failover, kill {}", round + 1),
                    kind: kind.name(),
                    errors: 0,
                    last,
                })?;
        times.push(outage);
        cluster.restart(leader)?;
        cluster.wait_ready(leader).await?;
        tokio::time::sleep(SETTLE).await;
    }
    Ok(times)
}

/// Sends overlapping probe puts through `clients` until one succeeds; returns the time from
/// `start` to that success, or the last error after [`NO_LEADER_LIMIT`].
async fn first_write(
    clients: &[Client],
    round: usize,
    start: Instant,
) -> std::result::Result<Duration, String> {
    let mut probes = JoinSet::new();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    let mut sent = 0usize;
    let mut last = String::from("no probe finished");
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if start.elapsed() > NO_LEADER_LIMIT {
                    probes.abort_all();
                    return Err(format!("no write succeeded within {} s; last: {last}", NO_LEADER_LIMIT.as_secs()));
                }
                let mut c = clients[sent % clients.len()].clone();
                let key = format!("bench/failover/{round}/{sent}");
                sent += 1;
                probes.spawn(async move {
                    match tokio::time::timeout(PROBE_TIMEOUT, c.put(key, "x", None)).await {
                        Ok(Ok(_)) => Ok(Instant::now()),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err("probe put timed out".to_string()),
                    }
                });
            }
            Some(done) = probes.join_next() => match done {
                Ok(Ok(at)) => {
                    probes.abort_all();
                    return Ok(at.duration_since(start));
                }
                Ok(Err(e)) => last = e,
                Err(e) => last = e.to_string(),
            },
        }
    }
}

/// The smallest, median and largest of `times` (the median of an even count is the mean of the
/// middle two); `None` for no times.
pub(crate) fn summary(times: &[Duration]) -> Option<(Duration, Duration, Duration)> {
    let mut t = times.to_vec();
    t.sort();
    let n = t.len();
    let (first, last) = (*t.first()?, *t.last()?);
    let median = if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2
    };
    Some((first, median, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_min_median_max() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        let d = Duration::from_millis;
        assert_eq!(summary(&ms(&[30, 10, 20])), Some((d(10), d(20), d(30))));
        assert_eq!(summary(&ms(&[40, 10, 20, 30])), Some((d(10), d(25), d(40))));
        assert_eq!(summary(&[]), None);
    }
}
