//! Benchmark of real `worker` processes against a private Redis: drain throughput of one and of
//! several processes, and how long a task of a SIGKILLed worker takes to run again elsewhere.
//!
//! Run it through `scripts/bench-worker`, which builds the release binaries, starts a private
//! redis-server and calls `cargo bench -p taskcluster-worker --bench cluster` with `REDIS_URL` and
//! `WORKER_BIN` set. Without `--bench` (as `cargo test --all-targets` runs it) it does nothing.
//!
//! Scenarios, each run in a fresh namespace (`REDIS_NAMESPACE` of the workers):
//! - `single`: N no-op `echo` tasks (input `null`) are created first (untimed, concurrent
//!   creates), then ONE worker process starts with `WORKER_CONCURRENCY=C` and
//!   `WORKER_ENTRYPOINTS=echo`. Timed from the spawn of the process: `startup` = until the
//!   registry lists the worker (polled every 2 ms; the runtime registers just before its fetch
//!   loop starts), `drain` = until `live_count()` reaches 0 (polled every 10 ms).
//!   tasks/s = N / (drain − startup).
//! - `multi`: the same with P processes of concurrency `MULTI_CONCURRENCY` each; startup is
//!   until the FIRST of them is listed (work begins then), so the rate includes the others'
//!   later start (the time until all are listed is reported too).
//! - `recovery`: worker A alone (`WORKER_LEASE_TTL_MS`=TTL, `WORKER_RECOVERY_INTERVAL_MS`=R),
//!   one `sleep` task of `SLEEP_MS`; once it is active on A, worker B starts (and is listed),
//!   then A gets SIGKILL. Polling `store.get` every 5 ms: kill → requeued by a recovery sweep
//!   (when the 5 ms poll sees the queued phase), kill → re-activated on B (attempt 2), kill →
//!   completed. "lease left" is A's lease expiry minus Redis `TIME` just before the kill, so
//!   "expiry → re-activation" is the latency that recovery itself adds.
//!
//! Measurements of the throughput runs (`CONFIG RESETSTAT` just before the spawn, `INFO`
//! diffed from then to the end of the drain, the bench's own polling commands subtracted):
//! - Redis commands per task: every command in `INFO commandstats` (Redis 7 counts the commands
//!   scripts run through `redis.call` too);
//! - client round trips per task: calls of the commands the store sends itself (EVALSHA,
//!   BLPOP doorbells, connection setup, SUBSCRIBE; see `CLIENT_COMMANDS`); the ZRANGE column
//!   counts those scripts run inside (create's prune of expired terminal tasks);
//! - Redis CPU µs per task (`used_cpu_sys + used_cpu_user`), worker CPU µs per task (the
//!   children's utime + stime from `/proc/<pid>/stat`, startup included), and the CPU of
//!   everything else on the machine ("foreign", with the part of niced processes such as
//!   other builds at `nice -n 19` shown apart). Niced processes still cost a lot here (on two
//!   vCPUs Redis CPU per task nearly doubled next to a niced build), so they count: each run
//!   first waits for a quiet machine, and a run above `FOREIGN_MAX` is re-run up to `RETRIES`
//!   times and marked ⚠.
//!
//! Environment:
//! - `REDIS_URL` (required) — never a shared Redis: the bench creates and deletes namespaces and
//!   runs `CONFIG RESETSTAT`;
//! - `WORKER_BIN` (default: `worker` next to this bench's profile directory, i.e.
//!   `target/release/worker`);
//! - `SCENARIOS` (single,multi,recovery), `N` (20000), `RUNS` (3, the median is reported),
//!   `CONCURRENCIES` (1,8,64,256), `PROCESSES` (2,4), `MULTI_CONCURRENCY` (64),
//!   `PRODUCERS` (16 concurrent create loops for the preload),
//!   `RECOVERY_TTLS_MS` (1000,3000), `RECOVERY_INTERVALS_MS` (1000,200), `RECOVERY_REPEATS` (5),
//!   `SLEEP_MS` (2000), `WORKER_RUST_LOG` (info), `QUIET_PCT` (15), `QUIET_WAIT_S` (120),
//!   `FOREIGN_MAX` (30, % of one core), `RETRIES` (2), `RUN_TIMEOUT_S` (600),
//!   `BENCH_OUT` (JSON file), `BENCH_LABEL`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::measure::commandstats::{
    CLIENT_COMMANDS, RedisSnap, client_round_trips, client_star, command_names, reset_stats,
    server_cmds,
};
use harness::measure::cpu::{CpuSnap, clock_ticks, run_again, wait_quiet};
use harness::measure::env::{bin_from_env, env_list, env_or, require_bins};
use harness::measure::output::{LogDir, bench_requested, cpu_model, cpus, loadavg, write_json};
use harness::measure::redis_admin::{admin_connection, delete_matching, server_facts};
use harness::measure::service::{BenchProc, terminate_all};
use harness::measure::stats::{Stat, stat, thousands};
use harness::measure::{BoxError, Res};
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use serde_json::json;
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{Admission, Invocation, NewTask, Phase, RedisStore, RedisStoreConfig, TaskStore};
use tokio::task::JoinSet;

