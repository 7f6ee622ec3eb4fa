//! Truthful durability: the store declares [`Durability::Durable`] only when the Redis server
//! fsyncs its writes to an append-only file, so that an acknowledged task (and a settled
//! payment's receipt) survives a Redis crash. Without AOF, or with `appendfsync no` (the
//! kernel flushes when it likes), a crash loses acknowledged writes: the store says
//! [`Durability::Process`] and the gateway refuses paid tasks with `durable_task_store_required`.
//!
//! `appendfsync everysec` counts as durable: at most the last second of writes can be lost to
//! a power failure, but not to a Redis crash (the kernel still holds them), which is the
//! standard production setting. The server is read once, at connect: an operator who turns AOF
//! on later restarts the processes. Where `CONFIG` is disabled (managed Redis services rename
//! or forbid it) the operator states the server's persistence with [`DurabilitySetting`].

use std::str::FromStr;

use super::pool;
use crate::{Durability, StoreError};

/// How a [`super::RedisStore`] decides what its writes are worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DurabilitySetting {
    /// Read `CONFIG GET appendonly` and `appendfsync` at connect; when CONFIG is refused,
    /// declare `process` (never claim a durability nobody checked).
    #[default]
    Detect,
    /// The operator vouches for AOF with fsync (for a Redis whose CONFIG is disabled).
    Durable,
    /// Declare `process` whatever the server does.
    Process,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown durability {0:?}: expected detect, durable or process")]
pub struct UnknownDurability(String);

impl FromStr for DurabilitySetting {
    type Err = UnknownDurability;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "detect" | "auto" => Ok(DurabilitySetting::Detect),
            "durable" | "aof" => Ok(DurabilitySetting::Durable),
            "process" | "none" => Ok(DurabilitySetting::Process),
            _ => Err(UnknownDurability(text.to_owned())),
        }
    }
}

impl std::fmt::Display for DurabilitySetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DurabilitySetting::Detect => "detect",
            DurabilitySetting::Durable => "durable",
            DurabilitySetting::Process => "process",
        })
    }
}

/// True when these persistence settings fsync every acknowledged write within a second.
pub fn fsynced(appendonly: &str, appendfsync: &str) -> bool {
    appendonly.eq_ignore_ascii_case("yes")
        && (appendfsync.eq_ignore_ascii_case("always")
            || appendfsync.eq_ignore_ascii_case("everysec"))
}

/// Decides the store's durability; only a connection failure is an error. A Redis Cluster is
/// `process` unless the operator says otherwise (see below).
pub(super) async fn decide(
    core: &super::Core,
    setting: DurabilitySetting,
) -> Result<Durability, StoreError> {
    match setting {
        DurabilitySetting::Durable => return Ok(Durability::Durable),
        DurabilitySetting::Process => return Ok(Durability::Process),
        DurabilitySetting::Detect => {}
    }
    let pool = match &core.connections {
        super::pool::Connections::Single(pool) => pool,
        super::pool::Connections::Cluster { .. } => {
            // A failover promotes a replica, and replication is asynchronous: a write the old
            // master acknowledged (and fsynced) may be missing on the new one. AOF on every
            // node does not make the cluster durable; an operator who declares it durable
            // (REDIS_DURABILITY=durable) gets every script's writes WAITed for on a replica
            // before they are acknowledged (`pool::Replicated`), and paid tasks.
            tracing::info!(
                "on a Redis Cluster a failover can lose writes the old master acknowledged: \
                 the task store declares process durability and paid tasks are refused \
                 (REDIS_DURABILITY=durable makes every write wait for a replica, with AOF on \
                 every node)"
            );
            return Ok(Durability::Process);
        }
    };
    let read = settings_read();
    let mut conn = pool::get(pool).await?;
    let result: Result<(Vec<String>, Vec<String>), redis::RedisError> =
        read.query_async(&mut *conn).await;
    match result {
        // Also drops the broken connection from the pool.
        Err(err) if connection_failure(&err) => pool::settle(pool, conn, Err(err)),
        other => judge(other),
    }
}

/// `CONFIG GET appendonly`, `CONFIG GET appendfsync`.
fn settings_read() -> redis::Pipeline {
    let mut read = redis::pipe();
    read.cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync");
    read
}

/// What one server's persistence settings are worth.
fn judge(
    result: Result<(Vec<String>, Vec<String>), redis::RedisError>,
) -> Result<Durability, StoreError> {
    match result {
        Ok((appendonly, appendfsync)) => {
            let appendonly = appendonly.get(1).map(String::as_str).unwrap_or("no");
            let appendfsync = appendfsync.get(1).map(String::as_str).unwrap_or("no");
            let durable = fsynced(appendonly, appendfsync);
            if !durable {
                tracing::info!(
                    appendonly,
                    appendfsync,
                    "Redis does not fsync writes to an append-only file: the task store \
                     declares process durability and paid tasks are refused \
                     (run Redis with --appendonly yes --appendfsync everysec)"
                );
            }
            Ok(if durable {
                Durability::Durable
            } else {
                Durability::Process
            })
        }
        Err(err) if connection_failure(&err) => Err(err.into()),
        Err(err) => {
            tracing::warn!(error = %err,
                "cannot read Redis persistence settings (CONFIG refused): declaring process \
                 durability; set REDIS_DURABILITY=durable if this Redis runs AOF with fsync");
            Ok(Durability::Process)
        }
    }
}

fn connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fsynced_aof_is_durable() {
        assert!(fsynced("yes", "always"));
        assert!(fsynced("yes", "everysec"));
        assert!(fsynced("YES", "EverySec"));
        assert!(!fsynced("yes", "no"));
        assert!(!fsynced("no", "always"));
        assert!(!fsynced("", ""));
    }

    #[test]
    fn settings_parse() {
        assert_eq!(
            "detect".parse::<DurabilitySetting>().ok(),
            Some(DurabilitySetting::Detect)
        );
        assert_eq!(
            "Durable".parse::<DurabilitySetting>().ok(),
            Some(DurabilitySetting::Durable)
        );
        assert_eq!(
            "process".parse::<DurabilitySetting>().ok(),
            Some(DurabilitySetting::Process)
        );
        assert!("sometimes".parse::<DurabilitySetting>().is_err());
    }
}
