//! The range allocator's arithmetic: the cluster CIDR cut into node-sized subnets, and the lowest subnet
//! no node holds. It keeps no state of its own: what is used is whatever the caller observed.

use std::net::Ipv4Addr;

use super::cidr::Ipv4Cidr;

/// kube-controller-manager's `--cluster-cidr` default in k3s (and keel).
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
/// kube-controller-manager's `--node-cidr-mask-size` default for IPv4.
pub const DEFAULT_NODE_MASK: u8 = 24;
/// At most this many bits between the cluster mask and the node mask (upstream's cidrset limit: 65 536
/// subnets).
pub const MAX_SUBNET_BITS: u8 = 16;

/// Why a cluster CIDR and node mask size do not make an allocator (upstream refuses the same at start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The node mask is shorter than the cluster's: a node range would not fit.
    #[error("--node-cidr-mask-size {mask} is smaller than the mask of --cluster-cidr {cluster}")]
    MaskTooSmall {
        /// The node mask size.
        mask: u8,
        /// The cluster CIDR.
        cluster: Ipv4Cidr,
    },
    /// Beyond /32.
    #[error("--node-cidr-mask-size {0} is larger than 32")]
    MaskTooLarge(u8),
    /// More than 2^16 node ranges.
    #[error("--node-cidr-mask-size {mask} cuts --cluster-cidr {cluster} into more than 2^{MAX_SUBNET_BITS} ranges")]
    TooManySubnets {
        /// The node mask size.
        mask: u8,
        /// The cluster CIDR.
        cluster: Ipv4Cidr,
    },
}

/// The cluster CIDR and the size of each node's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocator {
    cluster: Ipv4Cidr,
    mask: u8,
}

impl Default for Allocator {
    fn default() -> Self {
        Allocator {
            cluster: Ipv4Cidr::new(Ipv4Addr::new(10, 42, 0, 0), 16),
            mask: DEFAULT_NODE_MASK,
        }
    }
}

impl Allocator {
    /// An allocator of `/mask` ranges from `cluster`.
    pub fn new(cluster: Ipv4Cidr, mask: u8) -> Result<Allocator, ConfigError> {
        if mask > 32 {
            return Err(ConfigError::MaskTooLarge(mask));
        }
        if mask < cluster.prefix() {
            return Err(ConfigError::MaskTooSmall { mask, cluster });
        }
        if mask - cluster.prefix() > MAX_SUBNET_BITS {
            return Err(ConfigError::TooManySubnets { mask, cluster });
        }
        Ok(Allocator { cluster, mask })
    }

    /// The cluster CIDR.
    pub fn cluster(&self) -> Ipv4Cidr {
        self.cluster
    }

    /// The node mask size.
    pub fn mask(&self) -> u8 {
        self.mask
    }

    /// How many node ranges the cluster CIDR holds.
    pub fn len(&self) -> u32 {
        1u32 << (self.mask - self.cluster.prefix())
    }

