//! [`ConsoleSessions`] of a one-process cluster (embedded mode), with the same bounds as the
//! Redis ones.

use async_trait::async_trait;

use super::{ConsoleSessions, MAX_SESSIONS, key_of, member};
use crate::StoreError;
use crate::stats::MemoryStats;

#[async_trait]
impl ConsoleSessions for MemoryStats {
    async fn open_session(
        &self,
        key_id: &str,
        id: &str,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let mut held = self.lock();
        held.sessions.retain(|_, expires| *expires > now_ms);
        held.sessions.insert(member(key_id, id), expires_ms);
        while held.sessions.len() > MAX_SESSIONS {
            let oldest = held
                .sessions
                .iter()
                .min_by_key(|(_, expires)| **expires)
                .map(|(member, _)| member.clone());
            match oldest {
                Some(oldest) => held.sessions.remove(&oldest),
                None => break,
            };
        }
        Ok(())
    }

    async fn session_open(&self, key_id: &str, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let held = self.lock();
        Ok(held
            .sessions
            .get(&member(key_id, id))
            .is_some_and(|expires| *expires > now_ms))
    }

    async fn close_session(&self, key_id: &str, id: &str) -> Result<(), StoreError> {
        self.lock().sessions.remove(&member(key_id, id));
        Ok(())
    }

    async fn close_sessions_of_other_keys(&self, key_id: &str) -> Result<u64, StoreError> {
        let mut held = self.lock();
        let before = held.sessions.len();
        held.sessions.retain(|member, _| key_of(member) == key_id);
        Ok(u64::try_from(before - held.sessions.len()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sessions_expire_close_and_stay_bounded() -> Result<(), StoreError> {
        let stats = MemoryStats::new();
        stats.open_session("k1", "a", 1_000, 0).await?;
        assert!(stats.session_open("k1", "a", 999).await?);
        assert!(!stats.session_open("k1", "a", 1_000).await?);
        assert!(!stats.session_open("k2", "a", 0).await?);
        stats.close_session("k1", "a").await?;
        assert!(!stats.session_open("k1", "a", 0).await?);

        for n in 0..=MAX_SESSIONS as u64 {
            stats
                .open_session("k1", &n.to_string(), 10_000 + n, 0)
                .await?;
        }
        assert!(!stats.session_open("k1", "0", 0).await?, "the oldest goes");
        assert!(stats.session_open("k1", "1", 0).await?);
        assert_eq!(stats.lock().sessions.len(), MAX_SESSIONS);

        // One more (of a new key) drops the oldest again; then the new key ends the old one's.
        stats.open_session("k2", "b", 20_000, 0).await?;
        assert!(stats.session_open("k1", "2", 0).await?);
        let others = u64::try_from(MAX_SESSIONS - 1).unwrap_or(u64::MAX);
        assert_eq!(stats.close_sessions_of_other_keys("k2").await?, others);
        assert!(stats.session_open("k2", "b", 0).await?);
        assert!(!stats.session_open("k1", "2", 0).await?);
        Ok(())
    }
}
