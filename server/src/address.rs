//! Client addresses as the bounds count them, and the proxies whose word on a client's address
//! is trusted.
//!
//! - [`counted`] / [`address_key`]: the unit one client is counted in. An IPv4 address is
//!   itself (an IPv4-mapped IPv6 address the IPv4 address it carries); an IPv6 address counts
//!   by its /64 prefix: one host is usually handed a whole /64 and can pick any address in it,
//!   so a per-address bound would not hold it. The connection cap per address (the server loop,
//!   [`crate::serve`]) and the gateway's rate limits and live-task bound all key by it.
//! - [`TrustedProxies`]: the networks a gateway's proxies (load balancer, ingress) connect
//!   from. Only a TCP peer in them may name the client (`X-Forwarded-For`, `Forwarded`), and
//!   their connections are not held to the per-address connection cap (they carry many
//!   clients; the total cap still holds).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The address `address` counts as: itself for IPv4 (an IPv4-mapped IPv6 address: the IPv4
/// address), the first address of its /64 for IPv6.
pub fn counted(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// The key an address counts under ([`counted`]): `203.0.113.7`, or `2001:db8:1:2::/64`.
pub fn address_key(address: IpAddr) -> String {
    match counted(address) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("{v6}/64"),
    }
}

/// A list of networks whose peers are proxies of this gateway (`--trusted-proxies`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
}

/// A `--trusted-proxies` entry that is neither a network nor an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadNetwork(pub String);

impl fmt::Display for BadNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is neither a network (CIDR, e.g. 10.0.0.0/8) nor an address",
            self.0
        )
    }
}

impl std::error::Error for BadNetwork {}

impl TrustedProxies {
    /// Comma-separated networks (`10.0.0.0/8`) or single addresses (`192.0.2.10`, `::1`);
    /// empty: none.
    pub fn parse(text: &str) -> Result<TrustedProxies, BadNetwork> {
        let mut networks = Vec::new();
        for entry in text
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
        {
            let network = match entry.parse::<IpNet>() {
                Ok(network) => network.trunc(),
                Err(_) => entry
                    .parse::<IpAddr>()
                    .map(IpNet::from)
                    .map_err(|_| BadNetwork(entry.to_owned()))?,
            };
            networks.push(network);
        }
        Ok(TrustedProxies { networks })
    }

    /// Loopback and private networks (RFC 1918, IPv6 unique-local): what the deprecated
    /// `--trust-forwarded-for` stands for.
    pub fn private() -> TrustedProxies {
        let networks = [
            IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
            IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8),
            IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0)), 12),
            IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 0)), 16),
            IpNet::new_assert(IpAddr::V6(Ipv6Addr::LOCALHOST), 128),
            IpNet::new_assert(IpAddr::V6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0)), 7),
        ];
        TrustedProxies {
            networks: networks.to_vec(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// Whether `address` (an IPv4-mapped IPv6 address as its IPv4 address) is in a network.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        self.networks
            .iter()
            .any(|network| network.contains(&address))
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let networks: Vec<String> = self.networks.iter().map(IpNet::to_string).collect();
        f.write_str(&networks.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Option<String> {
        text.parse::<IpAddr>().ok().map(address_key)
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn ipv4_counts_by_address_and_ipv6_by_its_64_prefix() {
        assert_eq!(key("203.0.113.7").as_deref(), Some("203.0.113.7"));
        assert_eq!(key("::ffff:203.0.113.7").as_deref(), Some("203.0.113.7"));
        assert_eq!(
            key("2001:db8:1:2:aaaa:bbbb:cccc:dddd").as_deref(),
            Some("2001:db8:1:2::/64")
        );
        // Two addresses of one /64 share a key; the next /64 does not.
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::1").as_deref(), Some("::/64"));
        assert_eq!(
            counted(ip("2001:db8:1:2::1")),
            counted(ip("2001:db8:1:2:9::"))
        );
    }

    #[test]
    fn trusted_proxies_are_networks_or_addresses() -> Result<(), BadNetwork> {
        let proxies = TrustedProxies::parse(" 10.0.0.0/8, 192.0.2.10 ,2001:db8::/32,,")?;
        assert!(proxies.contains(ip("10.1.2.3")));
        assert!(proxies.contains(ip("::ffff:10.1.2.3")));
        assert!(proxies.contains(ip("192.0.2.10")));
        assert!(!proxies.contains(ip("192.0.2.11")));
        assert!(proxies.contains(ip("2001:db8:ffff::1")));
        assert!(!proxies.contains(ip("2001:db9::1")));
        assert_eq!(
            proxies.to_string(),
            "10.0.0.0/8,192.0.2.10/32,2001:db8::/32"
        );
        // Host bits are dropped, as a network means them.
        assert_eq!(
            TrustedProxies::parse("10.1.2.3/8")?.to_string(),
            "10.0.0.0/8"
        );
        assert!(TrustedProxies::parse("")?.is_empty());
        assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
        assert!(TrustedProxies::parse("proxy.internal").is_err());
        let private = TrustedProxies::private();
        assert!(private.contains(ip("127.0.0.1")) && private.contains(ip("::1")));
        assert!(private.contains(ip("172.31.0.1")) && private.contains(ip("fd00::1")));
        assert!(!private.contains(ip("203.0.113.7")));
        Ok(())
    }
}
