//! [`ConsoleSessions`] in the store's Redis: one sorted set, `{ns}:console:sessions`, in the
//! namespace's own slot, members `<key id>:<session id>` scored by their expiry (ms since the
//! Unix epoch). The set itself expires with its last session.

use async_trait::async_trait;

use super::{ConsoleSessions, MAX_SESSIONS, key_of, member};
use crate::StoreError;
use crate::stats::RedisStats;

#[async_trait]
impl ConsoleSessions for RedisStats {
    async fn open_session(
        &self,
        key_id: &str,
        id: &str,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let key = self.key("console:sessions");
        let mut pipe = ::redis::pipe();
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now_ms)
            .ignore();
        pipe.cmd("ZADD")
            .arg(&key)
            .arg(expires_ms)
            .arg(member(key_id, id))
            .ignore();
        // Every session lasts as long, so the lowest scores are the oldest ones.
        let beyond = i64::try_from(MAX_SESSIONS).unwrap_or(i64::MAX) + 1;
        pipe.cmd("ZREMRANGEBYRANK")
            .arg(&key)
            .arg(0)
            .arg(-beyond)
            .ignore();
        pipe.cmd("PEXPIREAT").arg(&key).arg(expires_ms).ignore();
        let () = self.store.pipe(&pipe).await?;
        Ok(())
    }

    async fn session_open(&self, key_id: &str, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let mut score = ::redis::cmd("ZSCORE");
        score
            .arg(self.key("console:sessions"))
            .arg(member(key_id, id));
        let expires: Option<f64> = self.store.query(&mut score).await?;
        // Scores are integral milliseconds, well within an f64's exact range.
        Ok(expires.is_some_and(|expires| expires > now_ms as f64))
    }

    async fn close_session(&self, key_id: &str, id: &str) -> Result<(), StoreError> {
        let mut remove = ::redis::cmd("ZREM");
        remove
            .arg(self.key("console:sessions"))
            .arg(member(key_id, id));
        let _removed: u64 = self.store.query(&mut remove).await?;
        Ok(())
    }

    async fn close_sessions_of_other_keys(&self, key_id: &str) -> Result<u64, StoreError> {
        let key = self.key("console:sessions");
        // At most MAX_SESSIONS members: read them all.
        let mut range = ::redis::cmd("ZRANGE");
        range.arg(&key).arg(0).arg(-1);
        let members: Vec<String> = self.store.query(&mut range).await?;
        let others: Vec<&String> = members.iter().filter(|m| key_of(m) != key_id).collect();
        if others.is_empty() {
            return Ok(0);
        }
        let mut remove = ::redis::cmd("ZREM");
        remove.arg(&key).arg(&others);
        self.store.query(&mut remove).await
    }
}
