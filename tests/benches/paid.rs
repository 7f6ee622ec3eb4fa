//! Paid invoke beside free invoke, in one run against one cluster: what an x402 payment through
//! the dev facilitator costs per request, in throughput, latency and CPU.
//!
//! Run it through `scripts/bench-paid` (it builds the release binaries, copies them aside and
//! runs this bench's executable), or directly:
//!
//! ```sh
//! cargo build --release -p gateway -p taskcluster-worker -p facilitator
//! DURATION=5 cargo bench -p cluster-tests --bench paid
//! ```
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it does nothing. It never asserts
//! a speed: it measures and prints.
//!
//! The cluster, on free loopback ports (never 6379), stopped at the end whatever happens:
//! a private redis-server with AOF (`appendfsync everysec`: what a durable deployment runs),
//! the `facilitator` (in-memory ledger; it funds Anvil accounts #0..#9 with 1000 USDC each),
//! `WORKERS` workers (`WORKER_CONCURRENCY` slots each, hosting `echo` and `summarize`, the
//! latter priced `PRICE` USDC per invoke through `WORKER_PRICES`) and one gateway paid to
//! Anvil account #1 through that facilitator.
//!
//! Phases, in this order, each `WARMUP` seconds (discarded) then `DURATION` seconds measured,
//! `CONNECTIONS` closed loops sharing one reqwest client (HTTP/1.1 keep-alive pool):
//! 1. `free`: `POST /entrypoints/echo/invoke {"input":{"x":1}}`;
//! 2. `paid`: `POST /entrypoints/summarize/invoke {"input":{"text":…}}` with a fresh
//!    `PAYMENT-SIGNATURE` on every request. Signing is the payer's cost, not the gateway's, so
//!    `CREDENTIALS` credentials are signed before the phase (round robin over the ten Anvil
//!    keys, random nonces), answering the challenge of one unpaid request (402,
//!    `PAYMENT-REQUIRED`). When the pool runs out the phase stops early and says so.
//!
//! Per phase: 2xx answers per second and their latency (answers completed inside the measured
//! window), non-2xx answers by status over the whole phase (warm-up included), CPU µs per 2xx
//! answer of the gateway, the facilitator, redis-server, the workers and this bench (utime +
//! stime from `/proc/<pid>/stat` at the window's edges), the CPU others used meanwhile (% of
//! one core) and the load average when the phase started; then the paid/free throughput ratio.
//!
//! Correctness, checked cheaply at the end: the facilitator's `GET /control/stats` `settled`
//! must equal the number of 200 answers to paid requests (each one settled exactly once);
//! a mismatch is printed loudly and the bench exits non-zero.
//!
//! Environment: `DURATION` (10 s), `WARMUP` (2 s), `CONNECTIONS` (64), `CREDENTIALS` (20000),
//! `WORKERS` (2), `WORKER_CONCURRENCY` (64), `PRICE` (0.001), `REQUEST_TIMEOUT` (60 s),
//! `SERVICE_RUST_LOG` (warn: per-request logging would be measured too), `QUIET_PCT` (15) and
//! `QUIET_WAIT_S` (10: before each phase, the longest wait for others' load to settle),
//! `GATEWAY_BIN`, `WORKER_BIN`, `FACILITATOR_BIN` (default: `target/release/…`, next to this
//! bench's profile directory), `REDIS_SERVER`, `BENCH_OUT` (also write the markdown there),
//! `BENCH_COMMAND` (the command line shown in the report).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::measure::cpu::{CpuSnap, clock_ticks, process_ticks, wait_quiet};
use harness::measure::env::{bin_from_env, env_or, require_bins};
use harness::measure::output::{LogDir, bench_requested, cpu_model, cpus, loadavg};
use harness::measure::redis_admin::{admin_connection, server_facts};
use harness::measure::service::{BenchProc, terminate_all};
use harness::measure::stats::{percentile, thousands};
use harness::measure::{BoxError, Res};
use harness::redis_server::{RedisOptions, RedisServer};
use payments::LocalPayer;
use payments::dev::ANVIL_KEYS;
use payments::payer::Challenge;
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig};
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Anvil account #1: the payee.
const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const FREE_KEY: &str = "echo";
const PAID_KEY: &str = "summarize";
const FREE_BODY: &str = r#"{"input":{"x":1}}"#;
const PAID_BODY: &str = r#"{"input":{"text":"The gateway admits a paid request only after the facilitator settled it. Each credential pays for exactly one execution. A replayed credential is refused before any work is queued. Workers never see payment data at all. The summary keeps the most salient sentences of the text."}}"#;
/// Never refuse a create for capacity: the bench measures throughput, not admission control.
const MAX_TASKS: u64 = 100_000_000;
/// Bound on things that take milliseconds when all is well (a process starting, a worker
/// registering).
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
/// Seconds of validity a credential must keep after the last use: the gateway's settle margin
/// plus room for a slow answer.
const VALIDITY_SLACK_S: u64 = payments::precheck::SETTLE_MARGIN_SECONDS + 10;

