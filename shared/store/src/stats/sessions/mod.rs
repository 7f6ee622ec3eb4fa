//! Operator console sessions, kept where every gateway of the cluster sees them (the store's
//! Redis, or this process in embedded mode), so that signing out or rotating the operator token
//! ends a session on every gateway at once.
//!
//! A session record is `(key_id, id)` with its expiry: `id` is a digest of the session's secret
//! (the cookie holds the secret; the store never does), and `key_id` a fingerprint of the
//! operator key it was made with (never the token). A session is open while its record stands
//! under the gateway's current `key_id` and has not expired.
//!
//! Bounded: only a caller who presented the operator token opens one, at most
//! [`MAX_SESSIONS`] stand at once (opening one more drops those that end soonest, i.e. the
//! oldest), and each lapses after its expiry.

mod memory;
mod redis;

use async_trait::async_trait;

use crate::StoreError;

/// The most sessions that stand at once, cluster-wide.
pub const MAX_SESSIONS: usize = 64;

#[async_trait]
pub trait ConsoleSessions: Send + Sync {
    /// Records session `id`, made with operator key `key_id`, until `expires_ms`; drops the
    /// expired ones, and the oldest beyond [`MAX_SESSIONS`].
    async fn open_session(
        &self,
        key_id: &str,
        id: &str,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<(), StoreError>;

    /// Whether session `id` of key `key_id` stands at `now_ms`.
    async fn session_open(&self, key_id: &str, id: &str, now_ms: u64) -> Result<bool, StoreError>;

    /// Ends session `id` (signing out); nothing when it is not there.
    async fn close_session(&self, key_id: &str, id: &str) -> Result<(), StoreError>;

    /// Ends every session made with another key than `key_id` (the operator token was
    /// rotated); returns how many.
    async fn close_sessions_of_other_keys(&self, key_id: &str) -> Result<u64, StoreError>;
}

/// The member naming session `id` of key `key_id` (both are hex digests: no `:` inside).
fn member(key_id: &str, id: &str) -> String {
    format!("{key_id}:{id}")
}

/// The key id of a member.
fn key_of(member: &str) -> &str {
    member.split_once(':').map_or(member, |(key_id, _)| key_id)
}
