//! Black holes for the cluster's private ranges: an `unreachable` route for the service CIDR and one for
//! the cluster (pod) CIDR, so a packet for a Service no rule rewrote, or for a pod IP on no node, is
//! refused here (ICMP unreachable) instead of following the default route off the machine. The routes
//! to real pod subnets (this node's bridge, other nodes' podCIDRs) are more specific and win.
//!
//! An `unreachable` route also fails a local `connect()` to a ClusterIP before the nat-output hook
//! could rewrite it, so the node's own processes (and hostNetwork pods) look up the service CIDR in
//! a table of their own ([`LOCAL_TABLE`], chosen by a rule for traffic from `iif lo`) that sends it
//! to `lo`: rewritten connections are rerouted to their endpoint after DNAT, and the rest are
//! dropped on the loopback, never routed off the machine.

use std::process::Command;

use tracing::{info, warn};

use crate::error::{Error, Result};

/// Runs `ip <args>`; its output whatever the exit status.
pub(crate) fn ip(args: &[&str]) -> Result<std::process::Output> {
    Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Command {
            command: format!("ip {}", args.join(" ")),
            message: e.to_string(),
        })
}

fn valid_cidr(c: &str) -> bool {
    match c.split_once('/') {
        Some((addr, len)) => {
            addr.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 128)
        }
        None => false,
    }
}

/// Installs (or keeps) `unreachable <cidr>` for each of `cidrs`.
pub fn install(cidrs: &[String]) -> Result<()> {
    for c in cidrs.iter().filter(|c| !c.is_empty()) {
        if !valid_cidr(c) {
            return Err(Error::Config(format!("{c:?} is not a CIDR")));
        }
        let out = ip(&["route", "replace", "unreachable", c])?;
        if !out.status.success() {
            return Err(Error::Command {
                command: format!("ip route replace unreachable {c}"),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        info!(cidr = %c, "unreachable route installed");
    }
    Ok(())
}

/// The routing table and rule preference for locally originated service traffic (netprog's routes
/// use the same number as their protocol).
pub const LOCAL_TABLE: &str = "75";

/// Runs `ip <args>`; an error with its stderr when it fails.
pub(crate) fn run_ip(args: &[&str]) -> Result<()> {
    let out = ip(args)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: format!("ip {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Lets the node's own processes reach ClusterIPs in `service_cidr` despite its `unreachable`
/// route: a rule for locally originated traffic to the CIDR and a `dev lo` route in [`LOCAL_TABLE`].
pub fn install_local_services(service_cidr: &str) -> Result<()> {
    if !valid_cidr(service_cidr) {
        return Err(Error::Config(format!("{service_cidr:?} is not a CIDR")));
    }
    remove_local_services();
    run_ip(&[
        "route",
        "replace",
        service_cidr,
        "dev",
        "lo",
        "table",
        LOCAL_TABLE,
    ])?;
    run_ip(&[
        "rule",
        "add",
        "pref",
        LOCAL_TABLE,
        "to",
        service_cidr,
        "iif",
        "lo",
        "lookup",
        LOCAL_TABLE,
    ])?;
    info!(cidr = %service_cidr, "local route to services installed");
    Ok(())
}

/// Removes what [`install_local_services`] added (safe to call when nothing is there).
pub fn remove_local_services() {
    // One rule at our preference, unless an earlier run was interrupted; never loop unbounded.
    for _ in 0..8 {
        match ip(&["rule", "del", "pref", LOCAL_TABLE]) {
            Ok(out) if out.status.success() => {}
            _ => break,
        }
    }
    let _ = ip(&["route", "flush", "table", LOCAL_TABLE]);
}

/// Removes the `unreachable` routes for `cidrs` (other routes for the same prefixes stay).
pub fn remove(cidrs: &[String]) {
    for c in cidrs.iter().filter(|c| valid_cidr(c)) {
        match ip(&["route", "del", "unreachable", c]) {
            Ok(out) if out.status.success() => info!(cidr = %c, "unreachable route removed"),
            Ok(_) => {}
            Err(e) => warn!(cidr = %c, error = %e, "unreachable route not removed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_are_checked() {
        assert!(valid_cidr("10.96.0.0/12"));
        assert!(valid_cidr("fd00::/64"));
        assert!(!valid_cidr("10.96.0.0"));
        assert!(!valid_cidr("10.96.0.0/12; rm -rf"));
        assert!(!valid_cidr("x/12"));
    }
}
