//! The operator's allowlist and the rule that decides, for each address a delivery would dial,
//! whether it may. Public unicast addresses always may; a refused one (see [`crate::ranges`])
//! may when an entry of the allowlist covers it, on the port dialled: a CIDR that contains it,
//! or the URL's host name. Private deployments and the A2A TCK's `localhost` receiver need the
//! allowlist; everything else should not.
//!
//! Each entry admits some ports ([`Ports`]): `127.0.0.1:8443`, `10.0.0.0/8:443`,
//! `[::1]:9000`, `hooks.example.com:8080` one port, `127.0.0.1:*` every port, and an entry
//! without a port only the URL scheme's own (80 for http, 443 for https), so that allowing a
//! host's webhook receiver does not open every other service on that host.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use reqwest::Url;

use crate::ranges::{RefusedRange, refused_range};

/// Which addresses webhook deliveries may dial. The default allows public addresses only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct WebhookPolicy {
    /// Lower case, without a trailing dot.
    hosts: Vec<(String, Ports)>,
    nets: Vec<(IpNet, Ports)>,
}

/// The ports an allowlist entry admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ports {
    /// No port written: the URL scheme's default port only (80 for http, 443 for https).
    SchemeDefault,
    /// `:<port>`.
    One(u16),
    /// `:*`.
    Any,
}

/// The port a delivery dials, and whether it is its URL scheme's default one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DialPort {
    pub port: u16,
    pub scheme_default: bool,
}

impl DialPort {
    /// The port `url` dials (written, or its scheme's), `None` for a scheme without one.
    pub fn of(url: &Url) -> Option<DialPort> {
        let default = url.port_or_known_default().filter(|_| url.port().is_none());
        let port = url.port_or_known_default()?;
        Some(DialPort {
            port,
            scheme_default: default == Some(port),
        })
    }
}

impl Ports {
    fn admit(self, dial: DialPort) -> bool {
        match self {
            Ports::SchemeDefault => dial.scheme_default,
            Ports::One(port) => port == dial.port,
            Ports::Any => true,
        }
    }

    fn suffix(self) -> String {
        match self {
            Ports::SchemeDefault => String::new(),
            Ports::One(port) => format!(":{port}"),
            Ports::Any => ":*".to_owned(),
        }
    }
}

/// An allowlist setting that does not parse. Names the entry so the operator can find it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid webhook allowlist entry {entry:?}: {reason}")]
pub struct PolicyError {
    pub entry: String,
    pub reason: String,
}

/// One address the policy does not let a delivery dial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{ip} is {range}")]
pub struct Refusal {
    pub ip: IpAddr,
    pub range: RefusedRange,
}

impl WebhookPolicy {
    /// Public addresses only: the policy without an allowlist.
    pub fn public_only() -> Self {
        Self::default()
    }