    /// Always false: a cluster CIDR holds at least one range.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn host_bits(&self) -> u32 {
        32 - u32::from(self.mask)
    }

    /// The `i`-th node range, if there is one.
    pub fn subnet(&self, i: u32) -> Option<Ipv4Cidr> {
        if i >= self.len() {
            return None;
        }
        let start = self
            .cluster
            .first()
            .checked_add(i.checked_shl(self.host_bits()).unwrap_or(0))?;
        Some(Ipv4Cidr::new(Ipv4Addr::from(start), self.mask))
    }

    /// The first and last index of the node ranges `cidr` takes: every range it overlaps (a larger block
    /// takes several, a smaller one the range holding it); `None` if it lies outside the cluster CIDR.
    pub fn taken_by(&self, cidr: &Ipv4Cidr) -> Option<(u32, u32)> {
        if !self.cluster.overlaps(cidr) {
            return None;
        }
        let base = self.cluster.first();
        let first = cidr.first().max(base) - base;
        let last = cidr.last().min(self.cluster.last()) - base;
        let shift = self.host_bits();
        let index = |offset: u32| offset.checked_shr(shift).unwrap_or(0);
        Some((index(first), index(last)))
    }

    /// The lowest node range none of `used` overlaps, if any is left.
    pub fn lowest_free<'a>(
        &self,
        used: impl IntoIterator<Item = &'a Ipv4Cidr>,
    ) -> Option<Ipv4Cidr> {
        let mut taken: Vec<(u32, u32)> =
            used.into_iter().filter_map(|c| self.taken_by(c)).collect();
        taken.sort_unstable();
        // Sweep the taken intervals in order: the first gap is the answer.
        let mut next = 0u32;
        for (first, last) in taken {
            if first > next {
                break;
            }
            next = next.max(last.saturating_add(1));
        }
        (next < self.len()).then(|| self.subnet(next)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    fn alloc(cluster: &str, mask: u8) -> Allocator {
        Allocator::new(p(cluster), mask).unwrap()
    }

    #[test]
    fn the_default_is_k3s_cluster_cidr_in_24s() {
        let a = Allocator::default();
        assert_eq!(a.cluster(), p(DEFAULT_CLUSTER_CIDR));
        assert_eq!(a.mask(), 24);
        assert_eq!(a.len(), 256);
        assert_eq!(a.subnet(0), Some(p("10.42.0.0/24")));
        assert_eq!(a.subnet(255), Some(p("10.42.255.0/24")));
        assert_eq!(a.subnet(256), None);
    }

    #[test]
    fn hands_out_the_lowest_free_range() {
        let a = Allocator::default();
        assert_eq!(a.lowest_free(&[]), Some(p("10.42.0.0/24")));
        let used = [p("10.42.0.0/24"), p("10.42.2.0/24")];
        assert_eq!(a.lowest_free(&used), Some(p("10.42.1.0/24")));
        let used = [p("10.42.0.0/24"), p("10.42.1.0/24"), p("10.42.2.0/24")];
        assert_eq!(a.lowest_free(&used), Some(p("10.42.3.0/24")));
        // Freed (no longer observed) ranges come back first.
        let used = [p("10.42.1.0/24"), p("10.42.2.0/24")];
        assert_eq!(a.lowest_free(&used), Some(p("10.42.0.0/24")));
    }

    #[test]
    fn ranges_outside_or_of_other_sizes() {
        let a = alloc("10.99.0.0/22", 24);
        assert_eq!(a.len(), 4);
        // Outside the cluster CIDR: ignored.
        assert_eq!(
            a.lowest_free(&[p("10.42.0.0/24"), p("192.168.0.0/16")]),
            Some(p("10.99.0.0/24"))
        );
        // A /23 preset takes two ranges; a /25 takes the one holding it.
        assert_eq!(
            a.lowest_free(&[p("10.99.0.0/23"), p("10.99.2.128/25")]),
            Some(p("10.99.3.0/24"))
        );
        // A block holding the whole cluster CIDR takes everything.
        assert_eq!(a.lowest_free(&[p("10.0.0.0/8")]), None);
        // One overlapping the cluster CIDR's start takes the ranges it covers.
        assert_eq!(a.taken_by(&p("10.98.0.0/15")), Some((0, 3)));
        assert_eq!(a.taken_by(&p("10.99.3.7/32")), Some((3, 3)));
        assert_eq!(a.taken_by(&p("10.100.0.0/24")), None);
        // Overlapping presets: the gap after both.
        assert_eq!(
            a.lowest_free(&[p("10.99.0.0/23"), p("10.99.1.0/24")]),
            Some(p("10.99.2.0/24"))
        );
    }

    #[test]
    fn exhaustion_and_release() {
        let a = alloc("10.99.0.0/23", 24);
        let mut used = Vec::new();
        while let Some(c) = a.lowest_free(&used) {
            used.push(c);
        }
        assert_eq!(used, vec![p("10.99.0.0/24"), p("10.99.1.0/24")]);
        assert_eq!(a.lowest_free(&used), None);
        used.remove(0);
        assert_eq!(a.lowest_free(&used), Some(p("10.99.0.0/24")));
    }

    #[test]
    fn node_masks_other_than_24() {
        let a = alloc("10.42.0.0/16", 26);
        assert_eq!(a.len(), 1024);
        assert_eq!(a.subnet(1), Some(p("10.42.0.64/26")));
        assert_eq!(a.lowest_free(&[p("10.42.0.0/24")]), Some(p("10.42.1.0/26")));
        let whole = alloc("10.1.2.0/24", 24);
        assert_eq!(whole.len(), 1);
        assert_eq!(whole.lowest_free(&[]), Some(p("10.1.2.0/24")));
        let hosts = alloc("10.1.2.0/30", 32);
        assert_eq!(hosts.subnet(3), Some(p("10.1.2.3/32")));
        let all = alloc("0.0.0.0/0", 16);
        assert_eq!(all.subnet(65535), Some(p("255.255.0.0/16")));
    }

    #[test]
    fn refuses_masks_that_do_not_fit() {
        assert_eq!(
            Allocator::new(p("10.42.0.0/16"), 15),
            Err(ConfigError::MaskTooSmall {
                mask: 15,
                cluster: p("10.42.0.0/16")
            })
        );
        assert_eq!(
            Allocator::new(p("10.42.0.0/16"), 33),
            Err(ConfigError::MaskTooLarge(33))
        );
        assert!(matches!(
            Allocator::new(p("10.0.0.0/8"), 25),
            Err(ConfigError::TooManySubnets { .. })
        ));
        assert!(Allocator::new(p("10.0.0.0/8"), 24).is_ok());
    }
}
