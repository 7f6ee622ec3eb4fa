//! What hosting an agent over HTTP costs (`worker --agent URL`), against the built-in `echo` on
//! the same Redis: drain throughput, worker CPU per task and per-task latency.
//!
//! Run it through `scripts/bench-remote`, which builds the release binaries (`worker`,
//! `echo_agent`), starts a private redis-server and calls `cargo bench -p worker --bench remote`
//! with `REDIS_URL` set. Without `--bench` (as `cargo test --all-targets` runs it) it does
//! nothing.
//!
//! One `echo_agent` (tests/src/bin/echo_agent.rs: axum, its card and
//! `/entrypoints/echo/invoke`) runs for the whole bench. Two variants of one worker process,
//! run alternately so that the shared machine's load falls on both alike:
//! - `builtin`: `WORKER_ENTRYPOINTS=echo`;
//! - `remote`: `WORKER_AGENTS=<the agent>` and no built-ins, so the agent's `echo` takes the
//!   same queue: each task is one `POST /entrypoints/echo/invoke` on a kept-alive connection.
//!
//! Scenarios:
//! - throughput: N `echo` tasks (input `{"i": i}`) are created first, then the worker starts with
//!   `WORKER_CONCURRENCY=C`; timed from the moment the registry lists it (polled every 2 ms)
//!   until `live_count()` is 0 (polled every 10 ms). Worker CPU is its utime + stime from
//!   `/proc/<pid>/stat` (startup included, the same for both); the agent's CPU over the same
//!   window is reported apart. Every task is checked: completed on its first attempt with its
//!   input as output.
//! - latency: a running worker; one task at a time, `create_watched` (the create and the
//!   subscription in one round trip) until its terminal event: end-to-end time per task as a
//!   client of the store sees it. "added" is remote minus built-in at each percentile.
//!
//! Environment: `REDIS_URL` (required; never a shared Redis: namespaces are created and
//! deleted), `WORKER_BIN`, `ECHO_AGENT_BIN` (default: beside this bench's profile directory),
//! `N` (20000), `RUNS` (3; medians reported), `CONCURRENCIES` (1,8,64), `LATENCY_N` (2000 per
//! variant and run), `LATENCY_WARMUP` (200), `LATENCY_CONCURRENCY` (8), `PRODUCERS` (16),
//! `QUIET_PCT` (15), `QUIET_WAIT_S` (20), `WORKER_RUST_LOG` (warn), `BENCH_OUT` (JSON file).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::measure::cpu::{clock_ticks, wait_quiet};
use harness::measure::env::{bin_from_env, env_list, env_or, require_bins};
use harness::measure::output::{LogDir, bench_requested, cpu_model, cpus, loadavg, write_json};
use harness::measure::redis_admin::{admin_connection, delete_matching};
use harness::measure::service::{BenchProc, terminate_all};
use harness::measure::stats::{median, percentile, stat};
use harness::measure::{BoxError, Res};
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use serde::Serialize;
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{
    Admission, Invocation, NewTask, RedisStore, RedisStoreConfig, StoredEvent, Subscription,
    TaskStore,
};
use tokio::task::JoinSet;