    /// Parses a comma-separated allowlist such as `localhost:8080,10.0.0.0/8:443,[::1]:*`:
    /// host names (matched exactly, case-insensitive), CIDRs, and bare IP addresses (one
    /// address), each with an optional `:port` or `:*` (see [`Ports`]; an IPv6 address with a
    /// port is written in brackets). Blank entries are skipped, so a trailing comma or an
    /// empty setting is fine.
    pub fn from_allowlist(setting: &str) -> Result<Self, PolicyError> {
        let mut policy = Self::default();
        for entry in setting.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (target, ports) = parse_entry(entry)?;
            match target {
                Target::Net(net) => policy.nets.push((net, ports)),
                Target::Host(host) => policy.hosts.push((host, ports)),
            }
        }
        Ok(policy)
    }

    /// The host names on the allowlist, lower case, with the ports each admits.
    pub fn hosts(&self) -> &[(String, Ports)] {
        &self.hosts
    }

    /// The CIDRs on the allowlist (a bare address is a /32 or /128), with their ports.
    pub fn nets(&self) -> &[(IpNet, Ports)] {
        &self.nets
    }

    /// The entries that admit `dial`, each for every port: what a connection to that port
    /// may use. Few distinct ones exist for any allowlist (they differ only by the ports it
    /// names), so a client can keep one connector for each.
    pub fn for_port(&self, dial: DialPort) -> WebhookPolicy {
        let keep = |ports: &Ports| ports.admit(dial);
        WebhookPolicy {
            hosts: self
                .hosts
                .iter()
                .filter(|(_, ports)| keep(ports))
                .map(|(host, _)| (host.clone(), Ports::Any))
                .collect(),
            nets: self
                .nets
                .iter()
                .filter(|(_, ports)| keep(ports))
                .map(|(net, _)| (*net, Ports::Any))
                .collect(),
        }
    }

    /// Whether the allowlist names this host for `dial` (case-insensitive, a trailing dot
    /// ignored).
    pub fn allows_host(&self, host: &str, dial: DialPort) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.hosts
            .iter()
            .any(|(h, ports)| h.eq_ignore_ascii_case(host) && ports.admit(dial))
    }

    /// Checks an address written in the URL itself, dialled on `dial`: only a CIDR on the
    /// allowlist can admit a refused one, since there is no host name.
    pub fn check_ip(&self, ip: IpAddr, dial: DialPort) -> Result<(), Refusal> {
        self.check(None, ip, dial)
    }

    /// Checks an address that `host` resolved to, dialled on `dial`.
    pub fn check_resolved(&self, host: &str, ip: IpAddr, dial: DialPort) -> Result<(), Refusal> {
        self.check(Some(host), ip, dial)
    }

    fn check(&self, host: Option<&str>, ip: IpAddr, dial: DialPort) -> Result<(), Refusal> {
        // A mapped address is dialled as the IPv4 address it carries, so an entry for either
        // form admits it.
        let canonical = ip.to_canonical();
        if self.nets.iter().any(|(net, ports)| {
            (net.contains(&ip) || net.contains(&canonical)) && ports.admit(dial)
        }) {
            return Ok(());
        }
        let Some(range) = refused_range(ip) else {
            return Ok(());
        };
        // A name that resolves to the metadata service is the classic rebinding target; an
        // allowlisted name should never need it, so only an explicit CIDR admits it.
        let host_admits =
            range != RefusedRange::Metadata && host.is_some_and(|h| self.allows_host(h, dial));
        if host_admits {
            return Ok(());
        }
        Err(Refusal { ip, range })
    }
}

impl FromStr for WebhookPolicy {
    type Err = PolicyError;

    fn from_str(setting: &str) -> Result<Self, Self::Err> {
        Self::from_allowlist(setting)
    }
}

impl fmt::Display for WebhookPolicy {
    /// The allowlist in the setting's own syntax, for start-up logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts = self
            .hosts
            .iter()
            .map(|(host, ports)| format!("{host}{}", ports.suffix()));
        // `::1/128:9000` reads back: a port after a prefix length needs no brackets.
        let nets = self
            .nets
            .iter()
            .map(|(net, ports)| format!("{net}{}", ports.suffix()));
        let entries: Vec<String> = hosts.chain(nets).collect();
        f.write_str(&entries.join(","))
    }
}

enum Target {
    Net(IpNet),
    Host(String),
}

fn parse_entry(entry: &str) -> Result<(Target, Ports), PolicyError> {
    let invalid = |reason: &str| PolicyError {
        entry: entry.to_owned(),
        reason: reason.to_owned(),
    };
    if entry.contains("://") {
        return Err(invalid("a host name or CIDR, not a URL"));
    }
    let (target, ports) = split_port(entry).map_err(invalid)?;
    let target = target.as_str();
    if target.contains('/') {
        let net: IpNet = target.parse().map_err(|_| {
            invalid("not a CIDR (address/prefix length, e.g. 10.0.0.0/8 or fd00::/8)")
        })?;
        if net.trunc() != net {
            return Err(invalid(&format!(
                "has bits set after the prefix; did you mean {}?",
                net.trunc()
            )));
        }
        return Ok((Target::Net(net), ports));
    }
    if let Ok(ip) = target.parse::<IpAddr>() {
        return Ok((Target::Net(IpNet::from(ip)), ports));
    }
    parse_host(target)
        .map(|host| (Target::Host(host), ports))
        .map_err(invalid)
}

