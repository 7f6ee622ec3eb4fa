//! The operator's allowlist and the rule that decides, for each address a delivery would dial,
//! whether it may. Public unicast addresses always may; a refused one (see [`crate::ranges`])
//! may when a CIDR on the allowlist contains it or when the URL's host name is on the allowlist.
//! Private deployments and the A2A TCK's `localhost` receiver need the allowlist; everything
//! else should not.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

use crate::ranges::{RefusedRange, refused_range};

/// Which addresses webhook deliveries may dial. The default allows public addresses only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookPolicy {
    /// Lower case, without a trailing dot.
    hosts: Vec<String>,
    nets: Vec<IpNet>,
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

    /// Parses a comma-separated allowlist such as `localhost,10.0.0.0/8,::1/128`: host names
    /// (matched exactly, case-insensitive), CIDRs, and bare IP addresses (one address).
    /// Blank entries are skipped, so a trailing comma or an empty setting is fine.
    pub fn from_allowlist(setting: &str) -> Result<Self, PolicyError> {
        let mut policy = Self::default();
        for entry in setting.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match parse_entry(entry)? {
                Entry::Net(net) => policy.nets.push(net),
                Entry::Host(host) => policy.hosts.push(host),
            }
        }
        Ok(policy)
    }

    /// The host names on the allowlist, lower case.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The CIDRs on the allowlist (a bare address is a /32 or /128).
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }

    /// Whether the allowlist names this host (case-insensitive, a trailing dot ignored).
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Checks an address written in the URL itself: only a CIDR on the allowlist can admit a
    /// refused one, since there is no host name.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refusal> {
        self.check(None, ip)
    }

    /// Checks an address that `host` resolved to.
    pub fn check_resolved(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        self.check(Some(host), ip)
    }

    fn check(&self, host: Option<&str>, ip: IpAddr) -> Result<(), Refusal> {
        // A mapped address is dialled as the IPv4 address it carries, so an entry for either
        // form admits it.
        let canonical = ip.to_canonical();
        if self
            .nets
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&canonical))
        {
            return Ok(());
        }
        let Some(range) = refused_range(ip) else {
            return Ok(());
        };
        // A name that resolves to the metadata service is the classic rebinding target; an
        // allowlisted name should never need it, so only an explicit CIDR admits it.
        let host_admits =
            range != RefusedRange::Metadata && host.is_some_and(|h| self.allows_host(h));
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
        let entries: Vec<String> = self
            .hosts
            .iter()
            .cloned()
            .chain(self.nets.iter().map(IpNet::to_string))
            .collect();
        f.write_str(&entries.join(","))
    }
}

enum Entry {
    Net(IpNet),
    Host(String),
}

fn parse_entry(entry: &str) -> Result<Entry, PolicyError> {
    let invalid = |reason: &str| PolicyError {
        entry: entry.to_owned(),
        reason: reason.to_owned(),
    };
    if entry.contains("://") {
        return Err(invalid("a host name or CIDR, not a URL"));
    }
    if entry.contains('/') {
        let net: IpNet = entry.parse().map_err(|_| {
            invalid("not a CIDR (address/prefix length, e.g. 10.0.0.0/8 or fd00::/8)")
        })?;
        if net.trunc() != net {
            return Err(invalid(&format!(
                "has bits set after the prefix; did you mean {}?",
                net.trunc()
            )));
        }
        return Ok(Entry::Net(net));
    }
    let unbracketed = entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .unwrap_or(entry);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        return Ok(Entry::Net(IpNet::from(ip)));
    }
    parse_host(entry).map(Entry::Host).map_err(invalid)
}

