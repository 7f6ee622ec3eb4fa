//! The outcome of a chaos run: what was done to the cluster, what the tasks did, and every
//! broken invariant.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::checks::SettleStats;
use super::load::{DriveStats, SubscriberLog};
use super::monkey::FaultCounts;
use super::push::PushStats;
use super::{ChaosConfig, RedisTopology};

/// Violations printed in full; the rest are counted.
const SHOWN_VIOLATIONS: usize = 40;

#[derive(Debug, Default)]
pub struct ChaosReport {
    pub config: Option<ChaosConfig>,
    pub faults: FaultCounts,
    pub drive: DriveStats,
    pub settle: SettleStats,
    pub acknowledged: usize,
    /// Tasks a create request made although its client never got the 200 (the gateway died
    /// after the write); they must finish like any other.
    pub created_unacknowledged: usize,
    pub statuses: BTreeMap<&'static str, usize>,
    /// Tasks that ran more than once (their run was lost to a crash or a stall).
    pub rerun: usize,
    /// Tasks run by the remote agent (`remote-echo`, `remote-sleep`), and those of them that
    /// ran more than once.
    pub remote: usize,
    pub remote_rerun: usize,
    pub max_attempt: u32,
    /// Failed with `task_attempts_exhausted`.
    pub exhausted: usize,
    pub subscribers: usize,
    pub subscriber_events: usize,
    pub subscriber_reconnects: usize,
    pub(super) subscriber_logs: Vec<SubscriberLog>,
    /// Worker log lines: results refused by fencing, leases found lost on renewal.
    pub fenced_results: usize,
    pub leases_lost: usize,
    pub keys: usize,
    /// The push notifications of the tasks created over A2A.
    pub push: PushStats,
    pub elapsed: Duration,
    /// How long the phases the other lines do not time took.
    pub phases: Vec<(&'static str, Duration)>,
    pub violations: Vec<String>,
}

impl ChaosReport {
    pub(super) fn new(
        config: &ChaosConfig,
        faults: FaultCounts,
        drive: DriveStats,
        settle: SettleStats,
        subscriber_logs: Vec<SubscriberLog>,
    ) -> Self {
        let mut report = ChaosReport {
            config: Some(config.clone()),
            drive,
            subscriber_logs,
            ..ChaosReport::default()
        };
        for (live, running) in &faults.count_mismatches {
            report.violation(format!(
                "mid-run, the store counted {live} live tasks while {running} records were running"
            ));
        }
        // A snapshot that never reads Redis would pass for agreement every time.
        if faults.count_checks > 0 && faults.count_unreadable.len() == faults.count_checks {
            report.violation(format!(
                "no mid-run count snapshot could read Redis, e.g. {:?}",
                faults.count_unreadable.first()
            ));
        }
        for error in &faults.errors {
            report.violation(format!("the cluster did not come back: {error}"));
        }
        match config.redis {
            RedisTopology::Single if config.restart_redis && faults.redis_restarts != 1 => {
                report.violation(format!(
                    "Redis was restarted {} times",
                    faults.redis_restarts
                ));
            }
            RedisTopology::Cluster { .. }
                if config.restart_redis && faults.master_failovers != 1 =>
            {
                report.violation(format!(
                    "{} Redis Cluster masters were failed over",
                    faults.master_failovers
                ));
            }
            _ => {}
        }
        if !settle.unfinished.is_empty() {
            report.violation(format!(
                "{} acknowledged tasks still unfinished after {:?}, e.g. {:?}",
                settle.unfinished.len(),
                settle.duration,
                &settle.unfinished[..settle.unfinished.len().min(5)]
            ));
        }
        report.faults = faults;
        report.settle = settle;
        report
    }

