//! The store memory watch: new tasks are refused while the store is near its memory limit.
//!
//! Redis runs `noeviction` with a fixed `maxmemory`: once full it refuses every write, the
//! leases, results, receipts and recovery of tasks already admitted included. So a gateway
//! samples `INFO memory` (every master of a Redis Cluster) in the background and, while any
//! server's `used_memory` is at or above `--redis-memory-high-water` percent of its
//! `maxmemory`, answers new tasks (POST /tasks, invoke, stream, A2A messages: all of them go
//! through [`crate::core::admit`]) `503 service_unavailable` with Retry-After. Only admission reads
//! the mark: writes about existing tasks never do.
//!
//! Staleness: admission reads the latest sample, taken at most `--redis-memory-check-ms` (plus
//! one reply) before; tasks admitted in that window still land. A failed sample keeps the
//! previous state (a store that cannot answer `INFO` fails the creation itself anyway).
//! Admission reopens once every server is [`HYSTERESIS`] below the mark (5 points of
//! `maxmemory`, at most half the mark), so a store hovering at the mark does not flap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use protocol::ErrorCode;
use store::{MemoryFill, TaskStore};
use telemetry::metrics;
use tokio_util::sync::CancellationToken;

use crate::http::error::ApiError;

/// How far below the mark (a fraction of `maxmemory`) the fill must fall to reopen admission.
pub const HYSTERESIS: f64 = 0.05;

/// Retry-After of a refusal: about when the next sample may have reopened admission.
const RETRY_AFTER_SECS: u64 = 5;

/// The latest verdict of the watch, read by every admission (two atomic loads).
#[derive(Debug)]
pub struct MemoryWatch {
    /// The mark as a fraction of `maxmemory`; `None`: disabled.
    mark: Option<f64>,
    /// True while the latest sample was at or above the mark.
    full: AtomicBool,
    /// The highest fill of the latest sample, in thousandths (for the refusal's log line).
    permille: AtomicU64,
}

/// The watch went from below the mark to at or above it, or back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crossing {
    Up,
    Down,
}

impl MemoryWatch {
    /// A watch refusing admission at `percent` of `maxmemory`; 0 or 100 disables it.
    pub fn new(percent: u8) -> Self {
        let mark = (percent > 0 && percent < 100).then(|| f64::from(percent) / 100.0);
        MemoryWatch {
            mark,
            full: AtomicBool::new(false),
            permille: AtomicU64::new(0),
        }
    }

    /// A watch that never refuses (the embedded mode: no Redis to fill).
    pub fn disabled() -> Self {
        MemoryWatch::new(0)
    }

    pub fn enabled(&self) -> bool {
        self.mark.is_some()
    }

    /// Admission's check: `Err` (503 with Retry-After) while the latest sample was at or above
    /// the mark.
    pub fn admit(&self) -> Result<(), ApiError> {
        if !self.full.load(Ordering::Relaxed) {
            return Ok(());
        }
        metrics::admission_refused("store_memory");
        tracing::debug!(
            fill_permille = self.permille.load(Ordering::Relaxed),
            "new task refused: the task store is near its memory limit"
        );
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            "The task store is near its memory limit; new tasks are refused until it frees up, retry later",
        )
        .retry_after(RETRY_AFTER_SECS))
    }

    /// Takes a sample in: the verdict admission reads from now on, and the crossing, if the
    /// verdict changed. Servers without `maxmemory` never count as full.
    pub fn observe(&self, fills: &[MemoryFill]) -> Option<Crossing> {
        let mark = self.mark?;
        let highest = fills
            .iter()
            .filter_map(MemoryFill::ratio)
            .fold(0.0_f64, f64::max);
        let was = self.full.load(Ordering::Relaxed);
        let full = if was {
            highest >= (mark - HYSTERESIS).max(mark / 2.0)
        } else {
            highest >= mark
        };
        // Thousandths of a non-negative ratio: the cast saturates, nothing to lose.
        self.permille
            .store((highest * 1000.0).round() as u64, Ordering::Relaxed);
        // One sampler per watch: no concurrent observer to race with.
        self.full.store(full, Ordering::Relaxed);
        match (was, full) {
            (false, true) => Some(Crossing::Up),
            (true, false) => Some(Crossing::Down),
            _ => None,
        }
    }
}

