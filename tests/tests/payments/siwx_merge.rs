//! Two workers disagreeing on a priced entrypoint's Sign-In-With-X policy, as real processes:
//! a private redis-server with AOF, the dev `facilitator`, two `gateway`s and two `worker`s.
//! One worker declares `echo` auth-only and unpriced (free for any signed-in wallet); the other
//! prices `echo`. The gateways merge the two registry entries and must apply the strictest
//! policy, never auth-only on a priced entrypoint: a caller pays (402) whether or not it signed
//! in (with a valid signature, but no entitlement), and which worker is listed or registered
//! first changes nothing. The card shows the merged policy, and each gateway logs the
//! disagreement once.
//!
//! Besides `echo`, the lax worker alone hosts `summarize` (auth-only: its 401 hands out the
//! sign-in offer to sign) and the pricing worker alone hosts `sleep`, so that a card listing
//! both proves the gateway merged both entries.

use harness::TestResult;
use harness::paid::{PATIENCE, PAYER_KEY, PaidCluster};
use harness::process::{ServiceProcess, plain};
use payments::LocalPayer;
use reqwest::StatusCode;
use serde_json::{Value, json};

const POLL: std::time::Duration = std::time::Duration::from_millis(25);

/// The lax worker: `echo` auth-only without a price.
fn lax() -> Vec<(&'static str, String)> {
    vec![
        ("WORKER_ENTRYPOINTS", "echo,summarize".to_owned()),
        (
            "WORKER_SIWX",
            "echo:auth-only,summarize:auth-only".to_owned(),
        ),
    ]
}

/// The pricing worker: `echo` at 0.001, with `siwx` (entitlements) as given.
fn pricing(siwx: Option<&str>) -> Vec<(&'static str, String)> {
    let mut envs = vec![
        ("WORKER_ENTRYPOINTS", "echo,sleep".to_owned()),
        ("WORKER_PRICES", "echo=0.001".to_owned()),
    ];
    if let Some(siwx) = siwx {
        envs.push(("WORKER_SIWX", siwx.to_owned()));
    }
    envs
}

/// The cluster with its first worker (`w1`, registered alone first) and a second worker
/// (`second_id`) started once every gateway listed the first.
struct Cluster {
    paid: PaidCluster,
    _second: ServiceProcess,
}

