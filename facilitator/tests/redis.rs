//! The Redis ledger, on a private `redis-server` (the workspace harness): settlement once, keys
//! under the namespace's hash tag, and state that outlives a facilitator restart.

mod common;

use alloy_primitives::{Address, U256};
use common::{anvil_payer, request, settle_for, start, terms, upto_request, upto_terms};
use facilitator::config::{FacilitatorConfig, default_address};
use facilitator::verify::reason;
use harness::redis_server::RedisServer;
use payments::Facilitator;
use redis::AsyncCommands;

const STARTING_BALANCE: u64 = 1_000_000_000;

fn config(redis: &RedisServer) -> FacilitatorConfig {
    let mut config = FacilitatorConfig::for_tests();
    config.redis_url = Some(redis.url().into());
    config
}

#[tokio::test]
async fn settles_once_in_redis_and_survives_a_restart() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x41);
    let request = request(&payer, &terms(1000, payee)?, 2)?;

    let server = start(config(&redis)).await?;
    assert!(server.client.verify(&request).await?.is_valid);
    let attempts = (0..8).map(|_| server.client.settle(&request));
    let mut successes = 0;
    for answer in futures::future::join_all(attempts).await {
        if answer?.success {
            successes += 1;
        }
    }
    assert_eq!(successes, 1);
    assert_eq!(server.balance(payee).await?, U256::from(1000u64));
    server.stop().await?;

    let mut client = redis.client().await?;
    let keys: Vec<String> = client.keys("*").await?;
    // Ten funded Anvil accounts, the payee, one spent nonce: all in the one hash tag.
    assert_eq!(keys.len(), 12, "{keys:?}");
    assert!(keys.iter().all(|key| key.starts_with("{fac}:")), "{keys:?}");

    // A new facilitator on the same Redis: the starting funds are not applied again, and the
    // nonce stays spent.
    let server = start(config(&redis)).await?;
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE - 1000)
    );
    let again = server.client.settle(&request).await?;
    assert!(!again.success);
    assert_eq!(again.error_reason.as_deref(), Some(reason::NONCE_USED));
    assert_eq!(server.balance(payee).await?, U256::from(1000u64));
    server.stop().await
}

#[tokio::test]
async fn an_upto_settlement_keeps_its_amount_in_redis() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x42);
    let request = upto_request(&payer, &upto_terms(5000, payee, default_address())?)?;

    let server = start(config(&redis)).await?;
    let settled = server.client.settle(&settle_for(&request, 1234)).await?;
    assert!(settled.success, "{settled:?}");
    server.stop().await?;

    // Another facilitator on the same Redis: the lookup names the amount, the permit stays
    // spent.
    let server = start(config(&redis)).await?;
    let found = server.client.settlement(&request).await?;
    assert_eq!(found.and_then(|found| found.amount), Some("1234".into()));
    let again = server.client.settle(&settle_for(&request, 1)).await?;
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::PERMIT2_NONCE_USED)
    );
    assert_eq!(server.balance(payee).await?, U256::from(1234u64));
    server.stop().await
}
