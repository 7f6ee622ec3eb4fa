//! Test harness shared by the integration suites.
//!
//! - [`chaos`]: the chaos run of a whole cluster (the `chaos` binary and `tests/chaos.rs`);
//! - [`process`]: the workspace's `gateway`/`worker` binaries as real processes, signalled and
//!   stopped on drop;
//! - [`redis_server`]: a private `redis-server` on a free loopback port, stopped on drop;
//! - [`otlp`]: an in-process OTLP receiver (HTTP/protobuf and gRPC) collecting what services
//!   export;
//! - [`measure`]: the cluster benchmarks' shared measurements (Redis commandstats, process and
//!   machine CPU, quiet-machine waits, medians and percentiles, report output).
pub mod chaos;
pub mod measure;
pub mod otlp;
pub mod process;
pub mod redis_server;
