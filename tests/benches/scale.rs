//! Scale-out benchmark (issue 16, item 3): throughput of the worker side and of the whole
//! service end to end with S store shards on P Redis processes (`SxP`), next to S = 1 on one
//! plain redis-server (the deployment of today), to show how the Redis ceiling moves when the
//! store spreads over more Redis masters. On a small machine the Redis processes, the services
//! and the clients share the same cores, so the measured rate is the machine's; the bench also
//! reports the CPU Redis spends per task and projects from it the throughput per Redis core and
//! the ceiling of the P-node cluster (set by its busiest node), which hold on a bigger machine.
//!
//! Run it through `scripts/bench-scale`, which builds the release binaries and this bench first,
//! or directly (`cargo bench -p cluster-tests --bench scale`, with `target/release/{gateway,
//! worker}` built). Without `--bench` (as `cargo test --all-targets` runs it) it does nothing.
//!
//! For each configuration in `CONFIGS` (`plain` = S = 1 on one plain redis-server; `SxP` = S
//! shards on a Redis Cluster of P masters without replicas; `Sxplain` = S shards on one plain
//! server) the bench starts its own Redis (tests/src/redis_server.rs, redis_cluster.rs: free
//! loopback ports, never 6379, no persistence, every node stopped when the configuration ends)
//! and runs, `RUNS` times each, in a namespace of its own:
//!
//! - `drain` (the worker side): `N` queued no-op `echo` tasks are created through the store
//!   (untimed; `PRODUCERS` concurrent create loops, their rate is reported too), then `WORKERS`
//!   worker processes start (`WORKER_CONCURRENCY` each, `WORKER_ENTRYPOINTS=echo`). Timed from
//!   the moment the registry lists the first of them until the store counts no live task:
//!   tasks/s = N / that time; every CPU figure covers the same window.
//! - `e2e` (end to end): `GATEWAYS` gateway processes and `WORKERS` workers; after `WARMUP`
//!   untimed tasks, `CLIENTS` client loops in this process (spread over the gateways) run
//!   `E2E_N` tasks, each to its end: `E2E_MODE=invoke` (default) is one
//!   `POST /entrypoints/echo/invoke` per task, which answers with the result (the gateway creates
//!   the task in the store, a worker runs it, the gateway waits for its end); `E2E_MODE=tasks` is
//!   `POST /tasks` then its SSE subscription read to the terminal event, as a Lucid client does.
//!   tasks/s = completed / (last completion − start of the load).
//!
//! Placement: the sharded store puts shard i of namespace `ns` under a hash tag whose slot lies
//! in the i-th S-th of the slot range (`store::redis::shard_tag`; one shard keeps
//! `{ns}`), so S shards spread evenly over P masters whenever S is a multiple of P, and what is
//! namespace-wide (worker registry, layout stamp, idempotency records) under `{ns}`. Unless
//! `NAMESPACE` is set, the bench still checks the placement of each run's namespace (see
//! [`pick_namespace`]) and says so when the shards do not spread (S not a multiple of P).
//! `NAMESPACE=tc` measures the default namespace. The table shows the planned shard -> node map
//! and the keys each node holds after the preload / the load, which is how a run shows whether
//! the binaries shard at all: binaries that do not know `REDIS_SHARDS` (it is passed to them
//! either way) keep every key on one node.
//!
//! Measured over the timed window: Redis CPU = utime + stime of every redis-server node
//! (`/proc/<pid>/stat`); per task, summed over the nodes and of the busiest node; % core;
//! projections: tasks/s per Redis core = 1e6 / (Redis CPU µs per task), and the Redis ceiling of
//! this layout = 1e6 / (busiest node's CPU µs per task), reached when that node saturates one
//! core. CPU per task of the workers, the gateways and this bench (the clients; in `drain` its
//! polling only), the machine's busy time (% of all cores: near 100 the machine, not Redis, sets
//! the rate), soft interrupts (loopback networking) and others' processes ("foreign", a run above
//! `FOREIGN_MAX` is marked ⚠). Redis commands per task: `INFO commandstats` of every node (reset
//! just before the window; in `drain` the worker start-up and the bench's own polling, a SCARD or
//! so every 10 ms, are included, in `e2e` the warm-up is not).
//!
//! Environment:
//! - `CONFIGS` (plain,1x1,2x2,4x2,4x4),
//!   `SCENARIOS` (drain,e2e), `RUNS` (3, medians reported);
//! - `N` (50000, drain), `PRODUCERS` (16), `E2E_N` (10000), `E2E_MODE` (invoke | tasks),
//!   `CLIENTS` (64), `WARMUP` (2 × CLIENTS), `WORKERS` (2), `WORKER_CONCURRENCY` (64),
//!   `GATEWAYS` (2);
//! - `NAMESPACE` (unset: picked per run as above), `SERVICE_RUST_LOG` (warn);
//! - `QUIET_PCT` (15), `QUIET_WAIT_S` (30), `FOREIGN_MAX` (30, % of one core), `RETRIES` (1: a
//!   run above FOREIGN_MAX is run again that many times), `RUN_TIMEOUT_S` (300); `GATEWAY_BIN`, `WORKER_BIN` (default `target/release/{gateway,worker}`);
//!   `BENCH_COMMIT` (what the binaries were built from, for the report), `BENCH_OUT` (JSON
//!   file), `BENCH_LABEL`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use client::{AgentCard, Client, ClientOptions, InvokeOptions, SendOptions, generate_token};
use harness::measure::commandstats::{RedisSnap, client_star, reset_stats};
use harness::measure::cpu::{CpuSnap, clock_ticks, process_ticks, run_again, wait_quiet};
use harness::measure::env::{bin_from_env, env_list, env_or, require_bins};
use harness::measure::output::{LogDir, bench_requested, cpu_model, cpus, loadavg, write_json};
use harness::measure::redis_admin::{admin_connection, server_facts};
use harness::measure::service::{BenchProc, terminate_all};
use harness::measure::stats::{Stat, percentile, stat, thousands};
use harness::measure::{BoxError, Res};
use harness::redis_cluster::{ClusterOptions, RedisCluster};
use harness::redis_server::RedisServer;
use protocol::TaskStatus;
use protocol::token::AccessToken;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{Admission, Invocation, NewTask, RedisStore, RedisStoreConfig, TaskStore};
use tokio::task::JoinSet;

/// Never refuse a create for capacity: the bench measures throughput, not admission control.
const MAX_TASKS: u64 = 100_000_000;
/// Bound on things that take milliseconds when all is well (a process starting, a worker
/// registering, the last tasks ending after the window).
const PATIENCE: Duration = Duration::from_secs(30);
const REGISTRY_POLL: Duration = Duration::from_millis(2);
const LIVE_POLL: Duration = Duration::from_millis(10);
const POLL: Duration = Duration::from_millis(20);
/// Above this share of one core the busiest Redis node counts as the bound of a run: a
/// single-threaded Redis whose clients wait on its replies rarely shows a full core, as part of
/// each cycle is the round trip (its network time is soft-interrupt time, not its own).
const REDIS_SATURATED_PCT: f64 = 75.0;
/// Above this share of all cores the machine counts as the bound.
const MACHINE_SATURATED_PCT: f64 = 85.0;
/// Namespaces tried per run for an even placement of the shards.
const PLACEMENT_TRIES: usize = 200;

