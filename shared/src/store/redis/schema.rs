//! The namespace's store layout: which key scheme and task field names its data uses.
//!
//! Changing a field name (as `fields.rs` did, layout 2) makes earlier data unreadable to new
//! code and new data unreadable to old code, so a namespace carries a stamp (`{ns}:layout`,
//! never expiring) and a process refuses, at connect, a namespace stamped with another layout
//! or one that holds live work from before stamps existed. Nothing is ever read as missing
//! because it was written under other names: an operator drains the namespace with the version
//! that wrote it, or starts the new version on a new `REDIS_NAMESPACE`.

use super::RedisStore;
use crate::store::StoreError;

/// The layout this code reads and writes: 2 = two-letter task fields (`fields.rs`), creation
/// and terminal events rebuilt from the record instead of logged.
pub const LAYOUT: &str = "2";

impl RedisStore {
    /// Stamps an empty namespace with [`LAYOUT`], or checks that it already carries it.
    pub(super) async fn check_layout(&self) -> Result<(), StoreError> {
        let keys = &self.inner.core.keys;
        let mut invocation = self.inner.core.scripts.layout.prepare_invoke();
        invocation
            .key(keys.layout())
            .key(keys.live())
            .key(keys.leases())
            .key(keys.admissions())
            .key(keys.registry())
            .arg(LAYOUT);
        let found: String = self.eval("layout", &invocation).await?;
        if found == LAYOUT {
            return Ok(());
        }
        let namespace = &self.inner.core.config.namespace;
        Err(StoreError::Incompatible(if found == "unstamped" {
            format!(
                "namespace {namespace:?} holds live tasks or workers of an earlier version (store layout 1); \
                 finish them with that version, or run this one with another REDIS_NAMESPACE"
            )
        } else {
            format!(
                "namespace {namespace:?} holds data of store layout {found}, this build reads layout {LAYOUT}; \
                 run the matching version, or another REDIS_NAMESPACE"
            )
        }))
    }
}
