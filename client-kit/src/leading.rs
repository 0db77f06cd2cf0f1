//! A component that works only while its process leads: started when `leading` turns true, cancelled
//! when it turns false, until `stop`. With [`Mode::Follow`] (Raft decided) the Lease is held alongside
//! the work; with [`Mode::Elect`] `leading` comes from [`crate::lease::elect`], which holds it.

use std::future::Future;

use kube::Client;
use tokio::sync::watch;
use tracing::info;

use crate::lease::{self, LeaderLease, Mode};

/// Who leads, and how.
#[derive(Clone)]
pub struct Leader<'a> {
    /// The client the Lease is written through.
    pub client: Client,
    /// The component, for logs ("controllers", "scheduler").
    pub what: &'a str,
    /// The Lease's name in `kube-system`.
    pub lease_name: &'a str,
    /// This process's holderIdentity.
    pub holder: &'a str,
    /// Raft-decided or elected.
    pub mode: Mode,
}

/// Runs `work()` while `leading` is true, holding the Lease as `leader` says, until `stop` fires.
pub async fn run_while_leading<F, Fut>(
    leader: Leader<'_>,
    mut leading: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    work: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let Leader {
        client,
        what,
        lease_name,
        holder,
        mode,
    } = leader;
    loop {
        if *stop.borrow() {
            return;
        }
        let lead = *leading.borrow_and_update();
        if lead {
            info!(holder = %holder, "leading: starting the {what}");
            let lease_task = async {
                if mode == Mode::Follow {
                    lease::hold(LeaderLease::new(client.clone(), lease_name, holder, mode)).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = work() => {}
                _ = lease_task => {}
                _ = stop.changed() => return,
                _ = wait_for(&mut leading, false) => {
                    info!(holder = %holder, "no longer leading: {what} stopped");
                }
            }
        } else {
            tokio::select! {
                _ = stop.changed() => {}
                _ = wait_for(&mut leading, true) => {}
            }
        }
    }
}

async fn wait_for(rx: &mut watch::Receiver<bool>, want: bool) {
    if rx.wait_for(|v| *v == want).await.is_err() {
        std::future::pending::<()>().await;
    }
}