/// An entry's target (brackets of an IPv6 address taken off) and its ports. An IPv6 address
/// has colons of its own, so its port follows brackets (`[::1]:9000`, `[fd00::/8]:443`) or a
/// prefix length (`fd00::/8:443`); an IPv6 address written alone has no port.
fn split_port(entry: &str) -> Result<(String, Ports), &'static str> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (address, after) = rest
            .split_once(']')
            .ok_or("a '[' without its ']' (an IPv6 address is written [::1] or [::1]:9000)")?;
        if address.parse::<IpAddr>().is_err() && !address.contains('/') {
            return Err("brackets hold an IP address or a CIDR, not a host name");
        }
        if let Some(prefix_and_port) = after.strip_prefix('/') {
            let (prefix, ports) = port_after_prefix(prefix_and_port)?;
            return Ok((format!("{address}/{prefix}"), ports));
        }
        if after.is_empty() {
            return Ok((address.to_owned(), Ports::SchemeDefault));
        }
        let port = after
            .strip_prefix(':')
            .ok_or("after ']' comes ':<port>', ':*' or '/<prefix length>'")?;
        return Ok((address.to_owned(), parse_ports(port)?));
    }
    if let Some((address, after)) = entry.split_once('/') {
        let (prefix, ports) = port_after_prefix(after)?;
        return Ok((format!("{address}/{prefix}"), ports));
    }
    match entry.rsplit_once(':') {
        // Colons before the last one and no brackets: an IPv6 address alone.
        Some((target, _)) if target.contains(':') => Ok((entry.to_owned(), Ports::SchemeDefault)),
        Some((target, port)) => Ok((target.to_owned(), parse_ports(port)?)),
        None => Ok((entry.to_owned(), Ports::SchemeDefault)),
    }
}

/// What follows a CIDR's '/': the prefix length, then an optional port.
fn port_after_prefix(after: &str) -> Result<(&str, Ports), &'static str> {
    match after.split_once(':') {
        Some((prefix, port)) => Ok((prefix, parse_ports(port)?)),
        None => Ok((after, Ports::SchemeDefault)),
    }
}

fn parse_ports(port: &str) -> Result<Ports, &'static str> {
    if port == "*" {
        return Ok(Ports::Any);
    }
    match port.parse::<u16>() {
        Ok(number) if number > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Ports::One(number))
        }
        _ => Err("a port is a number from 1 to 65535, or * for every port"),
    }
}

