//! End-to-end benchmark of a whole cluster over HTTP: a release `gateway` and W release `worker`
//! processes against a private Redis, driven by K concurrent clients that create `echo` tasks
//! with `POST /tasks` and follow each one through `GET /tasks/:id/subscribe` until its terminal
//! event, as a real client of the profile does. Also measures Redis memory per retained task.
//!
//! Run it through `scripts/bench-report` (everything) or directly:
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6601/ cargo bench -p cluster-tests --bench e2e
//! ```
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it does nothing.
//!
//! Scenarios, each run in a fresh namespace whose keys are deleted afterwards:
//! - `throughput`: for each W in `WORKERS`, `RUNS` times: start W workers
//!   (`WORKER_CONCURRENCY` each, hosting `ENTRYPOINTS`) and one gateway, wait until the card
//!   lists `echo` and the registry lists every worker, run `WARMUP` tasks (untimed: connection
//!   pools, lazily loaded scripts), wait for a quiet machine, `CONFIG RESETSTAT`, then the timed
//!   window: `CLIENTS` client loops share `N` tasks; each loop creates a task with
//!   `client` (`send_message`, its own access token per loop) and reads the task's
//!   subscription until the first event with a terminal status. tasks/s = completed / (last
//!   terminal event − first POST); latency = terminal event − just before the POST (the POST's
//!   own round trip is reported apart). The subscription is then read to its end, so that the
//!   keep-alive connection goes back to the pool instead of being closed.
//!   Then, unless `LATENCY_N` is 0, the same with one worker and ONE client for `LATENCY_N`
//!   tasks: the latency of a task when nothing else is queued (the pipeline's own latency; the
//!   closed loop of K clients at saturation mostly measures K / throughput).
//! - `open`: open loop, one cluster (`OPEN_WORKERS` workers): after the same warm-up, tasks are
//!   created on a fixed schedule, `OPEN_RATE` per second for `OPEN_DURATION_S` seconds
//!   (`CLIENTS` owners in turn), each followed through its subscription to the terminal event
//!   whatever became of the earlier ones (at most `OPEN_MAX_INFLIGHT` at once). Latency runs
//!   from the scheduled creation time, so that a late send counts against it; reports the rate
//!   achieved, latency percentiles and the same per-task costs as `throughput`.
//! - `memory`: one cluster (`MEMORY_WORKERS` workers), `INFO memory` `used_memory` just before
//!   `MEMORY_TASKS` tasks (input `{"i": n}`) and again once all of them are terminal (they stay
//!   retained for `RETENTION_MS` of the gateway, 24 h by default); the difference / tasks is
//!   the Redis memory a retained terminal task costs, everything it left included (task hash,
//!   event log, owner index entry). A sample task's keys are sized with `MEMORY USAGE` too.
//!
//! Measured in the timed window (the bench sends Redis nothing then but INFO/CONFIG, which are
//! left out): Redis commands per task (`INFO commandstats`, including the `redis.call`s inside
//! scripts, heartbeats and recovery sweeps of the workers, and the gateway's registry reads:
//! the cluster's whole cost); client round trips per task (calls of the commands a client
//! sends itself, EVALSHA etc., see `CLIENT_COMMANDS`); CPU per task of Redis (`INFO cpu`), the
//! gateway, the workers (utime + stime from `/proc/<pid>/stat`) and this bench (the HTTP
//! clients); and the CPU other processes used meanwhile ("foreign", % of one core): a run above
//! `FOREIGN_MAX` is re-run up to `RETRIES` times and marked ⚠ if it stays above.
//!
//! Environment:
//! - `REDIS_URL` (required) — never a shared Redis: the bench resets its statistics;
//! - `GATEWAY_BIN`, `WORKER_BIN` (default: next to this bench's profile directory, i.e.
//!   `target/release/{gateway,worker}`);
//! - `SCENARIOS` (throughput,open,memory), `WORKERS` (1,2,4), `WORKER_CONCURRENCY` (32),
//!   `CLIENTS` (64), `N` (5000), `RUNS` (3, medians reported), `WARMUP` (2 × CLIENTS),
//!   `LATENCY_N` (500, tasks of the one-client run; 0 skips it),
//!   `ENTRYPOINTS` (echo: what the workers host, as in the worker benchmark), `MEMORY_TASKS`
//!   (10000), `MEMORY_WORKERS` (2), `OPEN_RATE` (2000), `OPEN_DURATION_S` (10),
//!   `OPEN_WORKERS` (2), `OPEN_MAX_INFLIGHT` (4096), `SERVICE_RUST_LOG` (warn: per-request logging would be
//!   measured too), `QUIET_PCT` (15), `QUIET_WAIT_S` (60), `FOREIGN_MAX` (30), `RETRIES` (1),
//!   `RUN_TIMEOUT_S` (300), `BENCH_OUT` (JSON file), `BENCH_LABEL`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use client::{AgentCard, Client, ClientOptions, SendOptions, generate_token};
use harness::measure::commandstats::{
    CLIENT_COMMANDS, CommandDiff, RedisSnap, client_round_trips, client_star, command_names,
    reset_stats, server_cmds,
};
use harness::measure::cpu::{CpuSnap, clock_ticks, run_again, wait_quiet};
use harness::measure::env::{bin_from_env, env_list, env_or, require_bins};
use harness::measure::output::{LogDir, bench_requested, cpus, loadavg, write_json};
use harness::measure::redis_admin::{
    admin_connection, delete_matching, parse_info, scan_page, server_facts,
};
use harness::measure::service::{BenchProc, terminate_all};
use harness::measure::stats::{Stat, percentile, stat};
use harness::measure::{BoxError, Res};
use protocol::TaskStatus;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig, TaskStore};
use tokio::task::JoinSet;

/// Never refuse a create for capacity: the bench measures throughput, not admission control.
const MAX_TASKS: u64 = 100_000_000;
/// Bound on things that take milliseconds when all is well (a process starting, a worker
/// registering, the last tasks finishing after the window).
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

// ----- settings -----

#[derive(Debug, Clone)]
struct Settings {
    url: String,
    gateway_bin: PathBuf,
    worker_bin: PathBuf,
    label: String,
    scenarios: Vec<String>,
    workers: Vec<usize>,
    worker_concurrency: usize,
    clients: usize,
    n: usize,
    runs: usize,
    warmup: usize,
    latency_n: usize,
    entrypoints: String,
    memory_tasks: usize,
    memory_workers: usize,
    open_rate: f64,
    open_duration_s: f64,
    open_workers: usize,
    open_max_inflight: usize,
    service_rust_log: String,
    quiet_pct: f64,
    quiet_wait_s: u64,
    foreign_max: f64,
    retries: usize,
    run_timeout_s: u64,
    out: Option<String>,
}

