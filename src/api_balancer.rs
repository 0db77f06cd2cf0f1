//! The agent's client-side load balancer for the Kubernetes API (k3s's agent load balancer): a TCP
//! listener on loopback that forwards each connection to one member of a list, moving to the next when a
//! member does not accept. TLS stays end to end (members' serving certificates name 127.0.0.1), so the
//! agent needs no external load balancer and keeps working when the member it joined through dies. The
//! list is refreshed from `GET /v1-keel/apiservers` and kept in a file for the next start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

/// The members' API addresses and the one in use.
pub(crate) struct Servers {
    list: RwLock<Vec<String>>,
    current: AtomicUsize,
    file: PathBuf,
}

/// `host:port` of an `https://host:port` URL.
fn host_port(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    Some(rest.split('/').next()?.to_string())
}

impl Servers {
    /// The list `urls` (or, when a previous run kept one in `file`, that list with `urls` added).
    pub(crate) fn new(urls: &[String], file: PathBuf) -> Arc<Servers> {
        let mut list: Vec<String> = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<Vec<String>>(&t).ok())
            .unwrap_or_default();
        for u in urls.iter().filter_map(|u| host_port(u)) {
            if !list.contains(&u) {
                list.push(u);
            }
        }
        Arc::new(Servers {
            list: RwLock::new(list),
            current: AtomicUsize::new(0),
            file,
        })
    }

    fn snapshot(&self) -> Vec<String> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the list (an empty answer keeps the old one) and keeps it for the next start.
    fn replace(&self, urls: &[String]) {
        let fresh: Vec<String> = urls.iter().filter_map(|u| host_port(u)).collect();
        if fresh.is_empty() {
            return;
        }
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        if *list != fresh {
            info!(servers = ?fresh, "API server list updated");
            // Keep using the member in use if it is still listed.
            let cur = list.get(self.current.load(Ordering::Relaxed)).cloned();
            *list = fresh;
            let idx = cur
                .and_then(|c| list.iter().position(|x| *x == c))
                .unwrap_or(0);
            self.current.store(idx, Ordering::Relaxed);
            if let Ok(text) = serde_json::to_string(&*list) {
                let _ = std::fs::write(&self.file, text);
            }
        }
    }

    /// A connection to the member in use, or to the next one that accepts.
    async fn connect(&self) -> Option<TcpStream> {
        let list = self.snapshot();
        let n = list.len();
        let start = self.current.load(Ordering::Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            let attempt =
                tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(&list[i])).await;
            match attempt {
                Ok(Ok(s)) => {
                    if k > 0 {
                        info!(server = %list[i], "API server failover");
                    }
                    self.current.store(i, Ordering::Relaxed);
                    return Some(s);
                }
                _ => debug!(server = %list[i], "API server does not accept; trying the next"),
            }
        }
        None
    }

    /// The first listed member, for choosing the address this node reaches the cluster from.
    pub(crate) fn first(&self) -> Option<String> {
        self.snapshot().into_iter().next()
    }
}

/// Listens on 127.0.0.1 (a free port) and forwards every connection; returns the local address.
pub(crate) async fn start(servers: Arc<Servers>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let servers = servers.clone();
            tokio::spawn(async move {
                let Some(mut outbound) = servers.connect().await else {
                    warn!("no API server accepts a connection");
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    Ok(addr)
}

/// Refreshes the list from the API every 30 s while the agent runs.
pub(crate) fn refresh(client: kube::Client, servers: Arc<Servers>) {
    tokio::spawn(async move {
        loop {
            let answer = async {
                let req = http::Request::get("/v1-keel/apiservers")
                    .body(Vec::new())
                    .ok()?;
                let text = client.request_text(req).await.ok()?;
                let v: serde_json::Value = serde_json::from_str(&text).ok()?;
                let urls: Vec<String> = v
                    .get("servers")?
                    .as_array()?
                    .iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect();
                Some(urls)
            }
            .await;
            if let Some(urls) = answer {
                servers.replace(&urls);
            }
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
    });
}