// ----- settings -----

/// What a configuration runs on: `shards` store shards on `masters` Redis Cluster masters, or on
/// one plain redis-server (`masters` = None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    shards: u16,
    masters: Option<usize>,
}

impl Layout {
    fn nodes(&self) -> usize {
        self.masters.unwrap_or(1)
    }
}

impl FromStr for Layout {
    type Err = String;

    fn from_str(text: &str) -> Result<Layout, String> {
        let text = text.trim();
        let (shards, masters) = match text.split_once('x') {
            None if text == "plain" => ("1", "plain"),
            None => return Err(format!("{text:?}: expected plain, SxP or Sxplain")),
            Some(parts) => parts,
        };
        let shards: u16 = shards
            .parse()
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| format!("{text:?}: shards must be a positive number"))?;
        let masters = match masters {
            "plain" => None,
            p => Some(
                p.parse::<usize>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| format!("{text:?}: masters must be a positive number"))?,
            ),
        };
        Ok(Layout { shards, masters })
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.masters {
            None if self.shards == 1 => write!(f, "plain"),
            None => write!(f, "{}xplain", self.shards),
            Some(p) => write!(f, "{}x{p}", self.shards),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum E2eMode {
    Invoke,
    Tasks,
}

impl FromStr for E2eMode {
    type Err = String;

    fn from_str(text: &str) -> Result<E2eMode, String> {
        match text {
            "invoke" => Ok(E2eMode::Invoke),
            "tasks" => Ok(E2eMode::Tasks),
            other => Err(format!("{other:?}: invoke or tasks")),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Settings {
    #[serde(skip)]
    configs: Vec<Layout>,
    config_names: Vec<String>,
    scenarios: Vec<String>,
    runs: usize,
    n: usize,
    producers: usize,
    e2e_n: usize,
    e2e_mode: E2eMode,
    clients: usize,
    warmup: usize,
    workers: usize,
    worker_concurrency: usize,
    gateways: usize,
    namespace: Option<String>,
    service_rust_log: String,
    quiet_pct: f64,
    quiet_wait_s: u64,
    foreign_max: f64,
    retries: usize,
    run_timeout_s: u64,
    gateway_bin: PathBuf,
    worker_bin: PathBuf,
    commit: String,
    label: String,
    #[serde(skip)]
    out: Option<String>,
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let configs: Vec<Layout> = env_list("CONFIGS", "plain,1x1,2x2,4x2,4x4")?;
        let clients = env_or("CLIENTS", 64)?;
        let settings = Settings {
            config_names: configs.iter().map(Layout::to_string).collect(),
            configs,
            scenarios: env_list("SCENARIOS", "drain,e2e")?,
            runs: env_or("RUNS", 3)?,
            n: env_or("N", 50_000)?,
            producers: env_or("PRODUCERS", 16)?,
            e2e_n: env_or("E2E_N", 10_000)?,
            e2e_mode: env_or("E2E_MODE", E2eMode::Invoke)?,
            clients,
            warmup: env_or("WARMUP", 2 * clients)?,
            workers: env_or("WORKERS", 2)?,
            worker_concurrency: env_or("WORKER_CONCURRENCY", 64)?,
            gateways: env_or("GATEWAYS", 2)?,
            namespace: std::env::var("NAMESPACE")
                .ok()
                .filter(|ns| !ns.trim().is_empty()),
            service_rust_log: env_or("SERVICE_RUST_LOG", String::from("warn"))?,
            quiet_pct: env_or("QUIET_PCT", 15.0)?,
            quiet_wait_s: env_or("QUIET_WAIT_S", 30)?,
            foreign_max: env_or("FOREIGN_MAX", 30.0)?,
            retries: env_or("RETRIES", 1)?,
            run_timeout_s: env_or("RUN_TIMEOUT_S", 300)?,
            gateway_bin: bin_from_env("GATEWAY_BIN", "gateway"),
            worker_bin: bin_from_env("WORKER_BIN", "worker"),
            commit: env_or("BENCH_COMMIT", String::from("?"))?,
            label: env_or("BENCH_LABEL", String::from("default"))?,
            out: std::env::var("BENCH_OUT").ok().filter(|p| !p.is_empty()),
        };
        if settings.runs == 0
            || settings.n == 0
            || settings.producers == 0
            || settings.e2e_n == 0
            || settings.clients == 0
            || settings.workers == 0
            || settings.worker_concurrency == 0
            || settings.gateways == 0
        {
            return Err("RUNS, N, PRODUCERS, E2E_N, CLIENTS, WORKERS, WORKER_CONCURRENCY and GATEWAYS must be positive".into());
        }
        if let Some(unknown) = settings
            .scenarios
            .iter()
            .find(|s| !["drain", "e2e"].contains(&s.as_str()))
        {
            return Err(format!("unknown scenario {unknown:?} (drain, e2e)").into());
        }
        require_bins(
            &[&settings.gateway_bin, &settings.worker_bin],
            "`cargo build --release -p gateway -p taskcluster-worker`, or set GATEWAY_BIN / WORKER_BIN",
        )?;
        Ok(settings)
    }

    fn runs_scenario(&self, name: &str) -> bool {
        self.scenarios.iter().any(|s| s == name)
    }
}

// ----- Redis of one configuration -----

enum Server {
    Plain(RedisServer),
    Cluster(RedisCluster),
}

/// One node: its process (for its CPU) and the bench's own connection to it (INFO, CONFIG,
/// FLUSHALL, DBSIZE: node-local commands, sent to each node).
struct Node {
    pid: u32,
    admin: MultiplexedConnection,
}

/// The Redis of a configuration, stopped on drop (the harness kills every node).
struct Redis {
    server: Server,
    nodes: Vec<Node>,
}

impl Redis {
    async fn start(layout: Layout) -> Res<Redis> {
        // The harness' calls are synchronous and bounded (a few seconds at most).
        let server = match layout.masters {
            None => Server::Plain(RedisServer::start()?),
            // The harness runs cluster nodes with AOF (its failover tests need it); the bench
            // compares with a plain server without persistence, so the nodes go without too.
            Some(masters) => Server::Cluster(RedisCluster::start_with(
                ClusterOptions::new(masters, 0)
                    .arg("--appendonly")
                    .arg("no"),
            )?),
        };
        let servers: Vec<&RedisServer> = match &server {
            Server::Plain(server) => vec![server],
            Server::Cluster(cluster) => (0..cluster.len())
                .map(|i| cluster.node(i))
                .collect::<Result<_, _>>()?,
        };
        let mut nodes = Vec::new();
        for node in servers {
            nodes.push(Node {
                pid: node.pid().ok_or("a redis node is not running")?,
                admin: admin_connection(&node.url()).await?,
            });
        }
        Ok(Redis { server, nodes })
    }

    /// How the services and the store find this Redis.
    fn service_env(&self) -> (&'static str, String) {
        match &self.server {
            Server::Plain(server) => ("REDIS_URL", server.url()),
            Server::Cluster(cluster) => ("REDIS_CLUSTER_URLS", cluster.urls().join(",")),
        }
    }

    async fn store(&self, namespace: &str, shards: u16) -> Res<RedisStore> {
        let mut config = match &self.server {
            Server::Plain(server) => RedisStoreConfig::new(server.url()),
            Server::Cluster(cluster) => {
                let urls = cluster.urls();
                let mut config = RedisStoreConfig::new(urls.first().cloned().unwrap_or_default());
                config.cluster_urls = urls;
                config
            }
        };
        config.namespace = namespace.to_owned();
        config.max_tasks = MAX_TASKS;
        // The preload creates every task for one owner: the per-owner and retained bounds
        // (issue P13) are admission policy, not what this bench measures.
        config.max_live_per_owner = 0;
        config.max_retained_per_owner = 0;
        config.max_retained = 0;
        config.timeout = Duration::from_secs(10);
        // The same count as the services' REDIS_SHARDS: the namespace's layout stamp refuses
        // a process with another.
        config.shards = shards;
        Ok(RedisStore::connect(config).await?)
    }

    /// Index of the node serving hash tag `tag` (0 on a plain server).
    fn node_of_tag(&self, tag: &str) -> Res<usize> {
        match &self.server {
            Server::Plain(_) => Ok(0),
            Server::Cluster(cluster) => Ok(cluster.master_of_key(&format!("{{{tag}}}"))?),
        }
    }

    fn ticks(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| process_ticks(&n.pid.to_string()).unwrap_or(0))
            .collect()
    }

    async fn reset_stats(&mut self) -> Res<()> {
        for node in &mut self.nodes {
            reset_stats(&mut node.admin).await?;
        }
        Ok(())
    }

    async fn snaps(&mut self) -> Res<Vec<RedisSnap>> {
        let mut snaps = Vec::new();
        for node in &mut self.nodes {
            snaps.push(RedisSnap::take(&mut node.admin).await?);
        }
        Ok(snaps)
    }

    async fn dbsizes(&mut self) -> Res<Vec<u64>> {
        let mut sizes = Vec::new();
        for node in &mut self.nodes {
            sizes.push(redis::cmd("DBSIZE").query_async(&mut node.admin).await?);
        }
        Ok(sizes)
    }

    /// Empties every node between runs: the Redis is the bench's own, and whatever key layout
    /// the store uses goes with it.
    async fn flush(&mut self) -> Res<()> {
        for node in &mut self.nodes {
            let _: () = redis::cmd("FLUSHALL")
                .arg("SYNC")
                .query_async(&mut node.admin)
                .await?;
        }
        Ok(())
    }
}

/// Commands run between two snapshots, summed over the nodes (the bench's INFO/CONFIG left
/// out): command -> (calls, µs inside Redis).
fn commands_between(before: &[RedisSnap], after: &[RedisSnap]) -> BTreeMap<String, (u64, u64)> {
    let mut total: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (b, a) in before.iter().zip(after) {
        let diff = a.since(b, |_| 0);
        for (name, calls) in diff.calls {
            let usec = diff.usec.get(&name).copied().unwrap_or(0);
            let entry = total.entry(name).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
    }
    total
}

// ----- namespaces and placement -----

/// The hash tag of shard `shard` of `namespace`, as the sharded store names it
/// (`store::redis::shard_tag`); with one shard the namespace keeps its single tag.
fn shard_tag(namespace: &str, shard: u16, shards: u16) -> String {
    store::redis::shard_tag(namespace, usize::from(shard), usize::from(shards))
}

/// The node of every shard of `namespace`.
fn placement(redis: &Redis, namespace: &str, shards: u16) -> Res<Vec<usize>> {
    (0..shards)
        .map(|shard| redis.node_of_tag(&shard_tag(namespace, shard, shards)))
        .collect()
}

/// Whether the shards are spread as evenly as they can be: node loads differ by one at most.
fn even(nodes_of_shards: &[usize], nodes: usize) -> bool {
    let mut counts = vec![0usize; nodes];
    for &node in nodes_of_shards {
        if let Some(count) = counts.get_mut(node) {
            *count += 1;
        }
    }
    let most = counts.iter().copied().max().unwrap_or(0);
    let least = counts.iter().copied().min().unwrap_or(0);
    most - least <= 1
}

/// The run's namespace and where its shards live: `NAMESPACE` as given, else the first of
/// `scale-<tag>-<k>` whose shards spread evenly over the nodes (with shard tags chosen by slot,
/// the first one does whenever S is a multiple of P). When none does, the first namespace is
/// used as it falls, and the log and the table show the placement.
fn pick_namespace(
    settings: &Settings,
    redis: &Redis,
    layout: Layout,
    tag: &str,
) -> Res<(String, Vec<usize>)> {
    if let Some(namespace) = &settings.namespace {
        let nodes = placement(redis, namespace, layout.shards)?;
        return Ok((namespace.clone(), nodes));
    }
    let name = |k: usize| format!("scale-{tag}-{k}");
    for k in 0..PLACEMENT_TRIES {
        let nodes = placement(redis, &name(k), layout.shards)?;
        if even(&nodes, layout.nodes()) {
            return Ok((name(k), nodes));
        }
    }
    let nodes = placement(redis, &name(0), layout.shards)?;
    eprintln!(
        "  {layout}: no namespace among {PLACEMENT_TRIES} spreads the shards evenly; running with shards on nodes {nodes:?}"
    );
    Ok((name(0), nodes))
}

// ----- service processes -----

/// What every service of a run is told: where Redis is, the namespace and the shards.
fn common_env(
    settings: &Settings,
    redis: &Redis,
    namespace: &str,
    shards: u16,
) -> Vec<(&'static str, String)> {
    vec![
        redis.service_env(),
        ("REDIS_NAMESPACE", namespace.to_owned()),
        ("REDIS_SHARDS", shards.to_string()),
        ("RUST_LOG", settings.service_rust_log.clone()),
    ]
}

fn spawn_workers(
    settings: &Settings,
    redis: &Redis,
    log_dir: &Path,
    namespace: &str,
    shards: u16,
) -> Res<Vec<BenchProc>> {
    let mut workers = Vec::new();
    for w in 0..settings.workers {
        let id = format!("{namespace}-w{w}");
        let mut envs = common_env(settings, redis, namespace, shards);
        envs.extend([
            ("WORKER_ID", id.clone()),
            (
                "WORKER_CONCURRENCY",
                settings.worker_concurrency.to_string(),
            ),
            ("WORKER_ENTRYPOINTS", String::from("echo")),
        ]);
        workers.push(BenchProc::service(
            &settings.worker_bin,
            &id,
            log_dir,
            &envs,
        )?);
    }
    Ok(workers)
}

/// A gateway on a free port, and its base URL. The port is free when probed; should another
/// process take it before the gateway binds, the gateway exits and another port is tried.
async fn spawn_gateway(
    settings: &Settings,
    redis: &Redis,
    log_dir: &Path,
    namespace: &str,
    shards: u16,
    g: usize,
) -> Res<(BenchProc, String)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut envs = common_env(settings, redis, namespace, shards);
        envs.extend([
            ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("MAX_TASKS", MAX_TASKS.to_string()),
            // Every client is on loopback: the per-address bounds (issue P13) would throttle
            // the load itself, so the bench lifts them.
            ("RATE_PER_ADDRESS", "0".to_owned()),
            ("MAX_LIVE_PER_ADDRESS", "0".to_owned()),
        ]);
        let name = format!("{namespace}-g{g}");
        let mut gateway = BenchProc::service(&settings.gateway_bin, &name, log_dir, &envs)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        match gateway.check_alive() {
            Ok(()) => return Ok((gateway, format!("http://127.0.0.1:{port}"))),
            Err(err) if attempt >= 5 => return Err(err),
            Err(_) => continue,
        }
    }
}

fn check_alive(procs: &mut [BenchProc]) -> Res<()> {
    for proc in procs {
        proc.check_alive()?;
    }
    Ok(())
}

/// How many of `procs` (workers named by their id) the registry lists.
async fn listed(registry: &RedisRegistry, procs: &[BenchProc]) -> Res<usize> {
    let entries = registry.workers().await?;
    Ok(procs
        .iter()
        .filter(|p| entries.iter().any(|e| e.worker_id == p.name()))
        .count())
}

/// Waits until the store counts no live task.
async fn wait_idle(store: &RedisStore, procs: &mut [BenchProc]) -> Res<()> {
    let give_up = Instant::now() + PATIENCE;
    loop {
        check_alive(procs)?;
        let live = store.live_count().await?;
        if live == 0 {
            return Ok(());
        }
        if Instant::now() > give_up {
            return Err(format!("{live} tasks still live").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

// ----- CPU over a window -----

/// CPU counters at one instant.
struct Snapshot {
    at: Instant,
    redis: Vec<u64>,
    workers: u64,
    gateways: u64,
    cpu: CpuSnap,
}

fn snapshot(redis: &Redis, workers: &[BenchProc], gateways: &[BenchProc]) -> Res<Snapshot> {
    Ok(Snapshot {
        at: Instant::now(),
        redis: redis.ticks(),
        workers: workers.iter().map(BenchProc::ticks).sum(),
        gateways: gateways.iter().map(BenchProc::ticks).sum(),
        cpu: CpuSnap::now()?,
    })
}

/// What the processes used between two snapshots, in CPU seconds (and % of one core).
#[derive(Debug, Clone, Serialize)]
struct Usage {
    wall_s: f64,
    redis_node_cpu_s: Vec<f64>,
    worker_cpu_s: f64,
    gateway_cpu_s: f64,
    /// This process: the clients in `e2e`, the polling in `drain`.
    bench_cpu_s: f64,
    /// Busy time of the whole machine (soft interrupts included), % of one core.
    machine_busy_pct: f64,
    softirq_pct: f64,
    /// Processes other than Redis, the services and this bench, % of one core.
    foreign_pct: f64,
}

fn usage(a: &Snapshot, b: &Snapshot, ticks: f64) -> Usage {
    let wall_s = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let s = |t0: u64, t1: u64| t1.saturating_sub(t0) as f64 / ticks;
    let redis_node_cpu_s: Vec<f64> = a
        .redis
        .iter()
        .zip(&b.redis)
        .map(|(&x, &y)| s(x, y))
        .collect();
    let worker_cpu_s = s(a.workers, b.workers);
    let gateway_cpu_s = s(a.gateways, b.gateways);
    let bench_cpu_s = s(a.cpu.own, b.cpu.own);
    let busy_s = s(a.cpu.busy, b.cpu.busy);
    let measured =
        redis_node_cpu_s.iter().sum::<f64>() + worker_cpu_s + gateway_cpu_s + bench_cpu_s;
    Usage {
        wall_s,
        machine_busy_pct: s(a.cpu.busy_with_softirq(), b.cpu.busy_with_softirq()) / wall_s * 100.0,
        softirq_pct: s(a.cpu.softirq, b.cpu.softirq) / wall_s * 100.0,
        foreign_pct: ((busy_s - measured) / wall_s * 100.0).max(0.0),
        redis_node_cpu_s,
        worker_cpu_s,
        gateway_cpu_s,
        bench_cpu_s,
    }
}

// ----- one run -----

#[derive(Debug, Clone, Serialize)]
struct Run {
    scenario: &'static str,
    layout: String,
    run: usize,
    namespace: String,
    /// The node of each shard's hash tag (as planned).
    shard_nodes: Vec<usize>,
    /// The node of the namespace-wide tag `{ns}` (registry, layout stamp, idempotency records).
    namespace_node: usize,
    /// DBSIZE of each node once the tasks exist (after the preload, or after the load).
    keys_per_node: Vec<u64>,
    tasks: usize,
    tasks_per_s: f64,
    /// drain: spawn -> first worker listed.
    startup_ms: Option<f64>,
    /// drain: creates/s of the untimed preload.
    preload_creates_per_s: Option<f64>,
    /// e2e: per-task latency, ms.
    latency_ms: Option<BTreeMap<&'static str, f64>>,
    usage: Usage,
    /// Every node's commandstats over the window: command -> (calls, µs inside Redis).
    commands: BTreeMap<String, (u64, u64)>,
    quiet_before_pct: f64,
    contaminated: bool,
}

impl Run {
    fn per_task(&self, value: f64) -> f64 {
        value / self.tasks.max(1) as f64
    }

    fn us_per_task(&self, cpu_s: f64) -> f64 {
        self.per_task(cpu_s * 1e6)
    }

    fn redis_commands(&self) -> u64 {
        self.commands.values().map(|(calls, _)| calls).sum()
    }

    /// Time inside Redis commands (commandstats µs), the work proper; the rest of Redis's CPU
    /// is its event loop and system calls, which shrink per task as a node gets busier.
    fn command_usec(&self) -> u64 {
        self.commands.values().map(|(_, usec)| usec).sum()
    }

    fn redis_cpu_s(&self) -> f64 {
        self.usage.redis_node_cpu_s.iter().sum()
    }

    fn hottest_cpu_s(&self) -> f64 {
        self.usage
            .redis_node_cpu_s
            .iter()
            .copied()
            .fold(0.0, f64::max)
    }

    fn log(&self) {
        eprintln!(
            "  {} {} run {}: {} tasks/s; Redis {:.1} µs/task (busiest node {:.1}, nodes at {} % core), workers {:.1}, gateways {:.1}, bench {:.1} µs/task; machine {:.0}% of a core (softirq {:.0}%, others {:.0}%); {:.1} Redis cmds/task; shards on nodes {:?}, keys per node {:?}",
            self.layout,
            self.scenario,
            self.run,
            thousands(self.tasks_per_s),
            self.us_per_task(self.redis_cpu_s()),
            self.us_per_task(self.hottest_cpu_s()),
            self.usage
                .redis_node_cpu_s
                .iter()
                .map(|s| format!("{:.0}", s / self.usage.wall_s * 100.0))
                .collect::<Vec<_>>()
                .join("/"),
            self.us_per_task(self.usage.worker_cpu_s),
            self.us_per_task(self.usage.gateway_cpu_s),
            self.us_per_task(self.usage.bench_cpu_s),
            self.usage.machine_busy_pct,
            self.usage.softirq_pct,
            self.usage.foreign_pct,
            self.per_task(self.redis_commands() as f64),
            self.shard_nodes,
            self.keys_per_node,
        );
    }
}

/// Everything a run needs besides its own settings.
struct Ctx<'a> {
    settings: &'a Settings,
    log_dir: &'a Path,
    ticks: f64,
}

fn new_task(task_id: String, owner: &protocol::token::OwnerHash) -> NewTask {
    NewTask {
        task_id,
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: String::from("echo"),
            input: json!(null),
            context_id: None,
            metadata: None,
            trace_context: Default::default(),
        },
        admission: Admission::Queued,
        max_attempts: 3,
        retention: None,
        source: None,
        private_owner: false,
    }
}

/// Creates `n` queued `echo` tasks with `producers` concurrent loops; returns creates/s.
async fn preload(store: &RedisStore, n: usize, producers: usize) -> Res<f64> {
    let owner = AccessToken::generate().owner_hash();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut loops: JoinSet<Res<()>> = JoinSet::new();
    for _ in 0..producers {
        let store = store.clone();
        let next = next.clone();
        let owner = owner.clone();
        loops.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                store.create(new_task(format!("t{i}"), &owner)).await?;
            }
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined??;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let queued = store.queue_depth("echo").await?;
    if queued != n as u64 {
        return Err(format!("preloaded {queued} tasks, wanted {n}").into());
    }
    Ok(rate)
}

async fn quiet(ctx: &Ctx<'_>) -> Res<f64> {
    wait_quiet(
        ctx.settings.quiet_pct,
        ctx.settings.quiet_wait_s,
        ctx.ticks,
        |cpu| cpu.busy,
    )
    .await
}

async fn drain_run(ctx: &Ctx<'_>, redis: &mut Redis, layout: Layout, run: usize) -> Res<Run> {
    let settings = ctx.settings;
    let (namespace, shard_nodes) =
        pick_namespace(settings, redis, layout, &format!("d{layout}r{run}"))?;
    let store = redis.store(&namespace, layout.shards).await?;
    let registry = RedisRegistry::new(&store);
    let preload_rate = preload(&store, settings.n, settings.producers).await?;
    let keys_per_node = redis.dbsizes().await?;
    let quiet_before_pct = quiet(ctx).await?;

    redis.reset_stats().await?;
    let commands0 = redis.snaps().await?;
    let spawned = Instant::now();
    let mut workers = spawn_workers(settings, redis, ctx.log_dir, &namespace, layout.shards)?;
    let result = async {
        let give_up = spawned + Duration::from_secs(settings.run_timeout_s);
        // Work starts when the first worker is listed (it registers just before fetching).
        let start = loop {
            check_alive(&mut workers)?;
            if listed(&registry, &workers).await? > 0 {
                break snapshot(redis, &workers, &[])?;
            }
            if Instant::now() > give_up {
                return Err::<_, BoxError>("no worker was listed".into());
            }
            tokio::time::sleep(REGISTRY_POLL).await;
        };
        let end = loop {
            check_alive(&mut workers)?;
            if store.live_count().await? == 0 {
                break snapshot(redis, &workers, &[])?;
            }
            if Instant::now() > give_up {
                let live = store.live_count().await?;
                return Err(format!("run timed out with {live} tasks live").into());
            }
            tokio::time::sleep(LIVE_POLL).await;
        };
        Ok((start, end))
    }
    .await;
    let commands1 = redis.snaps().await;
    terminate_all(&mut workers, Duration::from_secs(10)).await;
    let (start, end) = result?;
    let commands1 = commands1?;

    let queued = store.queue_depth("echo").await?;
    if queued != 0 {
        return Err(format!("{queued} tasks still queued after the drain").into());
    }
    for i in [0, settings.n / 2, settings.n - 1] {
        let stored = store
            .get(&format!("t{i}"))
            .await?
            .ok_or_else(|| format!("task t{i} missing"))?;
        if stored.task.status != TaskStatus::Completed {
            return Err(format!("task t{i}: status {}", stored.task.status).into());
        }
    }
    store.close().await;
    redis.flush().await?;

    let usage = usage(&start, &end, ctx.ticks);
    Ok(Run {
        scenario: "drain",
        layout: layout.to_string(),
        run,
        namespace_node: redis.node_of_tag(&namespace)?,
        namespace,
        shard_nodes,
        keys_per_node,
        tasks: settings.n,
        tasks_per_s: settings.n as f64 / usage.wall_s,
        startup_ms: Some(start.at.duration_since(spawned).as_secs_f64() * 1e3),
        preload_creates_per_s: Some(preload_rate),
        latency_ms: None,
        contaminated: usage.foreign_pct > settings.foreign_max,
        usage,
        commands: commands_between(&commands0, &commands1),
        quiet_before_pct,
    })
}

/// One task as a client runs it; returns whether it completed.
async fn one_task(
    mode: E2eMode,
    client: &Client,
    card: &AgentCard,
    token: &str,
    input: &Value,
) -> Res<bool> {
    match mode {
        E2eMode::Invoke => {
            let result = client
                .invoke(card, "echo", input, &InvokeOptions::default())
                .await?;
            Ok(result.status == "succeeded")
        }
        E2eMode::Tasks => {
            let access = client
                .send_message(
                    card,
                    "echo",
                    input,
                    SendOptions {
                        access_token: Some(token.to_owned()),
                        ..SendOptions::default()
                    },
                )
                .await?;
            let mut events = client.subscribe_task(card, &access.task_id, token).await?;
            let mut terminal = None;
            // Read to the end of the stream (the gateway ends it after the terminal event), so
            // that the connection goes back to the pool instead of being closed.
            while let Some(event) = events.next().await? {
                if terminal.is_none() {
                    terminal = event.data.status.filter(|s| s.is_terminal());
                }
            }
            let status = terminal.ok_or("the subscription ended without a terminal event")?;
            Ok(status == TaskStatus::Completed)
        }
    }
}

#[derive(Debug, Default)]
struct LoadResult {
    latencies_ms: Vec<f64>,
    last_done: Option<Instant>,
    not_completed: usize,
    errors: usize,
    first_error: Option<String>,
}

/// `n` tasks through `settings.clients` concurrent loops, loop j on gateway j mod G, each loop
/// with its own access token.
async fn load(
    settings: &Settings,
    client: &Client,
    cards: &[Arc<AgentCard>],
    n: usize,
    deadline: Instant,
) -> Res<LoadResult> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut loops: JoinSet<LoadResult> = JoinSet::new();
    for j in 0..settings.clients.min(n) {
        let client = client.clone();
        let card = cards[j % cards.len()].clone();
        let next = next.clone();
        let token = generate_token();
        let mode = settings.e2e_mode;
        loops.spawn(async move {
            let mut result = LoadResult::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || Instant::now() > deadline {
                    return result;
                }
                let began = Instant::now();
                match one_task(mode, &client, &card, &token, &json!({ "i": i })).await {
                    Ok(completed) => {
                        let done = Instant::now();
                        result
                            .latencies_ms
                            .push(done.duration_since(began).as_secs_f64() * 1e3);
                        result.last_done = result.last_done.max(Some(done));
                        if !completed {
                            result.not_completed += 1;
                        }
                    }
                    Err(err) => {
                        result.errors += 1;
                        result.first_error.get_or_insert_with(|| err.to_string());
                    }
                }
            }
        });
    }
    let mut total = LoadResult::default();
    while let Some(joined) = loops.join_next().await {
        let part = joined?;
        total.latencies_ms.extend(part.latencies_ms);
        total.last_done = total.last_done.max(part.last_done);
        total.not_completed += part.not_completed;
        total.errors += part.errors;
        if total.first_error.is_none() {
            total.first_error = part.first_error;
        }
    }
    if total.errors > 0 || total.not_completed > 0 {
        return Err(format!(
            "{} requests failed and {} tasks did not complete; first error: {}",
            total.errors,
            total.not_completed,
            total.first_error.unwrap_or_default()
        )
        .into());
    }
    if total.latencies_ms.len() < n {
        return Err(format!(
            "the run passed its deadline with {} of {n} tasks done",
            total.latencies_ms.len()
        )
        .into());
    }
    Ok(total)
}

fn latency_stats(mut values: Vec<f64>) -> BTreeMap<&'static str, f64> {
    values.sort_by(f64::total_cmp);
    BTreeMap::from([
        ("p50", percentile(&values, 50.0)),
        ("p90", percentile(&values, 90.0)),
        ("p99", percentile(&values, 99.0)),
        ("max", values.last().copied().unwrap_or(0.0)),
    ])
}

