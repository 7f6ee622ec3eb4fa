//! [`MemoryIdempotency`]: process-local records (embedded mode, tests), bounded as the Redis
//! store is: each record is charged to its quota subjects, a subject at its quota gets
//! [`Begin::OverQuota`], the store at its ceiling [`Begin::Full`] (expired records are dropped
//! first); no live record is ever evicted. A response body over the limit is recorded as run,
//! not kept.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Begin, Claim, IdempotencyLimits, IdempotencyStore, StoredResponse};
use crate::StoreError;

type RecordId = (String, String);

pub struct MemoryIdempotency {
    limits: IdempotencyLimits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    records: HashMap<RecordId, Record>,
    /// Records charged to each quota subject (expired ones included until dropped).
    by_subject: HashMap<String, usize>,
}

struct Record {
    fingerprint: String,
    /// The quota subjects it is charged to.
    subjects: Vec<String>,
    expires: Instant,
    entry: Entry,
}

enum Entry {
    Running {
        owner: String,
    },
    Done(StoredResponse),
    /// Finished with this status; the body was over the limit.
    NotKept(u16),
}

impl MemoryIdempotency {
    /// Keeps at most `max_records` records (at least one), bodies of any size.
    pub fn new(max_records: usize) -> Self {
        MemoryIdempotency::with_limits(IdempotencyLimits {
            max_records,
            max_records_per_subject: max_records,
            max_body_bytes: usize::MAX,
        })
    }

    pub fn with_limits(limits: IdempotencyLimits) -> Self {
        MemoryIdempotency {
            limits: IdempotencyLimits {
                max_records: limits.max_records.max(1),
                max_records_per_subject: limits.max_records_per_subject.max(1),
                ..limits
            },
            state: Mutex::new(State::default()),
        }
    }

    /// Records currently held, expired ones included until they are swept.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // No code path panics while holding the lock; a poisoned lock still holds valid data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemoryIdempotency {
    fn default() -> Self {
        MemoryIdempotency::with_limits(IdempotencyLimits::default())
    }
}

impl State {
    fn remove(&mut self, id: &RecordId) {
        if let Some(record) = self.records.remove(id) {
            for subject in &record.subjects {
                if let Some(count) = self.by_subject.get_mut(subject) {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.by_subject.remove(subject);
                    }
                }
            }
        }
    }

    /// The live record of `id`; an expired one is dropped on the way.
    fn live(&mut self, id: &RecordId, now: Instant) -> Option<&mut Record> {
        let expired = self.records.get(id).is_some_and(|r| r.expires <= now);
        if expired {
            self.remove(id);
        }
        self.records.get_mut(id)
    }

    fn charged(&self, subject: &str) -> usize {
        self.by_subject.get(subject).copied().unwrap_or(0)
    }

    fn drop_expired(&mut self, now: Instant) {
        let expired: Vec<RecordId> = self
            .records
            .iter()
            .filter(|(_, r)| r.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
    }

    /// Why a new record charged to `subjects` cannot be made, if it cannot; evicts nothing
    /// live.
    fn refusal(
        &mut self,
        subjects: &[String],
        limits: &IdempotencyLimits,
        now: Instant,
    ) -> Option<Begin> {
        let over = |state: &State| {
            subjects
                .iter()
                .find(|s| state.charged(s) >= limits.max_records_per_subject)
                .cloned()
        };
        if self.records.len() >= limits.max_records || over(self).is_some() {
            self.drop_expired(now);
        }
        if let Some(subject) = over(self) {
            let oldest = self
                .records
                .values()
                .filter(|r| r.subjects.contains(&subject))
                .map(|r| r.expires)
                .min()
                .unwrap_or(now);
            let retry_after = oldest
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            return Some(Begin::OverQuota { retry_after });
        }
        (self.records.len() >= limits.max_records).then_some(Begin::Full)
    }

    /// The record `claim` still owns.
    fn owned(&mut self, claim: &Claim, now: Instant) -> Option<RecordId> {
        let id = (claim.scope.clone(), claim.key.clone());
        let record = self.live(&id, now)?;
        let owns = matches!(&record.entry, Entry::Running { owner } if *owner == claim.owner)
            && record.fingerprint == claim.fingerprint;
        owns.then_some(id)
    }
}

#[async_trait]
impl IdempotencyStore for MemoryIdempotency {
    async fn begin_for(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        subjects: &[String],
        in_progress_ttl: Duration,
    ) -> Result<Begin, StoreError> {
        let now = Instant::now();
        let id = (scope.to_owned(), key.to_owned());
        let mut state = self.lock();
        if let Some(record) = state.live(&id, now) {
            return Ok(if record.fingerprint != fingerprint {
                Begin::Conflict
            } else {
                match &record.entry {
                    Entry::Running { .. } => Begin::InProgress,
                    Entry::Done(response) => Begin::Replay(response.clone()),
                    Entry::NotKept(status) => Begin::NotKept { status: *status },
                }
            });
        }
        if let Some(refusal) = state.refusal(subjects, &self.limits, now) {
            return Ok(refusal);
        }
        let claim = Claim::new(scope, key, fingerprint, subjects);
        for subject in subjects {
            *state.by_subject.entry(subject.clone()).or_default() += 1;
        }
        state.records.insert(
            id,
            Record {
                fingerprint: fingerprint.to_owned(),
                subjects: subjects.to_vec(),
                expires: now + in_progress_ttl,
                entry: Entry::Running {
                    owner: claim.owner.clone(),
                },
            },
        );
        Ok(Begin::Started(claim))
    }

