//! P25 design spike (issue 43): Redis CPU and Redis commands per task of a task queue on a Redis
//! Stream with a consumer group that keeps lease fencing (`harness::streams_spike`; the design
//! and the measured table are in docs/store.md, "Toward P25: a Streams queue").
//!
//!   cargo bench -p cluster-tests --bench streams_spike
//!   N=50000 BATCHES=1,16,256 WORKERS=8 MODES=key,bucket RENEW=1 cargo bench -p cluster-tests --bench streams_spike
//!
//! It starts its own redis-server (the harness: a free loopback port, no persistence; the binary
//! is `$REDIS_SERVER` or `redis-server` on PATH). Per result mode and batch size B, on a fresh
//! queue:
//! - add: N tasks by `XADD`, pipelined 256 at a time (one connection);
//! - drain: WORKERS loops, each its own connection and consumer (`w<i>-e1`): `XREADGROUP COUNT B`,
//!   with EVENTS_EACH=1 each finished task's event is also published on its own channel;
//!   with TRIM=1 finished entries leave the stream by one `XTRIM MINID ~` per batch, not `XDEL`;
//!   with RENEW=1 one fenced renewal call for the batch (an upper bound: a real worker renews its
//!   whole set once per TTL/3, not per batch), then one fenced finish call for the batch (result
//!   kept with an expiry, `XACK`, `XDEL`, one `PUBLISH`), until nothing is left to take.
//!
//! `CONFIG RESETSTAT` is not needed: `INFO commandstats cpu` is diffed around each phase. Redis
//! 7 counts the commands a script runs, so "commands" is every command Redis executed, in and
//! out of scripts (a script call counts once as `evalsha` besides the commands it runs).
//! After each drain the stream and its pending list must be empty and every task finished once.

use std::collections::BTreeMap;
use std::time::Instant;

use harness::measure::Res;
use harness::measure::commandstats::RedisSnap;
use harness::measure::env::{env_list, env_or};
use harness::measure::output::bench_requested;
use harness::redis_server::RedisServer;
use harness::streams_spike::{Lease, ResultMode, SpikeQueue};
use redis::aio::MultiplexedConnection;

const ADD_PIPELINE: usize = 256;
const RETENTION_MS: u64 = 3_600_000;

/// Per-task figures of one phase.
#[derive(Debug, Clone, Default)]
struct Phase {
    us_per_task: f64,
    cmds_per_task: f64,
    scripts_per_task: f64,
    tasks_per_s: f64,
    calls: BTreeMap<String, u64>,
    usec: BTreeMap<String, u64>,
}

fn phase(before: &RedisSnap, after: &RedisSnap, tasks: u64, secs: f64) -> Phase {
    let diff = after.since(before, |_| 0);
    let n = tasks.max(1) as f64;
    let scripts = diff
        .calls
        .iter()
        .filter(|(name, _)| name.starts_with("eval"))
        .map(|(_, c)| *c)
        .sum::<u64>();
    Phase {
        us_per_task: (after.cpu_s - before.cpu_s) * 1e6 / n,
        cmds_per_task: diff.calls.values().sum::<u64>() as f64 / n,
        scripts_per_task: scripts as f64 / n,
        tasks_per_s: n / secs.max(1e-9),
        calls: diff.calls,
        usec: diff.usec,
    }
}

fn parse_mode(text: &str) -> Res<ResultMode> {
    match text {
        "key" => Ok(ResultMode::Key),
        "bucket" => Ok(ResultMode::Bucket),
        "record" => Ok(ResultMode::Record),
        other => Err(format!("MODES: {other:?} is neither key nor bucket").into()),
    }
}

async fn add_all(
    conn: &mut MultiplexedConnection,
    q: &SpikeQueue,
    n: usize,
    payload: &str,
) -> Res<()> {
    let mut done = 0;
    while done < n {
        let mut pipe = redis::pipe();
        let end = (done + ADD_PIPELINE).min(n);
        for i in done..end {
            q.add_to(&mut pipe, &format!("task-{i:08}"), payload);
        }
        pipe.exec_async(conn).await?;
        done = end;
    }
    Ok(())
}

/// One worker loop; returns the tasks it finished.
async fn worker(
    mut conn: MultiplexedConnection,
    q: SpikeQueue,
    consumer: String,
    batch: usize,
    renew: bool,
) -> Res<u64> {
    let mut finished = 0;
    loop {
        let leases: Vec<Lease> = q.take(&mut conn, &consumer, batch).await?;
        if leases.is_empty() {
            return Ok(finished);
        }
        if renew {
            let refs: Vec<&Lease> = leases.iter().collect();
            let renewed = q.renew(&mut conn, &consumer, &refs).await?;
            if renewed.len() != leases.len() {
                return Err(
                    format!("{consumer}: renewed {} of {}", renewed.len(), leases.len()).into(),
                );
            }
        }
        let items: Vec<(&Lease, &str)> = leases.iter().map(|l| (l, "{\"ok\":true}")).collect();
        let written = q.finish(&mut conn, &consumer, &items).await?;
        let ok = written.iter().filter(|w| **w).count();
        if ok != leases.len() {
            return Err(format!("{consumer}: finished {ok} of {}", leases.len()).into());
        }
        finished += ok as u64;
    }
}

