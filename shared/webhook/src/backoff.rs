//! When to try a failed delivery again: exponential backoff with full jitter (the wait is drawn
//! uniformly between zero and `min(cap, base * 2^(failures - 1))`), and a bounded number of
//! attempts. Full jitter spreads the retries of many deliveries that failed together (a
//! receiver that came back up) instead of sending them in waves.

use std::time::Duration;

use rand::{Rng, RngExt};

/// A retry schedule. The default: 1 s base, 5 min cap, 10 attempts in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    max_attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    #[error("the backoff base must be more than zero")]
    ZeroBase,
    #[error("the backoff cap ({cap:?}) must be at least the base ({base:?})")]
    CapBelowBase { base: Duration, cap: Duration },
    #[error("a delivery needs at least one attempt")]
    ZeroAttempts,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
            max_attempts: 10,
        }
    }
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration, max_attempts: u32) -> Result<Self, BackoffError> {
        if base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if cap < base {
            return Err(BackoffError::CapBelowBase { base, cap });
        }
        if max_attempts == 0 {
            return Err(BackoffError::ZeroAttempts);
        }
        Ok(Self {
            base,
            cap,
            max_attempts,
        })
    }

    pub fn base(&self) -> Duration {
        self.base
    }

    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// Attempts in all, the first one included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The longest wait after `failures` failed attempts: `min(cap, base * 2^(failures - 1))`,
    /// zero before any failure.
    pub fn ceiling(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait before the next attempt after `failures` failed ones, drawn from `rng`, or
    /// `None` when all attempts are used and the delivery is exhausted.
    pub fn next_delay_with<R: Rng + ?Sized>(&self, failures: u32, rng: &mut R) -> Option<Duration> {
        if failures >= self.max_attempts {
            return None;
        }
        let ceiling = u64::try_from(self.ceiling(failures).as_nanos()).unwrap_or(u64::MAX);
        Some(Duration::from_nanos(rng.random_range(0..=ceiling)))
    }

    /// [`Backoff::next_delay_with`] drawing from the thread's random generator.
    pub fn next_delay(&self, failures: u32) -> Option<Duration> {
        self.next_delay_with(failures, &mut rand::rng())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn settings_are_checked() {
        assert_eq!(
            Backoff::new(Duration::ZERO, SECOND, 3),
            Err(BackoffError::ZeroBase)
        );
        assert_eq!(
            Backoff::new(SECOND * 2, SECOND, 3),
            Err(BackoffError::CapBelowBase {
                base: SECOND * 2,
                cap: SECOND
            })
        );
        assert_eq!(
            Backoff::new(SECOND, SECOND, 0),
            Err(BackoffError::ZeroAttempts)
        );
    }

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() -> Result<(), BackoffError> {
        let backoff = Backoff::new(SECOND, SECOND * 60, 100)?;
        let ceilings: Vec<u64> = (0..10).map(|n| backoff.ceiling(n).as_secs()).collect();
        assert_eq!(ceilings, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // No overflow however many failures.
        assert_eq!(backoff.ceiling(u32::MAX), SECOND * 60);
        let huge = Backoff::new(SECOND, Duration::MAX, 100)?;
        assert!(huge.ceiling(u32::MAX) >= SECOND * (1 << 30));
        Ok(())
    }

    #[test]
    fn delays_are_full_jitter_within_the_ceiling() -> Result<(), BackoffError> {
        let backoff = Backoff::new(Duration::from_millis(100), SECOND * 5, 12)?;
        let mut rng = StdRng::seed_from_u64(17);
        for failures in 1..12 {
            let ceiling = backoff.ceiling(failures);
            let draws: Vec<Duration> = (0..2000)
                .filter_map(|_| backoff.next_delay_with(failures, &mut rng))
                .collect();
            assert_eq!(draws.len(), 2000);
            assert!(draws.iter().all(|d| *d <= ceiling), "{failures}");
            // Full jitter: the draws cover the whole range, not just near the ceiling.
            assert!(draws.iter().any(|d| *d < ceiling / 10), "{failures}");
            assert!(draws.iter().any(|d| *d > ceiling * 9 / 10), "{failures}");
        }
        Ok(())
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_attempts_run_out() -> Result<(), BackoffError> {
        let backoff = Backoff::new(SECOND, SECOND * 30, 4)?;
        let schedule = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..6)
                .map(|n| backoff.next_delay_with(n, &mut rng))
                .collect::<Vec<_>>()
        };
        let first = schedule(5);
        assert_eq!(first, schedule(5));
        assert_eq!(first[0], Some(Duration::ZERO));
        assert!(first[1..4].iter().all(Option::is_some));
        // Four attempts in all: after the fourth failure the delivery is exhausted.
        assert_eq!(&first[4..], [None, None]);
        assert!(backoff.next_delay(3).is_some_and(|d| d <= SECOND * 4));
        assert_eq!(backoff.next_delay(4), None);
        Ok(())
    }
}
