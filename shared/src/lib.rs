//! Shared building blocks of the agent task service.
//!
//! Layers stack one way, each module only using the ones above it:
//! - [`protocol`]: wire types of the Lucid HTTP profile (tasks, statuses, events, error codes,
//!   the `POST /tasks` request), serialized exactly as upstream clients expect;
//! - [`token`]: access-token rules and the owner hash that is all a store ever keeps of a token;
//! - [`registry`]: the live worker registry (what each worker hosts, refreshed by heartbeat);
//! - [`store`]: the [`store::TaskStore`] contract with its two implementations,
//!   [`store::MemoryStore`] (durability `process`) and [`store::RedisStore`] (durability `durable`,
//!   Lua-scripted fenced leases);
//! - [`client`]: a client for agents speaking the profile (card discovery, invoke, stream,
//!   owned tasks), as used by the `taskctl` command-line client;
//! - [`telemetry`]: OpenTelemetry traces and metrics over OTLP, off unless configured, and the
//!   log set-up of the binaries (the SDK parts behind the `telemetry` feature).

pub mod client;
pub mod credentials;
pub mod idempotency;
pub mod limits;
pub mod protocol;
pub mod ratelimit;
pub mod registry;
pub mod secret;
pub mod store;
pub mod telemetry;
pub mod token;
