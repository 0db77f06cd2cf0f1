//! `keel up`: a local cluster on loopback. Today a single member on 127.0.0.11.

use std::time::Instant;

use crate::cli::{ServerArgs, UpArgs};
use crate::server::{self, ServerError};

/// Starts the local cluster and waits for Ctrl-C.
pub async fn run(args: UpArgs) -> Result<(), ServerError> {
    let name = "m1".to_string();
    let ip = "127.0.0.11";
    let client = format!("http://{ip}:2379");
    let peer = format!("http://{ip}:2380");
    let sargs = ServerArgs {
        name: name.clone(),
        data_dir: args.data_dir.join(&name),
        listen_client_urls: vec![client.clone()],
        advertise_client_urls: vec![client.clone()],
        listen_peer_urls: vec![peer.clone()],
        initial_advertise_peer_urls: vec![peer],
        heartbeat_interval: 100,
        election_timeout: 1000,
        snapshot_count: 10_000,
        progress_notify_interval: std::time::Duration::from_secs(600),
        log_level: args.log_level.clone(),
    };
    let started = Instant::now();
    eprintln!(
        "keel up: starting member {name} on {ip} (data in {})",
        sargs.data_dir.display()
    );
    let ready = tokio::spawn(wait_ready(client.clone(), started));
    let res = server::run(sargs).await;
    ready.abort();
    res
}

async fn wait_ready(client: String, started: Instant) {
    let addr = client.trim_start_matches("http://").to_string();
    loop {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eprintln!(
        "keel up: ready in {} ms: 1 member\n\n  export ETCDCTL_API=3 ETCDCTL_ENDPOINTS={client}\n  etcdctl endpoint status -w table\n  etcdctl put hello world && etcdctl get hello\n\nPress Ctrl-C to stop.",
        started.elapsed().as_millis()
    );
}
