//! Redis commands counted over a timed window: `CONFIG RESETSTAT` just before it, an
//! `INFO commandstats cpu stats` snapshot at each end, the difference. Redis 7 counts the
//! commands scripts run through `redis.call` too, so the counts are the cluster's whole cost.

use std::collections::{BTreeMap, BTreeSet};

use redis::aio::MultiplexedConnection;

use super::Res;
use super::redis_admin::parse_info;

/// Commands clients (the store, the registry) send themselves; the rest of
/// `INFO commandstats` runs inside scripts. ZRANGE is not among them: scripts run it inside
/// (create's prune of expired terminal tasks, owner evictions), while the clients' own ZRANGEs
/// (a registry read every refresh, an owner listing) are rare, so counting them as script work
/// is the smaller error.
pub const CLIENT_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "function|load",
    "blpop",
    "script|load",
    "ping",
    "hello",
    "client|setinfo",
    "client|setname",
    "select",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "mget",
];

/// The bench's own measurement commands, left out of every count.
pub fn is_admin(command: &str) -> bool {
    command == "info" || command.starts_with("config|")
}

/// `CONFIG RESETSTAT`: zeroes commandstats (the bench's Redis is private).
pub async fn reset_stats(admin: &mut MultiplexedConnection) -> Res<()> {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await?;
    Ok(())
}

/// One `INFO commandstats cpu stats`.
#[derive(Debug, Clone, Default)]
pub struct RedisSnap {
    /// command -> (calls, usec)
    pub commands: BTreeMap<String, (u64, u64)>,
    /// `used_cpu_sys + used_cpu_user`.
    pub cpu_s: f64,
    pub total_commands_processed: u64,
}

/// Calls and time inside Redis per command over a window.
#[derive(Debug, Clone, Default)]
pub struct CommandDiff {
    /// command -> calls
    pub calls: BTreeMap<String, u64>,
    /// command -> usec inside Redis
    pub usec: BTreeMap<String, u64>,
}

impl RedisSnap {
    pub async fn take(admin: &mut MultiplexedConnection) -> Res<RedisSnap> {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .arg("stats")
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
        })
    }

    /// The commands run since `before`, without the bench's admin commands and without
    /// `own(command)` calls the bench made itself (its polling); commands not called are left
    /// out.
    pub fn since(&self, before: &RedisSnap, own: impl Fn(&str) -> u64) -> CommandDiff {
        let mut diff = CommandDiff::default();
        for (name, (calls1, usec1)) in &self.commands {
            if is_admin(name) {
                continue;
            }
            let (calls0, usec0) = before.commands.get(name).copied().unwrap_or((0, 0));
            let calls = calls1.saturating_sub(calls0).saturating_sub(own(name));
            if calls > 0 {
                diff.calls.insert(name.clone(), calls);
                diff.usec.insert(name.clone(), usec1.saturating_sub(usec0));
            }
        }
        diff
    }
}

/// Every command counted: the server's work.
pub fn server_cmds(calls: &BTreeMap<String, u64>) -> u64 {
    calls.values().sum()
}

/// Calls of [`CLIENT_COMMANDS`]: round trips to Redis.
pub fn client_round_trips(calls: &BTreeMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(name, _)| CLIENT_COMMANDS.contains(&name.as_str()))
        .map(|(_, calls)| calls)
        .sum()
}

/// Every command some run called, sorted.
pub fn command_names<'a>(runs: impl IntoIterator<Item = &'a BTreeMap<String, u64>>) -> Vec<String> {
    let names: BTreeSet<&String> = runs.into_iter().flat_map(BTreeMap::keys).collect();
    names.into_iter().cloned().collect()
}

/// `*` after a command sent by a client, for the per-command tables.
pub fn client_star(name: &str) -> &'static str {
    if CLIENT_COMMANDS.contains(&name) {
        "*"
    } else {
        ""
    }
}