// ----- settings -----

#[derive(Debug, Clone)]
struct Settings {
    gateway_bin: PathBuf,
    worker_bin: PathBuf,
    facilitator_bin: PathBuf,
    duration_s: u64,
    warmup_s: u64,
    connections: usize,
    credentials: usize,
    workers: usize,
    worker_concurrency: usize,
    price: String,
    request_timeout_s: u64,
    service_rust_log: String,
    quiet_pct: f64,
    quiet_wait_s: u64,
    out: Option<String>,
    command: Option<String>,
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let settings = Settings {
            gateway_bin: bin_from_env("GATEWAY_BIN", "gateway"),
            worker_bin: bin_from_env("WORKER_BIN", "worker"),
            facilitator_bin: bin_from_env("FACILITATOR_BIN", "facilitator"),
            duration_s: env_or("DURATION", 10)?,
            warmup_s: env_or("WARMUP", 2)?,
            connections: env_or("CONNECTIONS", 64)?,
            credentials: env_or("CREDENTIALS", 20_000)?,
            workers: env_or("WORKERS", 2)?,
            worker_concurrency: env_or("WORKER_CONCURRENCY", 64)?,
            price: env_or("PRICE", String::from("0.001"))?,
            request_timeout_s: env_or("REQUEST_TIMEOUT", 60)?,
            service_rust_log: env_or("SERVICE_RUST_LOG", String::from("warn"))?,
            quiet_pct: env_or("QUIET_PCT", 15.0)?,
            quiet_wait_s: env_or("QUIET_WAIT_S", 10)?,
            out: std::env::var("BENCH_OUT").ok().filter(|p| !p.is_empty()),
            command: std::env::var("BENCH_COMMAND")
                .ok()
                .filter(|c| !c.is_empty()),
        };
        if settings.duration_s == 0
            || settings.connections == 0
            || settings.credentials == 0
            || settings.workers == 0
            || settings.worker_concurrency == 0
            || settings.request_timeout_s == 0
        {
            return Err(
                "DURATION, CONNECTIONS, CREDENTIALS, WORKERS, WORKER_CONCURRENCY and REQUEST_TIMEOUT must be positive"
                    .into(),
            );
        }
        require_bins(
            &[
                &settings.gateway_bin,
                &settings.worker_bin,
                &settings.facilitator_bin,
            ],
            "`cargo build --release -p gateway -p taskcluster-worker -p facilitator`, or set GATEWAY_BIN / WORKER_BIN / FACILITATOR_BIN",
        )?;
        Ok(settings)
    }
}

// ----- the cluster -----

fn free_port() -> Res<u16> {
    // Port 0 never yields 6379 in practice, but a system Redis may own it: skip it anyway.
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port != 6379 {
            return Ok(port);
        }
    }
}

/// A server bound to a port probed free; should another process take the port before the
/// server binds, the server exits and the next attempt uses another port.
async fn spawn_listening(
    bin: &Path,
    name: &str,
    log_dir: &Path,
    listen_var: &str,
    envs: &[(&str, String)],
) -> Res<(BenchProc, String)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port()?;
        let mut all = vec![(listen_var, format!("127.0.0.1:{port}"))];
        all.extend(envs.iter().cloned());
        let mut proc = BenchProc::service(bin, name, log_dir, &all)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        match proc.check_alive() {
            Ok(()) => return Ok((proc, format!("http://127.0.0.1:{port}"))),
            Err(err) if attempt >= 5 => return Err(err),
            Err(_) => continue,
        }
    }
}

struct Cluster {
    redis: Option<RedisServer>,
    facilitator: BenchProc,
    facilitator_url: String,
    gateway: BenchProc,
    gateway_url: String,
    workers: Vec<BenchProc>,
}

/// CPU ticks of every process of the cluster and of the machine at one instant.
#[derive(Debug, Clone, Copy)]
struct Ticks {
    at: Instant,
    machine: CpuSnap,
    gateway: u64,
    facilitator: u64,
    redis: u64,
    workers: u64,
}

