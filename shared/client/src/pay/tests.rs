//! Paying a 402 against an in-process fake agent whose challenges are built by
//! `payments::Terms` and whose checks of the retried request are the real ones
//! (`Credential::decode` + `precheck`, signature recovery included).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use payments::wire::v2::ResourceInfo;
use payments::{Credential, Terms, precheck};
use serde_json::json;

use super::*;
use crate::{
    AgentCard, ClientOptions, CreationFailure, InvokeOptions, SendOptions, generate_token,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Anvil's well-known key #0 (public test key, address 0xf39F…2266).
const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const PRICE_ATOMIC: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A valid credential gets a 200 with a receipt.
    Accept,
    /// Every credential is refused with a fresh challenge.
    Refuse,
    /// A valid credential gets the profile's `settlement_failed` 402, receipt attached.
    SettlementFailed,
}

/// One request as the fake agent saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    body: Bytes,
    token: Option<String>,
    idempotency_key: Option<String>,
    payment_signature: Option<String>,
    x_payment: Option<String>,
}

struct Fake {
    /// `http://127.0.0.1:PORT`: challenges name the resource at it, as a gateway does.
    origin: String,
    terms: Terms,
    offer_v2: bool,
    offer_v1: bool,
    mode: Mode,
    seen: Mutex<Vec<Seen>>,
}

