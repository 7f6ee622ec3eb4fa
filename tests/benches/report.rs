//! Assembles the report of `scripts/bench-report` from the JSON its benchmarks wrote: a summary
//! table (with ratios against BullMQ measured in the same session), then each benchmark's own
//! section, and a table of the goals of issue P8 item 7 (measured, goal, ratio, upstream's
//! quoted figures). Reads `REPORT_DIR/parts/{machine,e2e,worker,gateway,bullmq,bullmq-memory}.json`
//! (any but `machine` may be missing) and writes `REPORT_DIR/report.md` and `REPORT_DIR/report.json`.
//!
//! A bench target only so that `cargo bench --no-run` builds it with the others before any
//! measurement starts; without `--bench` it does nothing.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use harness::measure::Res;
use harness::measure::output::bench_requested;
use harness::measure::stats::median;
use serde_json::{Value, json};

fn read_part(dir: &Path, name: &str) -> Res<Option<Value>> {
    let path = dir.join("parts").join(format!("{name}.json"));
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).map_err(|err| format!("{}: {err}", path.display()))?,
        )),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(format!("{}: {err}", path.display()).into()),
    }
}

/// `v[a][b]...` as a number.
fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, key| v.get(*key))?.as_f64()
}

fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "–".into())
}

/// Thousands separated, no decimals: 12,345.
fn thousands(x: Option<f64>) -> String {
    x.map(harness::measure::stats::thousands)
        .unwrap_or_else(|| "–".into())
}

