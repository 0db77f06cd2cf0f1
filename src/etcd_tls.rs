//! TLS for keel's own etcd clients (`keel status`, `keel snapshot save`) with etcdctl's flags
//! (`--cacert`, `--cert`, `--key`), defaulting to the files `keel server --init`/`--join` keep in
//! `<data-dir>/tls/`. `https://` endpoints are dialed through the same TCP + rustls connector the
//! peer transport uses (so the etcd client needs no TLS feature of its own); `http://` ones as before.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::Args;
use etcd_client::{Client, ConnectOptions};

/// etcdctl's TLS flags.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct EtcdTlsArgs {
    /// CA (PEM) that verifies `https://` endpoints (default: `<data-dir>/tls/ca.crt` when --data-dir
    /// holds one).
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM) for `https://` endpoints (default: `<data-dir>/tls/etcd-client.crt`).
    #[arg(long)]
    pub cert: Option<PathBuf>,
    /// Key (PEM) of --cert (default: `<data-dir>/tls/etcd-client.key`).
    #[arg(long)]
    pub key: Option<PathBuf>,
}

/// The setup `https://` endpoints are dialed with, once [`install`] found one.
static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// The data directory's TLS file `name`, if it exists.
pub(crate) fn data_dir_file(data_dir: Option<&Path>, name: &str) -> Option<PathBuf> {
    let p = data_dir?
        .join(keel_kube_api::pki::MEMBER_TLS_DIR)
        .join(name);
    p.exists().then_some(p)
}

/// Reads the flags (or the data directory's files) and makes them the TLS setup of this process'
/// etcd clients. Without a CA, `https://` endpoints cannot be dialed (said when one is).
pub(crate) fn install(a: &EtcdTlsArgs, data_dir: Option<&Path>) -> Result<(), String> {
    let cacert = a
        .cacert
        .clone()
        .or_else(|| data_dir_file(data_dir, "ca.crt"));
    let (cert, key) = match (&a.cert, &a.key) {
        (Some(c), Some(k)) => (Some(c.clone()), Some(k.clone())),
        (None, None) => (
            data_dir_file(data_dir, "etcd-client.crt"),
            data_dir_file(data_dir, "etcd-client.key"),
        ),
        _ => return Err("--cert and --key go together".into()),
    };
    let Some(cacert) = cacert else {
        return Ok(());
    };
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let ca = read(&cacert)?;
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((read(&c)?, read(&k)?)),
        _ => None,
    };
    let config = keel_raft::tls::tool_client_config(
        &ca,
        identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
    )
    .map_err(|e| format!("TLS: {e}"))?;
    let _ = TLS.set(config);
    Ok(())
}

/// A client of one endpoint: TLS for `https://` (with the installed setup), plaintext otherwise.
pub(crate) async fn connect(
    endpoint: &str,
    opts: ConnectOptions,
    dial_timeout: Duration,
) -> Result<Client, etcd_client::Error> {
    let (plain, is_tls) = keel_raft::tls::split_tls_scheme(endpoint);
    if !is_tls {
        return Client::connect([endpoint], Some(opts)).await;
    }
    let config = TLS.get().cloned().ok_or_else(|| {
        etcd_client::Error::InvalidArgs(format!(
            "{endpoint}: an https:// endpoint needs --cacert (or a --data-dir with tls/ca.crt)"
        ))
    })?;
    let ep = tonic::transport::Endpoint::from_shared(plain)?.connect_timeout(dial_timeout);
    let channel = keel_raft::tls::lazy_tls_channel(&ep, config);
    Client::from_channel(etcd_client::Channel::Tonic(channel), Some(opts)).await
}