async fn e2e_run(ctx: &Ctx<'_>, redis: &mut Redis, layout: Layout, run: usize) -> Res<Run> {
    let settings = ctx.settings;
    let (namespace, shard_nodes) =
        pick_namespace(settings, redis, layout, &format!("e{layout}r{run}"))?;
    let store = redis.store(&namespace, layout.shards).await?;
    let registry = RedisRegistry::new(&store);
    let mut workers = spawn_workers(settings, redis, ctx.log_dir, &namespace, layout.shards)?;
    let mut gateways = Vec::new();
    let mut bases = Vec::new();
    for g in 0..settings.gateways {
        let (gateway, base) =
            spawn_gateway(settings, redis, ctx.log_dir, &namespace, layout.shards, g).await?;
        gateways.push(gateway);
        bases.push(base);
    }
    let result = async {
        let client = Client::new(ClientOptions::default())?;
        // Ready: the registry lists every worker and every gateway's card lists `echo`.
        let give_up = Instant::now() + PATIENCE;
        let mut cards = Vec::new();
        while cards.len() < bases.len() {
            check_alive(&mut workers)?;
            check_alive(&mut gateways)?;
            if listed(&registry, &workers).await? == workers.len()
                && let Some(base) = bases.get(cards.len())
                && let Ok(card) = client.fetch_card(base).await
                && card.entrypoints.contains_key("echo")
            {
                cards.push(Arc::new(card));
                continue;
            }
            if Instant::now() > give_up {
                return Err::<_, BoxError>(
                    format!(
                        "the services never came up; gateway log:\n{}",
                        gateways
                            .first()
                            .map(BenchProc::log_tail)
                            .unwrap_or_default()
                    )
                    .into(),
                );
            }
            tokio::time::sleep(POLL).await;
        }
        let deadline = Instant::now() + Duration::from_secs(settings.run_timeout_s);
        if settings.warmup > 0 {
            load(settings, &client, &cards, settings.warmup, deadline).await?;
            wait_idle(&store, &mut workers).await?;
        }
        let quiet_before_pct = quiet(ctx).await?;
        redis.reset_stats().await?;
        let commands0 = redis.snaps().await?;
        let start = snapshot(redis, &workers, &gateways)?;
        let result = load(settings, &client, &cards, settings.e2e_n, deadline).await?;
        let mut end = snapshot(redis, &workers, &gateways)?;
        // The window ends with the last completion (the snapshot follows it within a poll).
        end.at = result.last_done.unwrap_or(end.at);
        let commands1 = redis.snaps().await?;
        check_alive(&mut workers)?;
        check_alive(&mut gateways)?;
        wait_idle(&store, &mut workers).await?;
        let keys_per_node = redis.dbsizes().await?;
        Ok((
            start,
            end,
            result,
            commands0,
            commands1,
            keys_per_node,
            quiet_before_pct,
        ))
    }
    .await;
    terminate_all(&mut gateways, Duration::from_secs(10)).await;
    terminate_all(&mut workers, Duration::from_secs(10)).await;
    let (start, end, result, commands0, commands1, keys_per_node, quiet_before_pct) = result?;
    store.close().await;
    redis.flush().await?;

    let usage = usage(&start, &end, ctx.ticks);
    let tasks = result.latencies_ms.len();
    Ok(Run {
        scenario: "e2e",
        layout: layout.to_string(),
        run,
        namespace_node: redis.node_of_tag(&namespace)?,
        namespace,
        shard_nodes,
        keys_per_node,
        tasks,
        tasks_per_s: tasks as f64 / usage.wall_s,
        startup_ms: None,
        preload_creates_per_s: None,
        latency_ms: Some(latency_stats(result.latencies_ms)),
        contaminated: usage.foreign_pct > settings.foreign_max,
        usage,
        commands: commands_between(&commands0, &commands1),
        quiet_before_pct,
    })
}