fn ratio(ours: Option<f64>, theirs: Option<f64>) -> String {
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

/// One summary line: what, our figure, BullMQ's, the ratio, and a note.
struct Line {
    what: String,
    ours: String,
    theirs: String,
    ratio: String,
    note: String,
}

fn line(what: impl Into<String>, ours: impl Into<String>) -> Line {
    Line {
        what: what.into(),
        ours: ours.into(),
        theirs: String::new(),
        ratio: String::new(),
        note: String::new(),
    }
}

/// BullMQ's processing row closest to concurrency `c` (their run may use other concurrencies).
fn bullmq_proc(bullmq: &Value, c: u64) -> Option<(u64, &Value)> {
    bullmq["proc"]
        .as_object()?
        .iter()
        .filter_map(|(k, v)| k.parse::<u64>().ok().map(|k| (k, v)))
        .min_by_key(|(k, _)| k.abs_diff(c))
}

fn median_of(runs: &Value, f: impl Fn(&Value) -> Option<f64>) -> Option<f64> {
    median(runs.as_array()?.iter().filter_map(f))
}

fn summary(
    e2e: Option<&Value>,
    worker: Option<&Value>,
    bullmq: Option<&Value>,
    bullmq_memory: Option<&Value>,
) -> Vec<Line> {
    let mut lines = Vec::new();
    let bull_n = bullmq.and_then(|b| num(b, &["meta", "N"]));
    if let Some(rows) = e2e.and_then(|e| e["e2e"].as_array()) {
        for row in rows.iter().filter(|r| r["clients"].as_u64() != Some(1)) {
            let w = row["workers"].as_u64().unwrap_or(0);
            let c = row["worker_concurrency"].as_u64().unwrap_or(0);
            let mut l = line(
                format!(
                    "End to end over HTTP, {w} worker{} × {c}, {} clients: tasks/s",
                    if w == 1 { "" } else { "s" },
                    row["clients"]
                ),
                format!("**{}**", thousands(num(row, &["tasks_per_s", "median"]))),
            );
            l.note = format!(
                "{}–{} over runs; latency p50 {} / p90 {} / p99 {} ms; {} Redis cmds/task",
                thousands(num(row, &["tasks_per_s", "min"])),
                thousands(num(row, &["tasks_per_s", "max"])),
                fmt(num(row, &["latency_ms", "p50", "median"]), 1),
                fmt(num(row, &["latency_ms", "p90", "median"]), 1),
                fmt(num(row, &["latency_ms", "p99", "median"]), 1),
                fmt(num(row, &["redis_cmds_per_task", "median"]), 1),
            );
            lines.push(l);
        }
        if let Some(row) = rows.iter().find(|r| r["clients"].as_u64() == Some(1)) {
            let mut l = line(
                format!(
                    "End-to-end latency p50 / p99 with ONE client (nothing else queued), {} worker",
                    row["workers"]
                ),
                format!(
                    "{} / {} ms",
                    fmt(num(row, &["latency_ms", "p50", "median"]), 1),
                    fmt(num(row, &["latency_ms", "p99", "median"]), 1)
                ),
            );
            if let Some(b) = bullmq.filter(|b| b["latency"].is_object()) {
                l.theirs = format!(
                    "{} / {} ms",
                    fmt(num(b, &["latency", "p50ms", "median"]), 1),
                    fmt(num(b, &["latency", "p99ms", "median"]), 1)
                );
                l.note = format!(
                    "not the same load: BullMQ's is queue.add() → completed at an open-loop {} jobs/s with no HTTP; ours is POST /tasks → terminal event on the task's SSE subscription",
                    b["meta"]["RATE"]
                );
            }
            lines.push(l);
        }
    }
    if let Some(rows) = worker.and_then(|w| w["throughput"].as_array()) {
        for row in rows {
            let p = row["processes"].as_u64().unwrap_or(0);
            let c = row["concurrency"].as_u64().unwrap_or(0);
            let ours = num(row, &["tasks_per_s", "median"]);
            let mut l = line(
                format!(
                    "Worker only (preloaded queue), {p} process{} × {c}: tasks/s",
                    if p == 1 { "" } else { "es" }
                ),
                format!("**{}**", thousands(ours)),
            );
            l.note = format!(
                "{}–{} over runs; {} Redis cmds/task, {} client round trips/task, Redis {} µs CPU/task",
                thousands(num(row, &["tasks_per_s", "min"])),
                thousands(num(row, &["tasks_per_s", "max"])),
                fmt(num(row, &["server_cmds_per_task", "median"]), 1),
                fmt(num(row, &["client_round_trips_per_task", "median"]), 2),
                fmt(num(row, &["redis_cpu_us_per_task", "median"]), 1),
            );
            if p == 1
                && let Some((bc, b)) = bullmq.and_then(|b| bullmq_proc(b, c))
            {
                let theirs = num(b, &["jobsPerS", "median"]);
                l.theirs = format!("{} (c={bc})", thousands(theirs));
                l.ratio = ratio(ours, theirs);
            }
            lines.push(l);
        }
        // Per-task costs at the busiest single-process row, against BullMQ at that concurrency.
        if let Some(row) = rows
            .iter()
            .filter(|r| r["processes"].as_u64() == Some(1))
            .max_by_key(|r| r["concurrency"].as_u64().unwrap_or(0))
        {
            let c = row["concurrency"].as_u64().unwrap_or(0);
            let b = bullmq.and_then(|b| bullmq_proc(b, c));
            let cmds = num(row, &["server_cmds_per_task", "median"]);
            let mut l = line(
                format!("Redis commands per task, worker only, 1 × {c} (inside scripts included)"),
                fmt(cmds, 1),
            );
            if let Some((bc, b)) = b {
                let theirs = median_of(&b["runs"], |r| num(r, &["cmdsPerJob", "total"]));
                l.theirs = format!("{} (c={bc})", fmt(theirs, 1));
                l.ratio = ratio(cmds, theirs);
            }
            l.note = format!(
                "client round trips {}/task",
                fmt(num(row, &["client_round_trips_per_task", "median"]), 2)
            );
            lines.push(l);
            let cpu = num(row, &["redis_cpu_us_per_task", "median"]);
            let mut l = line(
                format!("Redis CPU µs per task, worker only, 1 × {c}"),
                fmt(cpu, 1),
            );
            if let (Some((bc, b)), Some(n)) = (b, bull_n) {
                let theirs = median_of(&b["runs"], |r| num(r, &["redisCpuS"]).map(|s| s * 1e6 / n));
                l.theirs = format!("{} (c={bc})", fmt(theirs, 1));
                l.ratio = ratio(cpu, theirs);
            }
            lines.push(l);
        }
    }
    if let Some(rows) = e2e.and_then(|e| e["e2e"].as_array())
        && let Some(row) = rows.first()
    {
        let mut l = line(
            format!(
                "Redis commands per task, end to end, {} worker (create + subscribe + run)",
                row["workers"]
            ),
            fmt(num(row, &["redis_cmds_per_task", "median"]), 1),
        );
        l.note = format!(
            "client round trips {}/task; CPU µs/task: Redis {}, gateway {}, workers {}",
            fmt(num(row, &["client_round_trips_per_task", "median"]), 2),
            fmt(num(row, &["redis_cpu_us_per_task", "median"]), 0),
            fmt(num(row, &["gateway_cpu_us_per_task", "median"]), 0),
            fmt(num(row, &["worker_cpu_us_per_task", "median"]), 0),
        );
        lines.push(l);
    }
    if let Some(rows) = worker.and_then(|w| w["recovery"].as_array()) {
        for row in rows {
            let ttl = num(row, &["lease_ttl_ms"]);
            let mut l = line(
                format!(
                    "Recovery after SIGKILL, lease TTL {} ms (sweep every {} ms): kill → running again elsewhere",
                    fmt(ttl, 0),
                    fmt(num(row, &["recovery_interval_ms"]), 0)
                ),
                format!(
                    "{} ms",
                    fmt(num(row, &["kill_to_reactivated_ms", "median"]), 0)
                ),
            );
            l.note = format!(
                "max {} ms = TTL + {} ms; lease expiry → re-activation {} ms (median); {}/{} within TTL + 1 s",
                fmt(num(row, &["kill_to_reactivated_ms", "max"]), 0),
                fmt(
                    num(row, &["kill_to_reactivated_ms", "max"])
                        .zip(ttl)
                        .map(|(a, b)| a - b),
                    0
                ),
                fmt(num(row, &["expiry_to_reactivated_ms", "median"]), 0),
                row["within_budget"],
                row["runs"].as_array().map(Vec::len).unwrap_or(0),
            );
            lines.push(l);
        }
    }
    if let Some(mem) = e2e.and_then(|e| e["memory"].as_object()) {
        let ours = mem.get("bytes_per_task").and_then(Value::as_f64);
        let mut l = line(
            "Redis memory per retained terminal task (bytes)",
            format!("**{}**", thousands(ours)),
        );
        l.note = format!(
            "{} tasks kept after completion; BullMQ: removeOnComplete:false",
            mem.get("tasks").cloned().unwrap_or(Value::Null)
        );
        if let Some(b) = bullmq_memory {
            let theirs = num(b, &["bytes_per_job"]);
            l.theirs = thousands(theirs);
            l.ratio = ratio(ours, theirs);
            l.note = format!(
                "{} tasks through HTTP, kept after completion; BullMQ: {} jobs added and completed with removeOnComplete:false, measured the same way (scripts/bench-bullmq-memory.mjs)",
                mem.get("tasks").cloned().unwrap_or(Value::Null),
                b["jobs"],
            );
        } else if let Some(b) = bullmq.filter(|b| b["keep"].is_object())
            && let Some(n) = bull_n
        {
            // Not comparable: the anchor reads used_memory after preloading its jobs.
            let theirs = median_of(&b["keep"]["runs"], |r| {
                num(r, &["redisUsedMemoryDeltaMB"]).map(|mb| mb * 1_048_576.0 / n)
            });
            l.note = format!(
                "{}; BullMQ's keep phase adds {} bytes per job on completion alone (its baseline is taken after the jobs were added), not comparable",
                l.note,
                thousands(theirs)
            );
        }
        lines.push(l);
    }
    lines
}

/// One line of the goals table (issue P8 item 7): a figure, its goal, and how they compare.
struct Goal {
    what: String,
    measured: String,
    target: String,
    to_target: String,
    upstream: String,
    to_upstream: String,
    met: String,
}

/// Higher is better (`at_least`) or lower is better: the verdict for a measured value.
fn verdict(measured: Option<f64>, target: f64, at_least: bool) -> String {
    match measured {
        Some(x) if (at_least && x >= target) || (!at_least && x <= target) => "✅ yes".into(),
        Some(_) => "❌ no".into(),
        None => "– (not measured)".into(),
    }
}

/// `a ÷ b` for a range of b: `1.08–1.67×` (the larger ratio against the smaller bound).
fn ratio_range(ours: Option<f64>, low: f64, high: f64) -> String {
    match ours {
        Some(a) => format!("{:.2}–{:.2}×", a / high, a / low),
        None => "–".into(),
    }
}

fn gateway_row<'a>(gateway: &'a Value, mode: &str, scenario: &str) -> Option<&'a Value> {
    gateway["rows"]
        .as_array()?
        .iter()
        .find(|r| r["mode"].as_str() == Some(mode) && r["scenario"].as_str() == Some(scenario))
}

