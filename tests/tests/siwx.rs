//! Sign-In-With-X against real processes: a private redis-server with AOF, the dev
//! `facilitator`, a `worker` hosting `echo` (priced, `--siwx echo`: a payer may sign in
//! instead of paying again) and `summarize` (`--siwx summarize:auth-only`: free, but only for
//! a signed-in caller), and two `gateway`s. Signatures are real (Anvil #0 and #2's keys).
//!
//! What is proven: the card shows `authorization.siwx`; an auth-only entrypoint answers 401
//! `auth_required` with a sign-in offer, runs for a valid signature, and refuses a replayed
//! nonce (at either gateway), another domain's signature and another key's claim; a priced SIWX
//! entrypoint offers sign-in in its 402, refuses a signer who never paid (402), and, once
//! paid, runs for its payer's signature without a second settlement; the Rust client and
//! `taskctl` sign in by themselves.

use std::sync::Arc;

use base64::Engine;
use harness::paid::{PATIENCE, PAYER_KEY, PaidCluster, Res};
use payments::LocalPayer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::client::{Client, ClientOptions, InvokeOptions, KeyPayer};

type TestResult = Res<()>;

const PRICES: &str = "echo=0.001";
/// `echo` is priced and takes SIWX (entitlements); `summarize` is free but auth-only.
const SIWX: &str = "echo,summarize:auth-only";
/// Anvil #2: a wallet that never paid.
const OTHER_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";

/// The suite's cluster: the shared paying cluster, plus this suite's requests.
struct Cluster(PaidCluster);

impl std::ops::Deref for Cluster {
    type Target = PaidCluster;

    fn deref(&self) -> &PaidCluster {
        &self.0
    }
}

impl Cluster {
    async fn start() -> Res<Cluster> {
        let ready =
            |card: &Value| card["entrypoints"]["echo"]["authorization"]["siwx"]["enabled"] == true;
        Ok(Cluster(
            PaidCluster::start(
                &[
                    ("WORKER_PRICES", PRICES.to_owned()),
                    ("WORKER_SIWX", SIWX.to_owned()),
                ],
                &[],
                ready,
            )
            .await?,
        ))
    }

    async fn invoke(
        &self,
        gateway: usize,
        key: &str,
        sign_in: Option<&str>,
    ) -> Res<reqwest::Response> {
        let mut request = self
            .http
            .post(format!("{}/entrypoints/{key}/invoke", self.base(gateway)))
            .json(&json!({"input": {"text": "hello there"}}));
        if let Some(value) = sign_in {
            request = request.header("sign-in-with-x", value);
        }
        Ok(request.send().await?)
    }
}

fn payer() -> Res<LocalPayer> {
    Ok(LocalPayer::from_hex(PAYER_KEY)?)
}

/// A 401's sign-in offer.
async fn offer_of_401(response: reqwest::Response) -> Res<payments::siwx::SiwxExtension> {
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "auth_required", "{body}");
    Ok(serde_json::from_value(
        body["extensions"]["sign-in-with-x"].clone(),
    )?)
}

#[tokio::test]
async fn auth_only_runs_for_a_signed_in_caller_once_per_nonce() -> TestResult {
    let cluster = Cluster::start().await?;
    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base(0)))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        card["entrypoints"]["summarize"]["authorization"],
        json!({"siwx": {"enabled": true, "auth_only": true}})
    );
    assert_eq!(
        card["entrypoints"]["echo"]["authorization"],
        json!({"siwx": {"enabled": true, "auth_only": false}})
    );

    let offer = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    let signed = payer()?.sign_in_with_x(&offer)?;
    let ran = cluster.invoke(0, "summarize", Some(&signed)).await?;
    assert_eq!(ran.status(), StatusCode::OK);

    // The same signature again, at either gateway: its nonce is spent.
    for gateway in [0, 1] {
        offer_of_401(cluster.invoke(gateway, "summarize", Some(&signed)).await?).await?;
    }
    // Signed for another domain, or garbage: refused, never a 5xx.
    let mut elsewhere = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    elsewhere.info.domain = "evil.example".into();
    let foreign = payer()?.sign_in_with_x(&elsewhere)?;
    offer_of_401(cluster.invoke(0, "summarize", Some(&foreign)).await?).await?;
    offer_of_401(
        cluster
            .invoke(0, "summarize", Some("!!not base64!!"))
            .await?,
    )
    .await?;
    // A signature by one key claiming another address: refused.
    let fresh = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    let by_other = LocalPayer::from_hex(OTHER_KEY)?.sign_in_with_x(&fresh)?;
    let mut claim: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(&by_other)?)?;
    claim["address"] = json!(payer()?.address().to_checksum(None));
    let impostor = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&claim)?);
    offer_of_401(cluster.invoke(0, "summarize", Some(&impostor)).await?).await?;
    // Nothing of the headers reached a log.
    let logs = cluster.logs();
    assert!(!logs.contains(&signed[signed.len().saturating_sub(24)..]));
    Ok(())
}

