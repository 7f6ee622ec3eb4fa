//! What handlers share: the facilitator's address, the ledger, the faults in force and the
//! request counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::Address;
use serde::Serialize;

use crate::faults::Faults;
use crate::ledger::Ledger;

#[derive(Clone)]
pub struct AppState {
    /// What upto permits must name as their facilitator.
    pub address: Address,
    pub ledger: Arc<dyn Ledger>,
    pub faults: Arc<Faults>,
    pub stats: Arc<Stats>,
}

/// Counters since start, as `/control/stats` shows them.
#[derive(Debug, Default)]
pub struct Stats {
    verify: AtomicU64,
    settle: AtomicU64,
    settled: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    /// `/verify` requests read (whatever their outcome or fault).
    pub verify: u64,
    /// `/settle` requests read (whatever their outcome or fault).
    pub settle: u64,
    /// Settlements that moved funds.
    pub settled: u64,
}

impl Stats {
    // Relaxed: each counter is independent and only ever read for display.
    pub fn verify(&self) {
        self.verify.fetch_add(1, Ordering::Relaxed);
    }

    pub fn settle(&self) {
        self.settle.fetch_add(1, Ordering::Relaxed);
    }

    pub fn settled(&self) {
        self.settled.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            verify: self.verify.load(Ordering::Relaxed),
            settle: self.settle.load(Ordering::Relaxed),
            settled: self.settled.load(Ordering::Relaxed),
        }
    }
}

pub use payments::unix_now;
