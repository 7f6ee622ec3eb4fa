//! The address ranges a webhook may not reach unless the operator allows them: everything that
//! is not a public unicast address. A webhook URL comes from an untrusted caller, and a delivery
//! is a request our cluster makes from inside its network, so without this check a push config
//! could make us call the cloud metadata service, Redis, or any other internal endpoint.
//!
//! IPv6 forms that carry an IPv4 address (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
//! SIIT `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`) are judged by
//! the IPv4 address they carry: a dual-stack socket dials `::ffff:127.0.0.1` as 127.0.0.1, and
//! a translator forwards the others to the embedded address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusedRange {
    /// 0.0.0.0/8 ("this network"; Linux dials 0.0.0.0 as the local host) and `::`.
    Unspecified,
    /// 127.0.0.0/8 and `::1`.
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT (RFC 6598); cloud providers also put internal services
    /// there.
    SharedAddressSpace,
    /// 169.254.0.0/16 and fe80::/10.
    LinkLocal,
    /// Cloud instance metadata services, which hand out credentials: 169.254.169.254
    /// (AWS, GCP, Azure, OpenStack), 169.254.170.2 (AWS ECS), 100.100.100.200 (Alibaba),
    /// 192.0.0.192 (Oracle) and fd00:ec2::254 (AWS IPv6). A host name on the allowlist does not
    /// unlock these; only a CIDR that contains them does.
    Metadata,
    /// fc00::/7 (RFC 4193) and the deprecated site-local fec0::/10.
    UniqueLocal,
    /// 224.0.0.0/4 and ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32 and 3fff::/20: never on the
    /// internet, so a network that routes them uses them for something of its own.
    Documentation,
    /// 198.18.0.0/15 and 2001:2::/48 (RFC 2544, RFC 5180), used inside networks for test
    /// equipment and by some proxies for their fake-IP pools.
    Benchmarking,
    /// Everything else that is not public unicast: 240/4, 192.0.0/24, 192.88.99/24, the IETF
    /// protocol assignments 2001::/23 (Teredo, ORCHID), 64:ff9b:1::/48, 100::/64 and all of IPv6
    /// outside 2000::/3.
    Reserved,
}

impl RefusedRange {
    /// A short name for errors and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private (RFC 1918)",
            Self::SharedAddressSpace => "shared address space (100.64.0.0/10)",
            Self::LinkLocal => "link-local",
            Self::Metadata => "cloud metadata service",
            Self::UniqueLocal => "unique-local",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation",
            Self::Benchmarking => "benchmarking",
            Self::Reserved => "reserved",
        }
    }
}

impl fmt::Display for RefusedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)];

/// First match wins, so narrower ranges come before the ranges that contain them.
const V4: [(Ipv4Net, RefusedRange); 16] = [
    (v4(255, 255, 255, 255, 32), RefusedRange::Broadcast),
    (v4(0, 0, 0, 0, 8), RefusedRange::Unspecified),
    (v4(10, 0, 0, 0, 8), RefusedRange::Private),
    (v4(100, 64, 0, 0, 10), RefusedRange::SharedAddressSpace),
    (v4(127, 0, 0, 0, 8), RefusedRange::Loopback),
    (v4(169, 254, 0, 0, 16), RefusedRange::LinkLocal),
    (v4(172, 16, 0, 0, 12), RefusedRange::Private),
    (v4(192, 0, 0, 0, 24), RefusedRange::Reserved),
    (v4(192, 0, 2, 0, 24), RefusedRange::Documentation),
    (v4(192, 88, 99, 0, 24), RefusedRange::Reserved),
    (v4(192, 168, 0, 0, 16), RefusedRange::Private),
    (v4(198, 18, 0, 0, 15), RefusedRange::Benchmarking),
    (v4(198, 51, 100, 0, 24), RefusedRange::Documentation),
    (v4(203, 0, 113, 0, 24), RefusedRange::Documentation),
    (v4(224, 0, 0, 0, 4), RefusedRange::Multicast),
    (v4(240, 0, 0, 0, 4), RefusedRange::Reserved),
];

/// Ranges with a more telling name than "reserved". Embedded-IPv4 forms are handled before
/// this table, and what it does not name is refused unless it is global unicast (2000::/3).
const V6: [(Ipv6Net, RefusedRange); 10] = [
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), RefusedRange::Unspecified),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), RefusedRange::Loopback),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        RefusedRange::LinkLocal,
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        RefusedRange::UniqueLocal,
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        RefusedRange::UniqueLocal,
    ),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        RefusedRange::Multicast,
    ),
    (
        v6([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48),
        RefusedRange::Benchmarking,
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        RefusedRange::Documentation,
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        RefusedRange::Documentation,
    ),
    // IETF protocol assignments: Teredo, ORCHID, AMT and other relays, never a receiver.
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),
        RefusedRange::Reserved,
    ),
];

