//! What every listening binary of the cluster (`gateway`, the dev `facilitator`) and the
//! `worker` share about running as a process, so that none of them depends on another for it:
//!
//! - [`address`]: the unit a client address counts in (an IPv6 address by its /64) and the
//!   networks of trusted proxies;
//! - [`admin`]: the admin listener (`/metrics`, `/health`) of `--metrics-listen`, and the
//!   `/metrics` route a gateway mounts on its own listener;
//! - [`serve`]: the HTTP server loop: a deadline on each connection's first request head, bounds
//!   on header size and on open connections (in total and per client address), HTTP/2
//!   keep-alive pings, and a graceful drain;
//! - [`signal`]: waiting for SIGTERM or SIGINT, the one way every process is told to stop;
//! - [`redis`]: the `REDIS_*` settings of the gateway and the worker, as one clap struct mapped
//!   to the store's configuration once;
//! - [`secret`]: a secret setting (a Redis URL with a password, a key), redacted in every
//!   `Debug` print and hidden from `--help`.

pub mod address;
pub mod admin;
pub mod redis;
pub mod secret;
pub mod serve;
pub mod signal;
