//! HTTP plumbing both protocol adapters use, about HTTP rather than either protocol:
//!
//! - [`origin`]: the origin a client reached us at, and the one payments are bound to;
//! - [`interfaces`]: each protocol's endpoint URLs under that origin (cards cross-link them);
//! - [`document`]: cached documents (the cards, `/entrypoints`, OpenAPI) with ETag and `304`;
//! - [`sse`]: server-sent events' keep-alive and plain `data:` streams;
//! - [`client_address`]: the client address key of rate limits and of `MAX_LIVE_PER_ADDRESS`,
//!   behind trusted proxies the right-most untrusted hop of the chain [`forwarded`] reads;
//! - [`request_id`]: `x-request-id` values (random UUIDs without a system call each);
//! - [`observe`]: HTTP server spans and metrics (OpenTelemetry semantic conventions);
//! - [`error`]: [`error::ApiError`], an HTTP status with the Lucid profile's error body: the
//!   core's error type, which the A2A adapter maps to the spec's codes;
//! - [`extract`]: JSON and `Task-Access-Token` extractors whose rejections are `ApiError`s.
//!
//! Nothing here imports the core or either adapter, except the settings ([`crate::core::config`])
//! that name the public URL and the listen address.

pub mod client_address;
pub mod document;
pub mod error;
pub mod extract;
pub mod forwarded;
pub mod interfaces;
pub mod observe;
pub mod origin;
pub mod request_id;
pub mod sse;
