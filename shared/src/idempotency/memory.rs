//! [`MemoryIdempotency`]: process-local records (embedded mode, tests), bounded: at capacity,
//! expired records go first, then the oldest.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Begin, Claim, DEFAULT_MAX_RECORDS, IdempotencyStore, StoredResponse};
use crate::store::StoreError;

type RecordId = (String, String);

pub struct MemoryIdempotency {
    max_records: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    records: HashMap<RecordId, Record>,
    /// Record ids by creation order, for eviction.
    order: BTreeMap<u64, RecordId>,
    next: u64,
}

struct Record {
    fingerprint: String,
    created: u64,
    expires: Instant,
    entry: Entry,
}

enum Entry {
    Running { owner: String },
    Done(StoredResponse),
}

impl MemoryIdempotency {
    /// Keeps at most `max_records` records (at least one).
    pub fn new(max_records: usize) -> Self {
        MemoryIdempotency {
            max_records: max_records.max(1),
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
        MemoryIdempotency::new(DEFAULT_MAX_RECORDS)
    }
}

impl State {
    fn remove(&mut self, id: &RecordId) {
        if let Some(record) = self.records.remove(id) {
            self.order.remove(&record.created);
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

    /// Makes room for one more record.
    fn make_room(&mut self, max: usize, now: Instant) {
        if self.records.len() < max {
            return;
        }
        let expired: Vec<RecordId> = self
            .records
            .iter()
            .filter(|(_, r)| r.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
        while self.records.len() >= max {
            let Some((_, id)) = self.order.pop_first() else {
                break;
            };
            self.records.remove(&id);
        }
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
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
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
                }
            });
        }
        state.make_room(self.max_records, now);
        let claim = Claim::new(scope, key, fingerprint);
        let created = state.next;
        state.next += 1;
        state.order.insert(created, id.clone());
        state.records.insert(
            id,
            Record {
                fingerprint: fingerprint.to_owned(),
                created,
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
            record.entry = Entry::Done(response.clone());
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

    #[tokio::test]
    async fn evicts_the_oldest_at_capacity() -> Result<(), StoreError> {
        let store = MemoryIdempotency::new(2);
        for key in ["a", "b", "c"] {
            assert!(matches!(
                store.begin("s", key, "f", TTL).await?,
                Begin::Started(_)
            ));
        }
        assert_eq!(store.len(), 2);
        // "a" was evicted: it starts afresh; "c" is still in progress.
        assert!(matches!(
            store.begin("s", "a", "f", TTL).await?,
            Begin::Started(_)
        ));
        assert_eq!(store.begin("s", "c", "f", TTL).await?, Begin::InProgress);
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