// ----- report -----

#[derive(Debug, Clone, Serialize)]
struct Row {
    scenario: &'static str,
    layout: String,
    shards: u16,
    /// Redis processes (1 for a plain server).
    nodes: usize,
    cluster: bool,
    tasks_per_s: Stat,
    redis_cpu_us_per_task: Stat,
    busiest_node_cpu_us_per_task: Stat,
    redis_cpu_pct: Stat,
    busiest_node_cpu_pct: Stat,
    /// Each node's % of one core, busiest first, median per rank.
    node_cpu_pct_sorted: Vec<f64>,
    /// 1e6 / Redis CPU µs per task.
    tasks_per_s_per_redis_core: Stat,
    /// 1e6 / busiest node's CPU µs per task: the rate at which that node fills one core.
    redis_ceiling_tasks_per_s: Stat,
    worker_cpu_us_per_task: Stat,
    gateway_cpu_us_per_task: Stat,
    bench_cpu_us_per_task: Stat,
    /// 1e6 / (worker + gateway CPU µs per task).
    tasks_per_s_per_service_core: Stat,
    machine_busy_pct_of_all_cores: Stat,
    softirq_pct: Stat,
    foreign_pct: Stat,
    redis_cmds_per_task: Stat,
    /// µs inside Redis commands per task (commandstats), all nodes.
    redis_command_us_per_task: Stat,
    /// command -> (calls, µs inside Redis) per task, all nodes, medians.
    commands_per_task: BTreeMap<String, (f64, f64)>,
    latency_p50_ms: Option<Stat>,
    latency_p99_ms: Option<Stat>,
    preload_creates_per_s: Option<Stat>,
    /// What bounds the rate, from the medians.
    bound: String,
    shard_nodes: Vec<usize>,
    namespace_node: usize,
    keys_per_node: Vec<u64>,
    contaminated_runs: usize,
    runs: Vec<Run>,
}

