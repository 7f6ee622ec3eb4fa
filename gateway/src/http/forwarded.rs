//! The hops a request passed through, as proxies record them: `X-Forwarded-For` (a comma list
//! of addresses, each proxy appending the peer it saw) or RFC 7239 `Forwarded` (elements of
//! `for=` pairs). Read left to right over every line of the header, so that the right-most hop
//! is the one the nearest proxy wrote: [`crate::http::client_address`] walks them from there.
//!
//! A hop that names no address (`unknown`, an obfuscated `_identifier`, a name, garbage, an
//! element without `for=`) is [`Hop::Unknown`]: a client cannot be counted by it.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;

/// Which header names the client: `--client-address-header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For` (nginx, HAProxy, Envoy, cloud load balancers, Kubernetes ingresses).
    #[default]
    #[value(name = "x-forwarded-for")]
    XForwardedFor,
    /// RFC 7239 `Forwarded`'s `for=` parameters.
    #[value(name = "forwarded")]
    Forwarded,
}

/// One hop of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    Address(IpAddr),
    Unknown,
}

/// The hops `header` records in `headers`, left (farthest) to right (nearest).
pub fn hops(headers: &HeaderMap, header: ClientAddressHeader) -> Vec<Hop> {
    match header {
        ClientAddressHeader::XForwardedFor => x_forwarded_for(headers),
        ClientAddressHeader::Forwarded => forwarded(headers),
    }
}

/// `X-Forwarded-For`: every line's comma-separated entries, in order. Read as bytes, so that a
/// line a client filled with non-ASCII still yields the entries proxies appended after it.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Hop> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
        .map(|entry| match std::str::from_utf8(entry) {
            Ok(entry) => node(entry.trim_matches([' ', '\t'])),
            Err(_) => Hop::Unknown,
        })
        .collect()
}

/// `Forwarded`: each element's `for=` (an element without one, or with two, is unknown).
fn forwarded(headers: &HeaderMap) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in headers.get_all("forwarded").iter() {
        let Ok(value) = value.to_str() else {
            // Not visible ASCII: nothing in it can be split reliably.
            hops.push(Hop::Unknown);
            continue;
        };
        for element in split_outside_quotes(value, ',') {
            let mut found = None;
            let mut twice = false;
            for pair in split_outside_quotes(element, ';') {
                let Some((name, value)) = pair.split_once('=') else {
                    continue;
                };
                if name.trim().eq_ignore_ascii_case("for") {
                    twice |= found.is_some();
                    found = Some(node(&unquote(value.trim())));
                }
            }
            hops.push(match found {
                Some(hop) if !twice => hop,
                _ => Hop::Unknown,
            });
        }
    }
    hops
}

/// `text` split on `separator` where it is not inside a quoted string (`\` escapes the next
/// character there).
fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (at, character) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && character == '\\' {
            escaped = true;
        } else if character == '"' {
            quoted = !quoted;
        } else if character == separator && !quoted {
            parts.push(&text[start..at]);
            start = at + character.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A token or a quoted string's content.
fn unquote(value: &str) -> String {
    match value
        .strip_prefix('"')
        .and_then(|inner| inner.strip_suffix('"'))
    {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut escaped = false;
            for character in inner.chars() {
                if !escaped && character == '\\' {
                    escaped = true;
                    continue;
                }
                escaped = false;
                out.push(character);
            }
            out
        }
        None => value.to_owned(),
    }
}

/// A node: `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:4711`;
/// anything else (`unknown`, `_hidden`, a name) is unknown. A port, real or obfuscated, is
/// dropped.
fn node(text: &str) -> Hop {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Hop::Address(address);
    }
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return Hop::Address(socket.ip());
    }
    // `[v6]` or `[v6]:port` with an obfuscated port (`_8080`), or `v4:_port`.
    let host = match text.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(host, _)| host),
        None => text.split_once(':').map(|(host, _)| host),
    };
    match host.and_then(|host| host.parse::<IpAddr>().ok()) {
        Some(address) => Hop::Address(address),
        None => Hop::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(name: &'static str, lines: &[&'static [u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            if let Ok(value) = HeaderValue::from_bytes(line) {
                headers.append(name, value);
            }
        }
        headers
    }

    fn at(text: &str) -> Hop {
        text.parse().map_or(Hop::Unknown, Hop::Address)
    }

    #[test]
    fn x_forwarded_for_lists_every_line_in_order() {
        let chain = headers(
            "x-forwarded-for",
            &[
                b"203.0.113.9, 198.51.100.7:4711",
                b" [2001:db8::1]:80 ,2001:db8::2",
            ],
        );
        assert_eq!(
            hops(&chain, ClientAddressHeader::XForwardedFor),
            [
                at("203.0.113.9"),
                at("198.51.100.7"),
                at("2001:db8::1"),
                at("2001:db8::2")
            ]
        );
        // Garbage, names and empty entries are unknown; non-ASCII does not hide the entries a
        // proxy appended after it.
        let messy = headers(
            "x-forwarded-for",
            &[b"\xff\xfe, proxy.internal,, unknown, 192.0.2.1"],
        );
        assert_eq!(
            hops(&messy, ClientAddressHeader::XForwardedFor),
            [
                Hop::Unknown,
                Hop::Unknown,
                Hop::Unknown,
                Hop::Unknown,
                at("192.0.2.1")
            ]
        );
        assert!(hops(&HeaderMap::new(), ClientAddressHeader::XForwardedFor).is_empty());
    }

    #[test]
    fn forwarded_reads_each_elements_for() {
        let chain = headers(
            "forwarded",
            &[
                b"for=192.0.2.43, for=\"[2001:db8:cafe::17]:4711\";proto=https",
                b"For=\"198.51.100.17:_8080\";by=203.0.113.60, for=unknown",
                b"by=203.0.113.43;proto=http, for=_hidden, for=\"_gazonk\"",
                b"for=192.0.2.1;for=192.0.2.2, host=\"a,b\";for=192.0.2.3",
                b"for=\"[2001:db8::5]\"",
            ],
        );
        assert_eq!(
            hops(&chain, ClientAddressHeader::Forwarded),
            [
                at("192.0.2.43"),
                at("2001:db8:cafe::17"),
                at("198.51.100.17"),
                Hop::Unknown,
                Hop::Unknown,
                Hop::Unknown,
                Hop::Unknown,
                Hop::Unknown,
                at("192.0.2.3"),
                at("2001:db8::5"),
            ]
        );
        // The other header is not read.
        assert!(hops(&chain, ClientAddressHeader::XForwardedFor).is_empty());
    }
}
