//! Pod networking across nodes on a flat network (flannel's host-gw idea): a route to every other
//! node's pod subnet via that node's address, kept equal to the Nodes the API lists. The routes carry
//! their own protocol number, so the ones netprog made are found (and removed) again after a restart
//! without touching anyone else's.
//!
//! Also the host settings Services need: forwarding on, and bridged traffic passed through netfilter
//! (without it a backend's reply to a client pod on the same bridge is switched past the un-DNAT and
//! the connection breaks). Their values before netprog changed them are kept in a file, so cleanup
//! can put them back.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Node;
use tokio::process::Command;
use tracing::{info, warn};

use crate::error::{Error, Result};

/// The routing protocol number that marks netprog's routes (`ip route show proto 75`).
pub const ROUTE_PROTO: &str = "75";

/// The sysctls netprog sets to 1.
const SYSCTLS: &[&str] = &[
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/bridge/bridge-nf-call-iptables",
];

async fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|e| Error::Command {
            command: format!("ip {}", args.join(" ")),
            message: e.to_string(),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: format!("ip {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The pod subnets of the other nodes and the address each is reached through.
pub fn wanted<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    me: &str,
) -> BTreeMap<Ipv4Net, Ipv4Addr> {
    let mut out = BTreeMap::new();
    for n in nodes {
        if n.metadata.name.as_deref() == Some(me) {
            continue;
        }
        let Some(cidr) = n
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.as_deref())
            .and_then(|c| c.parse::<Ipv4Net>().ok())
        else {
            continue;
        };
        let via = n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .find_map(|a| a.address.parse::<Ipv4Addr>().ok());
        if let Some(via) = via {
            out.insert(cidr.trunc(), via);
        }
    }
    out
}

/// The routes netprog has installed now.
pub async fn installed() -> Result<BTreeMap<Ipv4Net, Ipv4Addr>> {
    let text = ip(&["-j", "-4", "route", "show", "proto", ROUTE_PROTO]).await?;
    parse_routes(&text)
}

fn parse_routes(json: &str) -> Result<BTreeMap<Ipv4Net, Ipv4Addr>> {
    if json.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::Config(format!("ip -j route output is not JSON: {e}")))?;
    let mut out = BTreeMap::new();
    for r in v.as_array().into_iter().flatten() {
        let dst = r
            .get("dst")
            .and_then(|d| d.as_str())
            .and_then(|d| d.parse::<Ipv4Net>().ok());
        let via = r
            .get("gateway")
            .and_then(|g| g.as_str())
            .and_then(|g| g.parse::<Ipv4Addr>().ok());
        if let (Some(dst), Some(via)) = (dst, via) {
            out.insert(dst, via);
        }
    }
    Ok(out)
}

/// Makes the installed routes equal `wanted`; a route the kernel refuses (its gateway not on a
/// connected network) is logged and retried at the next sync. Returns how many routes are in place.
pub async fn sync(wanted: &BTreeMap<Ipv4Net, Ipv4Addr>) -> Result<usize> {
    let have = installed().await?;
    for (dst, via) in &have {
        if wanted.get(dst) != Some(via) {
            match ip(&["route", "del", &dst.to_string(), "proto", ROUTE_PROTO]).await {
                Ok(_) => info!(dst = %dst, via = %via, "pod route removed"),
                Err(e) => warn!(dst = %dst, error = %e, "pod route not removed"),
            }
        }
    }
    let mut ok = 0;
    for (dst, via) in wanted {
        if have.get(dst) == Some(via) {
            ok += 1;
            continue;
        }
        let (d, v) = (dst.to_string(), via.to_string());
        match ip(&["route", "replace", &d, "via", &v, "proto", ROUTE_PROTO]).await {
            Ok(_) => {
                ok += 1;
                info!(dst = %dst, via = %via, "pod route installed");
            }
            Err(e) => warn!(dst = %dst, via = %via, error = %e, "pod route not installed"),
        }
    }
    Ok(ok)
}

/// Removes every route netprog installed.
pub async fn remove_all() -> Result<usize> {
    let have = installed().await?;
    for dst in have.keys() {
        ip(&["route", "del", &dst.to_string(), "proto", ROUTE_PROTO]).await?;
    }
    Ok(have.len())
}

/// Sets forwarding and bridge netfilter on, recording their earlier values in `state` (once: a
/// restarted agent keeps the first record).
pub fn enable_forwarding(state: &Path) -> Result<()> {
    let mut before = serde_json::Map::new();
    for path in SYSCTLS {
        let value = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: path.to_string(),
            source: e,
        })?;
        before.insert(path.to_string(), value.trim().into());
    }
    if !state.exists() {
        if let Some(dir) = state.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::Io {
                path: dir.display().to_string(),
                source: e,
            })?;
        }
        let text = serde_json::Value::Object(before).to_string();
        std::fs::write(state, text).map_err(|e| Error::Io {
            path: state.display().to_string(),
            source: e,
        })?;
    }
    for path in SYSCTLS {
        std::fs::write(path, "1").map_err(|e| Error::Io {
            path: path.to_string(),
            source: e,
        })?;
    }
    Ok(())
}

/// Puts back the values [`enable_forwarding`] recorded, and forgets them.
pub fn restore_forwarding(state: &Path) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(state) else {
        return Ok(());
    };
    let before: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).unwrap_or_default();
    for path in SYSCTLS {
        if let Some(v) = before.get(*path).and_then(|v| v.as_str()) {
            if v == "0" || v == "1" {
                std::fs::write(path, v).map_err(|e| Error::Io {
                    path: path.to_string(),
                    source: e,
                })?;
            }
        }
    }
    let _ = std::fs::remove_file(state);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn other_nodes_subnets_via_their_internal_ip() {
        let node = |name: &str, cidr: &str, ip: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"podCIDR": cidr},
                "status": {"addresses": [{"type": "Hostname", "address": name},
                                         {"type": "InternalIP", "address": ip}]}
            }))
            .unwrap()
        };
        let nodes = [
            node("a", "10.42.0.0/24", "198.18.0.11"),
            node("b", "10.42.1.0/24", "198.18.0.12"),
            node("c", "garbage", "198.18.0.13"),
        ];
        let w = wanted(&nodes, "a");
        assert_eq!(w.len(), 1);
        assert_eq!(
            w[&"10.42.1.0/24".parse().unwrap()],
            Ipv4Addr::new(198, 18, 0, 12)
        );
    }

    #[test]
    fn reads_ip_json() {
        let r = parse_routes(r#"[{"dst":"10.42.1.0/24","gateway":"198.18.0.12","dev":"eth0","protocol":"75","flags":[]}]"#).unwrap();
        assert_eq!(r.len(), 1);
        assert!(parse_routes("").unwrap().is_empty());
    }
}