#[tokio::test]
async fn a_payer_signs_in_instead_of_paying_twice() -> TestResult {
    let cluster = Cluster::start().await?;
    // The 402 of a priced SIWX entrypoint offers sign-in beside the payment.
    let unpaid = cluster.invoke(0, "echo", None).await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let header = unpaid.headers()["payment-required"].to_str()?;
    let challenge: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header)?)?;
    let offer: payments::siwx::SiwxExtension =
        serde_json::from_value(challenge["extensions"]["sign-in-with-x"].clone())?;
    // A signer who never paid is told to pay.
    let stranger = LocalPayer::from_hex(OTHER_KEY)?.sign_in_with_x(&offer)?;
    assert_eq!(
        cluster.invoke(0, "echo", Some(&stranger)).await?.status(),
        StatusCode::PAYMENT_REQUIRED
    );

    // The Rust client pays once (its sign-in is refused first: not entitled yet)...
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base(0)).await?;
    let options = InvokeOptions {
        payer: Some(Arc::new(KeyPayer::new(payer()?, None))),
        ..InvokeOptions::default()
    };
    let first = client
        .invoke(&card, "echo", &json!({"n": 1}), &options)
        .await?;
    assert_eq!(first.output, json!({"n": 1}));
    assert_eq!(cluster.settled().await?, 1);
    // ...then signs in at the other gateway and runs without paying again.
    let card = client.fetch_card(cluster.base(1)).await?;
    let second = client
        .invoke(&card, "echo", &json!({"n": 2}), &options)
        .await?;
    assert_eq!(second.output, json!({"n": 2}));
    assert!(second.settlement.is_empty());
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test]
async fn taskctl_signs_in_for_an_auth_only_entrypoint() -> TestResult {
    let cluster = Cluster::start().await?;
    let taskctl = harness::process::binary("taskctl")?;
    let output = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(taskctl)
            .args([
                "invoke",
                cluster.base(0),
                "summarize",
                r#"{"text":"sign me in"}"#,
                "--json",
            ])
            .env("TASKCTL_PAY_KEY", PAYER_KEY)
            .output(),
    )
    .await??;
    let stdout = String::from_utf8(output.stdout)?;
    assert!(
        output.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(cluster.settled().await?, 0);
    Ok(())
}

/// `POST /tasks` goes through the same sign-in: an auth-only skill without a signature is
/// 401, with one it is a task like any free one.
#[tokio::test]
async fn a_task_of_an_auth_only_skill_needs_a_signature() -> TestResult {
    let cluster = Cluster::start().await?;
    let send = |sign_in: Option<String>| {
        let mut request = cluster
            .http
            .post(format!("{}/tasks", cluster.base(0)))
            .json(&json!({
                "skillId": "summarize",
                "message": {"role": "user", "content": {"text": r#"{"text":"a task"}"#}},
            }));
        if let Some(value) = sign_in {
            request = request.header("sign-in-with-x", value);
        }
        request.send()
    };
    let offer = offer_of_401(send(None).await?).await?;
    let created = send(Some(payer()?.sign_in_with_x(&offer)?)).await?;
    let status = created.status();
    let body: Value = created.json().await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["taskId"].is_string() && body["accessToken"].is_string(),
        "{body}"
    );
    Ok(())
}
