//! The resolver every webhook connection goes through. It resolves the host with the system's
//! resolver and hands the connector only the addresses the policy allows, so the socket can
//! only be opened to an address that was checked in the same step: a name that answers with a
//! public address when the config is created and with 127.0.0.1 later (DNS rebinding) is
//! refused at that later connection.
//!
//! A resolver is not told the port it resolves for, so each one holds the policy's view for
//! the ports it serves ([`WebhookPolicy::for_port`]: the entries that admit them, for every
//! port), and the client sends each URL through the connector of its port's view.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::policy::{DialPort, Refusal, WebhookPolicy};

/// Every address `host` resolved to is refused. Travels through reqwest's error as its source,
/// and the client turns it back into [`WebhookError::Refused`](crate::WebhookError::Refused).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{host} resolves only to refused addresses")]
pub(crate) struct DialRefused {
    pub(crate) host: String,
    pub(crate) refusals: Vec<Refusal>,
}

#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    /// A view whose entries admit every port (`WebhookPolicy::for_port`).
    policy: Arc<WebhookPolicy>,
}

impl GuardedResolver {
    pub(crate) fn new(policy: Arc<WebhookPolicy>) -> Self {
        Self { policy }
    }
}

/// Any port: the view's entries admit every one.
const VIEW_PORT: DialPort = DialPort {
    port: 0,
    scheme_default: false,
};

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port in.
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (allowed, refusals) = filter(&policy, &host, resolved);
            if allowed.is_empty() {
                if refusals.is_empty() {
                    // No answer at all is a DNS problem that may pass, not a refusal.
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("{host} resolved to no addresses"),
                    )
                    .into());
                }
                tracing::warn!(%host, addresses = %describe(&refusals), "webhook host refused: it resolves only to addresses outside the policy");
                return Err(DialRefused { host, refusals }.into());
            }
            if !refusals.is_empty() {
                tracing::debug!(%host, dropped = %describe(&refusals), "webhook host: refused addresses left out");
            }
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

fn filter(
    policy: &WebhookPolicy,
    host: &str,
    resolved: Vec<SocketAddr>,
) -> (Vec<SocketAddr>, Vec<Refusal>) {
    let mut allowed = Vec::with_capacity(resolved.len());
    let mut refusals = Vec::new();
    for addr in resolved {
        match policy.check_resolved(host, addr.ip(), VIEW_PORT) {
            Ok(()) => allowed.push(addr),
            Err(refusal) => refusals.push(refusal),
        }
    }
    (allowed, refusals)
}

fn describe(refusals: &[Refusal]) -> String {
    let each: Vec<String> = refusals.iter().map(ToString::to_string).collect();
    each.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Result<Vec<SocketAddr>, std::net::AddrParseError> {
        list.iter()
            .map(|ip| Ok(SocketAddr::new(ip.parse()?, 0)))
            .collect()
    }

    #[test]
    fn keeps_only_allowed_addresses() -> Result<(), Box<dyn std::error::Error>> {
        let resolved = addrs(&["127.0.0.1", "93.184.215.14", "::1", "2606:2800:21f::1"])?;
        let (allowed, refusals) = filter(&WebhookPolicy::public_only(), "mixed.example", resolved);
        assert_eq!(allowed, addrs(&["93.184.215.14", "2606:2800:21f::1"])?);
        assert_eq!(
            describe(&refusals),
            "127.0.0.1 is loopback, ::1 is loopback"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_unless_allowed()
    -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let refuse = GuardedResolver::new(Arc::new(WebhookPolicy::public_only()));
        let error = match refuse.resolve("localhost".parse()?).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(error) => error,
        };
        let refused = error
            .downcast_ref::<DialRefused>()
            .ok_or("not a DialRefused")?;
        assert_eq!(refused.host, "localhost");
        assert!(
            refused
                .refusals
                .iter()
                .any(|r| r.ip == std::net::Ipv4Addr::LOCALHOST)
        );

        let allow = GuardedResolver::new(Arc::new(WebhookPolicy::from_allowlist("127.0.0.0/8:*")?));
        let allowed: Vec<SocketAddr> = allow.resolve("localhost".parse()?).await?.collect();
        assert!(!allowed.is_empty());
        assert!(
            allowed
                .iter()
                .all(|a| a.ip().is_ipv4() && a.ip().is_loopback()),
            "{allowed:?}"
        );
        Ok(())
    }
}