impl Cluster {
    async fn start(
        first: Vec<(&'static str, String)>,
        first_alone: impl Fn(&Value) -> bool,
        second_id: &str,
        second: Vec<(&'static str, String)>,
    ) -> TestResult<Cluster> {
        let paid = PaidCluster::start(&first, &[], first_alone).await?;
        let second = harness::cluster::worker(&paid.redis, second_id, &second)?;
        let cluster = Cluster {
            paid,
            _second: second,
        };
        // Both entries listed: `summarize` and `sleep` are hosted by one worker each.
        for gateway in [0, 1] {
            cluster
                .wait_for_card(gateway, |card| {
                    card["entrypoints"]["summarize"].is_object()
                        && card["entrypoints"]["sleep"].is_object()
                })
                .await?;
        }
        Ok(cluster)
    }

    async fn card(&self, gateway: usize) -> TestResult<Value> {
        Ok(self
            .paid
            .http
            .get(format!(
                "{}/.well-known/agent-card.json",
                self.paid.base(gateway)
            ))
            .send()
            .await?
            .json()
            .await?)
    }

    async fn wait_for_card(
        &self,
        gateway: usize,
        ready: impl Fn(&Value) -> bool,
    ) -> TestResult<()> {
        let start = tokio::time::Instant::now();
        loop {
            let card = self.card(gateway).await?;
            if ready(&card) {
                return Ok(());
            }
            if start.elapsed() > PATIENCE {
                return Err(format!("the card never listed both workers: {card}").into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn invoke(
        &self,
        gateway: usize,
        key: &str,
        sign_in: Option<&str>,
    ) -> TestResult<reqwest::Response> {
        let mut request = self
            .paid
            .http
            .post(format!(
                "{}/entrypoints/{key}/invoke",
                self.paid.base(gateway)
            ))
            .json(&json!({"input": {"text": "hello there"}}));
        if let Some(value) = sign_in {
            request = request.header("sign-in-with-x", value);
        }
        Ok(request.send().await?)
    }

    /// A valid sign-in at `gateway` by a wallet that never paid: the auth-only `summarize`
    /// answers 401 with an offer for this gateway's origin, which the wallet signs.
    async fn signed_in(&self, gateway: usize) -> TestResult<String> {
        let refused = self.invoke(gateway, "summarize", None).await?;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        let body: Value = refused.json().await?;
        let offer: payments::siwx::SiwxExtension =
            serde_json::from_value(body["extensions"]["sign-in-with-x"].clone())?;
        Ok(LocalPayer::from_hex(PAYER_KEY)?.sign_in_with_x(&offer)?)
    }

    /// `echo` at both gateways answers 402, unsigned and signed in, and nothing settles.
    async fn echo_must_be_paid(&self) -> TestResult {
        for gateway in [0, 1] {
            let unsigned = self.invoke(gateway, "echo", None).await?;
            assert_eq!(unsigned.status(), StatusCode::PAYMENT_REQUIRED);
            assert!(unsigned.headers().contains_key("payment-required"));
            let signed = self.signed_in(gateway).await?;
            let answer = self.invoke(gateway, "echo", Some(&signed)).await?;
            let status = answer.status();
            assert_eq!(
                status,
                StatusCode::PAYMENT_REQUIRED,
                "{}",
                answer.text().await?
            );
        }
        assert_eq!(self.paid.settled().await?, 0);
        Ok(())
    }

    /// SIWX disagreements each gateway logged (both gateways' logs together).
    fn siwx_warnings(&self) -> usize {
        plain(&self.paid.logs())
            .lines()
            .filter(|line| line.contains("disagree on this entrypoint's Sign-In-With-X policy"))
            .count()
    }
}

/// The lax worker registers first and is listed first (`w1` before `w2`); the pricing worker
/// declares no SIWX, so everyone pays and a signature counts for nothing.
#[tokio::test]
async fn a_lax_worker_listed_first_does_not_make_a_priced_entrypoint_free() -> TestResult {
    let cluster = Cluster::start(
        lax(),
        |card| card["entrypoints"]["echo"]["authorization"]["siwx"]["auth_only"] == true,
        "w2",
        pricing(None),
    )
    .await?;
    cluster.echo_must_be_paid().await?;
    // The card shows the merged policy: priced, no SIWX.
    for gateway in [0, 1] {
        let card = cluster.card(gateway).await?;
        let echo = &card["entrypoints"]["echo"];
        assert_eq!(echo["pricing"], json!({"invoke": "0.001"}), "{echo}");
        assert_eq!(echo["authorization"], Value::Null, "{echo}");
        // The lax worker's own entrypoint keeps its policy.
        assert_eq!(
            card["entrypoints"]["summarize"]["authorization"],
            json!({"siwx": {"enabled": true, "auth_only": true}})
        );
    }
    // The signature refused a free run was valid: it runs the auth-only entrypoint.
    let signed = cluster.signed_in(0).await?;
    let refused = cluster.invoke(0, "echo", Some(&signed)).await?;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    let ran = cluster.invoke(0, "summarize", Some(&signed)).await?;
    assert_eq!(ran.status(), StatusCode::OK);
    // Once per gateway, however many requests read the merged entry.
    assert_eq!(cluster.siwx_warnings(), 2, "{}", cluster.paid.logs());
    Ok(())
}

/// The pricing worker (with entitlements, `--siwx echo`) registers first; the lax worker
/// joins later but is listed first (`w0` before `w1`). Entitlements apply: a signed-in wallet
/// without one pays.
#[tokio::test]
async fn a_lax_worker_joining_later_does_not_make_a_priced_entrypoint_free() -> TestResult {
    let cluster = Cluster::start(
        pricing(Some("echo")),
        |card| card["entrypoints"]["echo"]["pricing"]["invoke"] == "0.001",
        "w0",
        lax(),
    )
    .await?;
    cluster.echo_must_be_paid().await?;
    // The card shows the merged policy: priced, entitlements.
    for gateway in [0, 1] {
        let card = cluster.card(gateway).await?;
        let echo = &card["entrypoints"]["echo"];
        assert_eq!(echo["pricing"], json!({"invoke": "0.001"}), "{echo}");
        assert_eq!(
            echo["authorization"],
            json!({"siwx": {"enabled": true, "auth_only": false}}),
            "{echo}"
        );
    }
    assert_eq!(cluster.siwx_warnings(), 2, "{}", cluster.paid.logs());
    Ok(())
}