fn row(layout: Layout, scenario: &'static str, runs: Vec<Run>, cpus: usize) -> Row {
    let s = |f: &dyn Fn(&Run) -> f64| stat(runs.iter().map(f));
    let opt = |f: &dyn Fn(&Run) -> Option<f64>| {
        let values: Vec<f64> = runs.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| stat(values))
    };
    let all_cores = cpus.max(1) as f64;
    let machine = s(&|r| r.usage.machine_busy_pct / all_cores);
    let busiest_pct = s(&|r| r.hottest_cpu_s() / r.usage.wall_s * 100.0);
    let bound = if busiest_pct.median >= REDIS_SATURATED_PCT {
        "Redis (busiest node)"
    } else if machine.median >= MACHINE_SATURATED_PCT {
        "machine CPU"
    } else {
        "neither (latency)"
    };
    let last = runs.last();
    Row {
        scenario,
        layout: layout.to_string(),
        shards: layout.shards,
        nodes: layout.nodes(),
        cluster: layout.masters.is_some(),
        tasks_per_s: s(&|r| r.tasks_per_s),
        redis_cpu_us_per_task: s(&|r| r.us_per_task(r.redis_cpu_s())),
        busiest_node_cpu_us_per_task: s(&|r| r.us_per_task(r.hottest_cpu_s())),
        redis_cpu_pct: s(&|r| r.redis_cpu_s() / r.usage.wall_s * 100.0),
        busiest_node_cpu_pct: busiest_pct,
        node_cpu_pct_sorted: (0..layout.nodes())
            .map(|rank| {
                stat(runs.iter().filter_map(|r| {
                    let mut pcts: Vec<f64> = r
                        .usage
                        .redis_node_cpu_s
                        .iter()
                        .map(|s| s / r.usage.wall_s * 100.0)
                        .collect();
                    pcts.sort_by(|a, b| b.total_cmp(a));
                    pcts.get(rank).copied()
                }))
                .median
            })
            .collect(),
        tasks_per_s_per_redis_core: s(&|r| 1e6 / r.us_per_task(r.redis_cpu_s()).max(1e-9)),
        redis_ceiling_tasks_per_s: s(&|r| 1e6 / r.us_per_task(r.hottest_cpu_s()).max(1e-9)),
        worker_cpu_us_per_task: s(&|r| r.us_per_task(r.usage.worker_cpu_s)),
        gateway_cpu_us_per_task: s(&|r| r.us_per_task(r.usage.gateway_cpu_s)),
        bench_cpu_us_per_task: s(&|r| r.us_per_task(r.usage.bench_cpu_s)),
        tasks_per_s_per_service_core: s(&|r| {
            1e6 / r
                .us_per_task(r.usage.worker_cpu_s + r.usage.gateway_cpu_s)
                .max(1e-9)
        }),
        machine_busy_pct_of_all_cores: machine,
        softirq_pct: s(&|r| r.usage.softirq_pct),
        foreign_pct: s(&|r| r.usage.foreign_pct),
        redis_cmds_per_task: s(&|r| r.per_task(r.redis_commands() as f64)),
        redis_command_us_per_task: s(&|r| r.per_task(r.command_usec() as f64)),
        commands_per_task: runs
            .iter()
            .flat_map(|r| r.commands.keys().cloned())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .map(|name| {
                let calls = stat(
                    runs.iter()
                        .map(|r| r.per_task(r.commands.get(&name).map_or(0, |c| c.0) as f64)),
                );
                let usec = stat(
                    runs.iter()
                        .map(|r| r.per_task(r.commands.get(&name).map_or(0, |c| c.1) as f64)),
                );
                (name, (calls.median, usec.median))
            })
            .collect(),
        latency_p50_ms: opt(&|r| r.latency_ms.as_ref().and_then(|l| l.get("p50").copied())),
        latency_p99_ms: opt(&|r| r.latency_ms.as_ref().and_then(|l| l.get("p99").copied())),
        preload_creates_per_s: opt(&|r| r.preload_creates_per_s),
        bound: bound.to_owned(),
        shard_nodes: last.map(|r| r.shard_nodes.clone()).unwrap_or_default(),
        namespace_node: last.map(|r| r.namespace_node).unwrap_or_default(),
        keys_per_node: last.map(|r| r.keys_per_node.clone()).unwrap_or_default(),
        contaminated_runs: runs.iter().filter(|r| r.contaminated).count(),
        runs,
    }
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("/")
}

