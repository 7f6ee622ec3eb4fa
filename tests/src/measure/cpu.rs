//! CPU accounting from `/proc`: a process's utime + stime, the machine's busy ticks, and the
//! CPU other processes use ("foreign"): others' builds on the machine would otherwise land in
//! the measurement.

use std::process::Command;
use std::time::{Duration, Instant};

use super::Res;

/// utime + stime of a process (`"self"` or a pid), in clock ticks.
pub fn process_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the file (utime, stime) are entries 11 and 12 after the name.
    Some(
        [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
            .sum(),
    )
}

/// This process's nice value (field 19 of `/proc/self/stat`).
fn self_nice() -> i64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let (_, after_name) = stat.rsplit_once(')')?;
            after_name.split_whitespace().nth(16)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 when that fails).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|ticks| *ticks > 0.0)
        .unwrap_or(100.0)
}

/// CPU ticks of the whole machine (`/proc/stat`) and of this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSnap {
    /// user + nice + system + irq.
    pub busy: u64,
    /// nice alone: processes running at a lower priority (other sessions' `nice` builds).
    pub nice: u64,
    /// Whether this process runs niced itself (then its CPU is part of `nice`).
    pub self_niced: bool,
    pub softirq: u64,
    pub steal: u64,
    /// This process's utime + stime.
    pub own: u64,
}

impl CpuSnap {
    pub fn now() -> Res<CpuSnap> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let line = stat.lines().next().ok_or("empty /proc/stat")?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let field = |i: usize| fields.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal
        Ok(CpuSnap {
            busy: field(0) + field(1) + field(2) + field(5),
            nice: field(1),
            self_niced: self_nice() != 0,
            softirq: field(6),
            steal: field(7),
            own: process_ticks("self").unwrap_or(0),
        })
    }

    /// user + nice + system + irq + softirq.
    pub fn busy_with_softirq(&self) -> u64 {
        self.busy + self.softirq
    }
}

/// Waits until other processes (niced ones included) use less than `quiet_pct` of a core over
/// one second, up to `quiet_wait_s`; returns the last foreign load seen (% of one core).
/// `busy` picks the machine's busy ticks from a snapshot; this process's own are subtracted.
pub async fn wait_quiet(
    quiet_pct: f64,
    quiet_wait_s: u64,
    ticks: f64,
    busy: impl Fn(&CpuSnap) -> u64,
) -> Res<f64> {
    let give_up = Instant::now() + Duration::from_secs(quiet_wait_s);
    loop {
        let before = CpuSnap::now()?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = CpuSnap::now()?;
        let foreign = busy(&after)
            .saturating_sub(busy(&before))
            .saturating_sub(after.own.saturating_sub(before.own)) as f64
            / ticks
            * 100.0;
        if foreign < quiet_pct || Instant::now() >= give_up {
            if foreign >= quiet_pct {
                eprintln!(
                    "  machine still busy ({foreign:.0}% of a core by others); running anyway"
                );
            }
            return Ok(foreign);
        }
        eprintln!("  waiting for a quiet machine: others use {foreign:.0}% of a core");
    }
}

/// After a run that others' load disturbed: whether to run it again (and says so), up to
/// `retries` times; `attempt` counts the re-runs so far.
pub fn run_again(disturbed: bool, attempt: &mut usize, retries: usize, foreign_max: f64) -> bool {
    if disturbed && *attempt < retries {
        *attempt += 1;
        eprintln!("  foreign load above {foreign_max}% of a core: run again");
        true
    } else {
        false
    }
}