/// 64:ff9b:1::/48, NAT64 for local use (RFC 8215): translates to whatever the site chose.
const LOCAL_NAT64: Ipv6Net = v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48);
/// 2000::/3, the only IPv6 unicast space handed out on the internet.
const GLOBAL_UNICAST: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix)
}

const fn v6(s: [u16; 8], prefix: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        prefix,
    )
}

/// Why `ip` may not be dialled without an allowlist entry, or `None` for a public unicast
/// address.
pub fn refused_range(ip: IpAddr) -> Option<RefusedRange> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<RefusedRange> {
    if METADATA_V4.contains(&ip) {
        return Some(RefusedRange::Metadata);
    }
    V4.iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, range)| *range)
}

fn refused_v6(ip: Ipv6Addr) -> Option<RefusedRange> {
    if METADATA_V6.contains(&ip) {
        return Some(RefusedRange::Metadata);
    }
    if let Some(v4) = embedded_v4(ip) {
        return refused_v4(v4);
    }
    if let Some((_, range)) = V6.iter().find(|(net, _)| net.contains(&ip)) {
        return Some(*range);
    }
    if LOCAL_NAT64.contains(&ip) || !GLOBAL_UNICAST.contains(&ip) {
        return Some(RefusedRange::Reserved);
    }
    None
}

/// The IPv4 address an IPv6 address stands for, in the forms that reach it.
pub(crate) fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    match s {
        // ::ffff:a.b.c.d (mapped) and ::ffff:0:a.b.c.d (SIIT).
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        // ::a.b.c.d (compatible, deprecated); `::` and `::1` are IPv6's own.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 || lo > 1 => Some(low),
        // 64:ff9b::a.b.c.d, the NAT64 well-known prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        // 2002:aabb:ccdd::/48, 6to4.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Result<Option<RefusedRange>, std::net::AddrParseError> {
        Ok(refused_range(text.parse()?))
    }

    #[test]
    fn public_addresses_are_not_refused() -> Result<(), std::net::AddrParseError> {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.215.14",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.169.0.1",
            "198.17.255.255",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(range(public)?, None, "{public}");
        }
        Ok(())
    }

    #[test]
    fn each_refused_range_is_named() -> Result<(), std::net::AddrParseError> {
        use RefusedRange::*;
        let cases = [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("::1", Loopback),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", SharedAddressSpace),
            ("100.127.255.255", SharedAddressSpace),
            ("169.254.1.1", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("100.100.100.200", Metadata),
            ("192.0.0.192", Metadata),
            ("fd00:ec2::254", Metadata),
            ("fc00::1", UniqueLocal),
            ("fdff:ffff::1", UniqueLocal),
            ("fec0::1", UniqueLocal),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Broadcast),
            ("192.0.2.1", Documentation),
            ("198.51.100.1", Documentation),
            ("203.0.113.1", Documentation),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
            ("2001:2::1", Benchmarking),
            ("240.0.0.1", Reserved),
            ("255.255.255.254", Reserved),
            ("192.0.0.8", Reserved),
            ("192.88.99.1", Reserved),
            ("2001::1", Reserved),
            ("2001:10::1", Reserved),
            ("64:ff9b:1::a00:1", Reserved),
            ("100::1", Reserved),
            ("4000::1", Reserved),
            ("::2:0:0:1", Reserved),
        ];
        for (text, expected) in cases {
            assert_eq!(range(text)?, Some(expected), "{text}");
        }
        Ok(())
    }

    #[test]
    fn ipv6_forms_of_an_ipv4_address_are_judged_as_that_address()
    -> Result<(), std::net::AddrParseError> {
        use RefusedRange::*;
        let cases = [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::127.0.0.1", Loopback),
            ("::ffff:0:127.0.0.1", Loopback),
            ("64:ff9b::127.0.0.1", Loopback),
            ("2002:7f00:1::", Loopback),
            ("::ffff:0.0.0.0", Unspecified),
            ("::ffff:10.0.0.1", Private),
            ("::192.168.0.1", Private),
            ("64:ff9b::10.1.1.1", Private),
            ("2002:c0a8:101::1", Private),
            ("::ffff:100.64.0.1", SharedAddressSpace),
            ("::ffff:169.254.169.254", Metadata),
            ("::169.254.169.254", Metadata),
            ("64:ff9b::a9fe:a9fe", Metadata),
            ("2002:a9fe:a9fe::", Metadata),
            ("::ffff:169.254.0.1", LinkLocal),
            ("::ffff:224.0.0.1", Multicast),
            ("::ffff:255.255.255.255", Broadcast),
        ];
        for (text, expected) in cases {
            assert_eq!(range(text)?, Some(expected), "{text}");
        }
        Ok(())
    }
}