const REGISTRY_POLL: Duration = Duration::from_millis(2);
const LIVE_POLL: Duration = Duration::from_millis(10);
/// Bound on what takes milliseconds when all is well (a worker listed, one task run).
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Serialize)]
struct Settings {
    #[serde(skip)]
    url: String,
    worker_bin: PathBuf,
    agent_bin: PathBuf,
    n: usize,
    runs: usize,
    concurrencies: Vec<usize>,
    latency_n: usize,
    latency_warmup: usize,
    latency_concurrency: usize,
    producers: usize,
    quiet_pct: f64,
    quiet_wait_s: u64,
    worker_rust_log: String,
    #[serde(skip)]
    out: Option<String>,
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let settings = Settings {
            url: std::env::var("REDIS_URL")
                .map_err(|_| "REDIS_URL is required (scripts/bench-remote sets it)")?,
            worker_bin: bin_from_env("WORKER_BIN", "worker"),
            agent_bin: bin_from_env("ECHO_AGENT_BIN", "echo_agent"),
            n: env_or("N", 20_000)?,
            runs: env_or("RUNS", 3)?,
            concurrencies: env_list("CONCURRENCIES", "1,8,64")?,
            latency_n: env_or("LATENCY_N", 2_000)?,
            latency_warmup: env_or("LATENCY_WARMUP", 200)?,
            latency_concurrency: env_or("LATENCY_CONCURRENCY", 8)?,
            producers: env_or("PRODUCERS", 16)?,
            quiet_pct: env_or("QUIET_PCT", 15.0)?,
            quiet_wait_s: env_or("QUIET_WAIT_S", 20)?,
            worker_rust_log: env_or("WORKER_RUST_LOG", String::from("warn"))?,
            out: std::env::var("BENCH_OUT").ok().filter(|p| !p.is_empty()),
        };
        if settings.n == 0
            || settings.runs == 0
            || settings.producers == 0
            || settings.concurrencies.contains(&0)
            || settings.latency_concurrency == 0
        {
            return Err("N, RUNS, PRODUCERS and concurrencies must be positive".into());
        }
        require_bins(
            &[&settings.worker_bin, &settings.agent_bin],
            "build them with `cargo build --release -p worker --bin worker -p cluster-tests --bin echo_agent`",
        )?;
        Ok(settings)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Variant {
    Builtin,
    Remote,
}

const VARIANTS: [Variant; 2] = [Variant::Builtin, Variant::Remote];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Builtin => "builtin",
            Variant::Remote => "remote",
        }
    }
}

/// The bench's fixture: its settings, the running agent and where logs go.
struct Bench {
    settings: Settings,
    agent: BenchProc,
    agent_url: String,
    log_dir: PathBuf,
    ticks: f64,
}

impl Bench {
    /// A worker of `variant` with `concurrency` slots on namespace `ns`.
    fn spawn_worker(&self, variant: Variant, ns: &str, concurrency: usize) -> Res<BenchProc> {
        let id = format!("rbench-{}-{}", variant.name(), short_id());
        let mut envs = vec![
            ("REDIS_URL", self.settings.url.clone()),
            ("REDIS_NAMESPACE", ns.to_owned()),
            ("WORKER_ID", id.clone()),
            ("WORKER_CONCURRENCY", concurrency.to_string()),
            ("RUST_LOG", self.settings.worker_rust_log.clone()),
        ];
        match variant {
            Variant::Builtin => envs.push(("WORKER_ENTRYPOINTS", "echo".to_owned())),
            Variant::Remote => envs.push(("WORKER_AGENTS", self.agent_url.clone())),
        }
        BenchProc::service(&self.settings.worker_bin, &id, &self.log_dir, &envs)
    }
}