fn markdown(settings: &Settings, meta: &Value, rows: &[Row]) -> Res<String> {
    let mut md = String::new();
    let f0 = |x: f64| format!("{x:.0}");
    let f1 = |x: f64| format!("{x:.1}");
    let mm =
        |s: Stat, f: &dyn Fn(f64) -> String| format!("{} ({}–{})", f(s.median), f(s.min), f(s.max));
    let cpus = meta["cpus"].as_u64().unwrap_or(0);
    writeln!(
        md,
        "### Scale-out: S store shards on P Redis processes — Redis {} (no persistence) — label: {}\n",
        meta["redis_version"].as_str().unwrap_or("?"),
        settings.label
    )?;
    writeln!(
        md,
        "Binaries from commit {}; they {} `REDIS_SHARDS`{}. {} × {}.\n",
        settings.commit,
        if meta["binaries_take_shards"].as_bool() == Some(true) {
            "take"
        } else {
            "do NOT know"
        },
        if meta["binaries_take_shards"].as_bool() == Some(true) {
            ""
        } else {
            " (every layout runs as S = 1: the keys stay on one node)"
        },
        cpus,
        meta["cpu_model"].as_str().unwrap_or("?"),
    )?;
    writeln!(
        md,
        "**On these {cpus} cores the Redis processes, the worker and gateway processes and this bench's clients all compete for the same CPUs**, so the measured tasks/s is this machine's ceiling, not Redis's: \"machine %\" near 100 says the box is full. What carries over to a bigger machine is the CPU per task: \"/Redis core\" = 1e6 / (Redis CPU µs per task, all nodes), the tasks/s one Redis core sustains; \"Redis ceiling\" = 1e6 / (busiest node's CPU µs per task), the rate at which this layout's busiest Redis process fills its core (= P × per-core when the shards spread evenly). Same for the services: \"/service core\" = 1e6 / (worker + gateway CPU µs per task). CPU from /proc/<pid>/stat utime+stime over the timed window; % core = of one core; medians of {} runs (min–max). Per node: the nodes' % core busiest first (median per rank). Bound: Redis if the busiest node is above {REDIS_SATURATED_PCT}% of a core, machine if all cores are above {MACHINE_SATURATED_PCT}% busy.\n",
        settings.runs
    )?;
    for scenario in ["drain", "e2e"] {
        let rows: Vec<&Row> = rows.iter().filter(|r| r.scenario == scenario).collect();
        if rows.is_empty() {
            continue;
        }
        if scenario == "drain" {
            writeln!(
                md,
                "#### Worker side: drain of N={} preloaded `echo` tasks by {} worker processes × concurrency {}\n",
                settings.n, settings.workers, settings.worker_concurrency
            )?;
        } else {
            writeln!(
                md,
                "#### End to end: {} tasks, {} clients ({}) over {} gateways, {} workers × concurrency {}\n",
                settings.e2e_n,
                settings.clients,
                match settings.e2e_mode {
                    E2eMode::Invoke => "POST /entrypoints/echo/invoke, one request per task",
                    E2eMode::Tasks => "POST /tasks + SSE subscription to the end",
                },
                settings.gateways,
                settings.workers,
                settings.worker_concurrency
            )?;
        }
        writeln!(
            md,
            "| S×P | tasks/s | Redis µs/task (all / busiest) | Redis % core (all / per node) | /Redis core | Redis ceiling | worker µs/task | gateway µs/task | bench µs/task | /service core | machine % (softirq, others) | cmds/task (µs in cmds) | {} | bound | shard→node (ns-wide), keys per node |",
            if scenario == "drain" {
                "preload creates/s"
            } else {
                "p50 / p99 ms"
            }
        )?;
        writeln!(md, "|{}", "---|".repeat(15))?;
        for r in &rows {
            let per_node: Vec<String> = r.node_cpu_pct_sorted.iter().map(|&p| f0(p)).collect();
            let extra = if scenario == "drain" {
                r.preload_creates_per_s
                    .map(|s| thousands(s.median))
                    .unwrap_or_else(|| "-".into())
            } else {
                format!(
                    "{} / {}",
                    r.latency_p50_ms.map(|s| f1(s.median)).unwrap_or_default(),
                    r.latency_p99_ms.map(|s| f1(s.median)).unwrap_or_default()
                )
            };
            writeln!(
                md,
                "| {}{} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} | {} ({}, {}){} | {} ({}) | {} | {} | {} ({}) → {} |",
                r.layout,
                if r.cluster { "" } else { " (plain)" },
                mm(r.tasks_per_s, &thousands),
                f1(r.redis_cpu_us_per_task.median),
                f1(r.busiest_node_cpu_us_per_task.median),
                f0(r.redis_cpu_pct.median),
                per_node.join("/"),
                thousands(r.tasks_per_s_per_redis_core.median),
                thousands(r.redis_ceiling_tasks_per_s.median),
                f1(r.worker_cpu_us_per_task.median),
                f1(r.gateway_cpu_us_per_task.median),
                f1(r.bench_cpu_us_per_task.median),
                thousands(r.tasks_per_s_per_service_core.median),
                f0(r.machine_busy_pct_of_all_cores.median),
                f0(r.softirq_pct.median),
                f0(r.foreign_pct.median),
                if r.contaminated_runs > 0 { " ⚠" } else { "" },
                f1(r.redis_cmds_per_task.median),
                f1(r.redis_command_us_per_task.median),
                extra,
                r.bound,
                list(&r.shard_nodes),
                r.namespace_node,
                list(&r.keys_per_node),
            )?;
        }
        writeln!(md)?;
        command_table(&mut md, &rows)?;
    }
    writeln!(
        md,
        "machine % = busy time of all {cpus} cores (soft interrupts included) over the window; softirq and others in % of one core (others = processes outside this benchmark; ⚠ = above FOREIGN_MAX={}%). bench µs/task: this process — the HTTP clients in e2e, its polling in drain. Redis commands per task summed over the nodes, and in brackets the µs spent inside them (commandstats): Redis's CPU beyond that is its event loop and system calls, a cost per round trip that a busier node spreads over more commands (drain: worker start-up and the bench's polling included). Shard→node: the node of each shard's hash tag {{ns:i}} as planned (in brackets the node of the namespace-wide tag {{ns}}: worker registry, layout stamp, idempotency records); keys per node: DBSIZE of each node once the tasks exist (all on one node = the binaries did not shard).\n",
        settings.foreign_max
    )?;
    Ok(md)
}

