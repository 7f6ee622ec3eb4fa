//! Bounds on credentials that are not yet known to pay.
//!
//! A credential that passes the offline checks proves only that someone holds a key: anyone
//! can sign an authorization from an empty wallet, as many as they like. Until the facilitator
//! says it can pay, such a credential must cost us little, and a flood of them must leave room
//! for callers who pay. So, per gateway:
//!
//! - at most `max_pending` credentials are between their claim and the facilitator's verdict
//!   at once; later ones wait their turn in arrival order (a fair semaphore), so a paying
//!   caller behind a flood waits for a few quick refusals, never for the flood to stop; past
//!   `8 × max_pending` waiting, `503` with Retry-After (what one gateway can hold is bounded);
//! - at most `per_payer` of one payer's credentials are pending at once (`429`);
//! - a payer the facilitator refused is refused here, without asking the facilitator again,
//!   for `cooldown` (`402`): a flood from one empty wallet costs one facilitator call per
//!   cooldown and gateway. The memory of refused payers is bounded too.
//!
//! No task is reserved before the facilitator's verdict (see [`super::admission`]), so forged
//! credentials never hold `MAX_TASKS` slots, whatever their number.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use payments::Address;
use protocol::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::core::config::GatewayConfig;
use crate::http::error::ApiError;

/// Waiting credentials allowed per pending slot before the gateway answers 503.
const WAITERS_PER_SLOT: usize = 8;
/// Refused payers remembered at most; past it, the expired are dropped, then the oldest.
const MAX_REFUSED_REMEMBERED: usize = 10_000;

/// The gateway's bounds on pending credentials (see the module doc).
pub struct PendingPayments {
    slots: Arc<Semaphore>,
    max_waiting: usize,
    per_payer: usize,
    cooldown: Duration,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    waiting: usize,
    by_payer: HashMap<Address, usize>,
    refused: HashMap<Address, Instant>,
}

/// Why a credential may not be checked now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Too many credentials are waiting at this gateway.
    Gateway,
    /// Too many of this payer's credentials are pending.
    Payer,
    /// The facilitator refused this payer moments ago.
    Refused,
}

impl Busy {
    /// The answer for `Gateway` and `Payer` (a `Refused` payer gets its rail's 402 instead).
    pub fn answer(self) -> ApiError {
        match self {
            Busy::Gateway => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServiceUnavailable,
                "Too many payments are being checked at this gateway; retry shortly",
            )
            .retry_after(1),
            Busy::Payer | Busy::Refused => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
                "Too many of this payer's payments are being checked at once; retry shortly",
            )
            .retry_after(1),
        }
    }
}

/// A pending credential's place: while held, it counts against the bounds.
pub struct Pending {
    _slot: OwnedSemaphorePermit,
    _share: PayerShare,
}

/// One of a payer's pending places, given back when dropped (also by a request dropped
/// while it waits for a slot).
struct PayerShare {
    payer: Address,
    state: Arc<Mutex<State>>,
}

impl Drop for PayerShare {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = state.by_payer.get_mut(&self.payer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.by_payer.remove(&self.payer);
            }
        }
    }
}

/// Takes a waiter's place off the count when the wait ends, however it ends (the request may
/// be dropped while it waits).
struct Waiting(Arc<Mutex<State>>);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.waiting = state.waiting.saturating_sub(1);
    }
}

impl PendingPayments {
    pub fn from_config(config: &GatewayConfig) -> Self {
        PendingPayments::new(
            config.max_pending_payments,
            config.max_pending_payments_per_payer,
            Duration::from_millis(config.refused_payer_cooldown_ms),
        )
    }

    pub fn new(max_pending: usize, per_payer: usize, cooldown: Duration) -> Self {
        let max_pending = max_pending.max(1);
        PendingPayments {
            slots: Arc::new(Semaphore::new(max_pending)),
            max_waiting: max_pending.saturating_mul(WAITERS_PER_SLOT),
            per_payer: per_payer.max(1),
            cooldown,
            state: Arc::default(),
        }
    }

