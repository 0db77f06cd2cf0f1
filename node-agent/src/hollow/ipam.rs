//! Pod IPs of one hollow node, from its `spec.podCIDR` (IPv4), handed out round robin as CNI's
//! host-local does: the network address, the `.1` a bridge would take as gateway and the broadcast
//! address are never given, and a released address is reused only after the others.

use std::net::Ipv4Addr;

/// An IPv4 range `base/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/p` (host bits are cleared); None for IPv6 or anything malformed.
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, prefix) = s.split_once('/')?;
        let addr: Ipv4Addr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32)?;
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        Some(Cidr {
            base: u32::from(addr) & mask,
            prefix,
        })
    }

    /// Whether `ip` is inside the range.
    pub fn contains(&self, ip: u32) -> bool {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix))
            .unwrap_or(0);
        ip & mask == self.base
    }

    /// The first and last address pods may get, when there is one.
    fn hosts(&self) -> Option<(u32, u32)> {
        // /31 and /32 have no room once network, gateway and broadcast are taken.
        if self.prefix > 30 {
            return None;
        }
        let size = 1u64 << (32 - u32::from(self.prefix));
        let last = u64::from(self.base) + size - 2;
        Some((self.base + 2, u32::try_from(last).ok()?))
    }
}

/// The addresses of one node in use, and where the next search starts.
#[derive(Debug, Default)]
pub struct Pool {
    used: Vec<u32>,
    next: u32,
}

impl Pool {
    /// A free address of `cidr`, now in use; None when every one is taken.
    pub fn allocate(&mut self, cidr: Cidr) -> Option<u32> {
        let (first, last) = cidr.hosts()?;
        let n = last - first + 1;
        let start = if (first..=last).contains(&self.next) {
            self.next - first
        } else {
            0
        };
        // Pods per node are few (110 by default), so a linear scan of `used` is cheapest in memory.
        for k in 0..n {
            let ip = first + (start + k) % n;
            if !self.used.contains(&ip) {
                self.used.push(ip);
                self.next = ip.wrapping_add(1);
                return Some(ip);
            }
        }
        None
    }

    /// Marks `ip` in use (a pod that already has it); false when it already was.
    pub fn reserve(&mut self, ip: u32) -> bool {
        if self.used.contains(&ip) {
            return false;
        }
        self.used.push(ip);
        true
    }

    /// Frees `ip`.
    pub fn release(&mut self, ip: u32) {
        if let Some(i) = self.used.iter().position(|u| *u == ip) {
            self.used.swap_remove(i);
        }
    }

    /// How many addresses are in use.
    pub fn len(&self) -> usize {
        self.used.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    #[test]
    fn parses_ipv4_ranges_only() {
        let c = Cidr::parse("10.42.3.7/24").unwrap();
        assert!(c.contains(ip("10.42.3.0")));
        assert!(c.contains(ip("10.42.3.255")));
        assert!(!c.contains(ip("10.42.4.1")));
        assert_eq!(Cidr::parse("fd00::/64"), None);
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        assert_eq!(Cidr::parse("10.0.0.0"), None);
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
    }

    #[test]
    fn hands_out_round_robin_and_never_the_reserved_ones() {
        let c = Cidr::parse("10.42.3.0/29").unwrap();
        let mut p = Pool::default();
        let got: Vec<u32> = (0..5).map(|_| p.allocate(c).unwrap()).collect();
        assert_eq!(
            got,
            [
                "10.42.3.2",
                "10.42.3.3",
                "10.42.3.4",
                "10.42.3.5",
                "10.42.3.6"
            ]
            .map(ip)
        );
        assert_eq!(p.allocate(c), None, "the /29 is full");
        p.release(ip("10.42.3.3"));
        assert_eq!(p.allocate(c), Some(ip("10.42.3.3")));
        p.release(ip("10.42.3.6"));
        p.release(ip("10.42.3.2"));
        // After .3 the search goes on at .4: .6 comes before .2.
        assert_eq!(p.allocate(c), Some(ip("10.42.3.6")));
        assert_eq!(p.allocate(c), Some(ip("10.42.3.2")));
        assert_eq!(p.len(), 5);
    }

    #[test]
    fn reserve_marks_adopted_addresses() {
        let c = Cidr::parse("10.42.3.0/30").unwrap();
        let mut p = Pool::default();
        assert!(p.reserve(ip("10.42.3.2")));
        assert!(!p.reserve(ip("10.42.3.2")));
        assert_eq!(p.allocate(c), None);
        assert_eq!(
            Pool::default().allocate(Cidr::parse("10.0.0.0/31").unwrap()),
            None
        );
    }
}
