//! An operator reconciles payments left `settling`, against real processes (a private
//! redis-server with AOF, the dev `facilitator` dropping its settle answers, a `worker`
//! pricing `echo`, two `gateway`s with the settlement sweep off), through `taskctl admin` and
//! the console API it calls.
//!
//! What is proven: a paid invoke whose settle answer was lost is listed once it is older than
//! a settle call can last, with its payer and amount; `lookup` asks the facilitator and stores
//! the receipt with the task, which then runs to completion; `void` records the operator's
//! decision and cancels the held task; `settled --transaction` stores a receipt naming that
//! transaction; a resolved record leaves the list; refusals: no operator token, a wrong one,
//! a task that holds no settling record, a malformed transaction; the audit log lists the
//! decisions newest first.

use std::time::Duration;

use harness::TestResult;
use harness::paid::{PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, TaskStore};

const OPERATOR_TOKEN: &str = "reconcile-suite-operator-token-0123456789";
const PATIENCE: Duration = Duration::from_secs(30);

async fn cluster() -> TestResult<PaidCluster> {
    PaidCluster::start(
        &[("WORKER_PRICES", "echo=0.001".to_owned())],
        &[
            ("OPERATOR_TOKEN", OPERATOR_TOKEN.to_owned()),
            // No sweep: what is left settling waits for the operator.
            ("SETTLEMENT_RECOVERY_MS", "0".to_owned()),
            // A record counts as stuck 1 s + 2 s after it entered settling.
            ("FACILITATOR_TIMEOUT_MS", "1000".to_owned()),
        ],
        |card| card["entrypoints"]["echo"]["pricing"]["invoke"].is_string(),
    )
    .await
}

/// A paid invoke of `echo` whose settle answer the facilitator drops (after moving the funds):
/// the gateway answers 503 and leaves the credential settling.
async fn lose_a_settle_answer(cluster: &PaidCluster, text: &str) -> TestResult {
    cluster
        .facilitator()
        .set_faults(json!({"settle": "drop"}))
        .await?;
    let body = json!({"input": {"text": text}});
    let challenge = cluster.x402_challenge(0, "echo", &body).await?;
    let payment =
        LocalPayer::from_hex(PAYER_KEY)?.answer(&challenge, None, payments::unix_now())?;
    let answer = cluster
        .http
        .post(format!("{}/entrypoints/echo/invoke", cluster.base(0)))
        .header(payment.name, &payment.value)
        .json(&body)
        .send()
        .await?;
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    cluster
        .facilitator()
        .set_faults(json!({"settle": "none"}))
        .await?;
    Ok(())
}

/// `taskctl --json admin ARGS` as the operator: its exit code and JSON answer.
async fn admin(args: &[&str], token: Option<&str>) -> TestResult<(i32, Value)> {
    harness::operator::taskctl_admin(args, token).await
}