impl Cluster {
    async fn start(settings: &Settings, log_dir: &Path) -> Res<Cluster> {
        // AOF with fsync every second: the durable setting a deployment runs (the harness'
        // `with_aof` means `always`; the later argument overrides it).
        let redis = tokio::task::spawn_blocking(|| {
            RedisServer::start_with(
                RedisOptions::default()
                    .with_aof(true)
                    .arg("--appendfsync")
                    .arg("everysec"),
            )
        })
        .await??;
        let redis_url = redis.url();

        let (facilitator, facilitator_url) = spawn_listening(
            &settings.facilitator_bin,
            "facilitator",
            log_dir,
            "FACILITATOR_LISTEN",
            &[("RUST_LOG", settings.service_rust_log.clone())],
        )
        .await?;

        let mut workers = Vec::new();
        let mut ids = Vec::new();
        for w in 0..settings.workers {
            let id = format!("paid-bench-w{w}-{}", std::process::id());
            workers.push(BenchProc::service(
                &settings.worker_bin,
                &id,
                log_dir,
                &[
                    ("REDIS_URL", redis_url.clone()),
                    ("WORKER_ID", id.clone()),
                    (
                        "WORKER_CONCURRENCY",
                        settings.worker_concurrency.to_string(),
                    ),
                    ("WORKER_ENTRYPOINTS", format!("{FREE_KEY},{PAID_KEY}")),
                    ("WORKER_PRICES", format!("{PAID_KEY}={}", settings.price)),
                    ("RUST_LOG", settings.service_rust_log.clone()),
                ],
            )?);
            ids.push(id);
        }

        let (gateway, gateway_url) = spawn_listening(
            &settings.gateway_bin,
            "gateway",
            log_dir,
            "LISTEN_ADDR",
            &[
                ("REDIS_URL", redis_url.clone()),
                ("PAY_TO", PAY_TO.to_owned()),
                ("FACILITATOR_URL", facilitator_url.clone()),
                ("MAX_TASKS", MAX_TASKS.to_string()),
                // Ten payers share every connection: the per-payer bound on pending
                // credentials (a guard against forged floods) must not throttle the bench.
                (
                    "MAX_PENDING_PAYMENTS",
                    settings.connections.max(32).to_string(),
                ),
                (
                    "MAX_PENDING_PAYMENTS_PER_PAYER",
                    settings.connections.to_string(),
                ),
                ("RUST_LOG", settings.service_rust_log.clone()),
            ],
        )
        .await?;

        let mut cluster = Cluster {
            redis: Some(redis),
            facilitator,
            facilitator_url,
            gateway,
            gateway_url,
            workers,
        };
        cluster.wait_workers(&redis_url, &ids).await?;
        Ok(cluster)
    }

