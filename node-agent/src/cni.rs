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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_fit_and_differ() {
        let a = bridge_name("node-a");
        assert!(a.len() <= 15);
        assert_ne!(a, bridge_name("node-b"));
        assert_eq!(a, bridge_name("node-a"));
    }
}