    /// A place for `payer`'s credential, once one is free.
    pub async fn enter(&self, payer: Address) -> Result<Pending, Busy> {
        let (waiting, share) = {
            let mut state = self.lock();
            if let Some(until) = state.refused.get(&payer) {
                if *until > Instant::now() {
                    return Err(Busy::Refused);
                }
                state.refused.remove(&payer);
            }
            let mine = state.by_payer.get(&payer).copied().unwrap_or(0);
            if mine >= self.per_payer {
                return Err(Busy::Payer);
            }
            if state.waiting >= self.max_waiting {
                return Err(Busy::Gateway);
            }
            state.waiting += 1;
            *state.by_payer.entry(payer).or_insert(0) += 1;
            let share = PayerShare {
                payer,
                state: self.state.clone(),
            };
            (Waiting(self.state.clone()), share)
        };
        // The semaphore is never closed; were it, this is a busy gateway.
        let slot = self.slots.clone().acquire_owned().await;
        drop(waiting);
        Ok(Pending {
            _slot: slot.map_err(|_| Busy::Gateway)?,
            _share: share,
        })
    }

    /// Remembers that the facilitator refused `payer`'s credential.
    pub fn refused(&self, payer: Address) {
        if self.cooldown.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut state = self.lock();
        if state.refused.len() >= MAX_REFUSED_REMEMBERED {
            state.refused.retain(|_, until| *until > now);
        }
        if state.refused.len() >= MAX_REFUSED_REMEMBERED
            && let Some(oldest) = state
                .refused
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(payer, _)| *payer)
        {
            state.refused.remove(&oldest);
        }
        state.refused.insert(payer, now + self.cooldown);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payer(byte: u8) -> Address {
        Address::repeat_byte(byte)
    }

    #[tokio::test]
    async fn one_payer_gets_its_share_and_no_more() {
        let pending = PendingPayments::new(8, 2, Duration::from_secs(30));
        let first = pending.enter(payer(1)).await;
        let second = pending.enter(payer(1)).await;
        assert!(first.is_ok() && second.is_ok());
        assert!(matches!(pending.enter(payer(1)).await, Err(Busy::Payer)));
        // Another payer is not affected.
        assert!(pending.enter(payer(2)).await.is_ok());
        drop(first);
        assert!(pending.enter(payer(1)).await.is_ok());
    }

    #[tokio::test]
    async fn a_refused_payer_waits_out_its_cooldown() {
        let pending = PendingPayments::new(8, 2, Duration::from_secs(30));
        pending.refused(payer(3));
        assert!(matches!(pending.enter(payer(3)).await, Err(Busy::Refused)));
        assert!(pending.enter(payer(4)).await.is_ok());
        let none = PendingPayments::new(8, 2, Duration::ZERO);
        none.refused(payer(3));
        assert!(none.enter(payer(3)).await.is_ok());
    }

    #[tokio::test]
    async fn waiters_are_bounded_and_served_in_turn() {
        let pending = Arc::new(PendingPayments::new(1, 1, Duration::ZERO));
        let held = pending.enter(payer(1)).await;
        assert!(held.is_ok());
        // Eight may wait for the one slot; the ninth is told to come back.
        let mut waiters = Vec::new();
        for byte in 10..18u8 {
            let pending = pending.clone();
            waiters.push(tokio::spawn(async move {
                pending.enter(payer(byte)).await.map(drop)
            }));
        }
        while pending.lock().waiting < 8 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(pending.enter(payer(20)).await, Err(Busy::Gateway)));
        drop(held);
        for waiter in waiters {
            assert!(matches!(waiter.await, Ok(Ok(()))));
        }
        assert_eq!(pending.lock().waiting, 0);
        assert!(pending.lock().by_payer.is_empty());
    }

    #[test]
    fn refused_payers_are_remembered_within_a_bound() {
        let pending = PendingPayments::new(1, 1, Duration::from_secs(30));
        for i in 0..(MAX_REFUSED_REMEMBERED + 5) {
            let mut bytes = [0u8; 20];
            bytes[..8].copy_from_slice(&(i as u64).to_be_bytes());
            pending.refused(Address::from(bytes));
        }
        assert!(pending.lock().refused.len() <= MAX_REFUSED_REMEMBERED);
    }
}
