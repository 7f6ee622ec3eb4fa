//! Fault injection: how `/verify` and `/settle` misbehave, switchable at runtime through
//! `/control/faults`, so that a client's handling of each failure x402 sees in the field can be
//! exercised on demand.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// Behave.
    #[default]
    None,
    /// Answer 200 with a refusal (`isValid: false` / `success: false`, `injected_failure`),
    /// moving nothing.
    Refuse,
    /// Answer HTTP 500, moving nothing.
    Http500,
    /// Wait `slowMs`, then behave.
    Slow,
    /// Do the work for real (a settle moves the funds), then close the connection without an
    /// answer: the client cannot know what happened.
    Drop,
}

/// The reason string of a `refuse` fault.
pub const INJECTED_FAILURE: &str = "injected_failure";

/// The faults in force, as `/control/faults` reads and writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultSettings {
    pub settle: Fault,
    pub verify: Fault,
    pub slow_ms: u64,
}

impl FaultSettings {
    pub fn slow(&self) -> Duration {
        Duration::from_millis(self.slow_ms)
    }
}

/// A `/control/faults` change: absent fields keep their value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultChange {
    #[serde(default)]
    pub settle: Option<Fault>,
    #[serde(default)]
    pub verify: Option<Fault>,
    #[serde(default)]
    pub slow_ms: Option<u64>,
}

/// The shared, switchable settings.
#[derive(Debug)]
pub struct Faults {
    current: Mutex<FaultSettings>,
}

impl Faults {
    pub fn new(initial: FaultSettings) -> Self {
        Faults {
            current: Mutex::new(initial),
        }
    }

    pub fn get(&self) -> FaultSettings {
        // The settings are plain data, valid whatever a panicking holder left behind.
        *self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `change` and returns the settings now in force.
    pub fn apply(&self, change: FaultChange) -> FaultSettings {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(settle) = change.settle {
            current.settle = settle;
        }
        if let Some(verify) = change.verify {
            current.verify = verify;
        }
        if let Some(slow_ms) = change.slow_ms {
            current.slow_ms = slow_ms;
        }
        *current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_only_what_is_given() {
        let faults = Faults::new(FaultSettings {
            settle: Fault::None,
            verify: Fault::None,
            slow_ms: 2000,
        });
        let change: FaultChange = match serde_json::from_str(r#"{"settle":"http500"}"#) {
            Ok(change) => change,
            Err(err) => panic!("{err}"),
        };
        let now = faults.apply(change);
        assert_eq!(now.settle, Fault::Http500);
        assert_eq!(now.verify, Fault::None);
        assert_eq!(now.slow_ms, 2000);
        assert_eq!(
            serde_json::to_value(faults.get()).ok(),
            Some(serde_json::json!({"settle": "http500", "verify": "none", "slowMs": 2000}))
        );
        assert!(serde_json::from_str::<FaultChange>(r#"{"settle":"explode"}"#).is_err());
        assert!(serde_json::from_str::<FaultChange>(r#"{"setle":"drop"}"#).is_err());
    }
}