/// Samples `store`'s memory every `every` until `shutdown`, feeding `watch`; logs each
/// crossing of the mark once. The fill gauge (`taskcluster.store.memory.fill`) is not
/// recorded here: it is the cluster's, reported by one worker (see `docs/observability.md`),
/// while every gateway needs a sample of its own to refuse admissions.
pub async fn run(
    watch: Arc<MemoryWatch>,
    store: Arc<dyn TaskStore>,
    every: Duration,
    shutdown: CancellationToken,
) {
    let Some(mark) = watch.mark else {
        return;
    };
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let fills = match store.memory_fill().await {
            Ok(fills) => {
                failing = false;
                fills
            }
            Err(err) => {
                if !failing {
                    tracing::warn!(error = %err, "cannot read the task store's memory; admission keeps its last verdict");
                }
                failing = true;
                continue;
            }
        };
        let worst = fills
            .iter()
            .filter(|fill| fill.ratio().is_some())
            .max_by(|a, b| {
                a.ratio()
                    .partial_cmp(&b.ratio())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        match watch.observe(&fills) {
            Some(Crossing::Up) => tracing::warn!(
                node = worst.map_or("", |fill| fill.node.as_str()),
                used_bytes = worst.map_or(0, |fill| fill.used),
                max_bytes = worst.map_or(0, |fill| fill.max),
                high_water_percent = mark * 100.0,
                "task store memory reached the high-water mark: new tasks are refused"
            ),
            Some(Crossing::Down) => tracing::info!(
                node = worst.map_or("", |fill| fill.node.as_str()),
                used_bytes = worst.map_or(0, |fill| fill.used),
                max_bytes = worst.map_or(0, |fill| fill.max),
                high_water_percent = mark * 100.0,
                "task store memory is below the high-water mark again: new tasks are admitted"
            ),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(node: &str, used: u64, max: u64) -> MemoryFill {
        MemoryFill {
            node: node.to_owned(),
            used,
            max,
        }
    }

    #[test]
    fn the_mark_closes_and_reopens_admission_once_per_crossing() {
        let watch = MemoryWatch::new(80);
        assert!(watch.admit().is_ok());
        assert_eq!(watch.observe(&[fill("a", 79, 100)]), None);
        assert!(watch.admit().is_ok());
        // Any master at the mark closes admission, once.
        assert_eq!(
            watch.observe(&[fill("a", 10, 100), fill("b", 80, 100)]),
            Some(Crossing::Up)
        );
        assert_eq!(watch.observe(&[fill("b", 95, 100)]), None);
        let refused = watch.admit().err();
        assert_eq!(
            refused.as_ref().map(|err| err.status),
            Some(StatusCode::SERVICE_UNAVAILABLE)
        );
        assert_eq!(
            refused.as_ref().map(|err| err.code),
            Some(ErrorCode::ServiceUnavailable)
        );
        assert!(refused.as_ref().and_then(|err| err.retry_after).is_some());
        assert!(
            refused
                .and_then(|err| err.message)
                .is_some_and(|message| message.contains("memory limit"))
        );
        // Just under the mark: still refused (no flapping around it).
        assert_eq!(watch.observe(&[fill("b", 76, 100)]), None);
        assert!(watch.admit().is_err());
        // Clearly below it again: reopened, once.
        assert_eq!(watch.observe(&[fill("b", 74, 100)]), Some(Crossing::Down));
        assert_eq!(watch.observe(&[fill("b", 79, 100)]), None);
        assert!(watch.admit().is_ok());
        assert_eq!(watch.observe(&[fill("b", 80, 100)]), Some(Crossing::Up));
    }

    #[test]
    fn a_low_mark_still_reopens() {
        let watch = MemoryWatch::new(4);
        assert_eq!(watch.observe(&[fill("a", 4, 100)]), Some(Crossing::Up));
        assert_eq!(watch.observe(&[fill("a", 1, 100)]), Some(Crossing::Down));
    }

    #[test]
    fn unlimited_servers_and_disabled_marks_never_refuse() {
        let watch = MemoryWatch::new(80);
        // maxmemory 0: unlimited, whatever it uses; no server at all (the memory store).
        assert_eq!(watch.observe(&[fill("a", u64::MAX, 0)]), None);
        assert_eq!(watch.observe(&[]), None);
        assert!(watch.admit().is_ok());
        for percent in [0, 100] {
            let watch = MemoryWatch::new(percent);
            assert!(!watch.enabled());
            assert_eq!(watch.observe(&[fill("a", 100, 100)]), None);
            assert!(watch.admit().is_ok());
        }
    }
}
