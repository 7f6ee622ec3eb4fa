//! Fair admission: GCRA (generic cell rate algorithm) rate limits per subject (a client
//! address, an owner), shared by every gateway of a namespace when they share a Redis.
//!
//! [`RedisRateLimiter`] keeps one key per subject, `{ns}:rate:<kind>:<subject>` (the subject's
//! theoretical arrival time, in microseconds of the Redis clock), checked and charged by one
//! script, `lua/rate_limit.lua`, whose module [`gcra`] holds its contract, keys and arguments,
//! typed reply and call; each key expires (PEXPIRE) once its subject's quota is whole again,
//! so idle subjects cost nothing. [`MemoryRateLimiter`] is the in-process equivalent for the
//! embedded mode.

mod gcra;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::{RedisStore, StoreError};

/// A rate: `per_second` requests a second on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub per_second: f64,
    pub burst: u32,
}

impl Quota {
    /// `None` when the rate is 0 (or not a positive number): no limit.
    pub fn new(per_second: f64, burst: u32) -> Option<Self> {
        (per_second.is_finite() && per_second > 0.0).then_some(Quota {
            per_second,
            burst: burst.max(1),
        })
    }

    /// The time one request uses up, in microseconds (at least 1).
    pub fn interval_us(&self) -> u64 {
        ((1_000_000.0 / self.per_second).round() as u64).max(1)
    }
}

/// One limited subject of a request.
#[derive(Debug, Clone)]
pub struct Subject {
    /// The policy's name, as the `RateLimit-Policy` header reports it (`per-address`).
    pub policy: &'static str,
    /// Who: the kind and the subject itself (`addr:127.0.0.1`, `owner:<hash>`).
    pub key: String,
    pub quota: Quota,
}

/// What a check decided.
#[derive(Debug, Clone)]
pub enum Verdict {
    Admitted,
    /// The subject over its limit, and when it admits one more request.
    Limited {
        subject: Subject,
        retry_after: Duration,
    },
}

#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Admits a request when every subject has room, and then charges each one; a limited
    /// request charges nobody.
    async fn check(&self, subjects: &[Subject]) -> Result<Verdict, StoreError>;
}

/// The limits in the store's Redis: one script call per request, whichever gateway takes it.
#[derive(Clone)]
pub struct RedisRateLimiter {
    store: RedisStore,
    prefix: String,
}

impl RedisRateLimiter {
    pub fn new(store: &RedisStore) -> Self {
        RedisRateLimiter {
            prefix: format!("{{{}}}:rate:", store.config().namespace),
            store: store.clone(),
        }
    }

    /// The subject's key: `{ns}:rate:<kind>:<subject>`.
    pub fn key(&self, subject: &str) -> String {
        format!("{}{}", self.prefix, subject)
    }
}

#[async_trait]
impl RateLimiter for RedisRateLimiter {
    async fn check(&self, subjects: &[Subject]) -> Result<Verdict, StoreError> {
        gcra::call(self, subjects).await
    }
}

/// Subjects kept in memory before idle ones are dropped.
const MEMORY_PRUNE_AT: usize = 10_000;

/// The same limits in this process (embedded mode).
#[derive(Default)]
pub struct MemoryRateLimiter {
    tats: Mutex<HashMap<String, Instant>>,
}

#[async_trait]
impl RateLimiter for MemoryRateLimiter {
    async fn check(&self, subjects: &[Subject]) -> Result<Verdict, StoreError> {
        let now = Instant::now();
        let mut tats = self.tats.lock().unwrap_or_else(PoisonError::into_inner);
        if tats.len() >= MEMORY_PRUNE_AT {
            tats.retain(|_, tat| *tat > now);
        }
        let mut next = Vec::with_capacity(subjects.len());
        for subject in subjects {
            let interval = Duration::from_micros(subject.quota.interval_us());
            let tat = tats.get(&subject.key).copied().unwrap_or(now).max(now);
            let ahead = interval * subject.quota.burst.saturating_sub(1);
            let allow_at = tat.checked_sub(ahead).unwrap_or(now);
            if now < allow_at {
                return Ok(Verdict::Limited {
                    subject: subject.clone(),
                    retry_after: allow_at - now,
                });
            }
            next.push(tat + interval);
        }
        for (subject, tat) in subjects.iter().zip(next) {
            tats.insert(subject.key.clone(), tat);
        }
        Ok(Verdict::Admitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn subject(key: &str, per_second: f64, burst: u32) -> Result<Subject, &'static str> {
        Ok(Subject {
            policy: "per-address",
            key: key.to_owned(),
            quota: Quota::new(per_second, burst).ok_or("no quota")?,
        })
    }

    #[tokio::test]
    async fn memory_admits_the_burst_then_limits() -> TestResult {
        let limiter = MemoryRateLimiter::default();
        let a = [subject("addr:a", 0.01, 3)?];
        for _ in 0..3 {
            assert!(matches!(limiter.check(&a).await?, Verdict::Admitted));
        }
        match limiter.check(&a).await? {
            Verdict::Limited { retry_after, .. } => {
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(100));
            }
            Verdict::Admitted => return Err("the request past the burst was admitted".into()),
        }
        // Another subject has its own quota.
        let b = [subject("addr:b", 0.01, 3)?];
        assert!(matches!(limiter.check(&b).await?, Verdict::Admitted));
        Ok(())
    }

    #[test]
    fn zero_rate_is_no_limit() -> TestResult {
        assert!(Quota::new(0.0, 10).is_none());
        assert_eq!(Quota::new(50.0, 0).ok_or("no quota")?.burst, 1);
        assert_eq!(
            Quota::new(50.0, 100).ok_or("no quota")?.interval_us(),
            20_000
        );
        Ok(())
    }
}
