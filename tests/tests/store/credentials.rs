//! The credential ledger's settle=after transitions, the same behaviours against both
//! implementations: [`MemoryCredentials`] and [`RedisCredentials`] (a private redis-server).
//!
//! `claimed -> reserved` keeps the facilitator request and indexes the record by when it falls
//! due: [`CredentialLedger::stuck`] does not list it before, lists it (as `reserved`) once due,
//! and each way out is a compare-and-set: `reserved -> settling` (the run succeeded; listed
//! again as `settling`, since that moment) or `reserved -> void` by the sweep, never both.

use std::time::Duration;

use harness::TestResult;
use harness::redis_server::RedisServer;
use store::credentials::{ClaimOutcome, CredentialLedger, CredentialState, MemoryCredentials};
use store::{RedisStore, RedisStoreConfig};

const LONG: Duration = Duration::from_secs(300);

async fn reserved_records_fall_due_and_leave_once(ledger: &dyn CredentialLedger) -> TestResult {
    // Due at once: listed as reserved, with its request.
    assert_eq!(
        ledger.claim("due", "task-due", LONG).await?,
        ClaimOutcome::Taken
    );
    assert!(
        ledger
            .reserve("due", "task-due", "{\"r\":1}", Duration::ZERO)
            .await?
    );
    // Due in five minutes: not listed yet.
    assert_eq!(
        ledger.claim("later", "task-later", LONG).await?,
        ClaimOutcome::Taken
    );
    assert!(
        ledger
            .reserve("later", "task-later", "{\"r\":2}", LONG)
            .await?
    );
    // Only a claimed record of its holder can be reserved.
    assert!(
        !ledger
            .reserve("due", "task-due", "{}", Duration::ZERO)
            .await?
    );
    assert!(
        !ledger
            .reserve("later", "task-other", "{}", Duration::ZERO)
            .await?
    );

    let stuck = ledger.stuck(Duration::ZERO, 10).await?;
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert_eq!(stuck[0].holder, "task-due");
    assert_eq!(stuck[0].state, CredentialState::Reserved);
    assert_eq!(stuck[0].request, "{\"r\":1}");

    // The sweep releases it; the run's gateway then can no longer settle it.
    assert!(
        ledger
            .resolve(
                &stuck[0].id,
                "task-due",
                CredentialState::Reserved,
                CredentialState::Void,
                Some("not charged"),
            )
            .await?
    );
    assert!(
        !ledger
            .advance(
                "due",
                "task-due",
                CredentialState::Reserved,
                CredentialState::Settling,
                None,
            )
            .await?
    );
    assert!(ledger.stuck(Duration::ZERO, 10).await?.is_empty());

    // The run succeeded: reserved -> settling keeps the request (none given) and lists the
    // record as settling; the sweep's release then fails.
    assert!(
        ledger
            .advance(
                "later",
                "task-later",
                CredentialState::Reserved,
                CredentialState::Settling,
                None,
            )
            .await?
    );
    let stuck = ledger.stuck(Duration::ZERO, 10).await?;
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert_eq!(stuck[0].state, CredentialState::Settling);
    assert_eq!(stuck[0].request, "{\"r\":2}");
    assert!(
        !ledger
            .resolve(
                &stuck[0].id,
                "task-later",
                CredentialState::Reserved,
                CredentialState::Void,
                None,
            )
            .await?
    );
    // A reserved credential stays spent: it is never claimed again.
    assert!(matches!(
        ledger.claim("due", "task-again", LONG).await?,
        ClaimOutcome::Held(CredentialState::Void)
    ));
    Ok(())
}

#[tokio::test]
async fn memory_reserved_records_fall_due_and_leave_once() -> TestResult {
    reserved_records_fall_due_and_leave_once(&MemoryCredentials::default()).await
}

#[tokio::test]
async fn redis_reserved_records_fall_due_and_leave_once() -> TestResult {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(redis.url())).await?;
    reserved_records_fall_due_and_leave_once(&store.credentials()).await
}