fn mib(kib: Option<f64>) -> String {
    fmt(kib.map(|k| k / 1024.0), 1)
}

fn goals(
    e2e: Option<&Value>,
    worker: Option<&Value>,
    bullmq: Option<&Value>,
    gateway: Option<&Value>,
) -> Vec<Goal> {
    let mut goals = Vec::new();
    let goal = |what: String, measured: String, target: String| Goal {
        what,
        measured,
        target,
        to_target: "–".into(),
        upstream: String::new(),
        to_upstream: String::new(),
        met: String::new(),
    };
    // Gateway over HTTP, both modes: req/s against the goal and upstream's quoted range.
    let http = [
        (
            "card",
            "GET /.well-known/agent-card.json",
            40_000.0,
            Some((24_000.0, 37_000.0)),
        ),
        (
            "invoke",
            "POST /entrypoints/echo/invoke (echo through a worker)",
            6_000.0,
            Some((2_200.0, 2_800.0)),
        ),
        ("tasks", "POST /tasks", 10_000.0, None),
    ];
    for (scenario, what, target, upstream) in http {
        for (mode, mode_label) in [
            ("redis", "cluster mode (Redis, AOF everysec, 2 workers)"),
            ("embedded", "embedded mode"),
        ] {
            let row = gateway.and_then(|g| gateway_row(g, mode, scenario));
            let rps = row.and_then(|r| num(r, &["rps"]));
            let mut g = goal(
                format!("Gateway {what}, {mode_label}: req/s"),
                match row {
                    Some(r) => format!(
                        "**{}** (p99 {} ms, {} non-2xx)",
                        thousands(rps),
                        fmt(num(r, &["p99_ms"]), 1),
                        thousands(num(r, &["non_2xx"]))
                    ),
                    None => "–".into(),
                },
                format!("≥ {}", thousands(Some(target))),
            );
            g.to_target = ratio(rps, Some(target));
            if let Some((low, high)) = upstream {
                g.upstream = format!("{}–{}", thousands(Some(low)), thousands(Some(high)));
                g.to_upstream = ratio_range(rps, low, high);
            }
            g.met = verdict(rps, target, true);
            goals.push(g);
        }
    }
    // Embedded memory with the default MAX_TASKS, and per retained task.
    let retained = gateway.and_then(|g| num(g, &["retain", "rss_bytes_per_task"]));
    if let Some(g) = gateway {
        let start = num(g, &["start_rss_kib", "embedded"]);
        let invoke = gateway_row(g, "embedded", "invoke");
        let tasks = gateway_row(g, "embedded", "tasks");
        if invoke.is_some() || tasks.is_some() {
            let after_tasks = tasks.and_then(|r| num(r, &["gateway_rss_after_drain_kib"]));
            let created = tasks
                .and_then(|r| Some(num(r, &["requests"])? - num(r, &["non_2xx"]).unwrap_or(0.0)));
            // The growth over the tasks scenario (from the RSS after the scenario before it,
            // connections and buffers warm by then), against what keeping every task created
            // would take: far below it means the default MAX_TASKS bounds the memory.
            let before_tasks = invoke.and_then(|r| num(r, &["gateway_rss_kib"])).or(start);
            let growth_kib = after_tasks.zip(before_tasks).map(|(b, a)| b - a);
            let kept_kib = created.zip(retained).map(|(n, r)| n * r / 1024.0);
            let mut l = goal(
                format!(
                    "Embedded gateway VmRSS under load, MAX_TASKS {} (MiB)",
                    g["meta"]["embedded_max_tasks"].as_str().unwrap_or("?")
                ),
                format!(
                    "start {}, after invoke {}, after tasks {} (peak {})",
                    mib(start),
                    mib(invoke.and_then(|r| num(r, &["gateway_rss_kib"]))),
                    mib(after_tasks),
                    mib(tasks
                        .and_then(|r| num(r, &["gateway_hwm_after_drain_kib"]))
                        .or_else(|| invoke.and_then(|r| num(r, &["gateway_hwm_kib"])))),
                ),
                "bounded".into(),
            );
            l.to_target = format!(
                "{} MiB growth over {} tasks created; keeping them all: ≈ {} MiB",
                mib(growth_kib),
                thousands(created),
                mib(kept_kib)
            );
            l.met = match (growth_kib, kept_kib) {
                (Some(g), Some(k)) if k > 0.0 => {
                    if g < k / 10.0 {
                        "✅ yes (growth < 1/10 of keeping them)".into()
                    } else {
                        "❌ no (growth ≥ 1/10 of keeping them)".into()
                    }
                }
                _ => "–".into(),
            };
            goals.push(l);
        }
        let mut l = goal(
            "Embedded gateway RSS bytes per retained task".into(),
            match g["retain"].as_object() {
                Some(r) => format!(
                    "**{}** ({} tasks, {} → {} MiB)",
                    thousands(retained),
                    thousands(r.get("tasks").and_then(Value::as_f64)),
                    mib(r.get("rss_before_kib").and_then(Value::as_f64)),
                    mib(r.get("rss_after_kib").and_then(Value::as_f64)),
                ),
                None => "–".into(),
            },
            "≤ 2,048".into(),
        );
        l.to_target = ratio(retained, Some(2048.0));
        l.met = verdict(retained, 2048.0, false);
        goals.push(l);
    }
    // End to end: closed-loop maximum, open-loop latency.
    if let Some(rows) = e2e.and_then(|e| e["e2e"].as_array()) {
        let best = rows
            .iter()
            .filter(|r| r["clients"].as_u64() != Some(1))
            .filter_map(|r| Some((num(r, &["tasks_per_s", "median"])?, r)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let mut l = goal(
            "End to end over HTTP, closed loop, best row: tasks/s".into(),
            match best {
                Some((x, r)) => format!(
                    "**{}** ({} worker(s), {} clients)",
                    thousands(Some(x)),
                    r["workers"],
                    r["clients"]
                ),
                None => "–".into(),
            },
            "≥ 4,000".into(),
        );
        let x = best.map(|b| b.0);
        l.to_target = ratio(x, Some(4000.0));
        l.met = verdict(x, 4000.0, true);
        goals.push(l);
    }
    if let Some(o) = e2e.map(|e| &e["open"]).filter(|o| o.is_object()) {
        let p50 = num(o, &["latency_ms", "p50"]);
        let offered = num(o, &["offered_rate"]);
        let mut l = goal(
            format!(
                "End to end, open loop at {} tasks/s: latency p50 (ms)",
                thousands(offered)
            ),
            format!(
                "**{}** (p90 {}, p99 {}; sent {}/s, completed {}/s, {} errors)",
                fmt(p50, 2),
                fmt(num(o, &["latency_ms", "p90"]), 2),
                fmt(num(o, &["latency_ms", "p99"]), 2),
                thousands(num(o, &["send_rate"])),
                thousands(num(o, &["completed_per_s"])),
                o["errors"].as_u64().unwrap_or(0) + o["not_completed"].as_u64().unwrap_or(0),
            ),
            "≤ 3 at 2,000/s".into(),
        );
        l.to_target = ratio(p50, Some(3.0));
        l.met = if offered.is_some_and(|r| r < 2000.0) {
            format!("{} (offered below 2,000/s)", verdict(p50, 3.0, false))
        } else {
            verdict(p50, 3.0, false)
        };
        goals.push(l);
        let mut l = goal(
            "End to end, open loop: Redis commands / client round trips per task".into(),
            format!(
                "{} / {}",
                fmt(num(o, &["redis_cmds_per_task"]), 1),
                fmt(num(o, &["client_round_trips_per_task"]), 2)
            ),
            "(reported)".into(),
        );
        l.met = "–".into();
        goals.push(l);
    }
    // Worker alone against BullMQ, and its client round trips.
    if let Some(rows) = worker.and_then(|w| w["throughput"].as_array()) {
        for (c, target) in [(64u64, 1.5), (1, 1.0)] {
            let Some(row) = rows.iter().find(|r| {
                r["processes"].as_u64() == Some(1) && r["concurrency"].as_u64() == Some(c)
            }) else {
                continue;
            };
            let ours = num(row, &["tasks_per_s", "median"]);
            let theirs = bullmq
                .and_then(|b| bullmq_proc(b, c))
                .and_then(|(bc, b)| Some((bc, num(b, &["jobsPerS", "median"])?)));
            let x = theirs.and_then(|(_, t)| ours.map(|o| o / t));
            let mut l = goal(
                format!("Worker alone, 1 process × {c}: ÷ BullMQ at c={c} (same session)"),
                match theirs {
                    Some((bc, t)) => format!(
                        "**{}×** ({} vs {} tasks/s{})",
                        fmt(x, 2),
                        thousands(ours),
                        thousands(Some(t)),
                        if bc == c {
                            String::new()
                        } else {
                            format!(", BullMQ c={bc}")
                        }
                    ),
                    None => format!("{} tasks/s (BullMQ not run)", thousands(ours)),
                },
                format!("≥ {target:.1}×"),
            );
            l.to_target = x
                .map(|x| format!("{:.2}×", x / target))
                .unwrap_or_else(|| "–".into());
            l.met = verdict(x, target, true);
            goals.push(l);
        }
        if let Some(row) = rows
            .iter()
            .filter(|r| r["processes"].as_u64() == Some(1))
            .max_by_key(|r| r["concurrency"].as_u64().unwrap_or(0))
        {
            let rt = num(row, &["client_round_trips_per_task", "median"]);
            let others: Vec<String> = rows
                .iter()
                .filter(|r| !std::ptr::eq(*r, row))
                .map(|r| {
                    format!(
                        "{} × {}: {}",
                        r["processes"],
                        r["concurrency"],
                        fmt(num(r, &["client_round_trips_per_task", "median"]), 2)
                    )
                })
                .collect();
            let mut l = goal(
                format!(
                    "Worker side: client round trips to Redis per task, 1 process × {}",
                    row["concurrency"]
                ),
                format!(
                    "**{}**{}",
                    fmt(rt, 2),
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(" (others: {})", others.join(", "))
                    }
                ),
                "≤ 1.5".into(),
            );
            l.to_target = ratio(rt, Some(1.5));
            l.met = verdict(rt, 1.5, false);
            goals.push(l);
        }
    }
    goals
}

fn goals_markdown(md: &mut String, goals: &[Goal]) -> Res<()> {
    writeln!(md, "## Goals\n")?;
    writeln!(
        md,
        "Issue P8 item 7. Ratio to goal = measured ÷ goal (for latency, bytes and round trips, below 1 is better). Upstream = the upstream TypeScript server's quoted figures for its in-process server (not measured here).\n"
    )?;
    writeln!(
        md,
        "| goal | measured | target | ratio to goal | upstream TypeScript (quoted) | ratio to upstream | met |\n|---|---|---|---:|---:|---:|---|"
    )?;
    for g in goals {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            g.what, g.measured, g.target, g.to_target, g.upstream, g.to_upstream, g.met
        )?;
    }
    writeln!(md)?;
    Ok(())
}

