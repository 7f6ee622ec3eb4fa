//! Fair admission per payer: paid task creations one payer (the address its credential's
//! signature recovers to) may make per second, across every gateway (the same GCRA limiter as
//! the per-address and per-owner limits, see [`crate::core::ratelimit`]).
//!
//! The payer is known only once a credential passed the offline checks, after the
//! per-address middleware ran; so the check is made in the paid admission, at the point the
//! pending-credential bounds identify the payer, before the credential is claimed, verified
//! or settled: a refused request charges nothing and costs the facilitator nothing.

use std::sync::Arc;

use axum::response::Response;
use payments::Address;
use store::ratelimit::{Quota, RateLimiter, Subject};

use crate::core::config::GatewayConfig;
use crate::core::ratelimit;

pub const PER_PAYER: &str = "per-payer";

/// The per-payer limit and where it is kept.
pub struct PayerRate {
    limiter: Arc<dyn RateLimiter>,
    quota: Quota,
}

impl PayerRate {
    /// `None` when `--rate-per-payer` is 0.
    pub fn from_config(config: &GatewayConfig, limiter: Arc<dyn RateLimiter>) -> Option<Self> {
        let quota = Quota::new(config.rate_per_payer, config.rate_burst)?;
        Some(PayerRate { limiter, quota })
    }

    /// Charges `payer` one creation; the `429` answer when it is over its limit. A limiter
    /// that fails admits (logged), as the other limits do.
    pub async fn check(&self, payer: Address) -> Option<Response> {
        let subject = Subject {
            policy: PER_PAYER,
            key: format!("payer:{payer:#x}"),
            quota: self.quota,
        };
        let limited = ratelimit::verdict_of(self.limiter.as_ref(), &[subject]).await?;
        Some(ratelimit::refused(&limited, false))
    }
}