/// Calls per task of each command that some layout calls at least 0.05 times per task (µs
/// inside Redis per task in brackets), most called first.
fn command_table(md: &mut String, rows: &[&Row]) -> Res<()> {
    let mut names: Vec<&String> = rows
        .iter()
        .flat_map(|r| r.commands_per_task.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let most = |name: &str| {
        rows.iter()
            .filter_map(|r| r.commands_per_task.get(name).map(|c| c.0))
            .fold(0.0, f64::max)
    };
    names.retain(|name| most(name) >= 0.05);
    names.sort_by(|a, b| most(b).total_cmp(&most(a)));
    let header: Vec<&str> = rows.iter().map(|r| r.layout.as_str()).collect();
    writeln!(
        md,
        "Commands per task, all nodes (* = sent by a client, the rest run inside scripts; µs inside Redis per task in brackets):\n"
    )?;
    writeln!(md, "| command | {} |", header.join(" | "))?;
    writeln!(md, "|---|{}", "---|".repeat(rows.len()))?;
    for name in names {
        let cells: Vec<String> = rows
            .iter()
            .map(|r| {
                let (calls, usec) = r.commands_per_task.get(name).copied().unwrap_or_default();
                format!("{calls:.2} ({usec:.1})")
            })
            .collect();
        writeln!(
            md,
            "| {name}{} | {} |",
            client_star(name),
            cells.join(" | ")
        )?;
    }
    writeln!(md)?;
    Ok(())
}

// ----- main -----

/// Whether a binary lists `REDIS_SHARDS` in its `--help`: the services built before sharding
/// landed ignore the variable (clap ignores unknown environment), so the report says so.
fn takes_shards(bin: &Path) -> bool {
    Command::new(bin)
        .arg("--help")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|help| help.contains("REDIS_SHARDS"))
}