/// How busy other processes kept the machine while our runs were timed (each bench measures
/// it: machine CPU minus its own processes'), as % of one core, per benchmark: when one part met
/// more of it than another, their ratio is skewed.
fn others_cpu(
    e2e: Option<&Value>,
    worker: Option<&Value>,
    bullmq: Option<&Value>,
) -> Option<String> {
    let runs_of = |rows: Option<&Value>, key: &str| -> Vec<f64> {
        rows.and_then(Value::as_array)
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| r["runs"].as_array())
                    .flatten()
                    .filter_map(|run| num(run, &[key]))
                    .collect()
            })
            .unwrap_or_default()
    };
    let bullmq_rows: Option<Value> = bullmq.map(|b| {
        let mut rows: Vec<Value> = b["proc"]
            .as_object()
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default();
        rows.extend(["keep", "latency"].iter().map(|k| b[*k].clone()));
        Value::Array(rows)
    });
    let parts = [
        (
            "end to end",
            runs_of(e2e.map(|e| &e["e2e"]), "foreign_cpu_pct"),
        ),
        (
            "worker alone",
            runs_of(worker.map(|w| &w["throughput"]), "foreign_cpu_pct"),
        ),
        ("BullMQ", runs_of(bullmq_rows.as_ref(), "foreignCpuPct")),
    ];
    let texts: Vec<String> = parts
        .into_iter()
        .filter(|(_, values)| !values.is_empty())
        .map(|(name, mut values)| {
            values.sort_by(f64::total_cmp);
            format!(
                "{name}: median {:.0}%, max {:.0}% ({} runs)",
                values[values.len() / 2],
                values[values.len() - 1],
                values.len()
            )
        })
        .collect();
    (!texts.is_empty()).then(|| {
        format!(
            "{} — % of one core; the benches wait up to QUIET_WAIT_S for a quiet machine before each timed run and mark runs above FOREIGN_MAX with ⚠",
            texts.join("; ")
        )
    })
}

