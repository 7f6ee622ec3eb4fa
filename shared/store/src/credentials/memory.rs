//! [`MemoryCredentials`]: credential records of one process (embedded mode), with the same
//! transitions as the Redis records.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{ClaimOutcome, CredentialLedger, CredentialState, MAX_ISSUED_NONCES, Stuck};
use crate::StoreError;

/// Records kept at most; past it expired ones are dropped first (each record is tiny).
const SWEEP_AT: usize = 100_000;

struct Record {
    holder: String,
    state: CredentialState,
    #[allow(dead_code)] // kept as the Redis record keeps it, for inspection
    receipt: Option<String>,
    /// The facilitator request, and since when the record is `settling` (for `reserved`:
    /// when it falls due).
    settling: Option<(String, Instant)>,
    expires: Instant,
}

pub struct MemoryCredentials {
    records: Mutex<HashMap<String, Record>>,
    /// Marks (`mark`) by key, with their expiry.
    marks: Mutex<HashMap<String, Instant>>,
    /// Issued nonces, bounded like the Redis set.
    nonces: Mutex<Nonces>,
}

impl Default for MemoryCredentials {
    fn default() -> Self {
        MemoryCredentials {
            records: Mutex::default(),
            marks: Mutex::default(),
            nonces: Mutex::new(Nonces::new(MAX_ISSUED_NONCES)),
        }
    }
}

/// Issued nonces by expiry (oldest first) and by value, at most `cap` of them.
struct Nonces {
    by_expiry: BTreeMap<(Instant, u64), String>,
    expiry: HashMap<String, (Instant, u64)>,
    /// Tells apart nonces issued at the same instant.
    seq: u64,
    cap: usize,
}

impl Nonces {
    fn new(cap: usize) -> Self {
        Nonces {
            by_expiry: BTreeMap::new(),
            expiry: HashMap::new(),
            seq: 0,
            cap: cap.max(1),
        }
    }

    fn issue(&mut self, nonce: &str, ttl: Duration) {
        let now = Instant::now();
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let expired = entry.remove();
            self.expiry.remove(&expired);
        }
        if let Some(previous) = self.expiry.remove(nonce) {
            self.by_expiry.remove(&previous);
        }
        self.seq = self.seq.wrapping_add(1);
        let at = (now + ttl, self.seq);
        self.by_expiry.insert(at, nonce.to_owned());
        self.expiry.insert(nonce.to_owned(), at);
        while self.expiry.len() > self.cap {
            let Some((_, oldest)) = self.by_expiry.pop_first() else {
                break;
            };
            self.expiry.remove(&oldest);
        }
    }

    fn take(&mut self, nonce: &str) -> bool {
        let Some(at) = self.expiry.remove(nonce) else {
            return false;
        };
        self.by_expiry.remove(&at);
        at.0 > Instant::now()
    }
}

impl MemoryCredentials {
    /// Records with another cap on outstanding nonces (tests of the bound).
    pub fn with_nonce_cap(cap: usize) -> Self {
        MemoryCredentials {
            nonces: Mutex::new(Nonces::new(cap)),
            ..MemoryCredentials::default()
        }
    }

    fn nonces<T>(&self, f: impl FnOnce(&mut Nonces) -> T) -> T {
        f(&mut self.nonces.lock().unwrap_or_else(PoisonError::into_inner))
    }
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
    async fn mark(&self, key: &str, ttl: Duration) -> Result<(), StoreError> {
        self.marks(|marks, now| marks.insert(key.to_owned(), now + ttl));
        Ok(())
    }

    async fn issue_nonce(&self, nonce: &str, ttl: Duration) -> Result<(), StoreError> {
        self.nonces(|nonces| nonces.issue(nonce, ttl));
        Ok(())
    }

    async fn take_nonce(&self, nonce: &str) -> Result<bool, StoreError> {
        Ok(self.nonces(|nonces| nonces.take(nonce)))
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
                    // From `reserved` the request is kept; from `claimed` it comes now.
                    let request = match (data, record.settling.take()) {
                        (Some(request), _) => request.to_owned(),
                        (None, Some((request, _))) => request,
                        (None, None) => String::new(),
                    };
                    record.settling = Some((request, Instant::now()));
                } else if let Some(receipt) = data {
                    record.receipt = Some(receipt.to_owned());
                }
                true
            }
            _ => false,
        }))
    }

    async fn reserve(
        &self,
        key: &str,
        holder: &str,
        request: &str,
        due_in: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|records| match live(records, key) {
            Some(record) if record.holder == holder && record.state == CredentialState::Claimed => {
                record.state = CredentialState::Reserved;
                record.settling = Some((request.to_owned(), Instant::now() + due_in));
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
                    matches!(
                        record.state,
                        CredentialState::Settling | CredentialState::Reserved
                    ) && record.expires > now
                })
                .filter_map(|(id, record)| {
                    let (request, since) = record.settling.as_ref()?;
                    (now.saturating_duration_since(*since) >= older_than && *since <= now).then(
                        || {
                            (
                                *since,
                                Stuck {
                                    id: id.clone(),
                                    state: record.state,
                                    holder: record.holder.clone(),
                                    request: request.clone(),
                                    age: now.saturating_duration_since(*since),
                                },
                            )
                        },
                    )
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
        from: CredentialState,
        next: CredentialState,
        receipt: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.advance(id, holder, from, next, receipt).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), StoreError>;

    const OFFER: Duration = Duration::from_secs(300);

    #[tokio::test]
    async fn credentials_nonces_pass_once_and_only_when_issued() -> TestResult {
        let ledger = MemoryCredentials::default();
        assert!(!ledger.take_nonce("never-issued-0001").await?);
        ledger.issue_nonce("issued-nonce-0001", OFFER).await?;
        assert!(ledger.take_nonce("issued-nonce-0001").await?);
        assert!(!ledger.take_nonce("issued-nonce-0001").await?);
        // Expired (valid for no time at all): refused, and gone.
        ledger
            .issue_nonce("expired-nonce-01", Duration::ZERO)
            .await?;
        assert!(!ledger.take_nonce("expired-nonce-01").await?);
        assert_eq!(ledger.nonces(|nonces| nonces.expiry.len()), 0);
        Ok(())
    }

    #[tokio::test]
    async fn credentials_nonces_are_capped_oldest_first() -> TestResult {
        let ledger = MemoryCredentials::with_nonce_cap(3);
        for n in 0..5 {
            ledger
                .issue_nonce(&format!("capped-nonce-{n}"), OFFER)
                .await?;
        }
        assert_eq!(ledger.nonces(|nonces| nonces.expiry.len()), 3);
        assert_eq!(ledger.nonces(|nonces| nonces.by_expiry.len()), 3);
        for n in 0..2 {
            assert!(
                !ledger.take_nonce(&format!("capped-nonce-{n}")).await?,
                "{n}"
            );
        }
        for n in 2..5 {
            assert!(
                ledger.take_nonce(&format!("capped-nonce-{n}")).await?,
                "{n}"
            );
        }
        // Expired nonces leave on the next issue, before the cap is even reached.
        let ledger = MemoryCredentials::with_nonce_cap(10);
        for n in 0..4 {
            ledger
                .issue_nonce(&format!("short-nonce-{n}"), Duration::ZERO)
                .await?;
        }
        ledger.issue_nonce("long-nonce-0001", OFFER).await?;
        assert_eq!(ledger.nonces(|nonces| nonces.expiry.len()), 1);
        Ok(())
    }
}