const MAX_TASKS: u64 = 100_000_000;
const REGISTRY_POLL: Duration = Duration::from_millis(2);
const LIVE_POLL: Duration = Duration::from_millis(10);
const TASK_POLL: Duration = Duration::from_millis(5);
/// Bound on things that take milliseconds when all is well (a worker registering, a task
/// activating).
const PATIENCE: Duration = Duration::from_secs(30);

// ----- settings -----

#[derive(Debug, Clone, Serialize)]
struct Settings {
    #[serde(skip)]
    url: String,
    worker_bin: PathBuf,
    label: String,
    scenarios: Vec<String>,
    n: usize,
    runs: usize,
    concurrencies: Vec<usize>,
    processes: Vec<usize>,
    multi_concurrency: usize,
    producers: usize,
    recovery_ttls_ms: Vec<u64>,
    recovery_intervals_ms: Vec<u64>,
    recovery_repeats: usize,
    sleep_ms: u64,
    worker_rust_log: String,
    quiet_pct: f64,
    quiet_wait_s: u64,
    foreign_max: f64,
    retries: usize,
    run_timeout_s: u64,
    #[serde(skip)]
    out: Option<String>,
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let url = std::env::var("REDIS_URL")
            .map_err(|_| "REDIS_URL is required (scripts/bench-worker sets it)")?;
        let worker_bin = bin_from_env("WORKER_BIN", "worker");
        let settings = Settings {
            url,
            worker_bin,
            label: env_or("BENCH_LABEL", String::from("default"))?,
            scenarios: env_list("SCENARIOS", "single,multi,recovery")?,
            n: env_or("N", 20_000)?,
            runs: env_or("RUNS", 3)?,
            concurrencies: env_list("CONCURRENCIES", "1,8,64,256")?,
            processes: env_list("PROCESSES", "2,4")?,
            multi_concurrency: env_or("MULTI_CONCURRENCY", 64)?,
            producers: env_or("PRODUCERS", 16)?,
            recovery_ttls_ms: env_list("RECOVERY_TTLS_MS", "1000,3000")?,
            recovery_intervals_ms: env_list("RECOVERY_INTERVALS_MS", "1000,200")?,
            recovery_repeats: env_or("RECOVERY_REPEATS", 5)?,
            sleep_ms: env_or("SLEEP_MS", 2_000)?,
            worker_rust_log: env_or("WORKER_RUST_LOG", String::from("info"))?,
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
        if settings.concurrencies.contains(&0)
            || settings.processes.contains(&0)
            || settings.multi_concurrency == 0
            || settings.recovery_repeats == 0
        {
            return Err("concurrencies, process counts and repeats must be positive".into());
        }
        if let Some(unknown) = settings
            .scenarios
            .iter()
            .find(|s| !["single", "multi", "recovery"].contains(&s.as_str()))
        {
            return Err(format!("unknown scenario {unknown:?} (single, multi, recovery)").into());
        }
        require_bins(
            &[&settings.worker_bin],
            "build it with `cargo build --release -p taskcluster-worker` or set WORKER_BIN",
        )?;
        Ok(settings)
    }

    fn runs_scenario(&self, name: &str) -> bool {
        self.scenarios.iter().any(|s| s == name)
    }
}

async fn redis_now_ms(admin: &mut MultiplexedConnection) -> Res<u64> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(admin).await?;
    Ok(secs * 1_000 + micros / 1_000)
}

// ----- worker processes -----

/// Settings a worker would otherwise pick up from the bench's environment.
const WORKER_ENV: &[&str] = &[
    "REDIS_URL",
    "REDIS_NAMESPACE",
    "WORKER_CONCURRENCY",
    "WORKER_ENTRYPOINTS",
    "WORKER_LEASE_TTL_MS",
    "WORKER_ID",
    "WORKER_RECOVERY_INTERVAL_MS",
    "WORKER_DRAIN_TIMEOUT_MS",
    "MAX_RUN_MS",
    "MAX_ATTEMPTS",
    "LOG_FORMAT",
];

/// A `worker` process named `id` in `log_dir`.
fn spawn_worker(
    settings: &Settings,
    log_dir: &Path,
    namespace: &str,
    id: &str,
    envs: &[(&str, String)],
) -> Res<BenchProc> {
    let mut command = Command::new(&settings.worker_bin);
    for name in WORKER_ENV {
        command.env_remove(name);
    }
    command
        .env("REDIS_URL", &settings.url)
        .env("REDIS_NAMESPACE", namespace)
        .env("WORKER_ID", id)
        .env("RUST_LOG", &settings.worker_rust_log);
    for (key, value) in envs {
        command.env(key, value);
    }
    BenchProc::spawn(command, id, log_dir.join(format!("{id}.log")))
}

// ----- store helpers -----

async fn connect(settings: &Settings, namespace: &str) -> Res<RedisStore> {
    let mut config = RedisStoreConfig::new(settings.url.clone());
    config.namespace = namespace.to_owned();
    config.max_tasks = MAX_TASKS;
    config.timeout = Duration::from_secs(10);
    // One owner preloads every task: the per-owner bounds are admission policy, not what this
    // bench measures (with them, a preload stops at the owner's 100 live tasks).
    config.max_live_per_owner = 0;
    config.max_retained_per_owner = 0;
    Ok(RedisStore::connect(config).await?)
}