    async fn complete(
        &self,
        claim: &Claim,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(id) = state.owned(claim, now) else {
            return Ok(false);
        };
        if let Some(record) = state.records.get_mut(&id) {
            record.entry = if response.body.len() > self.limits.max_body_bytes {
                Entry::NotKept(response.status)
            } else {
                Entry::Done(response.clone())
            };
            record.expires = now + retention;
        }
        Ok(true)
    }

    async fn release(&self, claim: &Claim) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(id) = state.owned(claim, now) else {
            return Ok(false);
        };
        state.remove(&id);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn response(body: &str) -> StoredResponse {
        StoredResponse {
            status: 200,
            headers: vec![],
            body: body.to_owned(),
        }
    }

    async fn claim(store: &MemoryIdempotency, key: &str) -> Result<Claim, StoreError> {
        match store.begin("s", key, "f", TTL).await? {
            Begin::Started(claim) => Ok(claim),
            other => Err(StoreError::Corrupt(format!("not started: {other:?}"))),
        }
    }

    #[tokio::test]
    async fn nothing_is_evicted_at_the_ceiling_or_a_quota() -> Result<(), StoreError> {
        let store = MemoryIdempotency::with_limits(IdempotencyLimits {
            max_records: 4,
            max_records_per_subject: 2,
            max_body_bytes: usize::MAX,
        });
        let subject = |name: &str| vec![name.to_owned()];
        let begin = |key: &'static str, who: Vec<String>| {
            let store = &store;
            async move { store.begin_for("s", key, "f", &who, TTL).await }
        };
        let Begin::Started(victim) = begin("v", subject("victim")).await? else {
            return Err(StoreError::Corrupt("victim not started".into()));
        };
        assert!(store.complete(&victim, &response("v"), TTL).await?);
        assert!(matches!(
            begin("a", subject("flood")).await?,
            Begin::Started(_)
        ));
        assert!(matches!(
            begin("b", subject("flood")).await?,
            Begin::Started(_)
        ));
        // The flooding subject is at its quota: refused, until its oldest record lapses.
        let Begin::OverQuota { retry_after } = begin("c", subject("flood")).await? else {
            return Err(StoreError::Corrupt("flood not refused".into()));
        };
        assert!(retry_after <= TTL && retry_after > Duration::ZERO);
        assert!(matches!(
            begin("d", subject("other")).await?,
            Begin::Started(_)
        ));
        // At the ceiling every newcomer is refused; nobody's record goes.
        assert_eq!(begin("e", subject("late")).await?, Begin::Full);
        assert_eq!(
            begin("v", subject("victim")).await?,
            Begin::Replay(response("v"))
        );
        assert_eq!(store.len(), 4);
        Ok(())
    }

    #[tokio::test]
    async fn large_bodies_are_run_but_not_kept() -> Result<(), StoreError> {
        let store = MemoryIdempotency::with_limits(IdempotencyLimits {
            max_records: 10,
            max_records_per_subject: 10,
            max_body_bytes: 4,
        });
        let small = claim(&store, "small").await?;
        assert!(store.complete(&small, &response("1234"), TTL).await?);
        let large = claim(&store, "large").await?;
        assert!(store.complete(&large, &response("12345"), TTL).await?);
        assert_eq!(
            store.begin("s", "small", "f", TTL).await?,
            Begin::Replay(response("1234"))
        );
        assert_eq!(
            store.begin("s", "large", "f", TTL).await?,
            Begin::NotKept { status: 200 }
        );
        Ok(())
    }

    #[tokio::test]
    async fn records_expire() -> Result<(), StoreError> {
        let short = Duration::from_millis(50);
        let store = MemoryIdempotency::new(10);
        let Begin::Started(claim) = store.begin("s", "k", "f", short).await? else {
            return Err(StoreError::Corrupt("not started".into()));
        };
        // Completing replaces the in-progress TTL with the retention.
        assert!(store.complete(&claim, &response("1"), short * 4).await?);
        tokio::time::sleep(short * 2).await;
        assert_eq!(
            store.begin("s", "k", "f", TTL).await?,
            Begin::Replay(response("1"))
        );
        tokio::time::sleep(short * 3).await;
        assert!(matches!(
            store.begin("s", "k", "f", TTL).await?,
            Begin::Started(_)
        ));
        Ok(())
    }
}
