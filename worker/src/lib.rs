//! The worker: hosts entrypoint handlers and runs tasks from the store.
//!
//! - [`handler`]: what a handler receives ([`handler::TaskContext`]) and returns;
//! - [`emitter`]: fenced progress and stream events from a running handler;
//! - [`entrypoint`]: entrypoint definitions (schemas, streaming, price) and the set a worker hosts;
//! - [`builtins`]: `echo`, `sleep`, `fail`, `count`, `summarize`, and the A2A TCK agent `tck`
//!   (only with `--a2a-tck-agent`);
//! - [`prices`]: `--price KEY=AMOUNT` parsed and applied to the hosted entrypoints;
//! - [`remote`]: `--agent URL`, the entrypoints of an agent speaking the Lucid HTTP profile;
//! - [`runtime`]: the claim loop, heartbeat, cancellation, recovery sweep and drain;
//! - [`config`]: settings, each a flag and an environment variable;
//! - [`host`]: the worker process (settings, logs, telemetry, `/metrics`, Redis, run, drain)
//!   as one call, which the `worker` binary is and an agent's program adds its entrypoints to.

pub mod builtins;
pub mod config;
pub mod emitter;
pub mod entrypoint;
pub mod handler;
pub mod host;
pub mod prices;
pub mod remote;
pub mod runtime;
