//! Benchmark of the Redis task store alone (no gateway, no HTTP): task life cycles per second,
//! Redis commands and Redis CPU per life cycle.
//!
//! Run it through `scripts/bench-store`, which starts a private redis-server and calls
//! `cargo bench -p taskcluster-store --bench store_lifecycle` with `REDIS_URL` set.
//!
//! One life cycle is `create` (queued, entrypoint `noop`) -> `take_next` -> `activate_execution`
//! -> `compare_and_set(.., completed, fenced)`. The "gateway" side (producers) and the "worker"
//! side use two separate [`RedisStore`]s (two pools), as two processes would; both live in this
//! process, so "client CPU" is the CPU of both sides together.
//!
//! Modes, each at every worker concurrency C:
//! - `full`: P producer loops create N tasks while C worker loops run them; timed from the first
//!   create to the last completion.
//! - `preloaded`: the N tasks are created first (not timed), then only the workers are timed.
//! - `batched`, `batched-preloaded`: as above, but the worker is one fetch loop with C slots
//!   (how the real worker runs): it calls `take_next(max = free slots)` (C when idle) and runs
//!   every claimed task concurrently (activate + complete), taking again as soon as a slot frees.
//! - per-task loops (`full`, `preloaded`): C independent loops, each `take_next(max = 1)` then
//!   activate + complete.
//!
//! Measurements per run (fresh namespace, `CONFIG RESETSTAT` first, then `INFO` diffed around
//! the timed part):
//! - `INFO commandstats`: every command Redis executed. Redis 7 also counts the commands a Lua
//!   script runs through `redis.call`, so the total is "server commands". The commands this
//!   store sends itself (EVALSHA/EVAL, ZRANGE peeks, BLPOP doorbells, SCRIPT LOAD, PING, HELLO,
//!   CLIENT SETINFO) never appear inside its scripts (checked against `shared/store/lua/`), so their
//!   sum is exactly the number of client round trips. As a cross-check the bench also counts
//!   its own store calls and multiplies them by the round trips the module doc of
//!   `store/redis/mod.rs` states (create 1, take 2, activate 1, terminal write 1); the
//!   difference is what `take_next` does internally (retries after losing a race, doorbell
//!   waits, the final look after a wait).
//! - `INFO cpu` (`used_cpu_sys + used_cpu_user` of redis-server): Redis CPU per life cycle.
//! - `/proc/stat` and `/proc/self/stat`: the CPU of this process, and "foreign" CPU (busy time
//!   of the machine minus Redis minus this process; includes loopback network softirq time that
//!   the kernel does not charge to a process). Before each run the bench waits for the machine
//!   to be quiet; a run with too much foreign CPU is re-run.
//!
//! Environment:
//! - `REDIS_URL` (required) — never a shared Redis: the bench writes and deletes keys in its
//!   own namespaces and runs `CONFIG RESETSTAT`.
//! - `CONCURRENCIES` (1,8,64), `N` (20000), `RUNS` (3, the median is reported),
//!   `MODES` (full,preloaded,batched,batched-preloaded), `PRODUCERS` (8 create loops),
//!   `OWNER_EVERY` (100 tasks per random owner), `POOL_SIZE` (store default),
//!   `QUIET_PCT` (15), `QUIET_WAIT_S` (120), `FOREIGN_MAX` (30, % of one core), `RETRIES` (2),
//!   `RUN_TIMEOUT_S` (600), `BENCH_OUT` (JSON file), `BENCH_LABEL`.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use protocol::token::{AccessToken, OwnerHash};
use protocol::{TaskResult, TaskStatus};
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use serde_json::json;
use store::{
    Admission, Claim, DEFAULT_MAX_ATTEMPTS, Invocation, NewTask, RedisStore, RedisStoreConfig,
    TaskStore, Transition,
};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

const ENTRYPOINT: &str = "noop";
const LEASE_TTL: Duration = Duration::from_secs(10);
const MAX_RUN: Duration = Duration::from_secs(60);
const TAKE_WAIT: Duration = Duration::from_secs(1);
const MAX_TASKS: u64 = 10_000_000;

/// Commands the store sends itself; none of them is called inside its Lua scripts.
const CLIENT_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "function|load",
    "zrange",
    "blpop",
    "script|load",
    "ping",
    "hello",
    "client|setinfo",
    "select",
];

/// The bench's own measurement commands, left out of every count.
fn is_admin(command: &str) -> bool {
    command == "info" || command.starts_with("config|")
}

