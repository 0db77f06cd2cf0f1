//! IPv4 CIDR blocks: parsed from `a.b.c.d/n`, normalised to their network address (as Go's
//! `net.ParseCIDR` returns the network), and compared as address ranges.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Why a CIDR did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// Not `address/prefix`.
    #[error("invalid CIDR {0:?}: expected an IPv4 address and a prefix length, e.g. 10.42.0.0/16")]
    Syntax(String),
    /// An IPv6 block (node-ipam hands out IPv4 ranges only).
    #[error("invalid CIDR {0:?}: only IPv4 is supported")]
    Ipv6(String),
    /// A prefix length beyond 32.
    #[error("invalid CIDR {0:?}: the prefix length must be between 0 and 32")]
    Prefix(String),
}

/// An IPv4 block: its network address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Cidr {
    network: u32,
    prefix: u8,
}

/// The netmask of a prefix length (`/0` is 0, `/32` all ones).
fn mask(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

impl Ipv4Cidr {
    /// The block of `prefix` bits holding `addr` (host bits cleared; a prefix over 32 is taken as 32).
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Ipv4Cidr {
        let prefix = prefix.min(32);
        Ipv4Cidr {
            network: u32::from(addr) & mask(prefix),
            prefix,
        }
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.network)
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The first address, as a number.
    pub fn first(&self) -> u32 {
        self.network
    }

    /// The last address, as a number.
    pub fn last(&self) -> u32 {
        self.network | !mask(self.prefix)
    }

    /// Whether the two blocks share an address.
    pub fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        self.first() <= other.last() && other.first() <= self.last()
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| CidrError::Syntax(s.to_string()))?;
        if addr.contains(':') {
            return Err(CidrError::Ipv6(s.to_string()));
        }
        let addr: Ipv4Addr = addr.parse().map_err(|_| CidrError::Syntax(s.to_string()))?;
        // Go accepts only decimal digits here: no sign, no spaces.
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CidrError::Syntax(s.to_string()));
        }
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| CidrError::Prefix(s.to_string()))?;
        Ok(Ipv4Cidr::new(addr, prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalises_to_the_network() {
        let c: Ipv4Cidr = "10.42.7.9/16".parse().unwrap();
        assert_eq!(c.to_string(), "10.42.0.0/16");
        assert_eq!(c.first(), u32::from(Ipv4Addr::new(10, 42, 0, 0)));
        assert_eq!(c.last(), u32::from(Ipv4Addr::new(10, 42, 255, 255)));
        let all: Ipv4Cidr = "0.0.0.0/0".parse().unwrap();
        assert_eq!(all.last(), u32::MAX);
        let one: Ipv4Cidr = "10.0.0.1/32".parse().unwrap();
        assert_eq!(one.first(), one.last());
    }

    #[test]
    fn refuses_what_is_not_an_ipv4_cidr() {
        for bad in [
            "10.42.0.0",
            "10.42.0.0/",
            "10.42.0/16",
            "x/8",
            "10.0.0.0/+8",
            "",
        ] {
            assert!(
                matches!(bad.parse::<Ipv4Cidr>(), Err(CidrError::Syntax(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            "10.0.0.0/33".parse::<Ipv4Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "10.0.0.0/999".parse::<Ipv4Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "fd00::/64".parse::<Ipv4Cidr>(),
            Err(CidrError::Ipv6(_))
        ));
    }

    #[test]
    fn overlap_is_shared_addresses() {
        let p = |s: &str| s.parse::<Ipv4Cidr>().unwrap();
        assert!(p("10.42.0.0/16").overlaps(&p("10.42.3.0/24")));
        assert!(p("10.42.3.0/24").overlaps(&p("10.42.0.0/16")));
        assert!(!p("10.42.0.0/24").overlaps(&p("10.42.1.0/24")));
        assert!(p("10.42.0.0/23").overlaps(&p("10.42.1.128/25")));
    }
}
