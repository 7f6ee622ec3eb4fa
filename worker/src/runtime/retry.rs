//! The retry policy: how many times a handler's retryable failure
//! ([`crate::handler::HandlerError::transient`]) gets another attempt, per entrypoint, and how
//! long the task waits before it (exponential backoff with full jitter). The wait itself is the
//! store's: the task sits in `backoff` holding no worker until the sweep queues it again
//! ([`store::TaskStore::retry_later`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Retries an entrypoint gets when no `--retry KEY=N` names it (`--retry-default`).
pub const DEFAULT_RETRIES: u32 = 3;
/// The first backoff's upper bound (`--retry-base-ms`).
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_millis(1_000);
/// The most any backoff's upper bound grows to (`--retry-max-ms`).
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(60);

/// `KEY=N`: entrypoint KEY gets up to N retries (0: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySpec {
    pub entrypoint: String,
    pub retries: u32,
}

/// A `--retry` value that is not `KEY=N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected KEY=N (an entrypoint and a number of retries), got {0:?}")]
pub struct BadRetrySpec(String);

impl FromStr for RetrySpec {
    type Err = BadRetrySpec;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadRetrySpec(text.to_owned());
        let (key, retries) = text.split_once('=').ok_or_else(bad)?;
        let key = key.trim();
        if key.is_empty() {
            return Err(bad());
        }
        Ok(RetrySpec {
            entrypoint: key.to_owned(),
            retries: retries.trim().parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for RetrySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.entrypoint, self.retries)
    }
}

/// Retries per entrypoint and the backoff between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries of an entrypoint `per_entrypoint` does not name.
    pub default: u32,
    pub per_entrypoint: BTreeMap<String, u32>,
    /// The upper bound of the first backoff; each retry doubles it, up to `max`.
    pub base: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            default: DEFAULT_RETRIES,
            per_entrypoint: BTreeMap::new(),
            base: DEFAULT_RETRY_BASE,
            max: DEFAULT_RETRY_MAX,
        }
    }
}

impl RetryPolicy {
    /// The policy of the flags: `specs` override `default` (a later spec of one key wins).
    pub fn new(default: u32, specs: &[RetrySpec], base: Duration, max: Duration) -> Self {
        RetryPolicy {
            default,
            per_entrypoint: specs
                .iter()
                .map(|spec| (spec.entrypoint.clone(), spec.retries))
                .collect(),
            base,
            max: max.max(base),
        }
    }

    /// Retries `entrypoint` gets.
    pub fn retries(&self, entrypoint: &str) -> u32 {
        self.per_entrypoint
            .get(entrypoint)
            .copied()
            .unwrap_or(self.default)
    }

    /// The upper bound of retry number `retry` (1 for the first): `min(max, base * 2^(retry-1))`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let doubling = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(doubling).min(self.max)
    }

    /// The wait before retry number `retry`: full jitter, uniform in `[0, ceiling(retry)]`
    /// (spreads the retries of many tasks failing together, as AWS's backoff advice shows),
    /// and never less than the handler's `after` (an upstream's `Retry-After`).
    pub fn delay(&self, retry: u32, after: Option<Duration>) -> Duration {
        let ceiling = u64::try_from(self.ceiling(retry).as_millis()).unwrap_or(u64::MAX);
        let jittered = Duration::from_millis(random_below(ceiling.saturating_add(1)));
        jittered.max(after.unwrap_or_default())
    }
}

/// A uniform-enough random number in `[0, bound)` (0 when `bound` is 0), from the system's
/// random source (what `uuid`'s v4 draws from): jitter needs no cryptographic quality, only
/// independence between processes.
fn random_below(bound: u64) -> u64 {
    if bound == 0 {
        return 0;
    }
    let bits = uuid::Uuid::new_v4().as_u128();
    // 122 random bits; the modulo bias over a 64-bit draw is negligible for a delay.
    (bits as u64) % bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_override_the_default() {
        let specs: Vec<RetrySpec> = ["echo=0", " fail = 5 ", "echo=2"]
            .iter()
            .map(|text| text.parse())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(specs.len(), 3);
        let policy = RetryPolicy::new(1, &specs, Duration::ZERO, Duration::ZERO);
        assert_eq!(policy.retries("echo"), 2);
        assert_eq!(policy.retries("fail"), 5);
        assert_eq!(policy.retries("other"), 1);
        for bad in ["echo", "=3", "echo=-1", "echo=x"] {
            assert!(bad.parse::<RetrySpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() {
        let policy = RetryPolicy::new(
            3,
            &[],
            Duration::from_millis(100),
            Duration::from_millis(500),
        );
        let ceilings: Vec<u128> = (1..=5).map(|n| policy.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 500, 500]);
        assert_eq!(policy.ceiling(200), Duration::from_millis(500));
    }

    #[test]
    fn delays_stay_within_the_ceiling_and_honour_retry_after() {
        let policy = RetryPolicy::new(
            3,
            &[],
            Duration::from_millis(100),
            Duration::from_millis(500),
        );
        for retry in 1..=6 {
            let delay = policy.delay(retry, None);
            assert!(delay <= policy.ceiling(retry), "{delay:?}");
        }
        let after = Duration::from_secs(7);
        assert_eq!(policy.delay(1, Some(after)), after);
        let zero = RetryPolicy::new(3, &[], Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.delay(4, None), Duration::ZERO);
    }
}