async fn connect(settings: &Settings, ns: &str) -> Res<RedisStore> {
    let mut config = RedisStoreConfig::new(settings.url.clone());
    config.namespace = ns.to_owned();
    config.max_tasks = 100_000_000;
    // One owner preloads every task: the per-owner and retained bounds are admission
    // policy, not what this bench measures.
    config.max_live_per_owner = 0;
    config.max_retained_per_owner = 0;
    config.max_retained = 0;
    config.timeout = Duration::from_secs(10);
    Ok(RedisStore::connect(config).await?)
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

fn namespace(tag: &str) -> String {
    format!("rbench{}-{tag}-{}", std::process::id(), short_id())
}

fn new_task(task_id: String, owner: &OwnerHash, input: Value) -> NewTask {
    NewTask {
        task_id,
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: "echo".to_owned(),
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

/// Waits until the registry lists `id` (the worker's fetch loop starts right after).
async fn wait_listed(store: &RedisStore, worker: &mut BenchProc) -> Res<Instant> {
    let registry = RedisRegistry::new(store);
    let give_up = Instant::now() + PATIENCE;
    loop {
        worker.check_alive()?;
        if registry
            .workers()
            .await?
            .iter()
            .any(|entry| entry.worker_id == worker.name())
        {
            return Ok(Instant::now());
        }
        if Instant::now() > give_up {
            return Err(format!("{} never listed:\n{}", worker.name(), worker.log_tail()).into());
        }
        tokio::time::sleep(REGISTRY_POLL).await;
    }
}

// ----- throughput -----

#[derive(Debug, Clone, Serialize)]
struct ThroughputRun {
    variant: Variant,
    concurrency: usize,
    run: usize,
    tasks_per_s: f64,
    drain_s: f64,
    worker_cpu_us_per_task: f64,
    agent_cpu_us_per_task: f64,
    foreign_before_pct: f64,
}

/// Creates `n` queued `echo` tasks `t0..` with `producers` concurrent loops.
async fn preload(settings: &Settings, store: &RedisStore) -> Res<()> {
    let owner = AccessToken::generate().owner_hash();
    let next = Arc::new(AtomicUsize::new(0));
    let mut loops: JoinSet<Res<()>> = JoinSet::new();
    for _ in 0..settings.producers {
        let (store, next, owner, n) = (store.clone(), next.clone(), owner.clone(), settings.n);
        loops.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                store
                    .create(new_task(format!("t{i}"), &owner, json!({ "i": i })))
                    .await?;
            }
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined??;
    }
    Ok(())
}

async fn throughput_run(
    bench: &mut Bench,
    variant: Variant,
    concurrency: usize,
    run: usize,
) -> Res<ThroughputRun> {
    let settings = bench.settings.clone();
    let ns = namespace(&format!("{}-c{concurrency}-r{run}", variant.name()));
    let store = connect(&settings, &ns).await?;
    preload(&settings, &store).await?;
    let foreign_before_pct = wait_quiet(
        settings.quiet_pct,
        settings.quiet_wait_s,
        bench.ticks,
        |cpu| cpu.busy,
    )
    .await?;

    let mut worker = bench.spawn_worker(variant, &ns, concurrency)?;
    let started = wait_listed(&store, &mut worker).await?;
    let agent0 = bench.agent.ticks();
    let give_up = started + Duration::from_secs(600);
    loop {
        worker.check_alive()?;
        bench.agent.check_alive()?;
        if store.live_count().await? == 0 {
            break;
        }
        if Instant::now() > give_up {
            return Err(format!("{} did not drain in 600 s", worker.name()).into());
        }
        tokio::time::sleep(LIVE_POLL).await;
    }
    let drain_s = started.elapsed().as_secs_f64();
    let worker_ticks = worker.ticks();
    let agent_ticks = bench.agent.ticks().saturating_sub(agent0);
    terminate_all(std::slice::from_mut(&mut worker), Duration::from_secs(10)).await;

    for i in 0..settings.n {
        let stored = store
            .get(&format!("t{i}"))
            .await?
            .ok_or_else(|| format!("task t{i} missing"))?;
        let output = stored.task.result.as_ref().map(|result| &result.output);
        if stored.task.status != TaskStatus::Completed
            || stored.attempt != 1
            || output != Some(&json!({ "i": i }))
        {
            return Err(format!(
                "{}: task t{i} ended {} on attempt {} with {output:?}",
                variant.name(),
                stored.task.status,
                stored.attempt
            )
            .into());
        }
    }
    let pattern = store.keys().all_pattern();
    store.close().await;
    let mut admin = admin_connection(&settings.url).await?;
    delete_matching(&mut admin, &pattern).await?;

    let per_task_us = |ticks: u64| ticks as f64 / bench.ticks / settings.n as f64 * 1e6;
    Ok(ThroughputRun {
        variant,
        concurrency,
        run,
        tasks_per_s: settings.n as f64 / drain_s,
        drain_s,
        worker_cpu_us_per_task: per_task_us(worker_ticks),
        agent_cpu_us_per_task: per_task_us(agent_ticks),
        foreign_before_pct,
    })
}

// ----- latency -----

#[derive(Debug, Clone, Serialize)]
struct LatencyRun {
    variant: Variant,
    run: usize,
    /// End-to-end milliseconds per task, sorted.
    #[serde(skip)]
    samples_ms: Vec<f64>,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
}

/// Awaits the terminal event of a watched task (in the replay or live).
async fn terminal(sub: &mut Subscription) -> Res<StoredEvent> {
    let is_terminal = |event: &StoredEvent| {
        matches!(
            event.event.as_str(),
            "statusUpdate" | "resultUpdate" | "error"
        ) && event.data["status"]
            .as_str()
            .is_some_and(|status| status != "running")
    };
    if let Some(event) = sub.replay.iter().find(|event| is_terminal(event)) {
        return Ok(event.clone());
    }
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = sub.events.next().await {
            if is_terminal(&event) {
                return Some(event);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err("the subscription ended before the task did".into()),
        Err(_) => Err("no terminal event within the patience".into()),
    }
}

async fn latency_run(bench: &mut Bench, variant: Variant, run: usize) -> Res<LatencyRun> {
    let settings = bench.settings.clone();
    let ns = namespace(&format!("{}-lat-r{run}", variant.name()));
    let store = connect(&settings, &ns).await?;
    let mut worker = bench.spawn_worker(variant, &ns, settings.latency_concurrency)?;
    wait_listed(&store, &mut worker).await?;
    let owner = AccessToken::generate().owner_hash();
    let mut samples_ms = Vec::with_capacity(settings.latency_n);
    for i in 0..settings.latency_warmup + settings.latency_n {
        let input = json!({ "i": i });
        let started = Instant::now();
        let (_, mut sub) = store
            .create_watched(new_task(format!("l{i}"), &owner, input.clone()))
            .await?;
        let event = terminal(&mut sub).await?;
        let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        if event.data["status"] != "completed" {
            worker.check_alive()?;
            return Err(format!("{}: task l{i} ended {}", variant.name(), event.data).into());
        }
        if i >= settings.latency_warmup {
            samples_ms.push(elapsed_ms);
        }
    }
    terminate_all(std::slice::from_mut(&mut worker), Duration::from_secs(10)).await;
    let pattern = store.keys().all_pattern();
    store.close().await;
    let mut admin = admin_connection(&settings.url).await?;
    delete_matching(&mut admin, &pattern).await?;
    samples_ms.sort_by(f64::total_cmp);
    Ok(LatencyRun {
        variant,
        run,
        p50_ms: percentile(&samples_ms, 50.0),
        p90_ms: percentile(&samples_ms, 90.0),
        p99_ms: percentile(&samples_ms, 99.0),
        samples_ms,
    })
}

// ----- report -----

fn markdown(settings: &Settings, throughput: &[ThroughputRun], latency: &[LatencyRun]) -> String {
    let mut md = String::new();
    md.push_str(&format!(
        "N = {} tasks per throughput run, median of {} runs; latency over {} tasks per variant and run (after {} warm-up), pooled.\n\n",
        settings.n, settings.runs, settings.latency_n, settings.latency_warmup
    ));
    md.push_str("| C | built-in tasks/s | remote tasks/s | remote / built-in | worker CPU µs/task built-in | worker CPU µs/task remote | agent CPU µs/task |\n");
    md.push_str("|---:|---:|---:|---:|---:|---:|---:|\n");
    for &c in &settings.concurrencies {
        let of = |variant: Variant, pick: fn(&ThroughputRun) -> f64| {
            median(
                throughput
                    .iter()
                    .filter(|r| r.variant == variant && r.concurrency == c)
                    .map(pick),
            )
            .unwrap_or(f64::NAN)
        };
        let builtin = stat(
            throughput
                .iter()
                .filter(|r| r.variant == Variant::Builtin && r.concurrency == c)
                .map(|r| r.tasks_per_s),
        );
        let remote = stat(
            throughput
                .iter()
                .filter(|r| r.variant == Variant::Remote && r.concurrency == c)
                .map(|r| r.tasks_per_s),
        );
        md.push_str(&format!(
            "| {c} | {:.0} ({:.0}–{:.0}) | {:.0} ({:.0}–{:.0}) | {:.2} | {:.0} | {:.0} | {:.0} |\n",
            builtin.median,
            builtin.min,
            builtin.max,
            remote.median,
            remote.min,
            remote.max,
            remote.median / builtin.median,
            of(Variant::Builtin, |r| r.worker_cpu_us_per_task),
            of(Variant::Remote, |r| r.worker_cpu_us_per_task),
            of(Variant::Remote, |r| r.agent_cpu_us_per_task),
        ));
    }
    let pooled = |variant: Variant| {
        let mut all: Vec<f64> = latency
            .iter()
            .filter(|r| r.variant == variant)
            .flat_map(|r| r.samples_ms.iter().copied())
            .collect();
        all.sort_by(f64::total_cmp);
        [50.0, 90.0, 99.0].map(|p| percentile(&all, p))
    };
    let (builtin, remote) = (pooled(Variant::Builtin), pooled(Variant::Remote));
    md.push_str(
        "\n| end to end, one task at a time | p50 ms | p90 ms | p99 ms |\n|---|---:|---:|---:|\n",
    );
    md.push_str(&format!(
        "| built-in echo | {:.3} | {:.3} | {:.3} |\n| remote echo | {:.3} | {:.3} | {:.3} |\n| added | {:.3} | {:.3} | {:.3} |\n",
        builtin[0],
        builtin[1],
        builtin[2],
        remote[0],
        remote[1],
        remote[2],
        remote[0] - builtin[0],
        remote[1] - builtin[1],
        remote[2] - builtin[2],
    ));
    md
}

fn free_port() -> Res<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn start_agent(settings: &Settings, log_dir: &Path) -> Res<(BenchProc, String)> {
    let url = format!("http://127.0.0.1:{}", free_port()?);
    let listen = url.trim_start_matches("http://").to_owned();
    let mut agent = BenchProc::service(
        &settings.agent_bin,
        "echo-agent",
        log_dir,
        &[("LISTEN_ADDR", listen)],
    )?;
    let http = reqwest::Client::new();
    let give_up = Instant::now() + PATIENCE;
    loop {
        agent.check_alive()?;
        if let Ok(response) = http.get(format!("{url}/health")).send().await
            && response.status().is_success()
        {
            return Ok((agent, url));
        }
        if Instant::now() > give_up {
            return Err("the echo agent never answered /health".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() -> Res<()> {
    if !bench_requested("remote is a benchmark: run it with scripts/bench-remote (cargo bench)") {
        return Ok(());
    }
    let settings = Settings::from_env()?;
    let logs = LogDir::create("remote-bench")?;
    let log_dir = logs.path().to_path_buf();
    let (agent, agent_url) = start_agent(&settings, &log_dir).await?;
    let meta = json!({
        "cpus": cpus(),
        "cpu_model": cpu_model(),
        "loadavg_before": loadavg(),
        "settings": settings,
    });
    eprintln!("remote bench: {meta}");
    let mut bench = Bench {
        settings: settings.clone(),
        agent,
        agent_url,
        log_dir,
        ticks: clock_ticks(),
    };

    let result = async {
        let mut throughput = Vec::new();
        let mut latency = Vec::new();
        for run in 0..settings.runs {
            for &c in &settings.concurrencies {
                for variant in VARIANTS {
                    let r = throughput_run(&mut bench, variant, c, run).await?;
                    eprintln!(
                        "  {} C={c} run {run}: {:.0} tasks/s, worker {:.0} µs/task, agent {:.0} µs/task",
                        variant.name(),
                        r.tasks_per_s,
                        r.worker_cpu_us_per_task,
                        r.agent_cpu_us_per_task
                    );
                    throughput.push(r);
                }
            }
            if settings.latency_n > 0 {
                for variant in VARIANTS {
                    let r = latency_run(&mut bench, variant, run).await?;
                    eprintln!(
                        "  {} latency run {run}: p50 {:.3} ms, p99 {:.3} ms",
                        variant.name(),
                        r.p50_ms,
                        r.p99_ms
                    );
                    latency.push(r);
                }
            }
        }
        Ok::<_, BoxError>((throughput, latency))
    }
    .await;
    bench.agent.kill();
    let (throughput, latency) = result?;
    let md = markdown(&settings, &throughput, &latency);
    println!("{md}");
    write_json(
        settings.out.as_deref(),
        &json!({
            "meta": meta,
            "loadavg_after": loadavg(),
            "throughput": throughput,
            "latency": latency,
            "markdown": md,
        }),
    )
}
