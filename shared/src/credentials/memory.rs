//! [`MemoryCredentials`]: credential records of one process (embedded mode), with the same
//! transitions as the Redis records.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{ClaimOutcome, CredentialLedger, CredentialState, Stuck};
use crate::store::StoreError;

/// Records kept at most; past it expired ones are dropped first (each record is tiny).
const SWEEP_AT: usize = 100_000;

struct Record {
    holder: String,
    state: CredentialState,
    #[allow(dead_code)] // kept as the Redis record keeps it, for inspection
    receipt: Option<String>,
    /// The facilitator request, and since when the record is `settling`.
    settling: Option<(String, Instant)>,
    expires: Instant,
}

#[derive(Default)]
pub struct MemoryCredentials {
    records: Mutex<HashMap<String, Record>>,
    /// Marks (`mark_once`, `mark`) by key, with their expiry.
    marks: Mutex<HashMap<String, Instant>>,
}

impl MemoryCredentials {
    fn marks<T>(&self, f: impl FnOnce(&mut HashMap<String, Instant>, Instant) -> T) -> T {
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if marks.len() >= SWEEP_AT {
            marks.retain(|_, expires| *expires > now);
        }
        f(&mut marks, now)
    }
}

impl MemoryCredentials {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Record>) -> T) -> T {
        // Every change is a whole-record insert or remove: consistent even after a panic.
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if records.len() >= SWEEP_AT {
            records.retain(|_, record| record.expires > now);
        }
        f(&mut records)
    }
}

fn live<'a>(records: &'a mut HashMap<String, Record>, key: &str) -> Option<&'a mut Record> {
    let now = Instant::now();
    if records.get(key).is_some_and(|record| record.expires <= now) {
        records.remove(key);
    }
    records.get_mut(key)
}

#[async_trait]
impl CredentialLedger for MemoryCredentials {
    async fn mark_once(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.marks(|marks, now| {
            if marks.get(key).is_some_and(|expires| *expires > now) {
                return false;
            }
            marks.insert(key.to_owned(), now + ttl);
            true
        }))
    }

    async fn mark(&self, key: &str, ttl: Duration) -> Result<(), StoreError> {
        self.marks(|marks, now| marks.insert(key.to_owned(), now + ttl));
        Ok(())
    }

    async fn marked(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.marks(|marks, now| marks.get(key).is_some_and(|expires| *expires > now)))
    }

    async fn claim(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        Ok(self.with(|records| {
            if let Some(record) = live(records, key) {
                return ClaimOutcome::Held(record.state);
            }
            records.insert(
                key.to_owned(),
                Record {
                    holder: holder.to_owned(),
                    state: CredentialState::Claimed,
                    receipt: None,
                    settling: None,
                    expires: Instant::now() + ttl,
                },
            );
            ClaimOutcome::Taken
        }))
    }

    async fn release(&self, key: &str, holder: &str) -> Result<bool, StoreError> {
        Ok(self.with(|records| {
            let held = live(records, key).is_some_and(|record| {
                record.holder == holder && record.state == CredentialState::Claimed
            });
            if held {
                records.remove(key);
            }
            held
        }))
    }

    async fn advance(
        &self,
        key: &str,
        holder: &str,
        expected: CredentialState,
        next: CredentialState,
        data: Option<&str>,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|records| match live(records, key) {
            Some(record) if record.holder == holder && record.state == expected => {
                record.state = next;
                if next == CredentialState::Settling {
                    record.settling = Some((data.unwrap_or_default().to_owned(), Instant::now()));
                } else if let Some(receipt) = data {
                    record.receipt = Some(receipt.to_owned());
                }
                true
            }
            _ => false,
        }))
    }

    async fn stuck(&self, older_than: Duration, limit: usize) -> Result<Vec<Stuck>, StoreError> {
        let now = Instant::now();
        Ok(self.with(|records| {
            let mut stuck: Vec<(Instant, Stuck)> = records
                .iter()
                .filter(|(_, record)| {
                    record.state == CredentialState::Settling && record.expires > now
                })
                .filter_map(|(id, record)| {
                    let (request, since) = record.settling.as_ref()?;
                    (now.duration_since(*since) >= older_than).then(|| {
                        (
                            *since,
                            Stuck {
                                id: id.clone(),
                                holder: record.holder.clone(),
                                request: request.clone(),
                            },
                        )
                    })
                })
                .collect();
            stuck.sort_by_key(|(since, _)| *since);
            stuck
                .into_iter()
                .take(limit)
                .map(|(_, stuck)| stuck)
                .collect()
        }))
    }

    async fn resolve(
        &self,
        id: &str,
        holder: &str,
        next: CredentialState,
        receipt: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.advance(id, holder, CredentialState::Settling, next, receipt)
            .await
    }
}