/// A DNS name as URLs carry it after normalisation (ASCII, lower case), so that exact matching
/// against a URL's host works.
fn parse_host(entry: &str) -> Result<String, &'static str> {
    if entry.contains(':') {
        return Err("not an IPv6 address; one with a port is written in brackets ([::1]:9000)");
    }
    if entry.contains('*') {
        return Err("wildcards are not supported; list each host name");
    }
    if !entry.is_ascii() {
        return Err("not ASCII; write an internationalised name in its xn-- form");
    }
    let host = entry
        .strip_suffix('.')
        .unwrap_or(entry)
        .to_ascii_lowercase();
    if host.len() > 253 {
        return Err("longer than 253 characters");
    }
    for label in host.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each dot-separated label must have 1 to 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("a host name has only letters, digits, '-', '_' and dots");
        }
    }
    // URLs read a host ending in a numeric label as an IPv4 address ("10.1" is 10.0.0.1), so a
    // name like that could never match.
    if host
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("looks like an incomplete IP address; write a full address or a CIDR");
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Result<IpAddr, std::net::AddrParseError> {
        text.parse()
    }

    /// Port 80 of an http URL that names no port: what an entry without a port admits.
    const HTTP: DialPort = DialPort {
        port: 80,
        scheme_default: true,
    };

    fn dial(url: &str) -> Result<DialPort, Box<dyn std::error::Error>> {
        DialPort::of(&Url::parse(url)?).ok_or_else(|| format!("no port in {url}").into())
    }

    #[test]
    fn parses_hosts_cidrs_and_bare_addresses() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist(
            " LocalHost., 10.0.0.0/8 ,::1/128, 192.168.1.7, [fd00::1], receiver.internal,",
        )?;
        let hosts: Vec<&str> = policy.hosts().iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hosts, ["localhost", "receiver.internal"]);
        let nets: Vec<String> = policy.nets().iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            nets,
            ["10.0.0.0/8", "::1/128", "192.168.1.7/32", "fd00::1/128"]
        );
        assert!(
            policy
                .nets()
                .iter()
                .all(|(_, ports)| *ports == Ports::SchemeDefault)
        );
        assert_eq!(
            policy.to_string(),
            "localhost,receiver.internal,10.0.0.0/8,::1/128,192.168.1.7/32,fd00::1/128"
        );
        assert_eq!(
            WebhookPolicy::from_allowlist("  ")?,
            WebhookPolicy::public_only()
        );
        assert_eq!(
            "localhost".parse::<WebhookPolicy>()?.hosts(),
            [("localhost".to_owned(), Ports::SchemeDefault)]
        );
        Ok(())
    }

    #[test]
    fn rejects_bad_entries_naming_them() {
        let cases = [
            ("10.0.0.0/33", "not a CIDR"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8?"),
            ("fe80::1/10", "did you mean fe80::/10?"),
            ("bogus/8", "not a CIDR"),
            ("localhost:0", "from 1 to 65535"),
            ("localhost:70000", "from 1 to 65535"),
            ("localhost:+80", "from 1 to 65535"),
            ("localhost:", "from 1 to 65535"),
            ("10.0.0.0/8:http", "from 1 to 65535"),
            ("[::1", "without its ']'"),
            ("[::1]9000", "after ']'"),
            ("[localhost]:80", "not a host name"),
            ("fe80::1%eth0:80", "in brackets"),
            ("http://localhost", "not a URL"),
            ("*.example.com", "wildcards"),
            ("bad host", "only letters"),
            ("a..b", "1 to 63"),
            ("10.1", "incomplete IP address"),
            ("bücher.example", "xn--"),
        ];
        for (entry, reason) in cases {
            let setting = format!("localhost,{entry}");
            match WebhookPolicy::from_allowlist(&setting) {
                Err(error) => {
                    assert_eq!(error.entry, entry);
                    let message = error.to_string();
                    assert!(message.contains(reason), "{entry}: {message}");
                    assert!(message.contains(&format!("{entry:?}")), "{message}");
                }
                Ok(policy) => panic!("{entry} parsed as {policy:?}"),
            }
        }
    }

    #[test]
    fn public_addresses_pass_and_refused_ones_name_their_range()
    -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::public_only();
        assert_eq!(policy.check_ip(ip("93.184.215.14")?, HTTP), Ok(()));
        assert_eq!(
            policy.check_resolved("example.com", ip("2606:2800:21f::1")?, HTTP),
            Ok(())
        );
        let refusal = policy.check_ip(ip("10.1.2.3")?, HTTP);
        assert_eq!(
            refusal,
            Err(Refusal {
                ip: ip("10.1.2.3")?,
                range: RefusedRange::Private
            })
        );
        assert_eq!(
            policy
                .check_ip(ip("::ffff:127.0.0.1")?, HTTP)
                .map_err(|r| r.to_string()),
            Err("::ffff:127.0.0.1 is loopback".to_owned())
        );
        Ok(())
    }

    #[test]
    fn cidrs_admit_addresses_in_either_form() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist("127.0.0.0/8,fd00::/8,::ffff:10.0.0.0/104")?;
        assert_eq!(policy.check_ip(ip("127.0.0.1")?, HTTP), Ok(()));
        assert_eq!(policy.check_ip(ip("::ffff:127.0.0.1")?, HTTP), Ok(()));
        assert_eq!(policy.check_ip(ip("fd12::1")?, HTTP), Ok(()));
        assert_eq!(policy.check_ip(ip("::ffff:10.1.1.1")?, HTTP), Ok(()));
        assert!(policy.check_ip(ip("::1")?, HTTP).is_err());
        assert!(
            policy.check_ip(ip("10.1.1.1")?, HTTP).is_err(),
            "entry is for the mapped form only"
        );
        assert!(policy.check_ip(ip("192.168.0.1")?, HTTP).is_err());
        Ok(())
    }

    #[test]
    fn an_allowlisted_name_admits_what_it_resolves_to_except_metadata()
    -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist("localhost,receiver.internal")?;
        assert_eq!(
            policy.check_resolved("localhost", ip("127.0.0.1")?, HTTP),
            Ok(())
        );
        assert_eq!(
            policy.check_resolved("LOCALHOST.", ip("::1")?, HTTP),
            Ok(())
        );
        assert_eq!(
            policy.check_resolved("receiver.internal", ip("10.2.3.4")?, HTTP),
            Ok(())
        );
        // The name covers what it resolves to, not the same address written as a literal or
        // reached through another name.
        assert!(policy.check_ip(ip("127.0.0.1")?, HTTP).is_err());
        assert!(
            policy
                .check_resolved("evil.example", ip("127.0.0.1")?, HTTP)
                .is_err()
        );
        assert!(
            policy
                .check_resolved("localhost.evil.example", ip("127.0.0.1")?, HTTP)
                .is_err()
        );
        for metadata in ["169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"] {
            assert_eq!(
                policy.check_resolved("receiver.internal", ip(metadata)?, HTTP),
                Err(Refusal {
                    ip: ip(metadata)?,
                    range: RefusedRange::Metadata
                })
            );
        }
        let explicit = WebhookPolicy::from_allowlist("169.254.169.254")?;
        assert_eq!(explicit.check_ip(ip("169.254.169.254")?, HTTP), Ok(()));
        Ok(())
    }

    #[test]
    fn entries_take_an_optional_port_or_every_port() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist(
            "127.0.0.1:8443, 10.0.0.0/8:443, [::1]:9000, hooks.example.com:8080, localhost:*, \
             [fd00::/8]:7000, fc00::/8:7001, [fe80::1], 192.168.0.0/16",
        )?;
        let hosts: Vec<String> = policy
            .hosts()
            .iter()
            .map(|(host, ports)| format!("{host} {ports:?}"))
            .collect();
        assert_eq!(hosts, ["hooks.example.com One(8080)", "localhost Any"]);
        let nets: Vec<String> = policy
            .nets()
            .iter()
            .map(|(net, ports)| format!("{net} {ports:?}"))
            .collect();
        assert_eq!(
            nets,
            [
                "127.0.0.1/32 One(8443)",
                "10.0.0.0/8 One(443)",
                "::1/128 One(9000)",
                "fd00::/8 One(7000)",
                "fc00::/8 One(7001)",
                "fe80::1/128 SchemeDefault",
                "192.168.0.0/16 SchemeDefault",
            ]
        );
        // The setting's own syntax, and it reads back the same.
        let shown = policy.to_string();
        assert_eq!(
            shown,
            "hooks.example.com:8080,localhost:*,127.0.0.1/32:8443,10.0.0.0/8:443,::1/128:9000,\
             fd00::/8:7000,fc00::/8:7001,fe80::1/128,192.168.0.0/16"
        );
        assert_eq!(WebhookPolicy::from_allowlist(&shown)?, policy);
        Ok(())
    }

    #[test]
    fn the_port_dialled_is_the_urls_own_or_its_schemes() -> Result<(), Box<dyn std::error::Error>> {
        let cases = [
            ("http://h/", 80, true),
            ("https://h/", 443, true),
            ("http://h:80/", 80, true),
            ("https://h:443/x", 443, true),
            ("http://h:443/", 443, false),
            ("https://h:80/", 80, false),
            ("http://h:8080/", 8080, false),
        ];
        for (url, port, scheme_default) in cases {
            assert_eq!(
                dial(url)?,
                DialPort {
                    port,
                    scheme_default
                },
                "{url}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_entry_admits_its_port_only_and_without_one_the_schemes()
    -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist(
            "127.0.0.1:8443,10.0.0.0/8,[::1]:9000,hooks.internal:8080,localhost,192.168.0.0/16:*",
        )?;
        let loopback = ip("127.0.0.1")?;
        assert_eq!(policy.check_ip(loopback, dial("https://x:8443/")?), Ok(()));
        assert_eq!(policy.check_ip(loopback, dial("http://x:8443/")?), Ok(()));
        for other in [
            "http://x/",
            "https://x/",
            "http://x:8444/",
            "http://x:6379/",
        ] {
            assert_eq!(
                policy.check_ip(loopback, dial(other)?),
                Err(Refusal {
                    ip: loopback,
                    range: RefusedRange::Loopback
                }),
                "{other}"
            );
        }
        // No port: the scheme's own, written or not, and no other.
        let private = ip("10.1.2.3")?;
        for allowed in ["http://x/", "https://x/", "http://x:80/", "https://x:443/"] {
            assert_eq!(
                policy.check_ip(private, dial(allowed)?),
                Ok(()),
                "{allowed}"
            );
        }
        for refused in [
            "http://x:443/",
            "https://x:80/",
            "http://x:8080/",
            "http://x:22/",
        ] {
            assert!(
                policy.check_ip(private, dial(refused)?).is_err(),
                "{refused}"
            );
        }
        assert_eq!(policy.check_ip(ip("::1")?, dial("http://x:9000/")?), Ok(()));
        assert!(
            policy
                .check_ip(ip("::1")?, dial("http://x:9001/")?)
                .is_err()
        );
        // `:*`: every port.
        for any in ["http://x:1/", "https://x:65535/", "http://x/"] {
            assert_eq!(
                policy.check_ip(ip("192.168.3.4")?, dial(any)?),
                Ok(()),
                "{any}"
            );
        }
        // Host names the same way, for what they resolve to.
        let hooks = dial("http://hooks.internal:8080/")?;
        assert_eq!(
            policy.check_resolved("hooks.internal", private, hooks),
            Ok(())
        );
        assert_eq!(
            policy.check_resolved("hooks.internal", loopback, hooks),
            Ok(())
        );
        let elsewhere = dial("http://hooks.internal:8081/")?;
        assert!(
            policy
                .check_resolved("hooks.internal", loopback, elsewhere)
                .is_err()
        );
        assert_eq!(policy.check_resolved("localhost", loopback, HTTP), Ok(()));
        assert!(
            policy
                .check_resolved("localhost", loopback, dial("http://localhost:3000/")?)
                .is_err()
        );
        // Public addresses on any port, whatever the allowlist.
        assert_eq!(
            policy.check_ip(ip("93.184.215.14")?, dial("http://x:6379/")?),
            Ok(())
        );
        Ok(())
    }

    #[test]
    fn a_ports_view_keeps_the_entries_that_admit_it() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist(
            "127.0.0.1:8443,10.0.0.0/8,localhost:*,hooks.internal:80",
        )?;
        let at_8443 = policy.for_port(dial("http://x:8443/")?);
        assert_eq!(at_8443.to_string(), "localhost:*,127.0.0.1/32:*");
        let at_80 = policy.for_port(HTTP);
        assert_eq!(
            at_80.to_string(),
            "localhost:*,hooks.internal:*,10.0.0.0/8:*"
        );
        let at_22 = policy.for_port(dial("http://x:22/")?);
        assert_eq!(at_22.to_string(), "localhost:*");
        // Views differ only by the ports the allowlist names: one for each.
        assert_eq!(policy.for_port(dial("http://x:23/")?), at_22);
        assert_eq!(
            policy.for_port(dial("https://x/")?).to_string(),
            "localhost:*,10.0.0.0/8:*"
        );
        Ok(())
    }
}