struct Row {
    mode: String,
    batch: usize,
    tasks: u64,
    add: Phase,
    drain: Phase,
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    server: &RedisServer,
    admin: &mut MultiplexedConnection,
    mode: ResultMode,
    batch: usize,
    n: usize,
    workers: usize,
    renew: bool,
    trim: bool,
    events_each: bool,
    payload: &str,
) -> Res<Row> {
    let label = match mode {
        ResultMode::Key => "key",
        ResultMode::Bucket => "bucket",
        ResultMode::Record => "record",
    };
    let name = format!(
        "spike-{label}{}{}-{batch}",
        if trim { "-trim" } else { "" },
        if events_each { "-events" } else { "" }
    );
    let mut q = SpikeQueue::new(&name, mode, RETENTION_MS);
    if trim {
        q = q.trimming();
    }
    if events_each {
        q = q.events_each();
    }
    q.create(admin).await?;

    let mut conn = server.client().await?;
    let s0 = RedisSnap::take(admin).await?;
    let t0 = Instant::now();
    add_all(&mut conn, &q, n, payload).await?;
    let add_secs = t0.elapsed().as_secs_f64();
    let s1 = RedisSnap::take(admin).await?;

    let mut conns = Vec::new();
    for _ in 0..workers {
        conns.push(server.client().await?);
    }
    let s2 = RedisSnap::take(admin).await?;
    let t1 = Instant::now();
    let mut handles = Vec::new();
    for (i, c) in conns.into_iter().enumerate() {
        handles.push(tokio::spawn(worker(
            c,
            q.clone(),
            format!("w{i}-e1"),
            batch,
            renew,
        )));
    }
    let mut finished = 0;
    for h in handles {
        finished += h.await.map_err(|e| format!("worker task: {e}"))??;
    }
    let drain_secs = t1.elapsed().as_secs_f64();
    let s3 = RedisSnap::take(admin).await?;

    let len: u64 = redis::cmd("XLEN")
        .arg(q.stream())
        .query_async(admin)
        .await?;
    let pending: (u64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
        .arg(q.stream())
        .arg("workers")
        .query_async(admin)
        .await?;
    // Trimming by whole nodes (`XTRIM MINID ~`) may leave the last node's acknowledged entries.
    if finished != n as u64 || (len != 0 && !trim) || pending.0 != 0 {
        return Err(format!(
            "{name}: finished {finished} of {n}, stream length {len}, pending {}",
            pending.0
        )
        .into());
    }
    let _: u64 = redis::cmd("DEL").arg(q.stream()).query_async(admin).await?;
    Ok(Row {
        mode: name,
        batch,
        tasks: n as u64,
        add: phase(&s0, &s1, n as u64, add_secs),
        drain: phase(&s2, &s3, n as u64, drain_secs),
    })
}

fn print(rows: &[Row], version: &str, workers: usize, renew: bool, n: usize) {
    println!();
    println!(
        "Streams spike on redis {version}: N={n} per run, WORKERS={workers}, RENEW={}",
        u8::from(renew)
    );
    println!(
        "| queue | batch | add µs/task | add cmds/task | drain µs/task | drain cmds/task | drain script calls/task | drain tasks/s | total µs/task | total cmds/task |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.0} | {:.2} | {:.2} |",
            r.mode,
            r.batch,
            r.add.us_per_task,
            r.add.cmds_per_task,
            r.drain.us_per_task,
            r.drain.cmds_per_task,
            r.drain.scripts_per_task,
            r.drain.tasks_per_s,
            r.add.us_per_task + r.drain.us_per_task,
            r.add.cmds_per_task + r.drain.cmds_per_task,
        );
    }
    println!();
    println!(
        "Drain commands per task, by command (calls, and µs inside Redis per task; a script's time includes the commands it runs):"
    );
    for r in rows {
        let per: Vec<String> = r
            .drain
            .calls
            .iter()
            .map(|(name, c)| {
                let n = r.tasks.max(1) as f64;
                let us = r.drain.usec.get(name).copied().unwrap_or(0) as f64;
                format!("{name} {:.3} ({:.2} µs)", *c as f64 / n, us / n)
            })
            .collect();
        println!("  {} B={}: {}", r.mode, r.batch, per.join(", "));
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Res<()> {
    if !bench_requested("streams_spike: a benchmark; run it with cargo bench") {
        return Ok(());
    }
    let n: usize = env_or("N", 50_000)?;
    let batches: Vec<usize> = env_list("BATCHES", "1,16,256")?;
    let workers: usize = env_or("WORKERS", 8)?;
    let renew = env_or::<u8>("RENEW", 1)? == 1;
    let trim = env_or::<u8>("TRIM", 0)? == 1;
    let events_each = env_or::<u8>("EVENTS_EACH", 0)? == 1;
    let payload_bytes: usize = env_or("PAYLOAD_BYTES", 64)?;
    let modes: Vec<String> = env_list("MODES", "key,bucket")?;
    let payload = "x".repeat(payload_bytes);

    let server = RedisServer::start()?;
    let mut admin = server.client().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut admin)
        .await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let mut rows = Vec::new();
    for mode in &modes {
        let mode = parse_mode(mode)?;
        for &batch in &batches {
            rows.push(
                run_one(
                    &server,
                    &mut admin,
                    mode,
                    batch,
                    n,
                    workers,
                    renew,
                    trim,
                    events_each,
                    &payload,
                )
                .await?,
            );
        }
    }
    print(&rows, &version, workers, renew, n);
    Ok(())
}
