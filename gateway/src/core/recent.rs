//! Entrypoints some worker advertised recently, so that a gap in the registry does not turn
//! into `404 skill_not_found`.
//!
//! Registry entries expire one lease TTL after a worker's last heartbeat. When Redis restarts
//! (or every worker of an entrypoint is replaced at once, as in a rolling deploy), the entries
//! can lapse for a moment although workers are about to come back; a client told "not found"
//! would give up on a request that a queued task would have served seconds later. Within the
//! grace period, the gateway admits tasks for an entrypoint it saw listed, with the schema it
//! saw; they wait in the ready queue like any other. The card still lists live workers only.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use store::registry::EntrypointInfo;

pub struct RecentEntrypoints {
    grace: Duration,
    seen: Mutex<HashMap<String, (EntrypointInfo, Instant)>>,
}

impl RecentEntrypoints {
    pub fn new(grace: Duration) -> Self {
        RecentEntrypoints {
            grace,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// How long an entrypoint is recalled after it was last listed.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Records the entrypoints the registry listed at `at` (when the read that found them
    /// live started, so that the grace never runs longer than the registry last said so).
    pub fn remember<'a>(&self, live: impl IntoIterator<Item = &'a EntrypointInfo>, at: Instant) {
        if self.grace.is_zero() {
            return;
        }
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for entrypoint in live {
            match seen.get_mut(&entrypoint.key) {
                Some((info, seen)) => {
                    *seen = (*seen).max(at);
                    if info != entrypoint {
                        *info = entrypoint.clone();
                    }
                }
                None => {
                    seen.insert(entrypoint.key.clone(), (entrypoint.clone(), at));
                }
            }
        }
    }

    /// The entrypoint `key` as last listed, if that was within the grace period.
    pub fn recall(&self, key: &str) -> Option<EntrypointInfo> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.get(key)
            .filter(|(_, at)| at.elapsed() <= self.grace)
            .map(|(info, _)| info.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entrypoint(key: &str) -> EntrypointInfo {
        EntrypointInfo {
            key: key.to_owned(),
            description: key.to_owned(),
            input_schema: serde_json::json!({}),
            output_schema: serde_json::json!({}),
            streaming: false,
            price: None,
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }
    }

    #[test]
    fn recalls_what_was_listed_within_the_grace_period() {
        let recent = RecentEntrypoints::new(Duration::from_secs(60));
        recent.remember(&[entrypoint("echo")], Instant::now());
        assert_eq!(recent.recall("echo").map(|e| e.key), Some("echo".into()));
        assert!(recent.recall("sleep").is_none());
    }

    #[test]
    fn forgets_after_the_grace_period() {
        let recent = RecentEntrypoints::new(Duration::ZERO);
        recent.remember(&[entrypoint("echo")], Instant::now());
        assert!(recent.recall("echo").is_none());
    }
}