fn markdown(
    machine: &Value,
    e2e: Option<&Value>,
    worker: Option<&Value>,
    bullmq: Option<&Value>,
    bullmq_memory: Option<&Value>,
    gateway: Option<&Value>,
) -> Res<String> {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let mut md = String::new();
    writeln!(md, "# taskcluster performance report\n")?;
    writeln!(
        md,
        "{} — commit `{}`{} — `{}`{}\n",
        s(&machine["date"]),
        s(&machine["commit"]),
        if machine["dirty"].as_bool() == Some(true) {
            " (with uncommitted changes)"
        } else {
            ""
        },
        s(&machine["command"]),
        if machine["quick"].as_bool() == Some(true) {
            " (QUICK=1: small sizes, one run per row; not figures to quote)"
        } else {
            ""
        },
    )?;
    writeln!(md, "## Machine\n")?;
    writeln!(md, "| | |\n|---|---|")?;
    for (label, key) in [
        ("CPUs (nproc)", "nproc"),
        ("CPU model", "cpu_model"),
        ("memory", "memory"),
        ("kernel", "kernel"),
        ("redis-server", "redis_version"),
        ("rustc", "rustc_version"),
        ("node (BullMQ)", "node_version"),
        ("load average at start / end", "loadavg"),
    ] {
        let value = &machine[key];
        if value.is_null() {
            continue;
        }
        let text = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        writeln!(md, "| {label} | {text} |")?;
    }
    if let Some(lines) = machine["redis_calibration"]
        .as_array()
        .filter(|lines| !lines.is_empty())
    {
        let text: Vec<&str> = lines
            .iter()
            .filter_map(Value::as_str)
            .map(|l| l.strip_prefix("raw redis-benchmark ").unwrap_or(l))
            .collect();
        writeln!(
            md,
            "| redis-benchmark on BullMQ's redis-server (its calibration) | {} |",
            text.join("<br>")
        )?;
    }
    if let Some(note) = others_cpu(e2e, worker, bullmq) {
        writeln!(md, "| others' CPU during the timed runs | {note} |")?;
    }
    if let Some(d) = machine["durations_s"].as_object() {
        let part = |k: &str| d.get(k).and_then(Value::as_u64).unwrap_or(0);
        writeln!(
            md,
            "| time taken | end to end {} s, worker alone {} s, gateway over HTTP {} s, BullMQ {} s |",
            part("e2e_s"),
            part("worker_s"),
            part("gateway_s"),
            part("bullmq_s")
        )?;
    }
    writeln!(
        md,
        "\nredis-server, the gateway, the workers, the benchmark clients (and BullMQ's node processes) all share these cores; one private redis-server without persistence (`--save \"\" --appendonly no`) serves every part but the gateway over HTTP, whose cluster mode has a redis-server of its own with AOF everysec. Single runs on this kind of machine vary by up to 2×: compare ratios measured in the same session more than absolute figures.\n"
    )?;
    writeln!(md, "## Summary\n")?;
    let lines = summary(e2e, worker, bullmq, bullmq_memory);
    writeln!(
        md,
        "| measurement | taskcluster | BullMQ (same session) | ratio | notes |\n|---|---:|---:|---:|---|"
    )?;
    for l in &lines {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            l.what,
            l.ours,
            if l.theirs.is_empty() { "" } else { &l.theirs },
            l.ratio,
            l.note
        )?;
    }
    writeln!(md)?;
    goals_markdown(&mut md, &goals(e2e, worker, bullmq, gateway))?;
    match bullmq {
        Some(b) => writeln!(
            md,
            "BullMQ {} (node {}), run by `../shared/bench/bullmq/run.sh` against its own private redis-server of the same build and settings, in this session. Ratio = taskcluster ÷ BullMQ (above 1 is more of the figure: better for tasks/s, worse for commands, CPU and bytes).\n",
            s(&b["meta"]["bullmq"]),
            s(&b["meta"]["node"]),
        )?,
        None => writeln!(
            md,
            "BullMQ: {}.\n",
            machine["bullmq_status"].as_str().unwrap_or("not run")
        )?,
    }
    if let Some(e) = e2e {
        writeln!(md, "## End to end\n")?;
        writeln!(md, "{}", s(&e["markdown"]))?;
    }
    match gateway {
        Some(g) => {
            writeln!(md, "## Gateway over HTTP\n")?;
            writeln!(
                md,
                "From `scripts/bench-gateway` (wrk, the release binaries of this run): cluster mode with its own redis-server (AOF everysec) and {} worker processes × {}; embedded mode (no Redis, in-process worker) with MAX_TASKS {} (the gateway's default unless set), then an embedded gateway keeping every task for the RSS per retained task.\n",
                g["meta"]["workers"],
                g["meta"]["worker_concurrency"],
                g["meta"]["embedded_max_tasks"].as_str().unwrap_or("?"),
            )?;
            // Its heading one level down, under this section's.
            let text = s(&g["markdown"]);
            let text = text
                .strip_prefix("### Gateway HTTP benchmark\n")
                .unwrap_or(&text);
            writeln!(md, "{}\n", text.trim())?;
        }
        None => {
            if let Some(status) = machine["gateway_status"].as_str() {
                writeln!(md, "## Gateway over HTTP\n\n{status}.\n")?;
            }
        }
    }
    if let Some(w) = worker {
        writeln!(md, "## Worker processes alone\n")?;
        writeln!(
            md,
            "From `worker/benches/cluster.rs` (as `scripts/bench-worker` runs it): tasks are created in Redis first, then worker processes drain them; no gateway, no HTTP.\n"
        )?;
        writeln!(md, "{}", s(&w["markdown"]))?;
    }
    if let Some(b) = bullmq {
        writeln!(md, "## BullMQ anchor\n")?;
        // Its headings one level down, under this section's.
        let text: Vec<String> = s(&b["reportMarkdown"])
            .lines()
            .map(|l| match l.strip_prefix("### ") {
                Some(rest) => format!("#### {rest}"),
                None => l.to_owned(),
            })
            .collect();
        writeln!(md, "{}\n", text.join("\n"))?;
    }
    if let Some(m) = bullmq_memory {
        writeln!(
            md,
            "BullMQ {} memory per retained job (`scripts/bench-bullmq-memory.mjs`, on the redis-server of the end-to-end run): {} jobs with data `{{i: n}}`, processor returning it, removeOnComplete:false, concurrency {}; used_memory {} → {} = **{} bytes per job**.\n",
            s(&m["bullmq"]),
            m["jobs"],
            m["concurrency"],
            m["used_memory_before"],
            m["used_memory_after"],
            fmt(num(m, &["bytes_per_job"]), 0),
        )?;
    }
    writeln!(md, "## Parameters\n")?;
    writeln!(
        md,
        "```json\n{}\n```\n",
        serde_json::to_string_pretty(&machine["parameters"])?
    )?;
    writeln!(md, "## Reproduce\n")?;
    writeln!(
        md,
        "```sh\n{}\n```\n\nThe raw figures (every run) are in the JSON file next to this one.",
        s(&machine["command"])
    )?;
    Ok(md)
}

