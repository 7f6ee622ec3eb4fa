//! Test harness shared by the integration suites.
//!
//! - [`redis_server`]: a private `redis-server` on a free loopback port, stopped on drop.
pub mod redis_server;