fn namespace(tag: &str) -> String {
    format!(
        "wbench{}-{tag}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    )
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

fn new_task(
    task_id: String,
    owner: &OwnerHash,
    entrypoint: &str,
    input: serde_json::Value,
) -> NewTask {
    NewTask {
        task_id,
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: entrypoint.to_owned(),
            input,
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
async fn preload(settings: &Settings, store: &RedisStore) -> Res<f64> {
    let owner = AccessToken::generate().owner_hash();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut loops: JoinSet<Res<()>> = JoinSet::new();
    for _ in 0..settings.producers {
        let store = store.clone();
        let next = next.clone();
        let owner = owner.clone();
        let n = settings.n;
        loops.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                store
                    .create(new_task(format!("t{i}"), &owner, "echo", json!(null)))
                    .await?;
            }
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined??;
    }
    let rate = settings.n as f64 / started.elapsed().as_secs_f64();
    let queued = store.queue_depth("echo").await?;
    if queued != settings.n as u64 {
        return Err(format!("preloaded {queued} tasks, wanted {}", settings.n).into());
    }
    Ok(rate)
}

/// The bench's own commands during a timed window, subtracted from commandstats.
#[derive(Debug, Clone, Default, Serialize)]
struct OwnCommands {
    /// `live_count()`: one SCARD.
    scard: u64,
    /// `workers()`: one ZRANGE, plus one MGET when the index is not empty.
    zrange: u64,
    mget: u64,
}

impl OwnCommands {
    fn of(&self, command: &str) -> u64 {
        match command {
            "scard" => self.scard,
            "zrange" => self.zrange,
            "mget" => self.mget,
            _ => 0,
        }
    }
}

async fn registered(registry: &RedisRegistry, own: &mut OwnCommands, ids: &[String]) -> Res<usize> {
    let entries = registry.workers().await?;
    own.zrange += 1;
    if !entries.is_empty() {
        own.mget += 1;
    }
    Ok(ids
        .iter()
        .filter(|id| entries.iter().any(|e| &e.worker_id == *id))
        .count())
}

// ----- throughput -----

#[derive(Debug, Clone, Serialize)]
struct ThroughputRun {
    processes: usize,
    concurrency: usize,
    run: usize,
    n: usize,
    preload_creates_per_s: f64,
    /// Spawn -> first worker listed in the registry.
    startup_s: f64,
    /// Spawn -> every worker listed.
    all_listed_s: f64,
    /// Spawn -> live_count 0.
    total_s: f64,
    /// total - startup.
    drain_s: f64,
    tasks_per_s: f64,
    redis_cpu_s: f64,
    worker_cpu_s: f64,
    bench_cpu_s: f64,
    foreign_cpu_pct: f64,
    /// The part of `foreign_cpu_pct` that niced processes used (0 when this bench runs niced
    /// itself: then niced time is not told apart).
    nice_cpu_pct: f64,
    softirq_pct: f64,
    steal_pct: f64,
    quiet_before_pct: f64,
    own: OwnCommands,
    /// INFO commandstats diff, own polling subtracted: command -> calls.
    commands: BTreeMap<String, u64>,
    /// command -> usec inside Redis.
    command_usec: BTreeMap<String, u64>,
    total_commands_processed: u64,
    contaminated: bool,
}

impl ThroughputRun {
    fn per_task(&self, value: f64) -> f64 {
        value / self.n as f64
    }

    fn server_cmds(&self) -> u64 {
        server_cmds(&self.commands)
    }

    fn client_round_trips(&self) -> u64 {
        client_round_trips(&self.commands)
    }

    fn command(&self, name: &str) -> u64 {
        self.commands.get(name).copied().unwrap_or(0)
    }
}

async fn throughput_run(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ticks: f64,
    processes: usize,
    concurrency: usize,
    run: usize,
) -> Res<ThroughputRun> {
    let ns = namespace(&format!("p{processes}c{concurrency}r{run}"));
    let store = connect(settings, &ns).await?;
    let registry = RedisRegistry::new(&store);
    let preload_creates_per_s = preload(settings, &store).await?;

    let quiet = wait_quiet(settings.quiet_pct, settings.quiet_wait_s, ticks, |cpu| {
        cpu.busy
    })
    .await?;
    reset_stats(admin).await?;
    let redis0 = RedisSnap::take(admin).await?;
    let proc0 = CpuSnap::now()?;
    let mut own = OwnCommands::default();

    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..processes {
        let id = format!("bench-w{w}-{}", short_id());
        workers.push(spawn_worker(
            settings,
            log_dir,
            &ns,
            &id,
            &[
                ("WORKER_CONCURRENCY", concurrency.to_string()),
                ("WORKER_ENTRYPOINTS", "echo".to_owned()),
            ],
        )?);
    }
    let ids: Vec<String> = workers.iter().map(|w| w.name().to_owned()).collect();
    let give_up = started + Duration::from_secs(settings.run_timeout_s);
    let mut first_listed = None;
    let mut all_listed = None;
    let end = loop {
        for worker in &mut workers {
            worker.check_alive()?;
        }
        if Instant::now() > give_up {
            let live = store.live_count().await?;
            return Err(format!("run timed out with {live} tasks live").into());
        }
        if all_listed.is_none() {
            let listed = registered(&registry, &mut own, &ids).await?;
            let now = Instant::now();
            if listed > 0 && first_listed.is_none() {
                first_listed = Some(now);
            }
            if listed == ids.len() {
                all_listed = Some(now);
            } else {
                tokio::time::sleep(REGISTRY_POLL).await;
                continue;
            }
        }
        own.scard += 1;
        if store.live_count().await? == 0 {
            break Instant::now();
        }
        tokio::time::sleep(LIVE_POLL).await;
    };
    let worker_cpu_s: f64 = workers.iter().map(|w| w.ticks() as f64 / ticks).sum();
    let proc1 = CpuSnap::now()?;
    let redis1 = RedisSnap::take(admin).await?;
    terminate_all(&mut workers, Duration::from_secs(10)).await;

    let first_listed = first_listed.ok_or("no worker was listed")?;
    let all_listed = all_listed.ok_or("not every worker was listed")?;
    let queued = store.queue_depth("echo").await?;
    if queued != 0 {
        return Err(format!("{queued} tasks still queued after the drain").into());
    }
    for i in [0, settings.n / 2, settings.n - 1] {
        let stored = store
            .get(&format!("t{i}"))
            .await?
            .ok_or_else(|| format!("task t{i} missing"))?;
        if stored.task.status != TaskStatus::Completed || stored.attempt != 1 {
            return Err(format!(
                "task t{i}: status {}, attempt {}",
                stored.task.status, stored.attempt
            )
            .into());
        }
    }

    let diff = redis1.since(&redis0, |name| own.of(name));
    let total_s = end.duration_since(started).as_secs_f64();
    let startup_s = first_listed.duration_since(started).as_secs_f64();
    let drain_s = (total_s - startup_s).max(1e-6);
    let redis_cpu_s = redis1.cpu_s - redis0.cpu_s;
    let bench_cpu_s = proc1.own.saturating_sub(proc0.own) as f64 / ticks;
    let busy_s = proc1.busy.saturating_sub(proc0.busy) as f64 / ticks;
    let foreign_cpu_pct =
        ((busy_s - bench_cpu_s - redis_cpu_s - worker_cpu_s) / total_s * 100.0).max(0.0);
    let nice_cpu_pct = if proc1.self_niced {
        0.0
    } else {
        proc1.nice.saturating_sub(proc0.nice) as f64 / ticks / total_s * 100.0
    };
    let steal_pct = proc1.steal.saturating_sub(proc0.steal) as f64 / ticks / total_s * 100.0;
    let softirq_pct = proc1.softirq.saturating_sub(proc0.softirq) as f64 / ticks / total_s * 100.0;
    let own_total = own.scard + own.zrange + own.mget;

    let pattern = store.keys().all_pattern();
    store.close().await;
    delete_matching(admin, &pattern).await?;

    Ok(ThroughputRun {
        processes,
        concurrency,
        run,
        n: settings.n,
        preload_creates_per_s,
        startup_s,
        all_listed_s: all_listed.duration_since(started).as_secs_f64(),
        total_s,
        drain_s,
        tasks_per_s: settings.n as f64 / drain_s,
        redis_cpu_s,
        worker_cpu_s,
        bench_cpu_s,
        foreign_cpu_pct,
        nice_cpu_pct,
        softirq_pct,
        steal_pct,
        quiet_before_pct: quiet,
        own,
        commands: diff.calls,
        command_usec: diff.usec,
        total_commands_processed: redis1
            .total_commands_processed
            .saturating_sub(redis0.total_commands_processed)
            .saturating_sub(own_total),
        contaminated: foreign_cpu_pct > settings.foreign_max,
    })
}

// ----- recovery -----

#[derive(Debug, Clone, Serialize)]
struct RecoveryRun {
    lease_ttl_ms: u64,
    recovery_interval_ms: u64,
    repeat: usize,
    /// A's lease expiry minus Redis TIME just before the kill.
    lease_left_ms: f64,
    /// First poll that saw the task queued again (None when B took it within one poll).
    kill_to_requeued_ms: Option<f64>,
    kill_to_reactivated_ms: f64,
    kill_to_completed_ms: f64,
    /// kill_to_reactivated - lease_left: what recovery adds after the lease ran out.
    expiry_to_reactivated_ms: f64,
    within_budget: bool,
}

async fn wait_listed(registry: &RedisRegistry, worker: &mut BenchProc, ids: &[String]) -> Res<()> {
    let give_up = Instant::now() + PATIENCE;
    let mut own = OwnCommands::default();
    loop {
        worker.check_alive()?;
        if registered(registry, &mut own, ids).await? == ids.len() {
            return Ok(());
        }
        if Instant::now() > give_up {
            return Err(format!("workers {ids:?} never listed").into());
        }
        tokio::time::sleep(REGISTRY_POLL).await;
    }
}

async fn recovery_run(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ttl_ms: u64,
    interval_ms: u64,
    repeat: usize,
) -> Res<RecoveryRun> {
    let ns = namespace(&format!("rec{ttl_ms}-{interval_ms}-{repeat}"));
    let store = connect(settings, &ns).await?;
    let registry = RedisRegistry::new(&store);
    let envs = [
        ("WORKER_CONCURRENCY", "4".to_owned()),
        ("WORKER_ENTRYPOINTS", "sleep".to_owned()),
        ("WORKER_LEASE_TTL_MS", ttl_ms.to_string()),
        ("WORKER_RECOVERY_INTERVAL_MS", interval_ms.to_string()),
    ];
    let a_id = format!("bench-a-{}", short_id());
    let b_id = format!("bench-b-{}", short_id());
    let mut a = spawn_worker(settings, log_dir, &ns, &a_id, &envs)?;
    wait_listed(&registry, &mut a, std::slice::from_ref(&a_id)).await?;

    let owner = AccessToken::generate().owner_hash();
    let task_id = format!("rec-{repeat}");
    store
        .create(new_task(
            task_id.clone(),
            &owner,
            "sleep",
            json!({ "ms": settings.sleep_ms }),
        ))
        .await?;
    let give_up = Instant::now() + PATIENCE;
    loop {
        a.check_alive()?;
        let stored = store.get(&task_id).await?.ok_or("task missing")?;
        if stored.phase == Phase::Active && stored.attempt == 1 {
            let holder = stored.lease.map(|l| l.holder).unwrap_or_default();
            if holder != a_id {
                return Err(format!("task active on {holder:?}, not on A").into());
            }
            break;
        }
        if Instant::now() > give_up {
            return Err(format!("task never became active on A: {:?}", stored.phase).into());
        }
        tokio::time::sleep(TASK_POLL).await;
    }

    let mut b = spawn_worker(settings, log_dir, &ns, &b_id, &envs)?;
    wait_listed(&registry, &mut b, &[a_id.clone(), b_id.clone()]).await?;
    let before = store.get(&task_id).await?.ok_or("task missing")?;
    let lease = before.lease.ok_or("no lease on the active task")?;
    if before.phase != Phase::Active || lease.holder != a_id {
        return Err(format!(
            "task no longer active on A before the kill ({:?}); raise SLEEP_MS",
            before.phase
        )
        .into());
    }
    let now_ms = redis_now_ms(admin).await?;
    let lease_left_ms = lease.expires_at_ms as f64 - now_ms as f64;
    let killed = Instant::now();
    a.kill();

    let ms_since = |t: Instant| t.duration_since(killed).as_secs_f64() * 1e3;
    let give_up =
        killed + Duration::from_millis(ttl_ms + interval_ms + settings.sleep_ms) + PATIENCE;
    let mut requeued = None;
    let mut reactivated = None;
    let completed = loop {
        b.check_alive()?;
        let stored = store.get(&task_id).await?.ok_or("task missing")?;
        let now = Instant::now();
        if requeued.is_none() && reactivated.is_none() && stored.phase == Phase::Queued {
            requeued = Some(now);
        }
        if reactivated.is_none() && stored.attempt >= 2 {
            if stored.phase == Phase::Active
                && let Some(lease) = &stored.lease
                && lease.holder != b_id
            {
                return Err(format!("re-activated on {:?}, not on B", lease.holder).into());
            }
            reactivated = Some(now);
        }
        if stored.task.status != TaskStatus::Running {
            if stored.task.status != TaskStatus::Completed || stored.attempt != 2 {
                return Err(format!(
                    "task ended {} at attempt {}",
                    stored.task.status, stored.attempt
                )
                .into());
            }
            break now;
        }
        if now > give_up {
            return Err(format!(
                "task not completed {:?} after the kill: phase {:?}, attempt {}",
                now.duration_since(killed),
                stored.phase,
                stored.attempt
            )
            .into());
        }
        tokio::time::sleep(TASK_POLL).await;
    };
    let reactivated = reactivated.ok_or("never saw the second activation")?;
    terminate_all(std::slice::from_mut(&mut b), Duration::from_secs(10)).await;
    let pattern = store.keys().all_pattern();
    store.close().await;
    delete_matching(admin, &pattern).await?;

    let kill_to_reactivated_ms = ms_since(reactivated);
    Ok(RecoveryRun {
        lease_ttl_ms: ttl_ms,
        recovery_interval_ms: interval_ms,
        repeat,
        lease_left_ms,
        kill_to_requeued_ms: requeued.map(ms_since),
        kill_to_reactivated_ms,
        kill_to_completed_ms: ms_since(completed),
        expiry_to_reactivated_ms: kill_to_reactivated_ms - lease_left_ms,
        within_budget: kill_to_reactivated_ms <= (ttl_ms + 1_000) as f64,
    })
}

// ----- report -----

#[derive(Debug, Clone, Serialize)]
struct ThroughputRow {
    processes: usize,
    concurrency: usize,
    tasks_per_s: Stat,
    startup_ms: Stat,
    all_listed_ms: Stat,
    drain_s: Stat,
    redis_cpu_us_per_task: Stat,
    redis_cpu_pct: Stat,
    worker_cpu_us_per_task: Stat,
    worker_cpu_pct: Stat,
    server_cmds_per_task: Stat,
    client_round_trips_per_task: Stat,
    evalsha_per_task: Stat,
    zrange_per_task: Stat,
    blpop_per_task: Stat,
    total_commands_processed_per_task: Stat,
    preload_creates_per_s: Stat,
    foreign_cpu_pct: Stat,
    nice_cpu_pct: Stat,
    softirq_pct: Stat,
    commands_per_task: BTreeMap<String, f64>,
    command_us_per_task: BTreeMap<String, f64>,
    runs: Vec<ThroughputRun>,
}

fn throughput_row(processes: usize, concurrency: usize, runs: Vec<ThroughputRun>) -> ThroughputRow {
    let s = |f: &dyn Fn(&ThroughputRun) -> f64| stat(runs.iter().map(f));
    let names = command_names(runs.iter().map(|r| &r.commands));
    let commands_per_task = names
        .iter()
        .map(|name| {
            let calls = s(&|r| r.per_task(r.command(name) as f64));
            (name.clone(), calls.median)
        })
        .collect();
    let command_us_per_task = names
        .iter()
        .map(|name| {
            let us = s(&|r| r.per_task(r.command_usec.get(name).copied().unwrap_or(0) as f64));
            (name.clone(), us.median)
        })
        .collect();
    ThroughputRow {
        processes,
        concurrency,
        tasks_per_s: s(&|r| r.tasks_per_s),
        startup_ms: s(&|r| r.startup_s * 1e3),
        all_listed_ms: s(&|r| r.all_listed_s * 1e3),
        drain_s: s(&|r| r.drain_s),
        redis_cpu_us_per_task: s(&|r| r.per_task(r.redis_cpu_s * 1e6)),
        redis_cpu_pct: s(&|r| r.redis_cpu_s / r.total_s * 100.0),
        worker_cpu_us_per_task: s(&|r| r.per_task(r.worker_cpu_s * 1e6)),
        worker_cpu_pct: s(&|r| r.worker_cpu_s / r.total_s * 100.0),
        server_cmds_per_task: s(&|r| r.per_task(r.server_cmds() as f64)),
        client_round_trips_per_task: s(&|r| r.per_task(r.client_round_trips() as f64)),
        evalsha_per_task: s(&|r| {
            r.per_task((r.command("evalsha") + r.command("eval") + r.command("fcall")) as f64)
        }),
        zrange_per_task: s(&|r| r.per_task(r.command("zrange") as f64)),
        blpop_per_task: s(&|r| r.per_task(r.command("blpop") as f64)),
        total_commands_processed_per_task: s(&|r| r.per_task(r.total_commands_processed as f64)),
        preload_creates_per_s: s(&|r| r.preload_creates_per_s),
        foreign_cpu_pct: s(&|r| r.foreign_cpu_pct),
        nice_cpu_pct: s(&|r| r.nice_cpu_pct),
        softirq_pct: s(&|r| r.softirq_pct),
        commands_per_task,
        command_us_per_task,
        runs,
    }
}

#[derive(Debug, Clone, Serialize)]
struct RecoveryRow {
    lease_ttl_ms: u64,
    recovery_interval_ms: u64,
    lease_left_ms: Stat,
    kill_to_requeued_ms: Option<Stat>,
    kill_to_reactivated_ms: Stat,
    kill_to_completed_ms: Stat,
    expiry_to_reactivated_ms: Stat,
    within_budget: usize,
    runs: Vec<RecoveryRun>,
}

fn recovery_row(ttl_ms: u64, interval_ms: u64, runs: Vec<RecoveryRun>) -> RecoveryRow {
    let s = |f: &dyn Fn(&RecoveryRun) -> f64| stat(runs.iter().map(f));
    let requeues: Vec<f64> = runs.iter().filter_map(|r| r.kill_to_requeued_ms).collect();
    RecoveryRow {
        lease_ttl_ms: ttl_ms,
        recovery_interval_ms: interval_ms,
        lease_left_ms: s(&|r| r.lease_left_ms),
        kill_to_requeued_ms: (!requeues.is_empty()).then(|| stat(requeues)),
        kill_to_reactivated_ms: s(&|r| r.kill_to_reactivated_ms),
        kill_to_completed_ms: s(&|r| r.kill_to_completed_ms),
        expiry_to_reactivated_ms: s(&|r| r.expiry_to_reactivated_ms),
        within_budget: runs.iter().filter(|r| r.within_budget).count(),
        runs,
    }
}

fn markdown(
    settings: &Settings,
    meta: &serde_json::Value,
    throughput: &[ThroughputRow],
    recovery: &[RecoveryRow],
) -> Res<String> {
    let mut md = String::new();
    let f0 = |x: f64| format!("{x:.0}");
    let f1 = |x: f64| format!("{x:.1}");
    let f2 = |x: f64| format!("{x:.2}");
    let mm =
        |s: Stat, f: &dyn Fn(f64) -> String| format!("{} ({}–{})", f(s.median), f(s.min), f(s.max));
    writeln!(
        md,
        "### Worker processes — Redis {} ({}) — label: {}\n",
        meta["redis_version"].as_str().unwrap_or("?"),
        meta["persistence"].as_str().unwrap_or("?"),
        settings.label
    )?;
    writeln!(
        md,
        "{}× {}; redis-server, the worker processes and this bench share these cores. Worker binary {}.\n",
        meta["cpus"],
        meta["cpu_model"].as_str().unwrap_or("?"),
        settings.worker_bin.display(),
    )?;
    if !throughput.is_empty() {
        writeln!(
            md,
            "#### Drain throughput: N={} preloaded no-op `echo` tasks, {} runs per row, median (min–max)\n",
            settings.n, settings.runs
        )?;
        writeln!(
            md,
            "Timed from spawning the process(es): startup = until the registry lists the first worker; tasks/s = N / (time until live_count() = 0 − startup). Per task: Redis CPU (INFO cpu), worker CPU (all worker processes, startup included), Redis commands (INFO commandstats, including those run inside scripts), client round trips (calls of {}), split into EVALSHA / BLPOP waits, beside the ZRANGEs scripts run inside. The bench's own polling is subtracted. % core = CPU over the whole timed window (startup included). Last column, % of one core: CPU of other processes (in brackets the part of niced ones, e.g. other builds at nice 19) and soft-interrupt time (loopback networking); ⚠ = a run with others above FOREIGN_MAX={}% even after retries.\n",
            CLIENT_COMMANDS.join("/"),
            settings.foreign_max,
        )?;
        writeln!(
            md,
            "| processes × C | tasks/s | startup ms | Redis CPU µs/task | Redis % core | worker CPU µs/task | worker % core | Redis cmds/task | client RT/task | EVALSHA / ZRANGE / BLPOP per task | others (niced) / softirq % |"
        )?;
        writeln!(md, "|{}", "---|".repeat(11))?;
        for r in throughput {
            writeln!(
                md,
                "| {} × {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} ({}) / {}{} |",
                r.processes,
                r.concurrency,
                mm(r.tasks_per_s, &thousands),
                f0(r.startup_ms.median),
                mm(r.redis_cpu_us_per_task, &f1),
                f0(r.redis_cpu_pct.median),
                f1(r.worker_cpu_us_per_task.median),
                f0(r.worker_cpu_pct.median),
                f2(r.server_cmds_per_task.median),
                f2(r.client_round_trips_per_task.median),
                f2(r.evalsha_per_task.median),
                f2(r.zrange_per_task.median),
                f2(r.blpop_per_task.median),
                f0(r.foreign_cpu_pct.median),
                f0(r.nice_cpu_pct.median),
                f0(r.softirq_pct.median),
                if r.runs.iter().any(|x| x.contaminated) {
                    " ⚠"
                } else {
                    ""
                },
            )?;
        }
        writeln!(md)?;
        let preload: Vec<String> = throughput
            .iter()
            .map(|r| {
                format!(
                    "{}×{}: {}",
                    r.processes,
                    r.concurrency,
                    thousands(r.preload_creates_per_s.median)
                )
            })
            .collect();
        writeln!(
            md,
            "Untimed preload ({} concurrent create loops), creates/s: {}\n",
            settings.producers,
            preload.join("; ")
        )?;
        let mut names: Vec<&String> = throughput
            .iter()
            .flat_map(|r| r.commands_per_task.keys())
            .collect();
        names.sort();
        names.dedup();
        let max_of = |name: &str| {
            throughput
                .iter()
                .map(|r| r.commands_per_task.get(name).copied().unwrap_or(0.0))
                .fold(0.0, f64::max)
        };
        names.sort_by(|a, b| max_of(b).total_cmp(&max_of(a)));
        writeln!(
            md,
            "Commands per task (median of runs; * = sent by the client, the rest run inside scripts; µs = time inside Redis per task):\n"
        )?;
        let header: Vec<String> = throughput
            .iter()
            .map(|r| format!("{}×{}", r.processes, r.concurrency))
            .collect();
        writeln!(md, "| command | {} |", header.join(" | "))?;
        writeln!(md, "|---|{}", "---|".repeat(throughput.len()))?;
        for name in names {
            if max_of(name) < 0.0005 {
                continue;
            }
            let cells: Vec<String> = throughput
                .iter()
                .map(|r| {
                    format!(
                        "{:.3} ({:.1})",
                        r.commands_per_task.get(name).copied().unwrap_or(0.0),
                        r.command_us_per_task.get(name).copied().unwrap_or(0.0)
                    )
                })
                .collect();
            writeln!(
                md,
                "| {name}{} | {} |",
                client_star(name),
                cells.join(" | ")
            )?;
        }
        let totals: Vec<String> = throughput
            .iter()
            .map(|r| format!("**{:.2}**", r.server_cmds_per_task.median))
            .collect();
        writeln!(md, "| **total** | {} |", totals.join(" | "))?;
        let tcp: Vec<String> = throughput
            .iter()
            .map(|r| format!("{:.2}", r.total_commands_processed_per_task.median))
            .collect();
        writeln!(
            md,
            "| INFO stats total_commands_processed | {} |\n",
            tcp.join(" | ")
        )?;
    }
    if !recovery.is_empty() {
        writeln!(
            md,
            "#### Recovery after SIGKILL: one `sleep` task ({} ms) active on worker A, worker B listed, A killed; {} repeats per row, median (min–max) in ms\n",
            settings.sleep_ms, settings.recovery_repeats
        )?;
        writeln!(
            md,
            "lease left = A's lease expiry − Redis TIME just before the kill (the kill comes a few ms after the activation, so nearly a full TTL: the worst case); requeued = first 5 ms poll that saw the task queued again (only when B had not taken it yet); re-activated = attempt 2 active on B; expiry → re-activated = re-activated − lease left; budget = TTL + 1 s.\n"
        )?;
        writeln!(
            md,
            "| lease TTL | recovery interval | lease left at kill | kill → requeued | kill → re-activated | max | expiry → re-activated | kill → completed | within TTL + 1 s |"
        )?;
        writeln!(md, "|{}", "---|".repeat(9))?;
        for r in recovery {
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | **{}** | {} | {} | {}/{} |",
                r.lease_ttl_ms,
                r.recovery_interval_ms,
                mm(r.lease_left_ms, &f0),
                r.kill_to_requeued_ms
                    .map(|s| mm(s, &f0))
                    .unwrap_or_else(|| "-".into()),
                mm(r.kill_to_reactivated_ms, &f0),
                f0(r.kill_to_reactivated_ms.max),
                mm(r.expiry_to_reactivated_ms, &f0),
                mm(r.kill_to_completed_ms, &f0),
                r.within_budget,
                r.runs.len(),
            )?;
        }
        writeln!(md)?;
    }
    Ok(md)
}

// ----- main -----

async fn meta(settings: &Settings, admin: &mut MultiplexedConnection) -> Res<serde_json::Value> {
    let server = server_facts(admin).await?;
    Ok(json!({
        "label": settings.label,
        "redis_version": server.version,
        "persistence": server.persistence,
        "cpus": cpus(),
        "cpu_model": cpu_model(),
        "loadavg_at_start": loadavg(),
        "settings": settings,
    }))
}

async fn throughput_rows(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
    ticks: f64,
) -> Res<Vec<ThroughputRow>> {
    let mut shapes = Vec::new();
    if settings.runs_scenario("single") {
        shapes.extend(settings.concurrencies.iter().map(|&c| (1, c)));
    }
    if settings.runs_scenario("multi") {
        shapes.extend(
            settings
                .processes
                .iter()
                .map(|&p| (p, settings.multi_concurrency)),
        );
    }
    let mut rows = Vec::new();
    for (processes, concurrency) in shapes {
        let mut runs = Vec::new();
        for run in 1..=settings.runs {
            let mut attempt = 0;
            let result = loop {
                let result =
                    throughput_run(settings, admin, log_dir, ticks, processes, concurrency, run)
                        .await
                        .map_err(|err| format!("{processes}×{concurrency} run {run}: {err}"))?;
                eprintln!(
                    "  {processes}×{concurrency} run {run}: {} tasks/s (startup {:.0} ms, drain {:.2} s); redis {:.1} µs/task ({:.0}% core), workers {:.1} µs/task; {:.2} cmds/task, {:.2} RT/task; foreign {:.0}% (niced {:.0}%) softirq {:.0}%",
                    thousands(result.tasks_per_s),
                    result.startup_s * 1e3,
                    result.drain_s,
                    result.per_task(result.redis_cpu_s * 1e6),
                    result.redis_cpu_s / result.total_s * 100.0,
                    result.per_task(result.worker_cpu_s * 1e6),
                    result.per_task(result.server_cmds() as f64),
                    result.per_task(result.client_round_trips() as f64),
                    result.foreign_cpu_pct,
                    result.nice_cpu_pct,
                    result.softirq_pct,
                );
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
        rows.push(throughput_row(processes, concurrency, runs));
    }
    Ok(rows)
}

async fn recovery_rows(
    settings: &Settings,
    admin: &mut MultiplexedConnection,
    log_dir: &Path,
) -> Res<Vec<RecoveryRow>> {
    let mut rows = Vec::new();
    if !settings.runs_scenario("recovery") {
        return Ok(rows);
    }
    for &ttl_ms in &settings.recovery_ttls_ms {
        for &interval_ms in &settings.recovery_intervals_ms {
            let mut runs = Vec::new();
            for repeat in 1..=settings.recovery_repeats {
                let result = recovery_run(settings, admin, log_dir, ttl_ms, interval_ms, repeat)
                    .await
                    .map_err(|err| {
                        format!("recovery ttl {ttl_ms} interval {interval_ms} #{repeat}: {err}")
                    })?;
                eprintln!(
                    "  recovery ttl {ttl_ms} ms interval {interval_ms} ms #{repeat}: lease left {:.0} ms, kill → requeued {}, re-activated {:.0} ms, completed {:.0} ms",
                    result.lease_left_ms,
                    result
                        .kill_to_requeued_ms
                        .map(|ms| format!("{ms:.0} ms"))
                        .unwrap_or_else(|| "-".into()),
                    result.kill_to_reactivated_ms,
                    result.kill_to_completed_ms,
                );
                runs.push(result);
            }
            rows.push(recovery_row(ttl_ms, interval_ms, runs));
        }
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> Res<()> {
    if !bench_requested("cluster is a benchmark: run it with scripts/bench-worker (cargo bench)") {
        return Ok(());
    }
    let settings = Settings::from_env()?;
    let ticks = clock_ticks();
    let mut admin = admin_connection(&settings.url).await?;
    let meta = meta(&settings, &mut admin).await?;
    eprintln!("cluster bench: {meta}");
    let logs = LogDir::create("worker-bench")?;
    let log_dir = logs.path();

    let result = async {
        let throughput = throughput_rows(&settings, &mut admin, log_dir, ticks).await?;
        let recovery = recovery_rows(&settings, &mut admin, log_dir).await?;
        Ok::<_, BoxError>((throughput, recovery))
    }
    .await;
    let (throughput, recovery) = result?;

    let md = markdown(&settings, &meta, &throughput, &recovery)?;
    println!("{md}");
    let report = json!({
        "meta": meta,
        "throughput": throughput,
        "recovery": recovery,
        "markdown": md,
    });
    write_json(settings.out.as_deref(), &report)
}