fn main() -> Res<()> {
    if !bench_requested("report assembles scripts/bench-report's output (cargo bench)") {
        return Ok(());
    }
    let dir = PathBuf::from(
        std::env::var("REPORT_DIR").map_err(|_| "REPORT_DIR is required (scripts/bench-report)")?,
    );
    let machine = read_part(&dir, "machine")?.ok_or("parts/machine.json is missing")?;
    let e2e = read_part(&dir, "e2e")?;
    let worker = read_part(&dir, "worker")?;
    let bullmq = read_part(&dir, "bullmq")?;
    let bullmq_memory = read_part(&dir, "bullmq-memory")?;
    let gateway = read_part(&dir, "gateway")?;
    let md = markdown(
        &machine,
        e2e.as_ref(),
        worker.as_ref(),
        bullmq.as_ref(),
        bullmq_memory.as_ref(),
        gateway.as_ref(),
    )?;
    let goals: Vec<Value> = goals(
        e2e.as_ref(),
        worker.as_ref(),
        bullmq.as_ref(),
        gateway.as_ref(),
    )
    .into_iter()
    .map(|g| {
        json!({"goal": g.what, "measured": g.measured.replace("**", ""), "target": g.target,
                   "ratio_to_goal": g.to_target, "upstream": g.upstream,
                   "ratio_to_upstream": g.to_upstream, "met": g.met})
    })
    .collect();
    let summary: Vec<Value> = summary(
        e2e.as_ref(),
        worker.as_ref(),
        bullmq.as_ref(),
        bullmq_memory.as_ref(),
    )
        .into_iter()
        .map(|l| json!({"measurement": l.what, "taskcluster": l.ours.replace("**", ""), "bullmq": l.theirs, "ratio": l.ratio, "notes": l.note}))
        .collect();
    // The sections' markdown is in report.md already.
    let strip = |part: Option<Value>, key: &str| {
        part.map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove(key);
            }
            v
        })
    };
    let (e2e, worker, bullmq, gateway) = (
        strip(e2e, "markdown"),
        strip(worker, "markdown"),
        strip(bullmq, "reportMarkdown"),
        strip(gateway, "markdown"),
    );
    let report = json!({
        "machine": machine,
        "summary": summary,
        "goals": goals,
        "e2e": e2e,
        "worker": worker,
        "bullmq": bullmq,
        "bullmq_memory": bullmq_memory,
        "gateway": gateway,
    });
    std::fs::write(dir.join("report.md"), &md)?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    eprintln!("wrote {} and report.json", dir.join("report.md").display());
    Ok(())
}
