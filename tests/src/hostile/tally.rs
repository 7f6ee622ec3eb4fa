//! What a hostile run saw: the answers each flood got, each honest owner's outcomes and
//! latencies, and Redis memory sampled against its mark; and the verdict.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::HostileConfig;
use super::cluster::Cluster;
use crate::measure::redis_admin::parse_info;
use crate::measure::stats::percentile;

/// How often Redis memory is sampled.
const MEMORY_SAMPLE: Duration = Duration::from_millis(100);
/// Failures quoted in the report per honest owner.
const QUOTED_FAILURES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flood {
    BigBody,
    Oversized,
    Keyed,
    Sleep,
    Stream,
    Listing,
}

impl Flood {
    fn describe(self) -> &'static str {
        match self {
            Flood::BigBody => "large echo invokes (admissible size)",
            Flood::Oversized => "echo invokes over MAX_INPUT_BYTES",
            Flood::Keyed => "60 KiB invokes, a fresh Idempotency-Key each",
            Flood::Sleep => "anonymous POST /tasks of long sleeps",
            Flood::Stream => "streams held open on those sleeps",
            Flood::Listing => "GET /tasks?limit=1000 of a filled owner",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Honest {
    Paying,
    Free,
}

#[derive(Default)]
struct Calls {
    ok: Vec<f64>,
    failed: Vec<f64>,
    quoted: Vec<String>,
}

#[derive(Default)]
pub struct Tally {
    floods: Mutex<BTreeMap<Flood, BTreeMap<String, u64>>>,
    honest: Mutex<BTreeMap<Honest, Calls>>,
    /// Peak `used_memory` and the `maxmemory` it is measured against, bytes.
    memory: Mutex<(u64, u64)>,
}

impl Tally {
    pub fn attack(&self, flood: Flood, answer: Option<String>) {
        // No answer: the connection was refused (the per-address connection cap) or dropped.
        let key = answer.unwrap_or_else(|| "no answer".to_owned());
        let mut floods = self.floods.lock().unwrap_or_else(PoisonError::into_inner);
        *floods.entry(flood).or_default().entry(key).or_default() += 1;
    }

    pub fn honest(&self, who: Honest, took: Duration, outcome: Result<(), String>) {
        let mut honest = self.honest.lock().unwrap_or_else(PoisonError::into_inner);
        let calls = honest.entry(who).or_default();
        let ms = took.as_secs_f64() * 1000.0;
        match outcome {
            Ok(()) => calls.ok.push(ms),
            Err(why) => {
                calls.failed.push(ms);
                if calls.quoted.len() < QUOTED_FAILURES {
                    calls.quoted.push(why);
                }
            }
        }
    }

    fn memory_sample(&self, used: u64, max: u64) {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        memory.0 = memory.0.max(used);
        memory.1 = max;
    }

    pub async fn report(&self, config: &HostileConfig, cluster: &Cluster) -> Report {
        let keys = match cluster.redis.client().await {
            Ok(mut conn) => redis::cmd("DBSIZE")
                .query_async::<u64>(&mut conn)
                .await
                .ok(),
            Err(_) => None,
        };
        let floods = self
            .floods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let honest = self.honest.lock().unwrap_or_else(PoisonError::into_inner);
        let summaries = honest
            .iter()
            .map(|(who, calls)| {
                let mut all: Vec<f64> = calls.ok.iter().chain(&calls.failed).copied().collect();
                all.sort_by(f64::total_cmp);
                HonestSummary {
                    who: *who,
                    calls: all.len(),
                    ok: calls.ok.len(),
                    p50_ms: percentile(&all, 50.0),
                    p99_ms: percentile(&all, 99.0),
                    max_ms: all.last().copied().unwrap_or(0.0),
                    quoted: calls.quoted.clone(),
                }
            })
            .collect();
        let (peak, max) = *self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        Report {
            duration: config.duration,
            attackers: config.attackers,
            floods,
            honest: summaries,
            peak_memory: peak,
            max_memory: max,
            mark_pct: config.memory_mark_pct,
            keys_at_end: keys,
        }
    }
}

/// Samples `INFO memory` until `stop`.
pub async fn sample_memory(url: String, tally: Arc<Tally>, stop: CancellationToken) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let mut ticks = tokio::time::interval(MEMORY_SAMPLE);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Ok(info) = redis::cmd("INFO")
            .arg("memory")
            .query_async::<String>(&mut conn)
            .await
        else {
            continue;
        };
        let info = parse_info(&info);
        let read = |name: &str| info.get(name).and_then(|v| v.parse::<u64>().ok());
        if let (Some(used), Some(max)) = (read("used_memory"), read("maxmemory")) {
            tally.memory_sample(used, max);
        }
    }
}

pub struct HonestSummary {
    pub who: Honest,
    pub calls: usize,
    pub ok: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub quoted: Vec<String>,
}

pub struct Report {
    pub duration: Duration,
    pub attackers: u8,
    pub floods: BTreeMap<Flood, BTreeMap<String, u64>>,
    pub honest: Vec<HonestSummary>,
    pub peak_memory: u64,
    pub max_memory: u64,
    pub mark_pct: u8,
    pub keys_at_end: Option<u64>,
}

impl Report {
    /// Peak Redis memory as a percentage of maxmemory.
    pub fn peak_pct(&self) -> f64 {
        if self.max_memory == 0 {
            return 0.0;
        }
        self.peak_memory as f64 * 100.0 / self.max_memory as f64
    }

    /// Every honest call succeeded, there were some, and memory stayed under the mark.
    pub fn passed(&self) -> bool {
        let honest_ok =
            self.honest.len() == 2 && self.honest.iter().all(|h| h.calls > 0 && h.ok == h.calls);
        honest_ok && self.max_memory > 0 && self.peak_pct() < f64::from(self.mark_pct)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "hostile run: {} s, {} attacking addresses against 2 gateways",
            self.duration.as_secs(),
            self.attackers
        )?;
        writeln!(f, "floods (answers by status and error code):")?;
        for (flood, answers) in &self.floods {
            let total: u64 = answers.values().sum();
            writeln!(f, "  {:<48} {total:>7}", flood.describe())?;
            let by: Vec<String> = answers.iter().map(|(s, n)| format!("{s}: {n}")).collect();
            writeln!(f, "      {}", by.join(", "))?;
        }
        writeln!(f, "honest callers:")?;
        for h in &self.honest {
            let pct = if h.calls == 0 {
                0.0
            } else {
                h.ok as f64 * 100.0 / h.calls as f64
            };
            writeln!(
                f,
                "  {:<8} {:>5} calls, {:>6.2} % ok, latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                format!("{:?}", h.who).to_lowercase(),
                h.calls,
                pct,
                h.p50_ms,
                h.p99_ms,
                h.max_ms
            )?;
            for why in &h.quoted {
                writeln!(f, "      failed: {why}")?;
            }
        }
        writeln!(
            f,
            "redis memory: peak {:.1} MiB of {:.0} MiB maxmemory ({:.1} %; mark {} %); keys at the end: {}",
            self.peak_memory as f64 / 1048576.0,
            self.max_memory as f64 / 1048576.0,
            self.peak_pct(),
            self.mark_pct,
            self.keys_at_end
                .map_or_else(|| "?".to_owned(), |k| k.to_string())
        )?;
        write!(
            f,
            "verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}