/// A DNS name as URLs carry it after normalisation (ASCII, lower case), so that exact matching
/// against a URL's host works.
fn parse_host(entry: &str) -> Result<String, &'static str> {
    if entry.contains(':') {
        return Err("a host name without a port (ports are not part of the allowlist)");
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

    #[test]
    fn parses_hosts_cidrs_and_bare_addresses() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist(
            " LocalHost., 10.0.0.0/8 ,::1/128, 192.168.1.7, [fd00::1], receiver.internal,",
        )?;
        assert_eq!(policy.hosts(), ["localhost", "receiver.internal"]);
        let nets: Vec<String> = policy.nets().iter().map(ToString::to_string).collect();
        assert_eq!(
            nets,
            ["10.0.0.0/8", "::1/128", "192.168.1.7/32", "fd00::1/128"]
        );
        assert_eq!(
            policy.to_string(),
            "localhost,receiver.internal,10.0.0.0/8,::1/128,192.168.1.7/32,fd00::1/128"
        );
        assert_eq!(
            WebhookPolicy::from_allowlist("  ")?,
            WebhookPolicy::public_only()
        );
        assert_eq!("localhost".parse::<WebhookPolicy>()?.hosts(), ["localhost"]);
        Ok(())
    }

    #[test]
    fn rejects_bad_entries_naming_them() {
        let cases = [
            ("10.0.0.0/33", "not a CIDR"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8?"),
            ("fe80::1/10", "did you mean fe80::/10?"),
            ("bogus/8", "not a CIDR"),
            ("localhost:8080", "without a port"),
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
        assert_eq!(policy.check_ip(ip("93.184.215.14")?), Ok(()));
        assert_eq!(
            policy.check_resolved("example.com", ip("2606:2800:21f::1")?),
            Ok(())
        );
        let refusal = policy.check_ip(ip("10.1.2.3")?);
        assert_eq!(
            refusal,
            Err(Refusal {
                ip: ip("10.1.2.3")?,
                range: RefusedRange::Private
            })
        );
        assert_eq!(
            policy
                .check_ip(ip("::ffff:127.0.0.1")?)
                .map_err(|r| r.to_string()),
            Err("::ffff:127.0.0.1 is loopback".to_owned())
        );
        Ok(())
    }

    #[test]
    fn cidrs_admit_addresses_in_either_form() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist("127.0.0.0/8,fd00::/8,::ffff:10.0.0.0/104")?;
        assert_eq!(policy.check_ip(ip("127.0.0.1")?), Ok(()));
        assert_eq!(policy.check_ip(ip("::ffff:127.0.0.1")?), Ok(()));
        assert_eq!(policy.check_ip(ip("fd12::1")?), Ok(()));
        assert_eq!(policy.check_ip(ip("::ffff:10.1.1.1")?), Ok(()));
        assert!(policy.check_ip(ip("::1")?).is_err());
        assert!(
            policy.check_ip(ip("10.1.1.1")?).is_err(),
            "entry is for the mapped form only"
        );
        assert!(policy.check_ip(ip("192.168.0.1")?).is_err());
        Ok(())
    }

    #[test]
    fn an_allowlisted_name_admits_what_it_resolves_to_except_metadata()
    -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist("localhost,receiver.internal")?;
        assert_eq!(policy.check_resolved("localhost", ip("127.0.0.1")?), Ok(()));
        assert_eq!(policy.check_resolved("LOCALHOST.", ip("::1")?), Ok(()));
        assert_eq!(
            policy.check_resolved("receiver.internal", ip("10.2.3.4")?),
            Ok(())
        );
        // The name covers what it resolves to, not the same address written as a literal or
        // reached through another name.
        assert!(policy.check_ip(ip("127.0.0.1")?).is_err());
        assert!(
            policy
                .check_resolved("evil.example", ip("127.0.0.1")?)
                .is_err()
        );
        assert!(
            policy
                .check_resolved("localhost.evil.example", ip("127.0.0.1")?)
                .is_err()
        );
        for metadata in ["169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"] {
            assert_eq!(
                policy.check_resolved("receiver.internal", ip(metadata)?),
                Err(Refusal {
                    ip: ip(metadata)?,
                    range: RefusedRange::Metadata
                })
            );
        }
        let explicit = WebhookPolicy::from_allowlist("169.254.169.254")?;
        assert_eq!(explicit.check_ip(ip("169.254.169.254")?), Ok(()));
        Ok(())
    }
}
