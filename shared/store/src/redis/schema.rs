//! The namespace's store layout: which key scheme and task field names its data uses.
//!
//! Changing a field name (as `fields.rs` did, layout 2) makes earlier data unreadable to new
//! code and new data unreadable to old code, so a namespace carries a stamp (`{ns}:layout`,
//! never expiring) and a process refuses, at connect, a namespace stamped with another layout
//! or one that holds live work from before stamps existed. Nothing is ever read as missing
//! because it was written under other names: an operator drains the namespace with the version
//! that wrote it, or starts the new version on a new `REDIS_NAMESPACE`.
//!
//! The stamp also records the shard count ([`super::shards`]): `3` for one shard (as the
//! layout before sharding existed wrote it), `3:shards=S` for S > 1. Every process
//! of a namespace must agree on S, since S decides where each task lives: a process started
//! with another S is refused at connect, never left to look for tasks in the wrong shards.
//! Builds from before sharding read `<layout>:shards=S` as an unknown layout and refuse it too.

use super::RedisStore;
use super::scripts::layout::{self, LayoutReply};
use crate::StoreError;

/// The layout this code reads and writes: 2 = two-letter task fields (`fields.rs`), creation
/// and terminal events rebuilt from the record instead of logged; 3 = the lease in one field
/// (`fields::LEASE`) instead of four.
pub const LAYOUT: &str = "3";

impl RedisStore {
    /// Stamps an empty namespace with [`LAYOUT`] and this store's shard count, or checks that
    /// it already carries them. The emptiness check reads the unsharded keys: data from before
    /// the stamp existed was never sharded.
    pub(super) async fn check_layout(&self) -> Result<(), StoreError> {
        let shards = self.shard_count();
        let expected = stamp(shards);
        let namespace = &self.inner.core.config.namespace;
        let found = match layout::call(&self.inner.core, &expected).await? {
            LayoutReply::Stamped(found) if found == expected => return Ok(()),
            LayoutReply::Stamped(found) => found,
            LayoutReply::Unstamped => {
                return Err(StoreError::Incompatible(format!(
                    "namespace {namespace:?} holds live tasks or workers of an earlier version (store layout 1); \
                     finish them with that version, or run this one with another REDIS_NAMESPACE"
                )));
            }
        };
        if let Some(stored) = stored_shards(&found) {
            return Err(StoreError::Incompatible(format!(
                "namespace {namespace:?} is split into {stored} shard(s), this process runs with \
                 {shards} (--shards / REDIS_SHARDS): every process of a namespace must use the \
                 namespace's count. Start it with REDIS_SHARDS={stored}, or, to change the count, \
                 drain the namespace (no live tasks) and start the new count on another \
                 REDIS_NAMESPACE"
            )));
        }
        Err(StoreError::Incompatible(format!(
            "namespace {namespace:?} holds data of store layout {found}, this build reads layout {LAYOUT}; \
             run the matching version, or another REDIS_NAMESPACE"
        )))
    }
}

/// The stamp of [`LAYOUT`] with `shards` shards.
fn stamp(shards: usize) -> String {
    if shards <= 1 {
        LAYOUT.to_owned()
    } else {
        format!("{LAYOUT}:shards={shards}")
    }
}

/// The shard count of a stamp of this layout; `None` for another layout.
fn stored_shards(found: &str) -> Option<usize> {
    if found == LAYOUT {
        return Some(1);
    }
    found
        .strip_prefix(LAYOUT)?
        .strip_prefix(":shards=")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_keeps_the_stamp_of_before_sharding() {
        assert_eq!(stamp(1), LAYOUT);
        assert_eq!(stored_shards(LAYOUT), Some(1));
    }

    #[test]
    fn shard_counts_round_trip_through_the_stamp() {
        for shards in [2, 4, 256] {
            assert_eq!(stored_shards(&stamp(shards)), Some(shards));
        }
        assert_eq!(stored_shards("1"), None);
        assert_eq!(stored_shards("2:shards=2"), None);
        assert_eq!(stored_shards("2"), None);
        assert_eq!(stored_shards("unstamped"), None);
    }
}
