//! Test harness shared by the integration suites.
//!
//! - [`a2a`]: an A2A v1.0 client of both HTTP bindings (JSON-RPC, HTTP+JSON): requests with
//!   version and credentials, replies and errors read, event streams read as `StreamResponse`s;
//! - [`browser`]: a headless Chromium driven through a private chromedriver, for tests of the
//!   pages the gateway serves; both stopped on drop;
//! - [`cluster`]: a cluster of real processes (Redis, workers, gateways) built in one place, and
//!   the waits every multi-process suite shares (health, card, free ports);
//! - [`chaos`]: the chaos run of a whole cluster (the `chaos` binary and `tests/chaos/chaos.rs`);
//! - [`cut_proxy`]: a loopback TCP proxy that loses one reply on demand (a server that ran a
//!   command and died before answering);
//! - [`process`]: the workspace's `gateway`/`worker` binaries as real processes, signalled and
//!   stopped on drop;
//! - [`redis_server`]: a private `redis-server` on a free loopback port, stopped on drop;
//! - [`redis_cluster`]: a private Redis Cluster (masters and replicas, each a [`redis_server`]
//!   node) joined by `redis-cli --cluster create`, with failover helpers, stopped on drop;
//! - [`sse`]: reading the Lucid routes' event streams (`event:`/`data:` frames, JSON data);
//! - [`store_fixtures`]: a queued task and ids placed in a shard, for the store-level suites;
//! - [`paid`]: a paying cluster (Redis with AOF, the dev facilitator, a worker, two gateways)
//!   for the MPP and Sign-In-With-X suites;
//! - [`prometheus`]: a private Prometheus (Debian's `prometheus`) scraping the processes'
//!   `/metrics`, queried over its HTTP API, stopped on drop;
//! - [`otlp`]: an in-process OTLP receiver (HTTP/protobuf and gRPC) collecting what services
//!   export;
//! - [`measure`]: the cluster benchmarks' shared measurements (Redis commandstats, process and
//!   machine CPU, quiet-machine waits, medians and percentiles, report output).
/// The result every test and harness helper returns: any error, boxed, so `?` works on all of
/// them. (The store suites whose errors cross `tokio::spawn` keep a `Send + Sync` box.)
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub mod a2a;
pub mod browser;
pub mod chaos;
pub mod cluster;
pub mod cut_proxy;
pub mod hostile;
pub mod measure;
pub mod operator;
pub mod otlp;
pub mod paid;
pub mod process;
pub mod prometheus;
pub mod redis_cluster;
pub mod redis_server;
pub mod sse;
pub mod store_fixtures;
pub mod streams_spike;
pub mod webhook_receiver;
