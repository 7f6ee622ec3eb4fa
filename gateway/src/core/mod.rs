//! The task service both protocol adapters call: settings, shared state, the catalog of
//! entrypoints, admission, the payment gate, following a run, rate limits. Nothing here
//! imports an adapter (`crate::a2a`, `crate::lucid`) or the console; `tests/layers.rs` checks.
//!
//! - [`caller`]: who is calling (a bearer token or `Task-Access-Token`, its owner hash);
//! - [`config`]: settings, each a flag and an environment variable;
//! - [`state`]: what handlers share ([`state::AppState`]): the store, the worker registry, settings;
//! - [`catalog`]: the cached view of the worker registry and the documents built from it;
//! - [`recent`]: entrypoints listed recently, admitted through a gap in the registry;
//! - [`prices`]: one view of each entrypoint's terms across workers, and a route's price;
//! - [`origin`]: the origin payments, sign-ins and signed cards are bound to (never one a
//!   request chose, unless forwarded headers are trusted);
//! - [`members`]: the callers `--member-tokens-file` lists, who see and run private
//!   entrypoints;
//! - [`admit`]: admission shared by task creation, invoke, stream and A2A messages;
//! - [`create`]: an admitted task stored, in its producer span (from the store alone: the
//!   payment gate creates its reserved tasks here);
//! - [`pay`]: the payment gate of priced routes (x402, MPP, SIWX): challenge, credential,
//!   durable admission; it reads the state through [`pay::PayContext`], not [`state`], which
//!   holds the gate;
//! - [`push`]: push notifications' outbox, guarded client and retry schedule (the A2A
//!   adapter renders and delivers them);
//! - [`watch`]: following a run through the store, its events in order, then its end;
//! - [`store_memory`]: new tasks refused while the store is near its memory limit;
//! - [`ratelimit`]: rate limits of task creation (middleware in front of both adapters; it
//!   answers in either protocol's error shape);
//! - [`card_signing`]: the JWS signatures of the cards (`--card-signing-key-file`).

pub mod admit;
pub mod caller;
pub mod card_signing;
pub mod catalog;
pub mod config;
pub mod create;
pub mod members;
pub mod origin;
pub mod pay;
pub mod prices;
pub mod push;
pub mod ratelimit;
pub mod recent;
pub mod state;
pub mod store_memory;
pub mod watch;