impl Fake {
    /// The terms of the route at `path`, its resource the request's URL.
    fn terms_for(&self, path: &str) -> Terms {
        let mut terms = self.terms.clone();
        terms.resource.url = format!("{}{path}", self.origin);
        terms
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

fn terms() -> Terms {
    Terms {
        scheme: payments::Scheme::Exact,
        network: &payments::network::NETWORKS[0],
        amount: U256::from(PRICE_ATOMIC),
        pay_to: Address::repeat_byte(0x22),
        max_timeout_seconds: payments::terms::DEFAULT_MAX_TIMEOUT_SECONDS,
        resource: ResourceInfo {
            url: "http://127.0.0.1/entrypoints/echo/invoke".into(),
            description: "echo".into(),
            mime_type: "application/json".into(),
        },
    }
}

fn now() -> u64 {
    payments::unix_now()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

fn response(status: StatusCode, headers: &[(&str, String)], body: String) -> Response {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// The 402 a priced route at `path` answers: v2 challenge in `PAYMENT-REQUIRED`, v1 in the
/// body.
fn challenge(fake: &Fake, path: &str, reason: &str) -> Response {
    let terms = fake.terms_for(path);
    let mut headers = vec![];
    if fake.offer_v2 {
        headers.push((
            payments::PAYMENT_REQUIRED,
            payments::wire::encode(&terms.challenge_v2(Some(reason))),
        ));
    }
    let body = if fake.offer_v1 {
        serde_json::to_string(&terms.challenge_v1(reason)).unwrap_or_default()
    } else {
        json!({"error": {"code": "payment_required", "message": reason}}).to_string()
    };
    headers.push(("content-type", "application/json".to_owned()));
    response(StatusCode::PAYMENT_REQUIRED, &headers, body)
}

fn receipt(version: X402Version, payer: Address, success: bool) -> (&'static str, String) {
    let receipt = SettleResponse {
        success,
        error_reason: (!success).then(|| "insufficient_funds".to_owned()),
        payer: Some(payer.to_string()),
        transaction: "0xfeed".into(),
        network: "base-sepolia".into(),
        amount: Some(PRICE_ATOMIC.to_string()),
    };
    (version.response_header(), payments::wire::encode(&receipt))
}

async fn agent(
    State(fake): State<Arc<Fake>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let seen = Seen {
        path: uri.path().to_owned(),
        body,
        token: header(&headers, "task-access-token"),
        idempotency_key: header(&headers, "idempotency-key"),
        payment_signature: header(&headers, payments::PAYMENT_SIGNATURE),
        x_payment: header(&headers, payments::X_PAYMENT),
    };
    fake.seen
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(seen.clone());
    let credential = match (&seen.payment_signature, &seen.x_payment) {
        (Some(value), _) => Some((X402Version::V2, value)),
        (None, Some(value)) => Some((X402Version::V1, value)),
        (None, None) => None,
    };
    let Some((version, value)) = credential else {
        return challenge(&fake, &seen.path, "payment required");
    };
    let payer = match Credential::decode(version, value) {
        Ok(credential) => match precheck(&credential, &fake.terms, now()) {
            Ok(payer) => payer,
            Err(rejection) => return challenge(&fake, &seen.path, rejection.reason()),
        },
        Err(err) => return challenge(&fake, &seen.path, &err.to_string()),
    };
    match fake.mode {
        Mode::Refuse => challenge(&fake, &seen.path, "invalid_exact_evm_payload_signature"),
        Mode::SettlementFailed => response(
            StatusCode::PAYMENT_REQUIRED,
            &[receipt(version, payer, false)],
            json!({"error": {"code": "settlement_failed", "message": "insufficient_funds"}})
                .to_string(),
        ),
        Mode::Accept => {
            let receipt = receipt(version, payer, true);
            match seen.path.as_str() {
                "/tasks" => response(
                    StatusCode::CREATED,
                    &[receipt, ("content-type", "application/json".into())],
                    json!({
                        "taskId": "t-1",
                        "accessToken": seen.token.unwrap_or_default(),
                        "status": "running",
                    })
                    .to_string(),
                ),
                "/entrypoints/echo/stream" => response(
                    StatusCode::OK,
                    &[receipt, ("content-type", "text/event-stream".into())],
                    "event: run-start\ndata: {\"run_id\":\"r-1\"}\n\n\
                     event: run-end\ndata: {\"status\":\"succeeded\",\"output\":{\"x\":1}}\n\n"
                        .into(),
                ),
                _ => response(
                    StatusCode::OK,
                    &[receipt, ("content-type", "application/json".into())],
                    json!({"run_id": "r-1", "status": "succeeded", "output": {"x": 1}}).to_string(),
                ),
            }
        }
    }
}

/// Starts a fake agent; its card and its record of requests.
async fn start(
    mode: Mode,
    offer_v2: bool,
    offer_v1: bool,
) -> Result<(AgentCard, Arc<Fake>), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let fake = Arc::new(Fake {
        origin: origin.clone(),
        terms: terms(),
        offer_v2,
        offer_v1,
        mode,
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new().fallback(agent).with_state(fake.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((AgentCard::for_url(&origin), fake))
}

fn key() -> Result<LocalPayer, PayError> {
    LocalPayer::from_hex(ANVIL_KEY_0)
}

fn payer(cap: Option<u64>, version: X402Version) -> Result<Arc<dyn Payer>, PayError> {
    Ok(Arc::new(
        KeyPayer::new(key()?, cap.map(U256::from)).prefer(version),
    ))
}

fn invoke_options(payer: Arc<dyn Payer>) -> InvokeOptions {
    InvokeOptions {
        idempotency_key: Some("invoke-key-0001".into()),
        payer: Some(payer),
    }
}

fn client() -> Result<Client, ClientError> {
    Client::new(ClientOptions::default())
}

#[tokio::test]
async fn invoke_pays_a_v2_challenge_once_and_surfaces_the_receipt() -> TestResult {
    let (card, fake) = start(Mode::Accept, true, true).await?;
    let options = invoke_options(payer(Some(1_000_000), X402Version::V2)?);
    let result = client()?
        .invoke(&card, "echo", &json!({"x": 1}), &options)
        .await?;
    assert_eq!(result.output, json!({"x": 1}));

    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (first, retry) = (&seen[0], &seen[1]);
    assert!(first.payment_signature.is_none() && first.x_payment.is_none());
    assert!(retry.x_payment.is_none(), "v2 is preferred");
    assert_eq!(retry.path, "/entrypoints/echo/invoke");
    assert_eq!(retry.body, first.body);
    assert_eq!(retry.idempotency_key.as_deref(), Some("invoke-key-0001"));
    assert_eq!(first.idempotency_key, retry.idempotency_key);
    let credential = retry
        .payment_signature
        .clone()
        .ok_or("no PAYMENT-SIGNATURE")?;
    let decoded = Credential::decode(X402Version::V2, &credential)?;
    assert_eq!(precheck(&decoded, &terms(), now()), Ok(key()?.address()));

    assert!(result.settlement.payment_response.is_some());
    let receipt = result.settlement.receipt().ok_or("no receipt")??;
    assert!(receipt.success);
    assert_eq!(receipt.transaction, "0xfeed");
    assert_eq!(receipt.network, "base-sepolia");
    assert_eq!(receipt.payer, Some(key()?.address().to_string()));

    // Neither the key nor the credential shows in anything printable.
    let printed = format!("{options:?} {result:?}");
    assert!(!printed.contains(&credential));
    assert!(!printed.contains(ANVIL_KEY_0.trim_start_matches("0x")));
    Ok(())
}

#[tokio::test]
async fn v1_is_used_when_preferred_or_when_it_is_all_there_is() -> TestResult {
    for (offer_v2, preferred) in [(true, X402Version::V1), (false, X402Version::V2)] {
        let (card, fake) = start(Mode::Accept, offer_v2, true).await?;
        let result = client()?
            .invoke(
                &card,
                "echo",
                &json!({}),
                &invoke_options(payer(None, preferred)?),
            )
            .await?;
        let seen = fake.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[1].payment_signature.is_none());
        let credential = seen[1].x_payment.clone().ok_or("no X-PAYMENT")?;
        let decoded = Credential::decode(X402Version::V1, &credential)?;
        assert_eq!(precheck(&decoded, &terms(), now()), Ok(key()?.address()));
        assert!(result.settlement.payment_response.is_none());
        assert!(result.settlement.x_payment_response.is_some());
        assert!(result.settlement.receipt().ok_or("no receipt")??.success);
    }

    // A v1-preferring payer still pays a server that only speaks v2.
    let (card, fake) = start(Mode::Accept, true, false).await?;
    client()?
        .invoke(
            &card,
            "echo",
            &json!({}),
            &invoke_options(payer(None, X402Version::V1)?),
        )
        .await?;
    assert!(fake.seen()[1].payment_signature.is_some());
    Ok(())
}

#[tokio::test]
async fn a_price_over_the_cap_sends_nothing_more() -> TestResult {
    let (card, fake) = start(Mode::Accept, true, true).await?;
    let error = client()?
        .invoke(
            &card,
            "echo",
            &json!({}),
            &invoke_options(payer(Some(PRICE_ATOMIC - 1), X402Version::V2)?),
        )
        .await
        .err()
        .ok_or("paid over the cap")?;
    assert!(
        matches!(&error, ClientError::Payment(PayError::OverCap { asked, cap })
            if asked == "0.001" && cap == "0.000999"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("0.001") && message.contains("0.000999"),
        "{message}"
    );
    assert_eq!(fake.seen().len(), 1);
    Ok(())
}

#[tokio::test]
async fn without_a_payer_a_402_names_the_price() -> TestResult {
    let (card, fake) = start(Mode::Accept, true, true).await?;
    let error = client()?
        .invoke(&card, "echo", &json!({}), &InvokeOptions::default())
        .await
        .err()
        .ok_or("a 402 was taken for success")?;
    let ClientError::PaymentRequired {
        paid: false,
        terms: Some(asked),
        ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(asked.amount, U256::from(PRICE_ATOMIC));
    assert_eq!(error.status(), Some(402));
    let message = error.to_string();
    assert!(message.contains("0.001 USDC on base-sepolia"), "{message}");
    assert_eq!(fake.seen().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_refused_payment_is_not_paid_twice() -> TestResult {
    let (card, fake) = start(Mode::Refuse, true, true).await?;
    let error = client()?
        .invoke(
            &card,
            "echo",
            &json!({}),
            &invoke_options(payer(None, X402Version::V2)?),
        )
        .await
        .err()
        .ok_or("a refused payment was taken for success")?;
    assert!(
        matches!(&error, ClientError::PaymentRequired { paid: true, reason: Some(reason), .. }
            if reason == "invalid_exact_evm_payload_signature"),
        "{error:?}"
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    let credential = seen[1].payment_signature.clone().ok_or("not paid")?;
    assert!(!format!("{error} {error:?}").contains(&credential));
    Ok(())
}

#[tokio::test]
async fn send_message_pays_with_the_same_token_and_key() -> TestResult {
    let (card, fake) = start(Mode::Accept, true, true).await?;
    let token = generate_token();
    let access = client()?
        .send_message(
            &card,
            "echo",
            &json!({"x": 1}),
            SendOptions {
                access_token: Some(token.clone()),
                payer: Some(payer(None, X402Version::V2)?),
                ..SendOptions::default()
            },
        )
        .await?;
    assert_eq!(access.task_id, "t-1");
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.path == "/tasks"));
    assert!(
        seen.iter()
            .all(|s| s.token.as_deref() == Some(token.as_str()))
    );
    assert_eq!(
        seen[1].idempotency_key.as_deref(),
        Some(access.idempotency_key.as_str())
    );
    assert_eq!(seen[0].idempotency_key, seen[1].idempotency_key);
    assert_eq!(seen[0].body, seen[1].body);
    assert!(seen[1].payment_signature.is_some());
    assert!(access.settlement.receipt().ok_or("no receipt")??.success);
    Ok(())
}

#[tokio::test]
async fn a_failed_settlement_keeps_its_receipt() -> TestResult {
    let (card, fake) = start(Mode::SettlementFailed, true, true).await?;
    let error = client()?
        .send_message(
            &card,
            "echo",
            &json!({}),
            SendOptions {
                payer: Some(payer(None, X402Version::V2)?),
                ..SendOptions::default()
            },
        )
        .await
        .err()
        .ok_or("a failed settlement was taken for success")?;
    assert_eq!(error.failure, CreationFailure::Status);
    assert_eq!(error.response_status, Some(402));
    assert_eq!(error.cause.code(), Some("settlement_failed"));
    let receipt = error.settlement.receipt().ok_or("no receipt")??;
    assert!(!receipt.success);
    assert_eq!(receipt.error_reason.as_deref(), Some("insufficient_funds"));
    assert_eq!(fake.seen().len(), 2);

    // Over the cap: the 402 created nothing, and no credential followed it.
    let (card, fake) = start(Mode::Accept, true, true).await?;
    let error = client()?
        .send_message(
            &card,
            "echo",
            &json!({}),
            SendOptions {
                payer: Some(payer(Some(1), X402Version::V2)?),
                ..SendOptions::default()
            },
        )
        .await
        .err()
        .ok_or("paid over the cap")?;
    assert_eq!(error.failure, CreationFailure::Status);
    assert!(matches!(
        error.cause,
        ClientError::Payment(PayError::OverCap { .. })
    ));
    assert_eq!(fake.seen().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_paid_stream_carries_its_receipt() -> TestResult {
    let (card, fake) = start(Mode::Accept, true, true).await?;
    let mut events = client()?
        .stream_with_options(
            &card,
            "echo",
            &json!({}),
            &invoke_options(payer(None, X402Version::V2)?),
        )
        .await?;
    assert!(events.settlement().receipt().ok_or("no receipt")??.success);
    let first = events.next().await?.ok_or("no event")?;
    assert_eq!(first.kind, "run-start");
    let end = events.next().await?.ok_or("no run-end")?;
    assert!(end.is_end());
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].path, "/entrypoints/echo/stream");
    assert!(seen[1].payment_signature.is_some());
    Ok(())
}

#[test]
fn challenges_are_read_from_either_part() {
    let terms = terms();
    let header = payments::wire::encode(&terms.challenge_v2(Some("pay up")));
    let body = serde_json::to_vec(&terms.challenge_v1("v1 reason")).unwrap_or_default();

    let both = PaymentRequired::parse(Some(&header), &body);
    assert!(matches!(
        both.challenge(X402Version::V2),
        Some(Challenge::V2(_))
    ));
    assert!(matches!(
        both.challenge(X402Version::V1),
        Some(Challenge::V1(_))
    ));
    assert_eq!(both.reason(), Some("pay up"));
    assert_eq!(both.terms(), Some(terms.clone()));

    let v1_only = PaymentRequired::parse(None, &body);
    assert!(matches!(
        v1_only.challenge(X402Version::V2),
        Some(Challenge::V1(_))
    ));
    assert_eq!(v1_only.reason(), Some("v1 reason"));

    // A header that does not decode says so when there is nothing else to pay.
    let broken = PaymentRequired::parse(Some("%%%"), b"{\"error\":{\"code\":\"x\"}}");
    assert!(broken.is_empty());
    let refused = key().map(|key| KeyPayer::new(key, None).pay(&broken));
    assert!(matches!(refused, Ok(Err(PayError::Header(_)))));
    let nothing = key().map(|key| KeyPayer::new(key, None).pay(&PaymentRequired::default()));
    assert!(matches!(nothing, Ok(Err(PayError::NoChallenge))));
}

#[test]
fn a_key_payer_signs_only_a_402_tied_to_its_request() -> TestResult {
    let terms = terms();
    let header = payments::wire::encode(&terms.challenge_v2(None));
    let untied = PaymentRequired::parse(Some(&header), &[]);
    let payer = KeyPayer::new(key()?, None);
    assert_eq!(
        payer.pay(&untied).err(),
        Some(PayError::Refused(Refusal::NoTarget))
    );
    let requested = Url::parse(&terms.resource.url)?;
    let tied = untied.clone().for_request(&requested);
    assert_eq!(tied.target().map(RequestTarget::url), Some(&requested));
    assert!(payer.pay(&tied).is_ok());
    let elsewhere = untied.for_request(&Url::parse(
        "http://127.0.0.1:8080/entrypoints/echo/invoke",
    )?);
    assert!(matches!(
        payer.pay(&elsewhere),
        Err(PayError::Refused(Refusal::ResourceOrigin { .. }))
    ));
    // The cap on validity is at least a second.
    assert_eq!(payer.max_validity(0).limits().max_validity_seconds, 1);
    Ok(())
}
