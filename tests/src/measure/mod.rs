//! Measurement code shared by the cluster benchmarks (`tests/benches/e2e.rs`,
//! `tests/benches/report.rs` and `worker/benches/cluster.rs`), so that every part of
//! `scripts/bench-report` counts Redis commands, CPU and foreign load the same way:
//!
//! - [`commandstats`]: `INFO commandstats`/`cpu`/`stats` snapshots and their difference over a
//!   timed window, client round trips;
//! - [`redis_admin`]: what a bench asks Redis outside the timed window (`INFO` fields, the
//!   server's persistence, deleting a namespace);
//! - [`cpu`]: CPU ticks of processes and of the machine (`/proc`), waiting for a quiet machine;
//! - [`service`]: the service processes a bench starts, with their logs and CPU ticks;
//! - [`stats`]: median (min–max) over runs, percentiles, number formatting;
//! - [`env`]: a bench's settings from the environment;
//! - [`output`]: the `--bench` guard, machine facts and the JSON file a bench writes.

pub mod commandstats;
pub mod cpu;
pub mod env;
pub mod output;
pub mod redis_admin;
pub mod service;
pub mod stats;

/// The benches' error type: any error, with its message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`BoxError`].
pub type Res<T> = Result<T, BoxError>;