/// The settling records the operator sees once `count` are listed (they are listed only past
/// the grace of a running settle call, so this polls).
async fn listed(base: &str, count: usize) -> TestResult<Vec<Value>> {
    let start = tokio::time::Instant::now();
    loop {
        let (code, answer) = admin(&["settlements", base], Some(OPERATOR_TOKEN)).await?;
        assert_eq!(code, 0, "{answer}");
        let records = answer["settlements"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if records.len() >= count {
            return Ok(records);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("never listed {count}: {answer}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The task's status once it is terminal, and its receipt.
async fn ended(store: &RedisStore, task_id: &str) -> TestResult<(String, Option<String>)> {
    let start = tokio::time::Instant::now();
    loop {
        let task = store.get(task_id).await?.ok_or("task gone")?;
        if task.task.status.is_terminal() {
            return Ok((task.task.status.as_str().to_owned(), task.receipt));
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("{task_id} never ended").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_operator_resolves_lost_settle_answers_by_lookup_void_or_transaction() -> TestResult {
    let cluster = cluster().await?;
    let base = cluster.base(0);
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let payer = format!("{:#x}", LocalPayer::from_hex(PAYER_KEY)?.address());

    // Lookup: the facilitator did settle; the receipt is stored and the task runs.
    lose_a_settle_answer(&cluster, "first").await?;
    let records = listed(base, 1).await?;
    assert_eq!(records.len(), 1, "{records:?}");
    let first = records[0]["taskId"]
        .as_str()
        .ok_or("no task id")?
        .to_owned();
    assert_eq!(
        records[0]["payer"].as_str().map(str::to_lowercase),
        Some(payer.clone())
    );
    assert_eq!(records[0]["amount"], "1000");
    assert!(records[0]["ageMs"].as_u64().is_some_and(|age| age >= 3000));
    let (code, answer) = admin(&["settle", base, &first, "lookup"], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(
        (code, &answer["outcome"]),
        (0, &json!("settled")),
        "{answer}"
    );
    let (status, receipt) = ended(&store, &first).await?;
    assert_eq!(status, "completed");
    assert!(receipt.is_some());

    // Void: the operator's decision; the held task is cancelled.
    lose_a_settle_answer(&cluster, "second").await?;
    let second = listed(base, 1).await?[0]["taskId"]
        .as_str()
        .ok_or("no task id")?
        .to_owned();
    assert_ne!(second, first, "the resolved record left the list");
    let (code, answer) = admin(
        &[
            "settle",
            base,
            &second,
            "void",
            "--note",
            "refunded by hand",
        ],
        Some(OPERATOR_TOKEN),
    )
    .await?;
    assert_eq!((code, &answer["outcome"]), (0, &json!("void")), "{answer}");
    assert_eq!(ended(&store, &second).await?.0, "cancelled");

    // Settled, naming the transaction: its receipt says so, and the task runs.
    lose_a_settle_answer(&cluster, "third").await?;
    let third = listed(base, 1).await?[0]["taskId"]
        .as_str()
        .ok_or("no task id")?
        .to_owned();
    let (code, answer) = admin(
        &["settle", base, &third, "settled", "--transaction", "0x12"],
        Some(OPERATOR_TOKEN),
    )
    .await?;
    assert_eq!(code, 1, "a malformed transaction is refused: {answer}");
    let transaction = format!("0x{}", "ab".repeat(32));
    let (code, answer) = admin(
        &[
            "settle",
            base,
            &third,
            "settled",
            "--transaction",
            &transaction,
        ],
        Some(OPERATOR_TOKEN),
    )
    .await?;
    assert_eq!(
        (code, &answer["outcome"]),
        (0, &json!("settled")),
        "{answer}"
    );
    let (status, receipt) = ended(&store, &third).await?;
    assert_eq!(status, "completed");
    // The stored receipt is the header the payer is owed: base64 JSON of the settlement.
    let stored: Value = serde_json::from_str(receipt.as_deref().ok_or("no receipt")?)?;
    let settlement: Value =
        payments::wire::decode(stored["value"].as_str().ok_or("no receipt value")?)?;
    assert_eq!(
        settlement["transaction"],
        transaction.as_str(),
        "{settlement}"
    );
    assert_eq!(settlement["success"], true);
    let (_, answer) = admin(&["settlements", base], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(answer["settlements"], json!([]), "nothing is left");

    // Refusals.
    let (code, answer) = admin(&["settle", base, &third, "lookup"], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 1, "a resolved record: {answer}");
    let (code, _) = admin(&["settlements", base], None).await?;
    assert_eq!(code, 2, "no operator token: a usage error");
    let wrong = cluster
        .http
        .get(format!("{base}/console/api/settlements"))
        .bearer_auth("not-the-operator-token-0123456789")
        .send()
        .await?;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let unauthenticated = cluster
        .http
        .post(format!("{base}/console/api/settlements/{third}"))
        .json(&json!({"action": "void"}))
        .send()
        .await?;
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);

    // The audit log: the three decisions that resolved a record, newest first (refusals are
    // not actions), each under the operator key's fingerprint.
    let (code, answer) = admin(&["audit", base], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    let entries = answer["entries"].as_array().cloned().unwrap_or_default();
    let actions = harness::operator::audit_actions(&entries);
    assert_eq!(
        actions,
        [
            ("settlement.settled", third.as_str()),
            ("settlement.void", second.as_str()),
            ("settlement.lookup", first.as_str()),
        ],
        "{answer}"
    );
    assert_eq!(entries[0]["detail"]["transaction"], transaction.as_str());
    assert_eq!(entries[1]["detail"]["note"], "refunded by hand");
    assert!(entries.iter().all(|entry| {
        entry["actor"]
            .as_str()
            .is_some_and(|actor| actor.starts_with("operator token "))
    }));
    Ok(())
}
