//! [`MemoryIdempotency`]: process-local records (embedded mode, tests), bounded: at capacity,
//! expired records go first, then the oldest finished one; a record in progress is never
//! evicted (its request would run twice), so with every record in progress `begin` answers
//! [`Begin::Full`]. A response body over the limit is recorded as run, not kept.

use std::collections::{BTreeMap, HashMap};
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
            max_body_bytes: usize::MAX,
        })
    }

    pub fn with_limits(limits: IdempotencyLimits) -> Self {
        MemoryIdempotency {
            limits: IdempotencyLimits {
                max_records: limits.max_records.max(1),
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

    /// Makes room for one more record; false when every record is in progress.
    fn make_room(&mut self, max: usize, now: Instant) -> bool {
        if self.records.len() < max {
            return true;
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
            let oldest_done = self.order.iter().find_map(|(_, id)| {
                let running = matches!(self.records.get(id)?.entry, Entry::Running { .. });
                (!running).then(|| id.clone())
            });
            let Some(id) = oldest_done else {
                return false;
            };
            self.remove(&id);
        }
        true
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
                    Entry::NotKept(status) => Begin::NotKept { status: *status },
                }
            });
        }
        if !state.make_room(self.limits.max_records, now) {
            return Ok(Begin::Full);
        }
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
    async fn evicts_the_oldest_finished_record_at_capacity() -> Result<(), StoreError> {
        let store = MemoryIdempotency::new(3);
        let a = claim(&store, "a").await?;
        let b = claim(&store, "b").await?;
        let c = claim(&store, "c").await?;
        // Every record in progress: none may go, the newcomer is refused.
        assert_eq!(store.begin("s", "d", "f", TTL).await?, Begin::Full);
        assert!(store.complete(&b, &response("b"), TTL).await?);
        assert!(store.complete(&c, &response("c"), TTL).await?);
        claim(&store, "d").await?;
        assert_eq!(store.len(), 3);
        // "b" was the oldest finished record; "a" (older, but running) and "c" stay.
        assert_eq!(store.begin("s", "a", "f", TTL).await?, Begin::InProgress);
        assert_eq!(
            store.begin("s", "c", "f", TTL).await?,
            Begin::Replay(response("c"))
        );
        claim(&store, "b").await?;
        drop(a);
        Ok(())
    }

    #[tokio::test]
    async fn large_bodies_are_run_but_not_kept() -> Result<(), StoreError> {
        let store = MemoryIdempotency::with_limits(IdempotencyLimits {
            max_records: 10,
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