impl Settings {
    fn to_json(&self) -> Value {
        json!({
            "gateway_bin": self.gateway_bin.display().to_string(),
            "worker_bin": self.worker_bin.display().to_string(),
            "label": self.label,
            "scenarios": self.scenarios,
            "workers": self.workers,
            "worker_concurrency": self.worker_concurrency,
            "clients": self.clients,
            "n": self.n,
            "runs": self.runs,
            "warmup": self.warmup,
            "latency_n": self.latency_n,
            "entrypoints": self.entrypoints,
            "memory_tasks": self.memory_tasks,
            "memory_workers": self.memory_workers,
            "open_rate": self.open_rate,
            "open_duration_s": self.open_duration_s,
            "open_workers": self.open_workers,
            "open_max_inflight": self.open_max_inflight,
            "service_rust_log": self.service_rust_log,
            "quiet_pct": self.quiet_pct,
            "quiet_wait_s": self.quiet_wait_s,
            "foreign_max": self.foreign_max,
            "retries": self.retries,
            "run_timeout_s": self.run_timeout_s,
        })
    }
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let url = std::env::var("REDIS_URL")
            .map_err(|_| "REDIS_URL is required (scripts/bench-report sets it)")?;
        let clients = env_or("CLIENTS", 64)?;
        let settings = Settings {
            url,
            gateway_bin: bin_from_env("GATEWAY_BIN", "gateway"),
            worker_bin: bin_from_env("WORKER_BIN", "worker"),
            label: env_or("BENCH_LABEL", String::from("default"))?,
            scenarios: env_list("SCENARIOS", "throughput,open,memory")?,
            workers: env_list("WORKERS", "1,2,4")?,
            worker_concurrency: env_or("WORKER_CONCURRENCY", 32)?,
            clients,
            n: env_or("N", 5_000)?,
            runs: env_or("RUNS", 3)?,
            warmup: env_or("WARMUP", 2 * clients)?,
            latency_n: env_or("LATENCY_N", 500)?,
            entrypoints: env_or("ENTRYPOINTS", String::from("echo"))?,
            memory_tasks: env_or("MEMORY_TASKS", 10_000)?,
            memory_workers: env_or("MEMORY_WORKERS", 2)?,
            open_rate: env_or("OPEN_RATE", 2_000.0)?,
            open_duration_s: env_or("OPEN_DURATION_S", 10.0)?,
            open_workers: env_or("OPEN_WORKERS", 2)?,
            open_max_inflight: env_or("OPEN_MAX_INFLIGHT", 4_096)?,
            service_rust_log: env_or("SERVICE_RUST_LOG", String::from("warn"))?,
            quiet_pct: env_or("QUIET_PCT", 15.0)?,
            quiet_wait_s: env_or("QUIET_WAIT_S", 60)?,
            foreign_max: env_or("FOREIGN_MAX", 30.0)?,
            retries: env_or("RETRIES", 1)?,
            run_timeout_s: env_or("RUN_TIMEOUT_S", 300)?,
            out: std::env::var("BENCH_OUT").ok().filter(|p| !p.is_empty()),
        };
        if settings.n == 0
            || settings.runs == 0
            || settings.clients == 0
            || settings.worker_concurrency == 0
            || settings.memory_workers == 0
            || settings.open_workers == 0
            || settings.open_max_inflight == 0
            || !(settings.open_rate > 0.0 && settings.open_rate.is_finite())
            || !(settings.open_duration_s > 0.0 && settings.open_duration_s.is_finite())
            || settings.workers.contains(&0)
        {
            return Err(
                "N, RUNS, CLIENTS, WORKER_CONCURRENCY, MEMORY_WORKERS, WORKERS, OPEN_WORKERS, OPEN_MAX_INFLIGHT, OPEN_RATE and OPEN_DURATION_S must be positive"
                    .into(),
            );
        }
        if let Some(unknown) = settings
            .scenarios
            .iter()
            .find(|s| !["throughput", "open", "memory"].contains(&s.as_str()))
        {
            return Err(format!("unknown scenario {unknown:?} (throughput, open, memory)").into());
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

// ----- Redis measurements -----

async fn used_memory(admin: &mut MultiplexedConnection) -> Res<(u64, u64)> {
    let text: String = redis::cmd("INFO").arg("memory").query_async(admin).await?;
    let info = parse_info(&text);
    let num = |key: &str| {
        info.get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((num("used_memory"), num("used_memory_dataset")))
}

/// Keys of a namespace, by type (`SCAN` + `TYPE`), for the memory report.
async fn count_keys(
    admin: &mut MultiplexedConnection,
    namespace: &str,
) -> Res<BTreeMap<String, u64>> {
    let pattern = format!("{{{namespace}}}*");
    let mut cursor: u64 = 0;
    let mut kinds = BTreeMap::new();
    loop {
        let (next, keys) = scan_page(admin, cursor, &pattern).await?;
        for key in keys {
            // The part after the namespace tag names the kind: `{ns}:task:<id>` -> `task`.
            let kind = key.split(':').nth(1).unwrap_or("?").to_owned();
            *kinds.entry(kind).or_insert(0) += 1;
        }
        if next == 0 {
            return Ok(kinds);
        }
        cursor = next;
    }
}

async fn memory_usage(admin: &mut MultiplexedConnection, key: &str) -> Res<Option<u64>> {
    Ok(redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(admin)
        .await?)
}

// ----- service processes -----

fn free_port() -> Res<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A namespace no earlier run used: the process id, a counter and the clock.
fn unique(tag: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("e2e{}-{count}-{tag}-{nanos:08x}", std::process::id())
}

/// One gateway and `workers` worker processes in a fresh namespace, ready to take tasks.
struct Cluster {
    namespace: String,
    gateway: BenchProc,
    workers: Vec<BenchProc>,
    store: RedisStore,
    card: Arc<AgentCard>,
}

impl Cluster {
    async fn start(settings: &Settings, log_dir: &Path, tag: &str, workers: usize) -> Res<Cluster> {
        let namespace = unique(tag);
        let mut config = RedisStoreConfig::new(settings.url.clone());
        config.namespace = namespace.clone();
        config.max_tasks = MAX_TASKS;
        config.timeout = Duration::from_secs(10);
        let store = RedisStore::connect(config).await?;
        let registry = RedisRegistry::new(&store);

        let mut procs = Vec::new();
        let mut ids = Vec::new();
        for w in 0..workers {
            let id = format!("{namespace}-w{w}");
            procs.push(BenchProc::service(
                &settings.worker_bin,
                &id,
                log_dir,
                &[
                    ("REDIS_URL", settings.url.clone()),
                    ("REDIS_NAMESPACE", namespace.clone()),
                    ("WORKER_ID", id.clone()),
                    (
                        "WORKER_CONCURRENCY",
                        settings.worker_concurrency.to_string(),
                    ),
                    ("WORKER_ENTRYPOINTS", settings.entrypoints.clone()),
                    ("RUST_LOG", settings.service_rust_log.clone()),
                ],
            )?);
            ids.push(id);
        }

        // The port is free when probed; should another process take it before the gateway
        // binds, the gateway exits and the next attempt uses another port.
        let mut attempt = 0;
        let (gateway, url) = loop {
            attempt += 1;
            let port = free_port()?;
            let mut gateway = BenchProc::service(
                &settings.gateway_bin,
                &format!("{namespace}-gateway"),
                log_dir,
                &[
                    ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                    ("REDIS_URL", settings.url.clone()),
                    ("REDIS_NAMESPACE", namespace.clone()),
                    ("MAX_TASKS", MAX_TASKS.to_string()),
                    ("RUST_LOG", settings.service_rust_log.clone()),
                ],
            )?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            match gateway.check_alive() {
                Ok(()) => break (gateway, format!("http://127.0.0.1:{port}")),
                Err(err) if attempt >= 5 => return Err(err),
                Err(_) => continue,
            }
        };

        let client = Client::new(ClientOptions::default())?;
        let give_up = Instant::now() + PATIENCE;
        let mut cluster_procs = procs;
        let mut gateway = gateway;
        let card = loop {
            gateway.check_alive()?;
            for worker in &mut cluster_procs {
                worker.check_alive()?;
            }
            let listed = registry
                .workers()
                .await?
                .iter()
                .filter(|entry| ids.contains(&entry.worker_id))
                .count();
            if listed == ids.len()
                && let Ok(card) = client.fetch_card(&url).await
                && card.entrypoints.contains_key("echo")
            {
                break card;
            }
            if Instant::now() > give_up {
                return Err(format!(
                    "the cluster never came up ({listed}/{} workers listed); gateway log:\n{}",
                    ids.len(),
                    gateway.log_tail()
                )
                .into());
            }
            tokio::time::sleep(POLL).await;
        };
        Ok(Cluster {
            namespace,
            gateway,
            workers: cluster_procs,
            store,
            card: Arc::new(card),
        })
    }

    fn check_alive(&mut self) -> Res<()> {
        self.gateway.check_alive()?;
        for worker in &mut self.workers {
            worker.check_alive()?;
        }
        Ok(())
    }

    /// Waits until no task of the namespace is live (the store's exact count).
    async fn wait_idle(&mut self) -> Res<()> {
        let give_up = Instant::now() + PATIENCE;
        loop {
            self.check_alive()?;
            let live = self.store.live_count().await?;
            if live == 0 {
                return Ok(());
            }
            if Instant::now() > give_up {
                return Err(format!("{live} tasks still live").into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn stop(mut self, admin: &mut MultiplexedConnection) -> Res<()> {
        let mut procs = vec![];
        procs.append(&mut self.workers);
        terminate_all(
            std::slice::from_mut(&mut self.gateway),
            Duration::from_secs(10),
        )
        .await;
        terminate_all(&mut procs, Duration::from_secs(10)).await;
        delete_matching(admin, &format!("{{{}}}*", self.namespace)).await?;
        Ok(())
    }
}

// ----- the load -----

/// What one task cost the client.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Just before the POST -> the first event with a terminal status.
    total_ms: f64,
    /// The POST's round trip.
    create_ms: f64,
    /// When the terminal event arrived.
    done: Instant,
}

#[derive(Debug, Default)]
struct LoadResult {
    samples: Vec<Sample>,
    started: Option<Instant>,
    /// Tasks that ended `failed`/`cancelled`, or whose stream ended without a terminal event.
    not_completed: usize,
    /// Requests that failed (network, non-2xx).
    errors: usize,
    first_error: Option<String>,
}

/// One task, as a client follows it: create, subscribe, read until a terminal status.
/// `start`: the instant latency is measured from (just before the POST in the closed loop; the
/// scheduled creation time in the open loop, so that a late send counts against the latency).
async fn one_task(
    client: &Client,
    card: &AgentCard,
    token: &str,
    input: &Value,
    start: Instant,
) -> Res<(Sample, bool)> {
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
        .await
        .map_err(|err| format!("create: {err}"))?;
    let create_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut events = client
        .subscribe_task(card, &access.task_id, token)
        .await
        .map_err(|err| format!("subscribe: {err}"))?;
    let mut terminal = None;
    while let Some(event) = events
        .next()
        .await
        .map_err(|err| format!("stream: {err}"))?
    {
        if terminal.is_none()
            && let Some(status) = event.data.status.filter(|s| s.is_terminal())
        {
            terminal = Some((Instant::now(), status));
        }
        // Read on to the end of the stream (the gateway ends it after the terminal event),
        // so that the connection is reused rather than closed mid-response.
    }
    let (done, status) = terminal.ok_or("the subscription ended without a terminal event")?;
    Ok((
        Sample {
            total_ms: done.duration_since(start).as_secs_f64() * 1e3,
            create_ms,
            done,
        },
        status == TaskStatus::Completed,
    ))
}

/// `n` tasks through `clients` concurrent loops, each with its own access token.
async fn load(
    client: &Client,
    card: &Arc<AgentCard>,
    clients: usize,
    n: usize,
    deadline: Instant,
) -> Res<LoadResult> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut loops: JoinSet<LoadResult> = JoinSet::new();
    let started = Instant::now();
    for _ in 0..clients.min(n) {
        let client = client.clone();
        let card = card.clone();
        let next = next.clone();
        let token = generate_token();
        loops.spawn(async move {
            let mut result = LoadResult::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || Instant::now() > deadline {
                    return result;
                }
                match one_task(&client, &card, &token, &json!({ "i": i }), Instant::now()).await {
                    Ok((sample, completed)) => {
                        result.samples.push(sample);
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
    let mut total = LoadResult {
        started: Some(started),
        ..LoadResult::default()
    };
    while let Some(joined) = loops.join_next().await {
        let part = joined?;
        total.samples.extend(part.samples);
        total.not_completed += part.not_completed;
        total.errors += part.errors;
        if total.first_error.is_none() {
            total.first_error = part.first_error;
        }
    }
    if Instant::now() > deadline {
        return Err(format!(
            "the run passed its deadline with {} tasks done",
            total.samples.len()
        )
        .into());
    }
    Ok(total)
}

// ----- throughput runs -----

/// What a throughput run loads: how many workers, client loops and tasks.
#[derive(Debug, Clone, Copy)]
struct Shape {
    workers: usize,
    clients: usize,
    n: usize,
}

#[derive(Debug, Clone)]
struct Run {
    workers: usize,
    clients: usize,
    run: usize,
    completed: usize,
    not_completed: usize,
    errors: usize,
    first_error: Option<String>,
    wall_s: f64,
    tasks_per_s: f64,
    latency: BTreeMap<&'static str, f64>,
    create: BTreeMap<&'static str, f64>,
    redis_cpu_s: f64,
    gateway_cpu_s: f64,
    worker_cpu_s: f64,
    client_cpu_s: f64,
    foreign_cpu_pct: f64,
    quiet_before_pct: f64,
    commands: BTreeMap<String, u64>,
    command_usec: BTreeMap<String, u64>,
    contaminated: bool,
}

impl Run {
    fn per_task(&self, value: f64) -> f64 {
        value / self.completed.max(1) as f64
    }

    fn server_cmds(&self) -> u64 {
        server_cmds(&self.commands)
    }

    fn client_round_trips(&self) -> u64 {
        client_round_trips(&self.commands)
    }

    fn to_json(&self) -> Value {
        let per_task = |m: &BTreeMap<String, u64>| -> BTreeMap<String, f64> {
            m.iter()
                .map(|(k, v)| (k.clone(), self.per_task(*v as f64)))
                .collect()
        };
        json!({
            "workers": self.workers,
            "clients": self.clients,
            "run": self.run,
            "completed": self.completed,
            "not_completed": self.not_completed,
            "errors": self.errors,
            "first_error": self.first_error,
            "wall_s": self.wall_s,
            "tasks_per_s": self.tasks_per_s,
            "latency_ms": self.latency,
            "create_ms": self.create,
            "redis_cpu_us_per_task": self.per_task(self.redis_cpu_s * 1e6),
            "gateway_cpu_us_per_task": self.per_task(self.gateway_cpu_s * 1e6),
            "worker_cpu_us_per_task": self.per_task(self.worker_cpu_s * 1e6),
            "client_cpu_us_per_task": self.per_task(self.client_cpu_s * 1e6),
            "redis_cpu_pct": self.redis_cpu_s / self.wall_s * 100.0,
            "gateway_cpu_pct": self.gateway_cpu_s / self.wall_s * 100.0,
            "worker_cpu_pct": self.worker_cpu_s / self.wall_s * 100.0,
            "client_cpu_pct": self.client_cpu_s / self.wall_s * 100.0,
            "foreign_cpu_pct": self.foreign_cpu_pct,
            "quiet_before_pct": self.quiet_before_pct,
            "redis_cmds_per_task": self.per_task(self.server_cmds() as f64),
            "client_round_trips_per_task": self.per_task(self.client_round_trips() as f64),
            "commands_per_task": per_task(&self.commands),
            "command_us_per_task": per_task(&self.command_usec),
            "contaminated": self.contaminated,
        })
    }
}

fn latency_stats(values: impl Iterator<Item = f64>) -> BTreeMap<&'static str, f64> {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    let mut stats = BTreeMap::new();
    stats.insert("p50", percentile(&sorted, 50.0));
    stats.insert("p90", percentile(&sorted, 90.0));
    stats.insert("p99", percentile(&sorted, 99.0));
    stats.insert("max", sorted.last().copied().unwrap_or(0.0));
    stats.insert(
        "mean",
        sorted.iter().sum::<f64>() / sorted.len().max(1) as f64,
    );
    stats
}

/// Runs `settings.warmup` tasks (discarded) and waits until the cluster is idle again.
async fn warm_up(
    settings: &Settings,
    client: &Client,
    cluster: &mut Cluster,
    clients: usize,
    deadline: Instant,
) -> Res<()> {
    if settings.warmup == 0 {
        return Ok(());
    }
    let warm = load(client, &cluster.card, clients, settings.warmup, deadline).await?;
    if warm.errors > 0 {
        return Err(format!(
            "warm-up: {} errors, first: {}",
            warm.errors,
            warm.first_error.unwrap_or_default()
        )
        .into());
    }
    cluster.wait_idle().await
}

/// The counters a timed window starts from (Redis command stats reset at its start).
struct Window {
    redis0: RedisSnap,
    cpu0: CpuSnap,
    gateway0: u64,
    workers0: u64,
}

/// What the cluster used during a window.
struct Usage {
    diff: CommandDiff,
    redis_cpu_s: f64,
    gateway_cpu_s: f64,
    worker_cpu_s: f64,
    client_cpu_s: f64,
    /// CPU of processes outside the cluster and this bench, % of one core.
    foreign_cpu_pct: f64,
}

impl Window {
    async fn open(admin: &mut MultiplexedConnection, cluster: &Cluster) -> Res<Window> {
        reset_stats(admin).await?;
        Ok(Window {
            redis0: RedisSnap::take(admin).await?,
            cpu0: CpuSnap::now()?,
            gateway0: cluster.gateway.ticks(),
            workers0: cluster.workers.iter().map(BenchProc::ticks).sum(),
        })
    }

    /// Reads the counters again, checks every service survived and waits for the cluster to be
    /// idle; `started` is when the load began (the window for the foreign CPU share).
    async fn close(
        self,
        admin: &mut MultiplexedConnection,
        cluster: &mut Cluster,
        started: Instant,
        ticks: f64,
    ) -> Res<Usage> {
        let cpu1 = CpuSnap::now()?;
        let gateway1 = cluster.gateway.ticks();
        let workers1: u64 = cluster.workers.iter().map(BenchProc::ticks).sum();
        let redis1 = RedisSnap::take(admin).await?;
        cluster.check_alive()?;
        cluster.wait_idle().await?;

        let window_s = started.elapsed().as_secs_f64().max(1e-9);
        let redis_cpu_s = redis1.cpu_s - self.redis0.cpu_s;
        let gateway_cpu_s = gateway1.saturating_sub(self.gateway0) as f64 / ticks;
        let worker_cpu_s = workers1.saturating_sub(self.workers0) as f64 / ticks;
        let client_cpu_s = cpu1.own.saturating_sub(self.cpu0.own) as f64 / ticks;
        let busy_s = cpu1
            .busy_with_softirq()
            .saturating_sub(self.cpu0.busy_with_softirq()) as f64
            / ticks;
        let foreign_cpu_pct =
            ((busy_s - redis_cpu_s - gateway_cpu_s - worker_cpu_s - client_cpu_s).max(0.0)
                / window_s)
                * 100.0;
        Ok(Usage {
            diff: redis1.since(&self.redis0, |_| 0),
            redis_cpu_s,
            gateway_cpu_s,
            worker_cpu_s,
            client_cpu_s,
            foreign_cpu_pct,
        })
    }
}

async fn throughput_run(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ticks: f64,
    shape: Shape,
    run: usize,
) -> Res<Run> {
    let Shape {
        workers,
        clients,
        n,
    } = shape;
    let mut cluster = Cluster::start(
        settings,
        log_dir,
        &format!("w{workers}c{clients}r{run}"),
        workers,
    )
    .await?;
    let result = async {
        let client = Client::new(ClientOptions::default())?;
        let deadline = Instant::now() + Duration::from_secs(settings.run_timeout_s);
        warm_up(settings, &client, &mut cluster, clients, deadline).await?;
        let quiet = wait_quiet(
            settings.quiet_pct,
            settings.quiet_wait_s,
            ticks,
            CpuSnap::busy_with_softirq,
        )
        .await?;
        let window = Window::open(admin, &cluster).await?;

        let result = load(&client, &cluster.card, clients, n, deadline).await?;

        let end = result
            .samples
            .iter()
            .map(|s| s.done)
            .max()
            .unwrap_or_else(Instant::now);
        let started = result.started.ok_or("no start time")?;
        let Usage {
            diff,
            redis_cpu_s,
            gateway_cpu_s,
            worker_cpu_s,
            client_cpu_s,
            foreign_cpu_pct,
        } = window.close(admin, &mut cluster, started, ticks).await?;
        let wall_s = end.duration_since(started).as_secs_f64().max(1e-9);
        let completed = result.samples.len() - result.not_completed;
        Ok::<_, BoxError>(Run {
            workers,
            clients,
            run,
            completed,
            not_completed: result.not_completed,
            errors: result.errors,
            first_error: result.first_error.clone(),
            wall_s,
            tasks_per_s: completed as f64 / wall_s,
            latency: latency_stats(result.samples.iter().map(|s| s.total_ms)),
            create: latency_stats(result.samples.iter().map(|s| s.create_ms)),
            redis_cpu_s,
            gateway_cpu_s,
            worker_cpu_s,
            client_cpu_s,
            foreign_cpu_pct,
            quiet_before_pct: quiet,
            commands: diff.calls,
            command_usec: diff.usec,
            contaminated: foreign_cpu_pct > settings.foreign_max,
        })
    }
    .await;
    cluster.stop(admin).await?;
    result
}

fn stat_json(s: Stat) -> Value {
    json!({"median": s.median, "min": s.min, "max": s.max})
}

/// The median over runs of one per-run figure.
fn over_runs(runs: &[Value], path: &[&str]) -> Stat {
    stat(runs.iter().filter_map(|run| {
        path.iter()
            .try_fold(run, |v, key| v.get(*key))
            .and_then(Value::as_f64)
    }))
}

fn throughput_row(settings: &Settings, shape: Shape, runs: &[Run]) -> Value {
    let runs_json: Vec<Value> = runs.iter().map(Run::to_json).collect();
    let s = |path: &[&str]| stat_json(over_runs(&runs_json, path));
    let names = command_names(runs.iter().map(|r| &r.commands));
    let commands: BTreeMap<String, Value> = names
        .iter()
        .map(|name| {
            (
                name.clone(),
                json!({
                    "calls": over_runs(&runs_json, &["commands_per_task", name]).median,
                    "us": over_runs(&runs_json, &["command_us_per_task", name]).median,
                    "client": CLIENT_COMMANDS.contains(&name.as_str()),
                }),
            )
        })
        .collect();
    json!({
        "workers": shape.workers,
        "worker_concurrency": settings.worker_concurrency,
        "clients": shape.clients,
        "n": shape.n,
        "tasks_per_s": s(&["tasks_per_s"]),
        "latency_ms": {
            "p50": s(&["latency_ms", "p50"]),
            "p90": s(&["latency_ms", "p90"]),
            "p99": s(&["latency_ms", "p99"]),
            "max": s(&["latency_ms", "max"]),
            "mean": s(&["latency_ms", "mean"]),
        },
        "create_ms": {
            "p50": s(&["create_ms", "p50"]),
            "p99": s(&["create_ms", "p99"]),
        },
        "redis_cmds_per_task": s(&["redis_cmds_per_task"]),
        "client_round_trips_per_task": s(&["client_round_trips_per_task"]),
        "redis_cpu_us_per_task": s(&["redis_cpu_us_per_task"]),
        "gateway_cpu_us_per_task": s(&["gateway_cpu_us_per_task"]),
        "worker_cpu_us_per_task": s(&["worker_cpu_us_per_task"]),
        "client_cpu_us_per_task": s(&["client_cpu_us_per_task"]),
        "redis_cpu_pct": s(&["redis_cpu_pct"]),
        "gateway_cpu_pct": s(&["gateway_cpu_pct"]),
        "worker_cpu_pct": s(&["worker_cpu_pct"]),
        "client_cpu_pct": s(&["client_cpu_pct"]),
        "foreign_cpu_pct": s(&["foreign_cpu_pct"]),
        "errors": runs.iter().map(|r| r.errors + r.not_completed).sum::<usize>(),
        "contaminated_runs": runs.iter().filter(|r| r.contaminated).count(),
        "commands_per_task": commands,
        "runs": runs_json,
    })
}

async fn throughput_rows(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ticks: f64,
) -> Res<Vec<Value>> {
    let mut shapes: Vec<Shape> = settings
        .workers
        .iter()
        .map(|&workers| Shape {
            workers,
            clients: settings.clients,
            n: settings.n,
        })
        .collect();
    if settings.latency_n > 0 {
        shapes.push(Shape {
            workers: 1,
            clients: 1,
            n: settings.latency_n,
        });
    }
    let mut rows = Vec::new();
    for shape in shapes {
        let Shape {
            workers, clients, ..
        } = shape;
        let mut runs = Vec::new();
        for run in 1..=settings.runs {
            let mut attempt = 0;
            let result = loop {
                let result = throughput_run(settings, admin, log_dir, ticks, shape, run)
                    .await
                    .map_err(|err| {
                        format!("{workers} workers, {clients} clients, run {run}: {err}")
                    })?;
                eprintln!(
                    "  {workers} workers, {clients} clients, run {run}: {:.0} tasks/s ({} tasks in {:.2} s, {} errors); latency p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} ms (create p50 {:.1}); per task: {:.1} Redis cmds, {:.2} round trips, CPU µs redis {:.0} gateway {:.0} workers {:.0} clients {:.0}; foreign {:.0}%",
                    result.tasks_per_s,
                    result.completed,
                    result.wall_s,
                    result.errors + result.not_completed,
                    result.latency["p50"],
                    result.latency["p90"],
                    result.latency["p99"],
                    result.latency["max"],
                    result.create["p50"],
                    result.per_task(result.server_cmds() as f64),
                    result.per_task(result.client_round_trips() as f64),
                    result.per_task(result.redis_cpu_s * 1e6),
                    result.per_task(result.gateway_cpu_s * 1e6),
                    result.per_task(result.worker_cpu_s * 1e6),
                    result.per_task(result.client_cpu_s * 1e6),
                    result.foreign_cpu_pct,
                );
                if let Some(err) = &result.first_error {
                    eprintln!("  first error: {err}");
                }
                if run_again(
                    result.contaminated,
                    &mut attempt,
                    settings.retries,
                    settings.foreign_max,
                ) {
                    continue;
                }
                break result;
            };
            runs.push(result);
        }
        rows.push(throughput_row(settings, shape, &runs));
    }
    Ok(rows)
}

// ----- open loop -----

/// What one open-loop task came to.
type Outcome = Result<(Sample, bool), String>;

impl LoadResult {
    fn settle(&mut self, outcome: Outcome) {
        match outcome {
            Ok((sample, completed)) => {
                self.samples.push(sample);
                if !completed {
                    self.not_completed += 1;
                }
            }
            Err(err) => {
                self.errors += 1;
                self.first_error.get_or_insert(err);
            }
        }
    }
}

/// Open loop: tasks are created on a fixed schedule (`OPEN_RATE` per second for
/// `OPEN_DURATION_S`), whatever happened to the earlier ones; each is then followed through its
/// subscription to the terminal event. Latency runs from the scheduled creation time, so a send
/// delayed by a busy client counts against it (no coordinated omission). At most
/// `OPEN_MAX_INFLIGHT` tasks are followed at once: beyond that, sends wait (and are late).
async fn open_run(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ticks: f64,
) -> Res<Value> {
    let workers = settings.open_workers;
    let mut cluster = Cluster::start(settings, log_dir, "open", workers).await?;
    let result = async {
        let client = Client::new(ClientOptions::default())?;
        let deadline = Instant::now() + Duration::from_secs(settings.run_timeout_s);
        warm_up(settings, &client, &mut cluster, settings.clients, deadline).await?;
        let quiet = wait_quiet(
            settings.quiet_pct,
            settings.quiet_wait_s,
            ticks,
            CpuSnap::busy_with_softirq,
        )
        .await?;
        let window = Window::open(admin, &cluster).await?;

        let scheduled = (settings.open_rate * settings.open_duration_s).round().max(1.0) as usize;
        let period_s = 1.0 / settings.open_rate;
        // A pool of owners, as many as the closed loop's clients.
        let tokens: Vec<String> = (0..settings.clients).map(|_| generate_token()).collect();
        let mut inflight: JoinSet<Outcome> = JoinSet::new();
        let mut tally = LoadResult::default();
        let mut max_lag_ms: f64 = 0.0;
        let mut late = 0usize;
        let started = Instant::now() + Duration::from_millis(5);
        let mut last_send = started;
        for i in 0..scheduled {
            let at = started + Duration::from_secs_f64(period_s * i as f64);
            while inflight.len() >= settings.open_max_inflight {
                if let Some(joined) = inflight.join_next().await {
                    tally.settle(joined?);
                }
            }
            while let Some(joined) = inflight.try_join_next() {
                tally.settle(joined?);
            }
            tokio::time::sleep_until(at.into()).await;
            let now = Instant::now();
            let lag_ms = now.duration_since(at).as_secs_f64() * 1e3;
            max_lag_ms = max_lag_ms.max(lag_ms);
            if lag_ms > 1.0 {
                late += 1;
            }
            last_send = now;
            let client = client.clone();
            let card = cluster.card.clone();
            let token = tokens[i % tokens.len()].clone();
            inflight.spawn(async move {
                one_task(&client, &card, &token, &json!({ "i": i }), at)
                    .await
                    .map_err(|err| err.to_string())
            });
        }
        let send_s = last_send.duration_since(started).as_secs_f64().max(1e-9);
        let give_up = Instant::now() + PATIENCE;
        while !inflight.is_empty() {
            match tokio::time::timeout_at(give_up.into(), inflight.join_next()).await {
                Ok(Some(joined)) => tally.settle(joined?),
                Ok(None) => break,
                Err(_) => {
                    let left = inflight.len();
                    inflight.abort_all();
                    tally.errors += left;
                    tally.first_error.get_or_insert(format!(
                        "{left} tasks still unfinished {} s after the last send",
                        PATIENCE.as_secs()
                    ));
                    break;
                }
            }
        }
        let LoadResult {
            samples,
            not_completed,
            errors,
            first_error,
            ..
        } = tally;
        let end = samples
            .iter()
            .map(|s| s.done)
            .max()
            .unwrap_or_else(Instant::now);
        let Usage {
            diff,
            redis_cpu_s,
            gateway_cpu_s,
            worker_cpu_s,
            client_cpu_s,
            foreign_cpu_pct,
        } = window.close(admin, &mut cluster, started, ticks).await?;
        let wall_s = end.duration_since(started).as_secs_f64().max(1e-9);
        let completed = samples.len() - not_completed;
        let per_task = |x: f64| x / completed.max(1) as f64;
        let commands: BTreeMap<String, f64> = diff
            .calls
            .iter()
            .map(|(k, v)| (k.clone(), per_task(*v as f64)))
            .collect();
        let latency = latency_stats(samples.iter().map(|s| s.total_ms));
        let create = latency_stats(samples.iter().map(|s| s.create_ms));
        let row = json!({
            "workers": workers,
            "worker_concurrency": settings.worker_concurrency,
            "offered_rate": settings.open_rate,
            "duration_s": settings.open_duration_s,
            "scheduled": scheduled,
            "completed": completed,
            "not_completed": not_completed,
            "errors": errors,
            "first_error": first_error,
            "send_rate": scheduled.saturating_sub(1) as f64 / send_s,
            "completed_per_s": completed as f64 / wall_s,
            "late_sends": late,
            "max_send_lag_ms": max_lag_ms,
            "max_inflight": settings.open_max_inflight,
            "latency_ms": latency,
            "create_ms": create,
            "redis_cmds_per_task": per_task(server_cmds(&diff.calls) as f64),
            "client_round_trips_per_task": per_task(client_round_trips(&diff.calls) as f64),
            "redis_cpu_us_per_task": per_task(redis_cpu_s * 1e6),
            "gateway_cpu_us_per_task": per_task(gateway_cpu_s * 1e6),
            "worker_cpu_us_per_task": per_task(worker_cpu_s * 1e6),
            "client_cpu_us_per_task": per_task(client_cpu_s * 1e6),
            "redis_cpu_pct": redis_cpu_s / wall_s * 100.0,
            "gateway_cpu_pct": gateway_cpu_s / wall_s * 100.0,
            "worker_cpu_pct": worker_cpu_s / wall_s * 100.0,
            "client_cpu_pct": client_cpu_s / wall_s * 100.0,
            "foreign_cpu_pct": foreign_cpu_pct,
            "quiet_before_pct": quiet,
            "contaminated": foreign_cpu_pct > settings.foreign_max,
            "commands_per_task": commands,
        });
        eprintln!(
            "  open loop, {workers} workers, offered {:.0}/s for {:.1} s: sent {:.0}/s ({late} sends > 1 ms late, max lag {max_lag_ms:.1} ms), {completed} completed ({:.0}/s), {errors} errors; latency p50 {:.2} p90 {:.2} p99 {:.2} max {:.1} ms; per task {:.1} Redis cmds, {:.2} round trips; foreign {foreign_cpu_pct:.0}%",
            settings.open_rate,
            settings.open_duration_s,
            row["send_rate"].as_f64().unwrap_or(0.0),
            row["completed_per_s"].as_f64().unwrap_or(0.0),
            latency["p50"],
            latency["p90"],
            latency["p99"],
            latency["max"],
            row["redis_cmds_per_task"].as_f64().unwrap_or(0.0),
            row["client_round_trips_per_task"].as_f64().unwrap_or(0.0),
        );
        if let Some(err) = row["first_error"].as_str() {
            eprintln!("  first error: {err}");
        }
        Ok::<_, BoxError>(row)
    }
    .await;
    cluster.stop(admin).await?;
    result
}

async fn open_rows(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ticks: f64,
) -> Res<Value> {
    let mut attempt = 0;
    loop {
        let row = open_run(settings, admin, log_dir, ticks)
            .await
            .map_err(|err| format!("open loop: {err}"))?;
        let disturbed = row["contaminated"].as_bool().unwrap_or(false);
        if run_again(
            disturbed,
            &mut attempt,
            settings.retries,
            settings.foreign_max,
        ) {
            continue;
        }
        return Ok(row);
    }
}

// ----- memory -----

async fn memory_run(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
) -> Res<Value> {
    let workers = settings.memory_workers;
    let mut cluster = Cluster::start(settings, log_dir, "mem", workers).await?;
    let result = async {
        let client = Client::new(ClientOptions::default())?;
        let deadline = Instant::now() + Duration::from_secs(settings.run_timeout_s);
        let keys0 = count_keys(admin, &cluster.namespace).await?;
        let (mem0, dataset0) = used_memory(admin).await?;
        let result = load(&client, &cluster.card, settings.clients, settings.memory_tasks, deadline).await?;
        cluster.wait_idle().await?;
        // Let in-flight heartbeats and sweeps settle; they touch only fixed-size keys.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (mem1, dataset1) = used_memory(admin).await?;
        let keys1 = count_keys(admin, &cluster.namespace).await?;
        let tasks = result.samples.len() - result.not_completed;
        if tasks == 0 {
            return Err(format!(
                "no task completed ({} errors, first: {})",
                result.errors,
                result.first_error.unwrap_or_default()
            )
            .into());
        }
        let kinds: BTreeMap<String, f64> = keys1
            .iter()
            .map(|(kind, count)| {
                let before = keys0.get(kind).copied().unwrap_or(0);
                (kind.clone(), count.saturating_sub(before) as f64 / tasks as f64)
            })
            .filter(|(_, per)| *per > 0.0)
            .collect();
        // Size one task's own keys, to show where the bytes go.
        let sample_id: Option<String> = {
            let pattern = format!("{{{}}}:task:*", cluster.namespace);
            let (_, keys) = scan_page(admin, 0, &pattern).await?;
            keys.first()
                .and_then(|key| key.rsplit_once(':').map(|(_, id)| id.to_owned()))
        };
        let mut sample = BTreeMap::new();
        if let Some(id) = &sample_id {
            for kind in ["task", "events"] {
                let key = format!("{{{}}}:{kind}:{id}", cluster.namespace);
                if let Some(bytes) = memory_usage(admin, &key).await? {
                    sample.insert(kind.to_owned(), bytes);
                }
            }
        }
        let ttl_s: i64 = match &sample_id {
            Some(id) => {
                redis::cmd("TTL")
                    .arg(format!("{{{}}}:task:{id}", cluster.namespace))
                    .query_async(admin)
                    .await?
            }
            None => -2,
        };
        let bytes_per_task = (mem1 as f64 - mem0 as f64) / tasks as f64;
        eprintln!(
            "  memory: {tasks} retained tasks, used_memory {mem0} -> {mem1} = {bytes_per_task:.0} bytes/task; keys per task {kinds:?}; sample MEMORY USAGE {sample:?}; task TTL {ttl_s} s"
        );
        Ok::<_, BoxError>(json!({
            "tasks": tasks,
            "workers": workers,
            "clients": settings.clients,
            "errors": result.errors + result.not_completed,
            "used_memory_before": mem0,
            "used_memory_after": mem1,
            "bytes_per_task": bytes_per_task,
            "dataset_bytes_per_task": (dataset1 as f64 - dataset0 as f64) / tasks as f64,
            "keys_per_task": kinds,
            "sample_memory_usage": sample,
            "sample_task_ttl_s": ttl_s,
            "input": "{\"i\": n} (echo returns it: result and input are stored)",
        }))
    }
    .await;
    cluster.stop(admin).await?;
    result
}

// ----- report -----

fn f(value: &Value, digits: usize) -> String {
    value
        .as_f64()
        .map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

fn mm(value: &Value, digits: usize) -> String {
    format!(
        "{} ({}–{})",
        f(&value["median"], digits),
        f(&value["min"], digits),
        f(&value["max"], digits)
    )
}

fn markdown(
    settings: &Settings,
    meta: &Value,
    rows: &[Value],
    open: Option<&Value>,
    memory: Option<&Value>,
) -> Res<String> {
    let mut md = String::new();
    if !rows.is_empty() {
        writeln!(
            md,
            "### End to end over HTTP: gateway + W workers × {} slots, K concurrent clients, N `echo` tasks per run, {} runs per row, median (min–max)\n",
            settings.worker_concurrency, settings.runs
        )?;
        writeln!(
            md,
            "Each client loop: `POST /tasks` (its own Task-Access-Token), then `GET /tasks/:id/subscribe` until the terminal event. tasks/s = completed tasks / (last terminal event − first POST); latency = just before the POST → terminal event received (closed loop: at saturation it is ≈ clients / throughput); create = the POST alone. Per task: Redis commands (INFO commandstats, inside scripts included: the whole cluster's, heartbeats and sweeps too), client round trips to Redis, CPU µs of Redis / the gateway / all workers / the HTTP clients (this bench). Redis {} ({}).\n",
            meta["redis_version"].as_str().unwrap_or("?"),
            meta["persistence"].as_str().unwrap_or("?"),
        )?;
        writeln!(
            md,
            "| workers | clients | N | tasks/s | p50 ms | p90 ms | p99 ms | max ms | create p50 / p99 ms | Redis cmds/task | Redis RT/task | CPU µs/task redis / gateway / workers / clients | others % core | errors |"
        )?;
        writeln!(md, "|{}", "---|".repeat(14))?;
        for row in rows {
            let lat = &row["latency_ms"];
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} / {} / {} / {} | {}{} | {} |",
                row["workers"],
                row["clients"],
                row["n"],
                mm(&row["tasks_per_s"], 0),
                mm(&lat["p50"], 1),
                f(&lat["p90"]["median"], 1),
                mm(&lat["p99"], 1),
                f(&lat["max"]["max"], 1),
                f(&row["create_ms"]["p50"]["median"], 1),
                f(&row["create_ms"]["p99"]["median"], 1),
                f(&row["redis_cmds_per_task"]["median"], 1),
                f(&row["client_round_trips_per_task"]["median"], 2),
                f(&row["redis_cpu_us_per_task"]["median"], 0),
                f(&row["gateway_cpu_us_per_task"]["median"], 0),
                f(&row["worker_cpu_us_per_task"]["median"], 0),
                f(&row["client_cpu_us_per_task"]["median"], 0),
                f(&row["foreign_cpu_pct"]["median"], 0),
                if row["contaminated_runs"].as_u64().unwrap_or(0) > 0 {
                    " ⚠"
                } else {
                    ""
                },
                row["errors"],
            )?;
        }
        writeln!(md)?;
        // The commands that make up the per-task count, busiest first (median of runs).
        let mut names: Vec<String> = rows
            .iter()
            .filter_map(|r| r["commands_per_task"].as_object())
            .flat_map(|m| m.keys().cloned())
            .collect();
        names.sort();
        names.dedup();
        let calls = |row: &Value, name: &str| {
            row["commands_per_task"][name]["calls"]
                .as_f64()
                .unwrap_or(0.0)
        };
        let max_of = |name: &str| rows.iter().map(|r| calls(r, name)).fold(0.0, f64::max);
        names.retain(|name| max_of(name) >= 0.005);
        names.sort_by(|a, b| max_of(b).total_cmp(&max_of(a)));
        writeln!(
            md,
            "Redis commands per task by command (* = sent by a client; the rest run inside scripts):\n"
        )?;
        let header: Vec<String> = rows
            .iter()
            .map(|r| format!("W={} K={}", r["workers"], r["clients"]))
            .collect();
        writeln!(md, "| command | {} |", header.join(" | "))?;
        writeln!(md, "|---|{}", "---|".repeat(rows.len()))?;
        for name in names {
            let cells: Vec<String> = rows
                .iter()
                .map(|r| format!("{:.2}", calls(r, &name)))
                .collect();
            writeln!(
                md,
                "| {name}{} | {} |",
                client_star(&name),
                cells.join(" | ")
            )?;
        }
        writeln!(md)?;
    }
    if let Some(o) = open {
        let lat = &o["latency_ms"];
        writeln!(
            md,
            "### End to end, open loop: {} `echo` tasks/s offered for {} s, gateway + {} workers × {} slots\n",
            f(&o["offered_rate"], 0),
            f(&o["duration_s"], 1),
            o["workers"],
            o["worker_concurrency"],
        )?;
        writeln!(
            md,
            "Each task is created on a fixed schedule (`POST /tasks`, {} owners in turn) whatever became of the earlier ones, then followed through `GET /tasks/:id/subscribe` to its terminal event. Latency = scheduled creation time → terminal event received (a late send counts against it); create = scheduled time → POST answered. At most {} tasks are followed at once. Per task as above.\n",
            settings.clients, o["max_inflight"],
        )?;
        writeln!(
            md,
            "| offered /s | sent /s | completed /s | p50 ms | p90 ms | p99 ms | max ms | create p50 / p99 ms | sends > 1 ms late (max lag ms) | Redis cmds/task | Redis RT/task | CPU µs/task redis / gateway / workers / clients | others % core | errors |"
        )?;
        writeln!(md, "|{}", "---|".repeat(14))?;
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} ({}) | {} | {} | {} / {} / {} / {} | {}{} | {} |\n",
            f(&o["offered_rate"], 0),
            f(&o["send_rate"], 0),
            f(&o["completed_per_s"], 0),
            f(&lat["p50"], 2),
            f(&lat["p90"], 2),
            f(&lat["p99"], 2),
            f(&lat["max"], 1),
            f(&o["create_ms"]["p50"], 2),
            f(&o["create_ms"]["p99"], 2),
            o["late_sends"],
            f(&o["max_send_lag_ms"], 1),
            f(&o["redis_cmds_per_task"], 1),
            f(&o["client_round_trips_per_task"], 2),
            f(&o["redis_cpu_us_per_task"], 0),
            f(&o["gateway_cpu_us_per_task"], 0),
            f(&o["worker_cpu_us_per_task"], 0),
            f(&o["client_cpu_us_per_task"], 0),
            f(&o["foreign_cpu_pct"], 0),
            if o["contaminated"].as_bool() == Some(true) {
                " ⚠"
            } else {
                ""
            },
            o["errors"].as_u64().unwrap_or(0) + o["not_completed"].as_u64().unwrap_or(0),
        )?;
    }
    if let Some(mem) = memory {
        writeln!(
            md,
            "### Redis memory per retained terminal task\n\n{} `echo` tasks (input `{{\"i\": n}}`) through HTTP by {} clients (one token each) on {} workers; INFO memory `used_memory` before the first create and after the last task was terminal (retained for 24 h by default): **{} bytes per task** (`used_memory_dataset`: {} bytes). Keys left per task: {}. One task's keys by `MEMORY USAGE`: {}.\n",
            mem["tasks"],
            mem["clients"],
            mem["workers"],
            f(&mem["bytes_per_task"], 0),
            f(&mem["dataset_bytes_per_task"], 0),
            mem["keys_per_task"]
                .as_object()
                .map(|m| m
                    .iter()
                    .map(|(k, v)| format!("{k} {}", f(v, 2)))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default(),
            mem["sample_memory_usage"]
                .as_object()
                .map(|m| m
                    .iter()
                    .map(|(k, v)| format!("{k} {v} B"))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default(),
        )?;
    }
    Ok(md)
}

async fn meta(settings: &Settings, admin: &mut MultiplexedConnection) -> Res<Value> {
    let server = server_facts(admin).await?;
    Ok(json!({
        "label": settings.label,
        "redis_version": server.version,
        "persistence": server.persistence,
        "cpus": cpus(),
        "loadavg_at_start": loadavg(),
        "settings": settings.to_json(),
    }))
}

#[tokio::main]
async fn main() -> Res<()> {
    if !bench_requested("e2e is a benchmark: run it with scripts/bench-report (cargo bench)") {
        return Ok(());
    }
    let settings = Settings::from_env()?;
    let ticks = clock_ticks();
    let mut admin = admin_connection(&settings.url).await?;
    let meta = meta(&settings, &mut admin).await?;
    eprintln!("e2e bench: {meta}");
    let logs = LogDir::create("e2e-bench")?;
    let log_dir = logs.path();

    let result = async {
        let rows = if settings.runs_scenario("throughput") {
            throughput_rows(&settings, &mut admin, log_dir, ticks).await?
        } else {
            Vec::new()
        };
        let open = if settings.runs_scenario("open") {
            Some(open_rows(&settings, &mut admin, log_dir, ticks).await?)
        } else {
            None
        };
        let memory = if settings.runs_scenario("memory") && settings.memory_tasks > 0 {
            Some(memory_run(&settings, &mut admin, log_dir).await?)
        } else {
            None
        };
        Ok::<_, BoxError>((rows, open, memory))
    }
    .await;
    let (rows, open, memory) = result?;

    let md = markdown(&settings, &meta, &rows, open.as_ref(), memory.as_ref())?;
    println!("{md}");
    let report = json!({
        "meta": meta,
        "e2e": rows,
        "open": open,
        "memory": memory,
        "markdown": md,
    });
    write_json(settings.out.as_deref(), &report)
}