    /// Until the registry lists every worker of ours, so that all of them take tasks from the
    /// first measured request on.
    async fn wait_workers(&mut self, redis_url: &str, ids: &[String]) -> Res<()> {
        let mut config = RedisStoreConfig::new(redis_url.to_owned());
        config.timeout = Duration::from_secs(10);
        let store = RedisStore::connect(config).await?;
        let registry = RedisRegistry::new(&store);
        let give_up = Instant::now() + PATIENCE;
        loop {
            self.check_alive()?;
            let listed = registry
                .workers()
                .await?
                .iter()
                .filter(|entry| ids.contains(&entry.worker_id))
                .count();
            if listed == ids.len() {
                return Ok(());
            }
            if Instant::now() > give_up {
                return Err(format!("only {listed}/{} workers registered", ids.len()).into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn check_alive(&mut self) -> Res<()> {
        self.gateway.check_alive()?;
        self.facilitator.check_alive()?;
        for worker in &mut self.workers {
            worker.check_alive()?;
        }
        if let Some(redis) = self.redis.as_mut()
            && !redis.is_running()
        {
            return Err(format!("redis-server exited; log tail:\n{}", redis.log_tail(20)).into());
        }
        Ok(())
    }

    fn url(&self, key: &str) -> String {
        format!("{}/entrypoints/{key}/invoke", self.gateway_url)
    }

    fn ticks(&self) -> Res<Ticks> {
        Ok(Ticks {
            at: Instant::now(),
            machine: CpuSnap::now()?,
            gateway: self.gateway.ticks(),
            facilitator: self.facilitator.ticks(),
            redis: self
                .redis
                .as_ref()
                .and_then(RedisServer::pid)
                .and_then(|pid| process_ticks(&pid.to_string()))
                .unwrap_or(0),
            workers: self.workers.iter().map(BenchProc::ticks).sum(),
        })
    }

    /// SIGTERM to the gateway first (it drains), then the workers and the facilitator, then
    /// redis-server (SIGTERM, SIGKILL after 5 s, its directory removed).
    async fn stop(mut self) {
        terminate_all(
            std::slice::from_mut(&mut self.gateway),
            Duration::from_secs(10),
        )
        .await;
        terminate_all(&mut self.workers, Duration::from_secs(10)).await;
        terminate_all(
            std::slice::from_mut(&mut self.facilitator),
            Duration::from_secs(5),
        )
        .await;
        if let Some(redis) = self.redis.take() {
            // Stopping it blocks for up to a few seconds.
            let _ = tokio::task::spawn_blocking(move || drop(redis)).await;
        }
    }
}

// ----- readiness and credentials -----

/// One readiness probe: a free invoke answered 200, then an unpaid paid invoke answered 402
/// with a `PAYMENT-REQUIRED` challenge (returned); otherwise what went wrong.
async fn probe(cluster: &Cluster, http: &reqwest::Client) -> Result<Challenge, String> {
    let free = http
        .post(cluster.url(FREE_KEY))
        .header(CONTENT_TYPE, "application/json")
        .body(FREE_BODY)
        .send()
        .await
        .map_err(|err| format!("{FREE_KEY}: {err}"))?;
    if free.status() != StatusCode::OK {
        return Err(format!("{FREE_KEY}: {}", free.status()));
    }
    let _ = free.bytes().await;
    let unpaid = http
        .post(cluster.url(PAID_KEY))
        .header(CONTENT_TYPE, "application/json")
        .body(PAID_BODY)
        .send()
        .await
        .map_err(|err| format!("unpaid {PAID_KEY}: {err}"))?;
    if unpaid.status() != StatusCode::PAYMENT_REQUIRED {
        return Err(format!("unpaid {PAID_KEY}: {}", unpaid.status()));
    }
    let header = unpaid
        .headers()
        .get(payments::PAYMENT_REQUIRED)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or("402 without a PAYMENT-REQUIRED header")?;
    let body = unpaid.bytes().await.map_err(|err| err.to_string())?;
    Challenge::from_response(Some(&header), &body).map_err(|err| err.to_string())
}

/// Waits until [`probe`] passes; returns the challenge.
async fn wait_ready(cluster: &mut Cluster, http: &reqwest::Client) -> Res<Challenge> {
    let give_up = Instant::now() + PATIENCE;
    loop {
        cluster.check_alive()?;
        let last = match probe(cluster, http).await {
            Ok(challenge) => return Ok(challenge),
            Err(last) => last,
        };
        if Instant::now() > give_up {
            return Err(format!(
                "the gateway never became ready ({last}); gateway log:\n{}",
                cluster.gateway.log_tail()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The shortest validity a credential answering `challenge` gets, in seconds from signing
/// (`LocalPayer` signs `now .. now + max(maxTimeoutSeconds, 60)`).
fn validity_s(challenge: &Challenge) -> u64 {
    let timeout = match challenge {
        Challenge::V2(c) => c.accepts.iter().map(|r| r.max_timeout_seconds).min(),
        Challenge::V1(c) => c.accepts.iter().map(|r| r.max_timeout_seconds).min(),
    };
    timeout.unwrap_or(0).max(60)
}

/// `count` credential header values answering `challenge`, signed before any measurement on
/// one blocking thread per Anvil key, interleaved so that consecutive requests pay from
/// different accounts. Returns the pool and the header's name.
async fn sign_pool(challenge: &Challenge, count: usize) -> Res<(Vec<String>, &'static str)> {
    let now = unix_now();
    let mut threads = Vec::new();
    for (k, key) in ANVIL_KEYS.iter().enumerate() {
        let payer = LocalPayer::from_hex(key)?;
        let challenge = challenge.clone();
        // Credential i is signed by key i % 10.
        let share = count / ANVIL_KEYS.len() + usize::from(k < count % ANVIL_KEYS.len());
        threads.push(tokio::task::spawn_blocking(move || {
            (0..share)
                .map(|_| {
                    payer
                        .answer(&challenge, None, now)
                        .map(|header| (header.name, header.value))
                })
                .collect::<Result<Vec<_>, _>>()
        }));
    }
    let mut shares = Vec::new();
    for thread in threads {
        shares.push(thread.await??.into_iter());
    }
    let mut pool = Vec::with_capacity(count);
    let mut name = payments::PAYMENT_SIGNATURE;
    while pool.len() < count {
        for share in &mut shares {
            if let Some((header, value)) = share.next() {
                name = header;
                pool.push(value);
            }
        }
    }
    Ok((pool, name))
}

// ----- the load -----

/// One answered (or failed) request.
#[derive(Debug, Clone, Copy)]
struct Sample {
    done: Instant,
    latency_ms: f64,
    /// The HTTP status; 0 when no answer came (connection error, timeout).
    status: u16,
    /// A 2xx answer to a paid request without a `PAYMENT-RESPONSE` receipt.
    no_receipt: bool,
}

#[derive(Debug, Default)]
struct Loop {
    samples: Vec<Sample>,
    first_error: Option<String>,
}

/// What a phase sends.
struct Load {
    url: String,
    body: &'static str,
    /// Paid: the pre-signed credentials (taken in order, each once) and the header's name.
    credentials: Option<(Arc<Vec<String>>, &'static str)>,
}

#[derive(Debug, Clone)]
struct Phase {
    name: &'static str,
    route: String,
    window_s: f64,
    ok: usize,
    ok_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Over the whole phase, warm-up and in-flight tail included.
    non_2xx: BTreeMap<String, usize>,
    ok_total: usize,
    no_receipt_total: usize,
    first_error: Option<String>,
    gateway_us: f64,
    facilitator_us: f64,
    redis_us: f64,
    workers_us: f64,
    client_us: f64,
    foreign_pct: f64,
    loadavg: String,
    credentials_used: Option<usize>,
    /// Seconds into the measured window when the credential pool ran out.
    exhausted_at_s: Option<f64>,
}

impl Phase {
    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "route": self.route,
            "window_s": self.window_s,
            "ok": self.ok,
            "ok_per_s": self.ok_per_s,
            "latency_ms": {"p50": self.p50_ms, "p99": self.p99_ms, "max": self.max_ms},
            "non_2xx": self.non_2xx,
            "ok_total": self.ok_total,
            "no_receipt_total": self.no_receipt_total,
            "first_error": self.first_error,
            "cpu_us_per_ok": {
                "gateway": self.gateway_us,
                "facilitator": self.facilitator_us,
                "redis": self.redis_us,
                "workers": self.workers_us,
                "bench": self.client_us,
            },
            "foreign_cpu_pct": self.foreign_pct,
            "loadavg": self.loadavg,
            "credentials_used": self.credentials_used,
            "exhausted_at_s": self.exhausted_at_s,
        })
    }
}

/// One closed loop: request, read the whole answer (so the connection goes back to the pool),
/// again, until `stop`, or until the credential pool is empty.
async fn one_loop(
    http: reqwest::Client,
    load: Arc<Load>,
    next: Arc<AtomicUsize>,
    stop: Instant,
    exhausted: Arc<(Mutex<Option<Instant>>, Notify)>,
) -> Loop {
    let mut out = Loop::default();
    while Instant::now() < stop {
        let mut request = http
            .post(&load.url)
            .header(CONTENT_TYPE, "application/json")
            .body(load.body);
        if let Some((pool, name)) = &load.credentials {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(value) = pool.get(i) else {
                let (first, notify) = &*exhausted;
                let mut first = first.lock().unwrap_or_else(|p| p.into_inner());
                if first.is_none() {
                    *first = Some(Instant::now());
                    // A stored permit: the window's end is taken even if nobody waits yet.
                    notify.notify_one();
                }
                break;
            };
            request = request.header(*name, value.as_str());
        }
        let sent = Instant::now();
        let (status, no_receipt) = match request.send().await {
            Ok(response) => {
                let status = response.status();
                let no_receipt = load.credentials.is_some()
                    && status.is_success()
                    && !response.headers().contains_key(payments::PAYMENT_RESPONSE);
                match response.bytes().await {
                    Ok(_) => (status.as_u16(), no_receipt),
                    Err(err) => {
                        out.first_error
                            .get_or_insert_with(|| format!("reading the answer: {err}"));
                        (0, false)
                    }
                }
            }
            Err(err) => {
                out.first_error.get_or_insert_with(|| err.to_string());
                (0, false)
            }
        };
        let done = Instant::now();
        if status != 0 && !(200..300).contains(&status) && out.first_error.is_none() {
            out.first_error = Some(format!("HTTP {status}"));
        }
        out.samples.push(Sample {
            done,
            latency_ms: done.duration_since(sent).as_secs_f64() * 1e3,
            status,
            no_receipt,
        });
    }
    out
}

async fn run_phase(
    settings: &Settings,
    cluster: &mut Cluster,
    http: &reqwest::Client,
    ticks_per_s: f64,
    name: &'static str,
    load: Load,
) -> Res<Phase> {
    let route = load
        .url
        .split_once("/entrypoints/")
        .map(|(_, path)| format!("POST /entrypoints/{path}"))
        .unwrap_or_else(|| load.url.clone());
    let pool_len = load.credentials.as_ref().map(|(pool, _)| pool.len());
    eprintln!(
        "phase {name}: {route}, {} connections, {} s warm-up + {} s measured",
        settings.connections, settings.warmup_s, settings.duration_s
    );
    wait_quiet(
        settings.quiet_pct,
        settings.quiet_wait_s,
        ticks_per_s,
        CpuSnap::busy_with_softirq,
    )
    .await?;
    let loadavg_at_start = loadavg_short();

    let load = Arc::new(load);
    let next = Arc::new(AtomicUsize::new(0));
    let exhausted = Arc::new((Mutex::new(None::<Instant>), Notify::new()));
    let begin = Instant::now();
    let window_start = begin + Duration::from_secs(settings.warmup_s);
    let window_end = window_start + Duration::from_secs(settings.duration_s);
    let mut loops: JoinSet<Loop> = JoinSet::new();
    for _ in 0..settings.connections {
        loops.spawn(one_loop(
            http.clone(),
            load.clone(),
            next.clone(),
            window_end,
            exhausted.clone(),
        ));
    }

    // The window's edges: CPU ticks of every process there, and the clock.
    tokio::time::sleep_until(window_start.into()).await;
    let t0 = cluster.ticks()?;
    tokio::select! {
        () = tokio::time::sleep_until(window_end.into()) => {}
        () = exhausted.1.notified() => {}
    }
    let t1 = cluster.ticks()?;

    let mut samples = Vec::new();
    let mut first_error = None;
    while let Some(joined) = loops.join_next().await {
        let part = joined?;
        samples.extend(part.samples);
        first_error = first_error.or(part.first_error);
    }
    cluster.check_alive()?;

    let exhausted_at = *exhausted.0.lock().unwrap_or_else(|p| p.into_inner());
    // The pool may run out in the warm-up already: then the window is empty.
    let end = t1.at.max(t0.at);
    let window_s = end.duration_since(t0.at).as_secs_f64();
    let in_window = |s: &&Sample| s.done >= t0.at && s.done <= end;
    let mut latencies: Vec<f64> = samples
        .iter()
        .filter(in_window)
        .filter(|s| (200..300).contains(&s.status))
        .map(|s| s.latency_ms)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let ok = latencies.len();
    let mut non_2xx = BTreeMap::new();
    for sample in samples.iter().filter(|s| !(200..300).contains(&s.status)) {
        let key = match sample.status {
            0 => String::from("no answer"),
            status => status.to_string(),
        };
        *non_2xx.entry(key).or_insert(0) += 1;
    }
    let per_ok = |delta: u64| delta as f64 / ticks_per_s * 1e6 / ok.max(1) as f64;
    let ours = t1.gateway.saturating_sub(t0.gateway)
        + t1.facilitator.saturating_sub(t0.facilitator)
        + t1.redis.saturating_sub(t0.redis)
        + t1.workers.saturating_sub(t0.workers)
        + t1.machine.own.saturating_sub(t0.machine.own);
    let busy = t1
        .machine
        .busy_with_softirq()
        .saturating_sub(t0.machine.busy_with_softirq());
    let foreign_pct = busy.saturating_sub(ours) as f64 / ticks_per_s / window_s.max(1e-9) * 100.0;
    let phase = Phase {
        name,
        route,
        window_s,
        ok,
        ok_per_s: ok as f64 / window_s.max(1e-9),
        p50_ms: percentile(&latencies, 50.0),
        p99_ms: percentile(&latencies, 99.0),
        max_ms: latencies.last().copied().unwrap_or(0.0),
        non_2xx,
        ok_total: samples
            .iter()
            .filter(|s| (200..300).contains(&s.status))
            .count(),
        no_receipt_total: samples.iter().filter(|s| s.no_receipt).count(),
        first_error,
        gateway_us: per_ok(t1.gateway.saturating_sub(t0.gateway)),
        facilitator_us: per_ok(t1.facilitator.saturating_sub(t0.facilitator)),
        redis_us: per_ok(t1.redis.saturating_sub(t0.redis)),
        workers_us: per_ok(t1.workers.saturating_sub(t0.workers)),
        client_us: per_ok(t1.machine.own.saturating_sub(t0.machine.own)),
        foreign_pct,
        loadavg: loadavg_at_start,
        credentials_used: pool_len.map(|len| next.load(Ordering::Relaxed).min(len)),
        exhausted_at_s: exhausted_at.map(|at| {
            at.checked_duration_since(window_start)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        }),
    };
    eprintln!(
        "  {name}: {:.0} 2xx/s ({} in {:.2} s), p50 {:.1} p99 {:.1} max {:.1} ms, non-2xx {:?}; CPU µs per 2xx: gateway {:.0} facilitator {:.0} redis {:.0} workers {:.0} bench {:.0}; others {:.0}% of a core",
        phase.ok_per_s,
        phase.ok,
        phase.window_s,
        phase.p50_ms,
        phase.p99_ms,
        phase.max_ms,
        phase.non_2xx,
        phase.gateway_us,
        phase.facilitator_us,
        phase.redis_us,
        phase.workers_us,
        phase.client_us,
        phase.foreign_pct,
    );
    if let Some(err) = &phase.first_error {
        eprintln!("  first error: {err}");
    }
    Ok(phase)
}

// ----- the report -----

/// The 1, 5 and 15 minute load averages.
fn loadavg_short() -> String {
    loadavg()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Output of a command run in the workspace, trimmed; `None` when it fails.
fn run_text(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned()).filter(|t| !t.is_empty())
}

/// Commit, and whether the sources of the measured binaries differ from it.
fn commit() -> String {
    let hash = run_text("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
    let dirty = Command::new("git")
        .args([
            "diff",
            "--quiet",
            "HEAD",
            "--",
            "gateway",
            "worker",
            "shared",
            "payments",
            "facilitator",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .status()
        .map(|status| !status.success())
        .unwrap_or(false);
    if dirty {
        format!("{hash} (+ uncommitted changes)")
    } else {
        hash
    }
}

fn statuses(map: &BTreeMap<String, usize>) -> String {
    if map.is_empty() {
        return String::from("0");
    }
    map.iter()
        .map(|(status, count)| format!("{status}: {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Facts {
    date: String,
    commit: String,
    redis: String,
    signed: usize,
    sign_s: f64,
    validity_s: u64,
    stats: Value,
    settled: u64,
    paid_ok: usize,
}

fn markdown(settings: &Settings, facts: &Facts, phases: &[Phase]) -> Res<String> {
    let mut md = String::new();
    writeln!(
        md,
        "### Paid invoke (x402 through the dev facilitator) beside free invoke\n"
    )?;
    writeln!(
        md,
        "{}, commit {}, {} CPUs ({}), {} connections (one reqwest client, HTTP/1.1 keep-alive), {} s measured after {} s warm-up per phase; gateway + {} workers × {} slots + facilitator (memory ledger) + redis-server {}; RUST_LOG={}.\n",
        facts.date,
        facts.commit,
        cpus(),
        cpu_model(),
        settings.connections,
        settings.duration_s,
        settings.warmup_s,
        settings.workers,
        settings.worker_concurrency,
        facts.redis,
        settings.service_rust_log,
    )?;
    writeln!(
        md,
        "| phase | route | 2xx/s | 2xx | p50 ms | p99 ms | max ms | non-2xx (whole phase) | gateway CPU µs/req | facilitator CPU µs/req | redis CPU µs/req | workers CPU µs/req | bench CPU µs/req | others % core | load avg |"
    )?;
    writeln!(md, "|{}", "---|".repeat(15))?;
    for p in phases {
        writeln!(
            md,
            "| {} | `{}` | {} | {} | {:.1} | {:.1} | {:.1} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            p.name,
            p.route,
            thousands(p.ok_per_s),
            p.ok,
            p.p50_ms,
            p.p99_ms,
            p.max_ms,
            statuses(&p.non_2xx),
            p.gateway_us,
            p.facilitator_us,
            p.redis_us,
            p.workers_us,
            p.client_us,
            p.foreign_pct,
            p.loadavg,
        )?;
    }
    writeln!(md)?;
    let free = phases.iter().find(|p| p.name == "free");
    let paid = phases.iter().find(|p| p.name == "paid");
    if let (Some(free), Some(paid)) = (free, paid)
        && free.ok_per_s > 0.0
    {
        writeln!(
            md,
            "- paid/free throughput: **{:.2}×** ({:.0} / {:.0} 2xx/s); gateway CPU per request paid/free: {:.2}×",
            paid.ok_per_s / free.ok_per_s,
            paid.ok_per_s,
            free.ok_per_s,
            paid.gateway_us / free.gateway_us.max(1e-9),
        )?;
    }
    if let Some(paid) = paid {
        let used = paid.credentials_used.unwrap_or(0);
        write!(
            md,
            "- credentials: {} pre-signed before the paid phase in {:.1} s ({:.0} µs each, {} keys on blocking threads; valid {} s from signing), {} used",
            facts.signed,
            facts.sign_s,
            facts.sign_s * 1e6 / facts.signed.max(1) as f64,
            ANVIL_KEYS.len(),
            facts.validity_s,
            used,
        )?;
        match paid.exhausted_at_s {
            Some(at) => writeln!(
                md,
                "; **the pool ran out {at:.1} s into the measured window: the phase stopped early** (raise CREDENTIALS)"
            )?,
            None => writeln!(md)?,
        }
        writeln!(
            md,
            "- settlement check: facilitator `settled` = {}, paid 200 answers = {} (warm-up included) → {}; facilitator stats {}",
            facts.settled,
            facts.paid_ok,
            if facts.settled == facts.paid_ok as u64 {
                "match"
            } else {
                "**MISMATCH**"
            },
            facts.stats,
        )?;
        if paid.no_receipt_total > 0 {
            writeln!(
                md,
                "- **{} paid 2xx answers carried no PAYMENT-RESPONSE receipt**",
                paid.no_receipt_total
            )?;
        }
    }
    writeln!(
        md,
        "- 2xx/s, 2xx and latency: answers completed inside the measured window (latency: request sent → whole answer read; closed loop, so at saturation ≈ connections / throughput). CPU µs/req: utime + stime (`/proc/<pid>/stat`) over the window / its 2xx answers (workers: all of them together; bench: this load generator, which competes for the same cores). others: CPU used by other processes during the window, % of one core."
    )?;
    if let Some(command) = &settings.command {
        writeln!(md, "- command: `{command}`")?;
    }
    Ok(md)
}

async fn facilitator_stats(http: &reqwest::Client, base: &str) -> Res<Value> {
    Ok(http
        .get(format!("{base}/control/stats"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

fn date_utc() -> String {
    run_text("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .unwrap_or_else(|| format!("unix {}", unix_now()))
}

async fn run(settings: &Settings, cluster: &mut Cluster) -> Res<(String, bool)> {
    let ticks_per_s = clock_ticks();
    let http = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(settings.connections)
        .timeout(Duration::from_secs(settings.request_timeout_s))
        .build()?;
    let challenge = wait_ready(cluster, &http).await?;
    let redis = {
        let redis_url = cluster
            .redis
            .as_ref()
            .map(RedisServer::url)
            .unwrap_or_default();
        let mut admin = admin_connection(&redis_url).await?;
        let facts = server_facts(&mut admin).await?;
        let fsync: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .query_async(&mut admin)
            .await?;
        format!(
            "{} ({}, appendfsync {})",
            facts.version,
            facts.persistence,
            fsync.get(1).map(String::as_str).unwrap_or("?")
        )
    };

    let mut phases = Vec::new();
    phases.push(
        run_phase(
            settings,
            cluster,
            &http,
            ticks_per_s,
            "free",
            Load {
                url: cluster.url(FREE_KEY),
                body: FREE_BODY,
                credentials: None,
            },
        )
        .await?,
    );

    // The pool is signed right before the paid phase, so that its validity window covers it;
    // the phase may take at most the quiet wait, the warm-up and the measured seconds.
    let validity_s = validity_s(&challenge);
    let needed_s = settings.quiet_wait_s + 1 + settings.warmup_s + settings.duration_s;
    if needed_s + VALIDITY_SLACK_S >= validity_s {
        return Err(format!(
            "a credential is valid {validity_s} s, the paid phase may take {needed_s} s (QUIET_WAIT_S + WARMUP + DURATION): shorten it"
        )
        .into());
    }
    eprintln!(
        "signing {} credentials over {} Anvil keys",
        settings.credentials,
        ANVIL_KEYS.len()
    );
    let signing = Instant::now();
    let (pool, header_name) = sign_pool(&challenge, settings.credentials).await?;
    let sign_s = signing.elapsed().as_secs_f64();
    eprintln!("  signed in {sign_s:.1} s");
    let signed = pool.len();
    phases.push(
        run_phase(
            settings,
            cluster,
            &http,
            ticks_per_s,
            "paid",
            Load {
                url: cluster.url(PAID_KEY),
                body: PAID_BODY,
                credentials: Some((Arc::new(pool), header_name)),
            },
        )
        .await?,
    );

    // Every paid request has been answered (or has failed) by now: the loops are joined.
    let stats = facilitator_stats(&http, &cluster.facilitator_url).await?;
    let settled = stats["settled"]
        .as_u64()
        .ok_or("the facilitator's /control/stats has no `settled`")?;
    let paid_ok = phases
        .iter()
        .find(|p| p.name == "paid")
        .map(|p| p.ok_total)
        .unwrap_or(0);
    let consistent = settled == paid_ok as u64;
    let facts = Facts {
        date: date_utc(),
        commit: commit(),
        redis,
        signed,
        sign_s,
        validity_s,
        stats,
        settled,
        paid_ok,
    };
    let md = markdown(settings, &facts, &phases)?;
    let json = json!({
        "phases": phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        "settled": settled,
        "paid_ok": paid_ok,
    });
    eprintln!("paid bench: {json}");
    Ok((md, consistent))
}

#[tokio::main]
async fn main() -> Res<()> {
    if !bench_requested("paid is a benchmark: run it with scripts/bench-paid (cargo bench)") {
        return Ok(());
    }
    let settings = Settings::from_env()?;
    eprintln!("paid bench: loadavg {}", loadavg());
    let logs = LogDir::create("paid-bench")?;
    let mut cluster = Cluster::start(&settings, logs.path()).await?;
    let result = run(&settings, &mut cluster).await;
    if result.is_err() {
        eprintln!("gateway log tail:\n{}", cluster.gateway.log_tail());
        eprintln!("facilitator log tail:\n{}", cluster.facilitator.log_tail());
    }
    cluster.stop().await;
    let (md, consistent) = result?;
    println!("{md}");
    if let Some(path) = &settings.out {
        std::fs::write(path, &md)?;
        eprintln!("wrote {path}");
    }
    if !consistent {
        eprintln!(
            "\n!!!!!!!!!! SETTLEMENT MISMATCH: the facilitator settled a different number of payments than the gateway answered 200 to paid requests (see the table's notes) !!!!!!!!!!\n"
        );
        return Err::<(), BoxError>("settlement check failed".into());
    }
    Ok(())
}
