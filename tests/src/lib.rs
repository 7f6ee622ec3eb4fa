//! Test harness shared by the integration suites.
//!
//! - [`process`]: the workspace's `gateway`/`worker` binaries as real processes, signalled and
//!   stopped on drop;
//! - [`redis_server`]: a private `redis-server` on a free loopback port, stopped on drop.
pub mod process;
pub mod redis_server;
