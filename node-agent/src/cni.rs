//! The node's pod network for containerd's CNI plugin: a bridge (one per node name, so several agents
//! can share a machine) with host-local addresses from the node's pod CIDR, its gateway on the bridge.
//! Nothing is masqueraded and the host does not forward, so pod traffic stays on this machine until
//! netprog programs Services and routes.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::{Error, Result};

/// The conflist's file name (the CRI plugin takes the first in lexical order).
pub const CONFLIST: &str = "10-keel.conflist";

/// The bridge device for `node` (at most 15 bytes, as Linux requires).
pub fn bridge_name(node: &str) -> String {
    // FNV-1a: stable across runs and builds, unlike std's hasher.
    let mut h: u32 = 0x811c_9dc5;
    for b in node.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("keel{h:08x}")
}

/// The conflist for `cidr`; host-local keeps its leases under `state_dir`.
pub fn conflist(bridge: &str, cidr: &str, state_dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "keel",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": cidr}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": state_dir.join("networks").display().to_string(),
            },
        }],
    })
}

/// Writes the conflist into `conf_dir` (atomically: the CRI plugin watches the directory).
pub fn write(conf_dir: &Path, bridge: &str, cidr: &str, state_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(conf_dir).map_err(|e| Error::io(conf_dir, e))?;
    let path = conf_dir.join(CONFLIST);
    let tmp = conf_dir.join(format!(".{CONFLIST}.tmp"));
    let text = serde_json::to_string_pretty(&conflist(bridge, cidr, state_dir))
        .map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    Ok(path)
}

/// The pod CIDR's gateway (its first address) as `addr/prefix`, the address the bridge plugin gives the
/// bridge; None when `cidr` is not an IPv4 CIDR with room for pods.
pub fn gateway(cidr: &str) -> Option<(std::net::Ipv4Addr, u8)> {
    let (addr, len) = cidr.split_once('/')?;
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    let len: u8 = len.parse().ok().filter(|l| *l <= 30)?;
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    Some(((u32::from(addr) & mask).wrapping_add(1).into(), len))
}

/// Makes `node_ip` the node's own address on its pod bridge, creating the bridge (up) if the bridge
/// plugin has not yet: for a machine whose other addresses pods cannot reach (`keel up` on loopback), so
/// the node's resolver and NodePorts are served where pods and the host both reach them. The bridge
/// plugin later finds the bridge with its gateway already in place. `node_ip` must be `cidr`'s gateway.
pub fn own_gateway(bridge: &str, cidr: &str, node_ip: &str) -> Result<()> {
    let (gw, len) = gateway(cidr).ok_or_else(|| {
        Error::Config(format!(
            "pod CIDR {cidr:?} is not an IPv4 CIDR of /30 or larger"
        ))
    })?;
    if node_ip.parse::<std::net::Ipv4Addr>().ok() != Some(gw) {
        return Err(Error::Config(format!(
            "--node-ip-on-bridge: the node IP {node_ip} must be the pod CIDR {cidr}'s gateway {gw}"
        )));
    }
    let exists = crate::node::routes::ip(&["link", "show", "dev", bridge])?
        .status
        .success();
    if !exists {
        crate::node::routes::run_ip(&["link", "add", bridge, "type", "bridge"])?;
    }
    crate::node::routes::run_ip(&["addr", "replace", &format!("{gw}/{len}"), "dev", bridge])?;
    crate::node::routes::run_ip(&["link", "set", bridge, "up"])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_is_the_first_address() {
        assert_eq!(
            gateway("10.42.0.0/24"),
            Some((std::net::Ipv4Addr::new(10, 42, 0, 1), 24))
        );
        assert_eq!(
            gateway("10.42.7.9/24"),
            Some((std::net::Ipv4Addr::new(10, 42, 7, 1), 24))
        );
        assert_eq!(gateway("10.42.0.0/31"), None);
        assert_eq!(gateway("fd00::/64"), None);
        assert_eq!(gateway("10.42.0.0"), None);
    }

    #[test]
    fn bridge_names_fit_and_differ() {
        let a = bridge_name("node-a");
        assert!(a.len() <= 15);
        assert_ne!(a, bridge_name("node-b"));
        assert_eq!(a, bridge_name("node-a"));
    }
}