async fn layout_rows(ctx: &Ctx<'_>, layout: Layout, cpus: usize) -> Res<Vec<Row>> {
    eprintln!("{layout}: starting Redis ({} node(s))", layout.nodes());
    let mut redis = Redis::start(layout).await?;
    let mut rows = Vec::new();
    for scenario in ["drain", "e2e"] {
        if !ctx.settings.runs_scenario(scenario) {
            continue;
        }
        let mut runs = Vec::new();
        for run in 1..=ctx.settings.runs {
            let mut attempt = 0;
            let result = loop {
                let result = match scenario {
                    "drain" => drain_run(ctx, &mut redis, layout, run).await,
                    _ => e2e_run(ctx, &mut redis, layout, run).await,
                }
                .map_err(|err| format!("{layout} {scenario} run {run}: {err}"))?;
                result.log();
                // Others' load on a small machine moves these figures a lot: such a run is
                // measured again, up to RETRIES times, and marked if it stays disturbed.
                if run_again(
                    result.contaminated,
                    &mut attempt,
                    ctx.settings.retries,
                    ctx.settings.foreign_max,
                ) {
                    continue;
                }
                break result;
            };
            runs.push(result);
        }
        rows.push(row(layout, scenario, runs, cpus));
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> Res<()> {
    if !bench_requested("scale is a benchmark: run it with scripts/bench-scale (cargo bench)") {
        return Ok(());
    }
    let settings = Settings::from_env()?;
    let ticks = clock_ticks();
    let cpus = cpus();
    let logs = LogDir::create("scale-bench")?;
    let ctx = Ctx {
        settings: &settings,
        log_dir: logs.path(),
        ticks,
    };
    let version = {
        let mut probe = Redis::start(Layout {
            shards: 1,
            masters: None,
        })
        .await?;
        let node = probe.nodes.first_mut().ok_or("no redis node")?;
        server_facts(&mut node.admin).await?.version
    };
    let meta = json!({
        "label": settings.label,
        "commit": settings.commit,
        "binaries_take_shards": takes_shards(&settings.worker_bin) && takes_shards(&settings.gateway_bin),
        "redis_version": version,
        "cpus": cpus,
        "cpu_model": cpu_model(),
        "loadavg_at_start": loadavg(),
        "settings": settings,
    });
    eprintln!("scale bench: {meta}");

    let mut rows = Vec::new();
    for &layout in &settings.configs {
        rows.extend(layout_rows(&ctx, layout, cpus).await?);
    }
    let md = markdown(&settings, &meta, &rows)?;
    println!("{md}");
    let report = json!({
        "meta": meta,
        "rows": rows,
        "markdown": md,
    });
    write_json(settings.out.as_deref(), &report)
}