// ----- settings -----

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    Full,
    Preloaded,
    Batched,
    BatchedPreloaded,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Preloaded => "preloaded",
            Mode::Batched => "batched",
            Mode::BatchedPreloaded => "batched-preloaded",
        }
    }

    fn parse(text: &str) -> Res<Mode> {
        [
            Mode::Full,
            Mode::Preloaded,
            Mode::Batched,
            Mode::BatchedPreloaded,
        ]
        .into_iter()
        .find(|mode| mode.name() == text.trim())
        .ok_or_else(|| format!("unknown mode {text:?}").into())
    }

    fn preloaded(self) -> bool {
        matches!(self, Mode::Preloaded | Mode::BatchedPreloaded)
    }

    fn batched(self) -> bool {
        matches!(self, Mode::Batched | Mode::BatchedPreloaded)
    }

    fn describe(self) -> &'static str {
        match self {
            Mode::Full => {
                "create ‖ C loops of take(max=1) → activate → complete; timed first create → last completion"
            }
            Mode::Preloaded => {
                "N tasks created first (untimed); C loops of take(max=1) → activate → complete"
            }
            Mode::Batched => {
                "create ‖ one fetch loop, take(max=free slots ≤ C), claimed tasks run concurrently"
            }
            Mode::BatchedPreloaded => {
                "N tasks created first (untimed); one fetch loop with C slots"
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Settings {
    #[serde(skip)]
    url: String,
    label: String,
    concurrencies: Vec<usize>,
    n: usize,
    runs: usize,
    modes: Vec<Mode>,
    producers: usize,
    owner_every: usize,
    pool_size: usize,
    quiet_pct: f64,
    quiet_wait_s: u64,
    foreign_max: f64,
    retries: usize,
    run_timeout_s: u64,
    #[serde(skip)]
    out: Option<String>,
}

fn env_or<T: FromStr>(name: &str, default: T) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .map_err(|err| format!("{name}={text:?}: {err}").into()),
        _ => Ok(default),
    }
}

fn env_list<T>(name: &str, default: &str, parse: impl Fn(&str) -> Res<T>) -> Res<Vec<T>> {
    let text = std::env::var(name)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| default.to_owned());
    text.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(parse)
        .collect()
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let url = std::env::var("REDIS_URL")
            .map_err(|_| "REDIS_URL is required (scripts/bench-store sets it)")?;
        let settings = Settings {
            url,
            label: env_or("BENCH_LABEL", String::from("default"))?,
            concurrencies: env_list("CONCURRENCIES", "1,8,64", |part| {
                part.trim()
                    .parse::<usize>()
                    .map_err(|err| format!("CONCURRENCIES: {part:?}: {err}").into())
            })?,
            n: env_or("N", 20_000)?,
            runs: env_or("RUNS", 3)?,
            modes: env_list(
                "MODES",
                "full,preloaded,batched,batched-preloaded",
                Mode::parse,
            )?,
            producers: env_or("PRODUCERS", 8)?,
            owner_every: env_or("OWNER_EVERY", 100)?,
            pool_size: env_or("POOL_SIZE", RedisStoreConfig::new("").pool_size)?,
            quiet_pct: env_or("QUIET_PCT", 15.0)?,
            quiet_wait_s: env_or("QUIET_WAIT_S", 120)?,
            foreign_max: env_or("FOREIGN_MAX", 30.0)?,
            retries: env_or("RETRIES", 2)?,
            run_timeout_s: env_or("RUN_TIMEOUT_S", 600)?,
            out: std::env::var("BENCH_OUT").ok().filter(|p| !p.is_empty()),
        };
        if settings.n == 0 || settings.runs == 0 || settings.producers == 0 {
            return Err("N, RUNS and PRODUCERS must be positive".into());
        }
        if settings.concurrencies.contains(&0) || settings.owner_every == 0 {
            return Err("concurrencies and OWNER_EVERY must be positive".into());
        }
        Ok(settings)
    }
}

// ----- machine and Redis measurements -----

/// CPU ticks of the whole machine and of this process (`/proc`).
#[derive(Debug, Clone, Copy, Default)]
struct ProcCpu {
    /// user + nice + system + irq: time charged to processes (and hard interrupts).
    busy: u64,
    /// Soft interrupts: mostly loopback network processing, charged to no process.
    softirq: u64,
    /// Time the hypervisor ran something else on our virtual CPUs.
    steal: u64,
    own: u64,
}

fn proc_cpu() -> Res<ProcCpu> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().ok_or("empty /proc/stat")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = field(0) + field(1) + field(2) + field(5);
    let own_stat = std::fs::read_to_string("/proc/self/stat")?;
    let after_name = own_stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or("");
    let own_fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the file (utime, stime) are entries 11 and 12 after the name.
    let own = [11, 12]
        .iter()
        .filter_map(|&i| own_fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Ok(ProcCpu {
        busy,
        softirq: field(6),
        steal: field(7),
        own,
    })
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|ticks| *ticks > 0.0)
        .unwrap_or(100.0)
}

#[derive(Debug, Clone, Default)]
struct RedisSnap {
    /// command -> (calls, usec)
    commands: BTreeMap<String, (u64, u64)>,
    cpu_s: f64,
    total_commands_processed: u64,
    used_memory: u64,
}

fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

