//! The HTTP client that delivers A2A push notifications to caller-supplied webhook URLs, guarded
//! against server-side request forgery: a push config must not be a way to make the cluster call
//! its own network (metadata services, Redis, admin endpoints).
//!
//! - [`ranges`]: the refused address ranges ([`RefusedRange`]), IPv6 forms of IPv4 addresses
//!   judged as the address they carry;
//! - [`policy`]: [`WebhookPolicy`], the operator's allowlist of host names and CIDRs, each with
//!   the ports it admits (the URL scheme's own unless it names some), and the rule for each
//!   dialled address and port;
//! - [`target`]: [`validate_url`], the checks that need no network (scheme, userinfo, IP
//!   literals), for config creation and before each send;
//! - [`authorization`]: [`validate_authorization`], the `Authorization` header's parts;
//! - `resolve`: the resolver that hands the connector only allowed addresses, so the check
//!   happens at every connection (DNS rebinding), one for each port's view of the policy;
//! - [`client`]: [`WebhookClient::post`], no proxies, no redirects, timeouts, a bounded read;
//! - [`outcome`]: [`DeliveryOutcome`], delivered, permanent or retryable;
//! - [`backoff`]: [`Backoff`], exponential with full jitter and bounded attempts;
//! - [`error`]: [`WebhookError`], the permanent failures (bad input, refused by policy).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use webhook::{WebhookClient, WebhookConfig, WebhookPolicy};
//! let policy = WebhookPolicy::from_allowlist("localhost:9000,10.0.0.0/8")?;
//! let client = WebhookClient::new(policy, WebhookConfig::default())?;
//! let outcome = client
//!     .post(
//!         "http://localhost:9000/hook",
//!         Some(("Bearer", "token")),
//!         "application/a2a+json",
//!         bytes::Bytes::from_static(b"{}"),
//!     )
//!     .await?;
//! if !outcome.is_delivered() && outcome.is_retryable() { /* schedule with Backoff */ }
//! # Ok(()) }
//! ```
//!
//! Credentials never appear in errors, outcomes or logs; logs and errors name the host only,
//! never the URL's path or query.

pub mod authorization;
pub mod backoff;
pub mod client;
pub mod error;
pub mod outcome;
pub mod policy;
pub mod ranges;
mod resolve;
pub mod target;

pub use authorization::{AuthorizationError, TokenError, validate_authorization, validate_token};
pub use backoff::{Backoff, BackoffError};
pub use client::{WebhookClient, WebhookConfig};
pub use error::WebhookError;
pub use outcome::DeliveryOutcome;
pub use policy::{DialPort, PolicyError, Ports, Refusal, WebhookPolicy};
pub use ranges::{RefusedRange, refused_range};
pub use target::validate_url;
