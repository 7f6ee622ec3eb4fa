//! The official A2A v1.0 bindings against real processes: a private redis-server, `worker`s
//! hosting the built-ins and the TCK agent (`--a2a-tck-agent`), and a `gateway` with
//! `A2A_DEFAULT_SKILL=tck`. Every operation is exercised on both bindings, JSON-RPC
//! (`POST /a2a/jsonrpc`) and HTTP+JSON (`/a2a/v1`), where it exists on both.
//!
//! One module per area, one behaviour per test:
//! - `card`: the strict card, its ETag and 304, the Lucid card's interfaces;
//! - `versions`: the `A2A-Version` header;
//! - `callers`: the bearer token, and another token's tasks reading as not found;
//! - `messages`: `SendMessage`: the TCK agent's behaviours, contexts, artifacts, direct
//!   messages, rejection, a named skill's data;
//! - `tasks`: `returnImmediately`, `GetTask` and `historyLength`, `CancelTask` once and twice,
//!   unknown tasks;
//! - `turns`: input-required turns, and their bound (`MAX_TURNS`);
//! - `streams`: `SendStreamingMessage` and `SubscribeToTask`, in order and to the end;
//! - `listing`: `ListTasks` pages, filters and owners;
//! - `refusals`: the spec's error codes and HTTP statuses with their `google.rpc.ErrorInfo`
//!   for what the gateway does not do or take;
//! - `hostile_input`: hostile JSON-RPC and REST input answered without a 5xx;
//! - `worker_loss`: a stream whose worker is killed still ending `COMPLETED` on another
//!   worker, and a subscriber to a queued task told when a worker starts it.
//!
//! `support` holds the fixture ([`support::Cluster`]), the client of both bindings
//! ([`support::A2a`]) and the reading of replies and streams.
//!
//! Processes: each test starts its own Redis, worker(s) and gateway, and stops them on drop.

mod callers;
mod card;
mod hostile_input;
mod list_reads;
mod listing;
mod messages;
mod refusals;
mod streams;
mod support;
mod tasks;
mod turns;
mod versions;
mod worker_loss;