async fn redis_snap(admin: &mut MultiplexedConnection) -> Res<RedisSnap> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .arg("stats")
        .arg("memory")
        .query_async(admin)
        .await?;
    let info = parse_info(&text);
    let mut commands = BTreeMap::new();
    for (key, value) in &info {
        let Some(name) = key.strip_prefix("cmdstat_") else {
            continue;
        };
        let mut calls = 0;
        let mut usec = 0;
        for part in value.split(',') {
            match part.split_once('=') {
                Some(("calls", v)) => calls = v.parse().unwrap_or(0),
                Some(("usec", v)) => usec = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        commands.insert(name.to_owned(), (calls, usec));
    }
    let num = |key: &str| {
        info.get(key)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(RedisSnap {
        commands,
        cpu_s: num("used_cpu_sys") + num("used_cpu_user"),
        total_commands_processed: num("total_commands_processed") as u64,
        used_memory: num("used_memory") as u64,
    })
}

/// Waits until the machine is quiet (other processes below `quiet_pct` of one core, over one
/// second), up to `quiet_wait_s`. Returns the last foreign load seen.
async fn wait_quiet(settings: &Settings, ticks: f64) -> Res<f64> {
    let give_up = Instant::now() + Duration::from_secs(settings.quiet_wait_s);
    loop {
        let before = proc_cpu()?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = proc_cpu()?;
        let foreign = (after.busy.saturating_sub(before.busy))
            .saturating_sub(after.own.saturating_sub(before.own)) as f64
            / ticks
            * 100.0;
        if foreign < settings.quiet_pct || Instant::now() >= give_up {
            if foreign >= settings.quiet_pct {
                eprintln!(
                    "  machine still busy ({foreign:.0}% of a core by others); running anyway"
                );
            }
            return Ok(foreign);
        }
        eprintln!("  waiting for a quiet machine: others use {foreign:.0}% of a core");
    }
}

// ----- the workload -----

#[derive(Default)]
struct Counters {
    creates: AtomicU64,
    take_calls: AtomicU64,
    take_empty: AtomicU64,
    claims: AtomicU64,
    activates: AtomicU64,
    completes: AtomicU64,
    anomalies: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Calls {
    creates: u64,
    take_calls: u64,
    take_empty: u64,
    claims: u64,
    activates: u64,
    completes: u64,
    anomalies: u64,
}

impl Counters {
    fn read(&self) -> Calls {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Calls {
            creates: get(&self.creates),
            take_calls: get(&self.take_calls),
            take_empty: get(&self.take_empty),
            claims: get(&self.claims),
            activates: get(&self.activates),
            completes: get(&self.completes),
            anomalies: get(&self.anomalies),
        }
    }
}

impl Calls {
    fn minus(self, base: Calls) -> Calls {
        Calls {
            creates: self.creates - base.creates,
            take_calls: self.take_calls - base.take_calls,
            take_empty: self.take_empty - base.take_empty,
            claims: self.claims - base.claims,
            activates: self.activates - base.activates,
            completes: self.completes - base.completes,
            anomalies: self.anomalies - base.anomalies,
        }
    }

    /// Round trips according to the module doc of `store/redis/mod.rs`.
    fn documented_round_trips(self) -> u64 {
        self.creates + 2 * self.take_calls + self.activates + self.completes
    }

    fn store_calls(self) -> u64 {
        self.creates + self.take_calls + self.activates + self.completes
    }
}

struct Ctx {
    n: usize,
    next_create: AtomicUsize,
    completed: AtomicUsize,
    end: OnceLock<Instant>,
    done: CancellationToken,
    counters: Counters,
    /// One random owner per `owner_every` tasks.
    owners: Vec<OwnerHash>,
    owner_every: usize,
    run_tag: String,
}

async fn producer(store: RedisStore, ctx: Arc<Ctx>) -> Res<()> {
    loop {
        let i = ctx.next_create.fetch_add(1, Ordering::Relaxed);
        if i >= ctx.n {
            return Ok(());
        }
        let owner = ctx
            .owners
            .get(i / ctx.owner_every)
            .cloned()
            .ok_or("no owner for this task")?;
        let new = NewTask {
            task_id: format!("{}-{}", ctx.run_tag, uuid::Uuid::new_v4()),
            owner,
            invocation: Invocation {
                entrypoint: ENTRYPOINT.to_owned(),
                input: json!({ "i": i }),
                context_id: None,
                metadata: None,
                trace_context: BTreeMap::new(),
            },
            admission: Admission::Queued,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retention: None,
            source: None,
            private_owner: false,
        };
        store.create(new).await?;
        ctx.counters.creates.fetch_add(1, Ordering::Relaxed);
    }
}

/// Activates and completes one claimed task.
async fn run_claim(store: &RedisStore, claim: Claim, ctx: &Ctx) -> Res<()> {
    let activation = store
        .activate_execution(&claim.lease, LEASE_TTL, MAX_RUN)
        .await?;
    ctx.counters.activates.fetch_add(1, Ordering::Relaxed);
    let Some(activation) = activation else {
        ctx.counters.anomalies.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    };
    let outcome = store
        .compare_and_set(
            &claim.lease.task_id,
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(json!(null))),
            Some(&activation.lease),
        )
        .await?;
    ctx.counters.completes.fetch_add(1, Ordering::Relaxed);
    if outcome.applied().is_none() {
        ctx.counters.anomalies.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    if ctx.completed.fetch_add(1, Ordering::AcqRel) + 1 == ctx.n {
        let _ = ctx.end.set(Instant::now());
        ctx.done.cancel();
    }
    Ok(())
}

async fn take(
    store: &RedisStore,
    ctx: &Ctx,
    worker_id: &str,
    max: usize,
) -> Res<Option<Vec<Claim>>> {
    let entrypoints = [ENTRYPOINT.to_owned()];
    let claims = tokio::select! {
        _ = ctx.done.cancelled() => return Ok(None),
        claims = store.take_next(&entrypoints, worker_id, LEASE_TTL, max, TAKE_WAIT) => claims?,
    };
    ctx.counters.take_calls.fetch_add(1, Ordering::Relaxed);
    if claims.is_empty() {
        ctx.counters.take_empty.fetch_add(1, Ordering::Relaxed);
    }
    ctx.counters
        .claims
        .fetch_add(claims.len() as u64, Ordering::Relaxed);
    Ok(Some(claims))
}

/// One of C independent worker loops: take one, run it, repeat.
async fn worker_loop(store: RedisStore, ctx: Arc<Ctx>, worker_id: String) -> Res<()> {
    while let Some(claims) = take(&store, &ctx, &worker_id, 1).await? {
        for claim in claims {
            run_claim(&store, claim, &ctx).await?;
        }
    }
    Ok(())
}

/// The real worker's shape: one fetch loop with C slots; claimed tasks run concurrently.
async fn batched_worker(
    store: RedisStore,
    ctx: Arc<Ctx>,
    worker_id: String,
    slots: usize,
) -> Res<()> {
    let free = Arc::new(Semaphore::new(slots));
    let mut running: JoinSet<Res<()>> = JoinSet::new();
    let result = async {
        loop {
            let first = tokio::select! {
                _ = ctx.done.cancelled() => return Ok(()),
                permit = free.clone().acquire_owned() => permit?,
            };
            let mut permits = vec![first];
            while let Ok(permit) = free.clone().try_acquire_owned() {
                permits.push(permit);
            }
            let Some(claims) = take(&store, &ctx, &worker_id, permits.len()).await? else {
                return Ok(());
            };
            for claim in claims {
                let permit = permits.pop().ok_or("take_next returned more than max")?;
                let store = store.clone();
                let ctx = ctx.clone();
                running.spawn(async move {
                    let _slot = permit;
                    run_claim(&store, claim, &ctx).await
                });
            }
            while let Some(joined) = running.try_join_next() {
                joined??;
            }
        }
    }
    .await;
    while let Some(joined) = running.join_next().await {
        joined??;
    }
    result
}

async fn connect(settings: &Settings, namespace: &str) -> Res<RedisStore> {
    let mut config = RedisStoreConfig::new(settings.url.clone());
    config.namespace = namespace.to_owned();
    config.max_tasks = MAX_TASKS;
    config.pool_size = settings.pool_size;
    config.timeout = Duration::from_secs(10);
    let store = RedisStore::connect(config).await?;
    // Open the pool's connections before timing anything.
    let pings: Vec<_> = (0..settings.pool_size).map(|_| store.ping()).collect();
    for result in futures::future::join_all(pings).await {
        result?;
    }
    Ok(store)
}

/// Deletes every key of a namespace (outside the timed part), synchronously so that no
/// background freeing runs into the next measurement.
async fn delete_namespace(admin: &mut MultiplexedConnection, pattern: &str) -> Res<u64> {
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(admin)
            .await?;
        if !keys.is_empty() {
            let removed: u64 = redis::cmd("DEL").arg(&keys).query_async(admin).await?;
            deleted += removed;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

// ----- one run -----

#[derive(Debug, Clone, Serialize)]
struct RunResult {
    mode: Mode,
    concurrency: usize,
    run: usize,
    n: usize,
    seconds: f64,
    lifecycles_per_s: f64,
    /// Create-only rate of the untimed preload (preloaded modes).
    preload_creates_per_s: Option<f64>,
    redis_cpu_s: f64,
    client_cpu_s: f64,
    /// CPU of other processes: busy (without softirq) minus Redis minus this process.
    foreign_cpu_pct: f64,
    softirq_pct: f64,
    steal_pct: f64,
    quiet_before_pct: f64,
    redis_memory_delta_mb: f64,
    /// Timed part only: for preloaded modes, creates are not in it.
    calls: Calls,
    /// INFO commandstats diff: command -> calls.
    commands: BTreeMap<String, u64>,
    /// INFO commandstats diff: command -> usec inside Redis.
    command_usec: BTreeMap<String, u64>,
    total_commands_processed: u64,
    contaminated: bool,
}

impl RunResult {
    fn per_lc(&self, value: f64) -> f64 {
        value / self.n as f64
    }

    fn server_cmds(&self) -> u64 {
        self.commands.values().sum()
    }

    fn client_round_trips(&self) -> u64 {
        self.commands
            .iter()
            .filter(|(name, _)| CLIENT_COMMANDS.contains(&name.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    }

    fn command(&self, name: &str) -> u64 {
        self.commands.get(name).copied().unwrap_or(0)
    }

    /// EVALSHA calls that ran `take.lua`: all script calls minus creates, activates and
    /// terminal writes (each exactly one script call).
    fn take_script_calls(&self) -> u64 {
        let scripts = self.command("evalsha") + self.command("eval") + self.command("fcall");
        scripts.saturating_sub(self.calls.creates + self.calls.activates + self.calls.completes)
    }
}

async fn run_once(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    ticks: f64,
    mode: Mode,
    concurrency: usize,
    run: usize,
) -> Res<RunResult> {
    let namespace = format!(
        "bench{}-{}-c{}-r{}-{}",
        std::process::id(),
        mode.name(),
        concurrency,
        run,
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let gateway = connect(settings, &namespace).await?;
    let worker = connect(settings, &namespace).await?;
    let owners: Vec<OwnerHash> = (0..settings.n.div_ceil(settings.owner_every))
        .map(|_| AccessToken::generate().owner_hash())
        .collect();
    let ctx = Arc::new(Ctx {
        n: settings.n,
        next_create: AtomicUsize::new(0),
        completed: AtomicUsize::new(0),
        end: OnceLock::new(),
        done: CancellationToken::new(),
        counters: Counters::default(),
        owners,
        owner_every: settings.owner_every,
        run_tag: format!("r{run}"),
    });
    let spawn_producers = |set: &mut JoinSet<Res<()>>| {
        for _ in 0..settings.producers {
            let store = gateway.clone();
            let ctx = ctx.clone();
            set.spawn(async move {
                let result = producer(store, ctx.clone()).await;
                if result.is_err() {
                    ctx.done.cancel();
                }
                result
            });
        }
    };

    let mut preload_creates_per_s = None;
    if mode.preloaded() {
        let started = Instant::now();
        let mut producers = JoinSet::new();
        spawn_producers(&mut producers);
        while let Some(joined) = producers.join_next().await {
            joined??;
        }
        preload_creates_per_s = Some(settings.n as f64 / started.elapsed().as_secs_f64());
    }
    let base_calls = ctx.counters.read();

    let quiet = wait_quiet(settings, ticks).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await?;
    let redis0 = redis_snap(admin).await?;
    let proc0 = proc_cpu()?;
    let started = Instant::now();

    let mut tasks: JoinSet<Res<()>> = JoinSet::new();
    let workers = if mode.batched() { 1 } else { concurrency };
    for w in 0..workers {
        let store = worker.clone();
        let ctx = ctx.clone();
        let worker_id = format!("worker-{w}-{}", uuid::Uuid::new_v4().simple());
        tasks.spawn(async move {
            let result = if mode.batched() {
                batched_worker(store, ctx.clone(), worker_id, concurrency).await
            } else {
                worker_loop(store, ctx.clone(), worker_id).await
            };
            if result.is_err() {
                ctx.done.cancel();
            }
            result
        });
    }
    if !mode.preloaded() {
        spawn_producers(&mut tasks);
    }
    let timed_out = tokio::time::timeout(
        Duration::from_secs(settings.run_timeout_s),
        ctx.done.cancelled(),
    )
    .await
    .is_err();
    ctx.done.cancel();
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    let proc1 = proc_cpu()?;
    let redis1 = redis_snap(admin).await?;
    let calls = ctx.counters.read().minus(base_calls);
    if timed_out {
        return Err(format!("run timed out: {calls:?}").into());
    }
    let end = ctx
        .end
        .get()
        .copied()
        .ok_or("run ended before its last completion")?;
    let completed = ctx.completed.load(Ordering::Acquire);
    if completed != settings.n || calls.anomalies != 0 {
        return Err(format!("{completed} of {} completed, {calls:?}", settings.n).into());
    }
    let live = worker.live_count().await?;
    let queued = worker.queue_depth(ENTRYPOINT).await?;
    if live != 0 || queued != 0 {
        return Err(format!("after the run: live {live}, queued {queued}").into());
    }

    let seconds = end.duration_since(started).as_secs_f64();
    let wall = started.elapsed().as_secs_f64();
    let mut commands = BTreeMap::new();
    let mut command_usec = BTreeMap::new();
    for (name, (calls1, usec1)) in &redis1.commands {
        if is_admin(name) {
            continue;
        }
        let (calls0, usec0) = redis0.commands.get(name).copied().unwrap_or((0, 0));
        if calls1 > &calls0 {
            commands.insert(name.clone(), calls1 - calls0);
            command_usec.insert(name.clone(), usec1.saturating_sub(usec0));
        }
    }
    let redis_cpu_s = redis1.cpu_s - redis0.cpu_s;
    let client_cpu_s = proc1.own.saturating_sub(proc0.own) as f64 / ticks;
    let busy_s = proc1.busy.saturating_sub(proc0.busy) as f64 / ticks;
    let foreign_cpu_pct = ((busy_s - client_cpu_s - redis_cpu_s) / wall * 100.0).max(0.0);
    let steal_pct = proc1.steal.saturating_sub(proc0.steal) as f64 / ticks / wall * 100.0;
    let softirq_pct = proc1.softirq.saturating_sub(proc0.softirq) as f64 / ticks / wall * 100.0;

    let pattern = gateway.keys().all_pattern();
    gateway.close().await;
    worker.close().await;
    delete_namespace(admin, &pattern).await?;

    Ok(RunResult {
        mode,
        concurrency,
        run,
        n: settings.n,
        seconds,
        lifecycles_per_s: settings.n as f64 / seconds,
        preload_creates_per_s,
        redis_cpu_s,
        client_cpu_s,
        foreign_cpu_pct,
        softirq_pct,
        steal_pct,
        quiet_before_pct: quiet,
        redis_memory_delta_mb: (redis1.used_memory as f64 - redis0.used_memory as f64)
            / 1_048_576.0,
        calls,
        commands,
        command_usec,
        total_commands_processed: redis1
            .total_commands_processed
            .saturating_sub(redis0.total_commands_processed),
        contaminated: foreign_cpu_pct > settings.foreign_max,
    })
}

// ----- report -----

#[derive(Debug, Clone, Copy, Serialize)]
struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

fn stat(values: impl IntoIterator<Item = f64>) -> Stat {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let median = match v.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => v[len / 2],
        len => (v[len / 2 - 1] + v[len / 2]) / 2.0,
    };
    Stat {
        median,
        min: v.first().copied().unwrap_or(f64::NAN),
        max: v.last().copied().unwrap_or(f64::NAN),
    }
}

fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    mode: Mode,
    concurrency: usize,
    lifecycles_per_s: Stat,
    redis_cpu_us_per_lc: Stat,
    redis_cpu_pct: Stat,
    client_cpu_us_per_lc: Stat,
    server_cmds_per_lc: Stat,
    client_round_trips_per_lc: Stat,
    documented_round_trips_per_lc: Stat,
    store_calls_per_lc: Stat,
    take_calls_per_lc: Stat,
    take_script_calls_per_lc: Stat,
    claims_per_take: Stat,
    total_commands_processed_per_lc: Stat,
    foreign_cpu_pct: Stat,
    softirq_pct: Stat,
    steal_pct: Stat,
    preload_creates_per_s: Option<Stat>,
    /// Median calls per life cycle of each command.
    commands_per_lc: BTreeMap<String, f64>,
    /// Median µs inside Redis per life cycle of each command (commandstats usec).
    command_us_per_lc: BTreeMap<String, f64>,
    runs: Vec<RunResult>,
}

fn row(mode: Mode, concurrency: usize, runs: Vec<RunResult>) -> Row {
    let s = |f: &dyn Fn(&RunResult) -> f64| stat(runs.iter().map(f));
    let mut names: Vec<String> = runs
        .iter()
        .flat_map(|r| r.commands.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    let commands_per_lc = names
        .iter()
        .map(|name| {
            (
                name.clone(),
                s(&|r| r.per_lc(r.command(name) as f64)).median,
            )
        })
        .collect();
    let command_us_per_lc = names
        .iter()
        .map(|name| {
            let us = s(&|r| r.per_lc(r.command_usec.get(name).copied().unwrap_or(0) as f64));
            (name.clone(), us.median)
        })
        .collect();
    Row {
        mode,
        concurrency,
        lifecycles_per_s: s(&|r| r.lifecycles_per_s),
        redis_cpu_us_per_lc: s(&|r| r.per_lc(r.redis_cpu_s * 1e6)),
        redis_cpu_pct: s(&|r| r.redis_cpu_s / r.seconds * 100.0),
        client_cpu_us_per_lc: s(&|r| r.per_lc(r.client_cpu_s * 1e6)),
        server_cmds_per_lc: s(&|r| r.per_lc(r.server_cmds() as f64)),
        client_round_trips_per_lc: s(&|r| r.per_lc(r.client_round_trips() as f64)),
        documented_round_trips_per_lc: s(&|r| r.per_lc(r.calls.documented_round_trips() as f64)),
        store_calls_per_lc: s(&|r| r.per_lc(r.calls.store_calls() as f64)),
        take_calls_per_lc: s(&|r| r.per_lc(r.calls.take_calls as f64)),
        take_script_calls_per_lc: s(&|r| r.per_lc(r.take_script_calls() as f64)),
        claims_per_take: s(&|r| {
            r.calls.claims as f64 / (r.calls.take_calls - r.calls.take_empty).max(1) as f64
        }),
        total_commands_processed_per_lc: s(&|r| r.per_lc(r.total_commands_processed as f64)),
        foreign_cpu_pct: s(&|r| r.foreign_cpu_pct),
        softirq_pct: s(&|r| r.softirq_pct),
        steal_pct: s(&|r| r.steal_pct),
        preload_creates_per_s: runs
            .iter()
            .map(|r| r.preload_creates_per_s)
            .collect::<Option<Vec<f64>>>()
            .map(stat),
        commands_per_lc,
        command_us_per_lc,
        runs,
    }
}

fn markdown(settings: &Settings, meta: &serde_json::Value, rows: &[Row]) -> Res<String> {
    let mut md = String::new();
    let f1 = |x: f64| format!("{x:.1}");
    let f2 = |x: f64| format!("{x:.2}");
    let mm =
        |s: Stat, f: &dyn Fn(f64) -> String| format!("{} ({}–{})", f(s.median), f(s.min), f(s.max));
    writeln!(
        md,
        "### RedisStore life cycles — Redis {} ({}) — label: {}\n",
        meta["redis_version"].as_str().unwrap_or("?"),
        meta["persistence"].as_str().unwrap_or("?"),
        settings.label
    )?;
    writeln!(
        md,
        "N={} tasks per run, {} runs per row, median (min–max); {} producer loops; pool size {} per store (gateway and worker stores separate, same process); {}× {}; redis-server and this process share these cores. \"lc\" = one life cycle (create → take → activate → complete); in the preloaded modes the create is not in the timed part, so its commands and CPU are not counted. Round trips (RT) from commandstats = calls of {}; \"doc RT\" = store calls × the round trips documented in store/redis/mod.rs (create 1, take 2, activate 1, complete 1). Last column, % of one core during the run: other processes' CPU (⚠ above FOREIGN_MAX={}% even after retries), soft-interrupt time (loopback networking, charged to no process), and hypervisor steal.\n",
        settings.n,
        settings.runs,
        settings.producers,
        settings.pool_size,
        meta["cpus"],
        meta["cpu_model"].as_str().unwrap_or("?"),
        CLIENT_COMMANDS.join("/"),
        settings.foreign_max,
    )?;
    writeln!(
        md,
        "| mode | C | life cycles/s | Redis CPU µs/lc | Redis CPU % core | client CPU µs/lc | server cmds/lc | client RT/lc | doc RT/lc | take_next calls/lc | take.lua runs/lc | claims per take | foreign / softirq / steal % |"
    )?;
    writeln!(md, "|{}", "---|".repeat(13))?;
    for r in rows {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {}{} |",
            r.mode.name(),
            r.concurrency,
            mm(r.lifecycles_per_s, &thousands),
            mm(r.redis_cpu_us_per_lc, &f1),
            thousands(r.redis_cpu_pct.median),
            f1(r.client_cpu_us_per_lc.median),
            f2(r.server_cmds_per_lc.median),
            f2(r.client_round_trips_per_lc.median),
            f2(r.documented_round_trips_per_lc.median),
            f2(r.take_calls_per_lc.median),
            f2(r.take_script_calls_per_lc.median),
            f1(r.claims_per_take.median),
            thousands(r.foreign_cpu_pct.median),
            thousands(r.softirq_pct.median),
            thousands(r.steal_pct.median),
            if r.runs.iter().any(|x| x.contaminated) {
                " ⚠"
            } else {
                ""
            },
        )?;
    }
    writeln!(md)?;
    let preloads: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.preload_creates_per_s.map(|s| {
                format!(
                    "{} C={}: {}",
                    r.mode.name(),
                    r.concurrency,
                    mm(s, &thousands)
                )
            })
        })
        .collect();
    if !preloads.is_empty() {
        writeln!(
            md,
            "Untimed preload, create only ({} concurrent producer loops), creates/s: {}\n",
            settings.producers,
            preloads.join("; ")
        )?;
    }
    writeln!(md, "Modes:")?;
    for mode in &settings.modes {
        writeln!(md, "- {}: {}", mode.name(), mode.describe())?;
    }
    writeln!(md)?;
    for mode in &settings.modes {
        let mode_rows: Vec<&Row> = rows.iter().filter(|r| r.mode == *mode).collect();
        if mode_rows.is_empty() {
            continue;
        }
        let mut names: Vec<&String> = mode_rows
            .iter()
            .flat_map(|r| r.commands_per_lc.keys())
            .collect();
        names.sort();
        names.dedup();
        let max_of = |name: &str| {
            mode_rows
                .iter()
                .map(|r| r.commands_per_lc.get(name).copied().unwrap_or(0.0))
                .fold(0.0, f64::max)
        };
        names.sort_by(|a, b| max_of(b).total_cmp(&max_of(a)));
        writeln!(
            md,
            "Commands per life cycle, {} (INFO commandstats diff / N, median of runs; * = issued by the client, the rest run inside Lua scripts; usec = time inside Redis per lc):\n",
            mode.name()
        )?;
        let header: Vec<String> = mode_rows
            .iter()
            .map(|r| format!("C={} calls (µs)", r.concurrency))
            .collect();
        writeln!(md, "| command | {} |", header.join(" | "))?;
        writeln!(md, "|---|{}", "---|".repeat(mode_rows.len()))?;
        for name in names {
            if max_of(name) < 0.0005 {
                continue;
            }
            let cells: Vec<String> = mode_rows
                .iter()
                .map(|r| {
                    format!(
                        "{:.3} ({:.1})",
                        r.commands_per_lc.get(name).copied().unwrap_or(0.0),
                        r.command_us_per_lc.get(name).copied().unwrap_or(0.0)
                    )
                })
                .collect();
            let star = if CLIENT_COMMANDS.contains(&name.as_str()) {
                "*"
            } else {
                ""
            };
            writeln!(md, "| {name}{star} | {} |", cells.join(" | "))?;
        }
        let totals: Vec<String> = mode_rows
            .iter()
            .map(|r| format!("**{:.2}**", r.server_cmds_per_lc.median))
            .collect();
        writeln!(md, "| **total** | {} |", totals.join(" | "))?;
        let tcp: Vec<String> = mode_rows
            .iter()
            .map(|r| format!("{:.2}", r.total_commands_processed_per_lc.median))
            .collect();
        writeln!(
            md,
            "| INFO stats total_commands_processed | {} |\n",
            tcp.join(" | ")
        )?;
    }
    Ok(md)
}

#[tokio::main]
async fn main() -> Res<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` / `--all-targets` runs this binary
    // without it, and a benchmark is not a test: do nothing then.
    if !std::env::args().any(|arg| arg == "--bench") {
        eprintln!("store_lifecycle is a benchmark: run it with scripts/bench-store (cargo bench)");
        return Ok(());
    }
    let settings = Settings::from_env()?;
    let ticks = clock_ticks();
    let client = redis::Client::open(settings.url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let server = parse_info(
        &redis::cmd("INFO")
            .arg("server")
            .arg("persistence")
            .query_async::<String>(&mut admin)
            .await?,
    );
    let appendfsync: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query_async(&mut admin)
        .await?;
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async(&mut admin)
        .await?;
    let persistence = if server.get("aof_enabled").map(String::as_str) == Some("1") {
        format!(
            "appendonly yes, appendfsync {}",
            appendfsync.get(1).map(String::as_str).unwrap_or("?")
        )
    } else {
        format!(
            "no AOF, save \"{}\"",
            save.get(1).map(String::as_str).unwrap_or("?")
        )
    };
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_default();
    let meta = json!({
        "label": settings.label,
        "redis_version": server.get("redis_version"),
        "persistence": persistence,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": cpu_model,
        "loadavg_at_start": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "settings": settings,
        "lease_ttl_s": LEASE_TTL.as_secs(),
        "take_wait_s": TAKE_WAIT.as_secs(),
    });
    eprintln!("store_lifecycle: {meta}");

    let mut rows = Vec::new();
    for &mode in &settings.modes {
        for &concurrency in &settings.concurrencies {
            let mut runs = Vec::new();
            for run in 1..=settings.runs {
                let mut attempt = 0;
                let result = loop {
                    let result = run_once(&settings, &mut admin, ticks, mode, concurrency, run)
                        .await
                        .map_err(|err| {
                            format!("{} C={concurrency} run {run}: {err}", mode.name())
                        })?;
                    eprintln!(
                        "  {} C={concurrency} run {run}: {} lc/s ({:.2} s); redis {:.1} µs/lc ({:.0}% core), client {:.1} µs/lc; {:.2} server cmds/lc, {:.2} client RT/lc; foreign {:.0}% softirq {:.0}% steal {:.0}%",
                        mode.name(),
                        thousands(result.lifecycles_per_s),
                        result.seconds,
                        result.per_lc(result.redis_cpu_s * 1e6),
                        result.redis_cpu_s / result.seconds * 100.0,
                        result.per_lc(result.client_cpu_s * 1e6),
                        result.per_lc(result.server_cmds() as f64),
                        result.per_lc(result.client_round_trips() as f64),
                        result.foreign_cpu_pct,
                        result.softirq_pct,
                        result.steal_pct,
                    );
                    if result.contaminated && attempt < settings.retries {
                        attempt += 1;
                        eprintln!(
                            "  foreign load above {}% of a core: run again",
                            settings.foreign_max
                        );
                        continue;
                    }
                    break result;
                };
                runs.push(result);
            }
            rows.push(row(mode, concurrency, runs));
        }
    }
    let md = markdown(&settings, &meta, &rows)?;
    println!("{md}");
    if let Some(path) = &settings.out {
        let report = json!({ "meta": meta, "rows": rows, "markdown": md });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        eprintln!("wrote {path}");
    }
    Ok(())
}