    pub fn violation(&mut self, text: String) {
        self.violations.push(text);
    }

    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(config) = &self.config {
            writeln!(
                f,
                "chaos run: {} tasks ({} clients, at most {}/s), {} gateways, {} workers (concurrency {}, lease TTL {} ms), seed {}",
                config.tasks,
                config.clients,
                config.rate,
                config.gateways,
                config.workers,
                config.worker_concurrency,
                config.lease_ttl_ms,
                config.seed
            )?;
            writeln!(f, "redis: {}; REDIS_SHARDS={}", config.redis, config.shards)?;
        }
        let faults = &self.faults;
        let redis_fault = match self.config.as_ref().map(|config| config.redis) {
            Some(RedisTopology::Cluster { .. }) => format!(
                "{} master SIGKILL+replica failover",
                faults.master_failovers
            ),
            _ => format!(
                "{} Redis crash+restart (appendfsync always)",
                faults.redis_restarts
            ),
        };
        writeln!(
            f,
            "faults: {} worker SIGKILLs, {} worker stalls past the lease, {} gateway SIGKILLs, {} remote agent stalls, {redis_fault}",
            faults.worker_kills, faults.worker_stalls, faults.gateway_kills, faults.agent_stalls
        )?;
        for note in &faults.redis_notes {
            writeln!(f, "  redis: {note}")?;
        }
        writeln!(
            f,
            "load: {} acknowledged in {:.1?} ({} requests retried on another gateway), {} created without acknowledgement; settled {:.1?} later",
            self.acknowledged,
            self.drive.duration,
            self.drive.retries,
            self.created_unacknowledged,
            self.settle.duration
        )?;
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(status, count)| format!("{count} {status}"))
            .collect();
        writeln!(
            f,
            "outcome: {}; {} ran more than once (max attempt {}), {} failed after exhausting attempts",
            statuses.join(", "),
            self.rerun,
            self.max_attempt,
            self.exhausted
        )?;
        writeln!(
            f,
            "remote agent: {} tasks run over HTTP by workers hosting it with --agent, {} of them more than once",
            self.remote, self.remote_rerun
        )?;
        writeln!(
            f,
            "fencing: {} results fenced out, {} leases found lost by their worker",
            self.fenced_results, self.leases_lost
        )?;
        writeln!(
            f,
            "subscribers: {} followed their task ({} events, {} reconnections); {} probes with another owner's token got 404",
            self.subscribers, self.subscriber_events, self.subscriber_reconnects, self.drive.probes
        )?;
        if let Some(config) = self
            .config
            .as_ref()
            .filter(|config| config.push_percent > 0)
        {
            let push = &self.push;
            writeln!(
                f,
                "push: {} A2A tasks with an inline config ({}% of creates, PUSH_CLAIM_MS={}), {} deliveries ({} re-sends of unconfirmed ones), {} final statuses delivered (waited {:.1?} for the last once settled), {} tasks created without acknowledgement delivered too, {} exhausted",
                push.tasks,
                config.push_percent,
                config.push_claim_ms,
                push.deliveries,
                push.resends,
                push.finals,
                push.wait.duration,
                push.unacknowledged,
                push.exhausted
            )?;
        }
        let unreadable = match self.faults.count_unreadable.first() {
            Some(first) => format!(
                " ({} more could not read Redis, e.g. {first})",
                self.faults.count_unreadable.len()
            ),
            None => String::new(),
        };
        writeln!(
            f,
            "counts: live count = running records in {} atomic mid-run snapshots and at the end{unreadable}; {} keys in Redis at the end",
            self.faults.count_checks - self.faults.count_unreadable.len(),
            self.keys
        )?;
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(phase, took)| format!("{phase} {took:.1?}"))
            .collect();
        writeln!(f, "elapsed: {:.1?} ({})", self.elapsed, phases.join(", "))?;
        if self.violations.is_empty() {
            writeln!(f, "result: PASS, no invariant violated")
        } else {
            writeln!(f, "fault timeline (since the load started):")?;
            for entry in &self.faults.timeline {
                writeln!(f, "  {entry}")?;
            }
            writeln!(f, "result: FAIL, {} violations:", self.violations.len())?;
            for violation in self.violations.iter().take(SHOWN_VIOLATIONS) {
                writeln!(f, "  - {violation}")?;
            }
            if self.violations.len() > SHOWN_VIOLATIONS {
                writeln!(
                    f,
                    "  ... and {} more",
                    self.violations.len() - SHOWN_VIOLATIONS
                )?;
            }
            Ok(())
        }
    }
}
