//! The client against a hostile agent: an in-process server (axum on 127.0.0.1:0) whose 402s
//! (and 401s) ask the payer to sign for something other than what it requested (another
//! origin, another path, another realm, another sign-in domain, an unknown network or asset).
//! The client must return the refusal and send nothing more: the server records every request
//! and which credential headers it carried. Honest variants of the same answers are paid, so
//! the refusals are the checks', not a client that pays nobody.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use payments::mpp::{ChallengeSecret, PaymentCredential, charge_params};
use payments::siwx::{SiwxExtension, SiwxPayload};
use payments::wire::v2::ResourceInfo;
use payments::{Credential, Terms};
use serde_json::{Value, json};

use super::*;
use crate::{AgentCard, ClientOptions, InvokeOptions, SendOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Anvil's well-known key #0 (a public test key).
const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// The headers a credential or a sign-in travels in.
const CREDENTIAL_HEADERS: [&str; 4] = [
    payments::PAYMENT_SIGNATURE,
    payments::X_PAYMENT,
    payments::mpp::AUTHORIZATION,
    payments::siwx::SIGN_IN_WITH_X,
];

/// What the agent answers an unpaid request with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// x402 v2, its resource on another origin.
    ForeignOrigin,
    /// x402 v1 only, its resource on another origin.
    ForeignOriginV1,
    /// x402 v2, its resource at another path of the same origin.
    OtherPath,
    /// MPP, its realm another host.
    ForeignRealm,
    /// MPP, its realm this host at another port.
    OtherPortRealm,
    /// x402 for this resource, with a SIWX offer for another domain.
    ForeignSiwxDomain,
    /// x402 for this resource, with a SIWX offer whose URI is of another origin.
    ForeignSiwxUri,
    /// An auth-only 401 whose SIWX offer is for another domain.
    ForeignSiwx401,
    /// An auth-only 401 whose SIWX offer names only an unknown chain.
    UnknownSiwxChain,
    /// x402 v2 on a network this client does not know.
    UnknownNetwork,
    /// x402 v2 in an asset other than the network's USDC.
    UnknownAsset,
    /// Honest x402 v2 asking for a year of validity.
    HonestGreedy,
    /// Honest MPP (realm: this host and port).
    HonestMpp,
    /// Honest auth-only 401.
    HonestSiwx401,
}

/// One request as the agent saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    /// The credential headers it carried, and their values.
    credentials: Vec<(&'static str, String)>,
}

struct Agent {
    origin: String,
    answer: Answer,
    secret: ChallengeSecret,
    seen: Mutex<Vec<Seen>>,
}

impl Agent {
    fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// `host:port` of the agent.
    fn host(&self) -> &str {
        self.origin.trim_start_matches("http://")
    }

    fn terms(&self, resource: String) -> Terms {
        Terms {
            scheme: payments::Scheme::Exact,
            network: &payments::network::NETWORKS[0],
            amount: U256::from(1000u64),
            pay_to: Address::repeat_byte(0x22),
            max_timeout_seconds: payments::terms::DEFAULT_MAX_TIMEOUT_SECONDS,
            resource: ResourceInfo {
                url: resource,
                description: String::new(),
                mime_type: "application/json".into(),
            },
        }
    }

    fn siwx(&self, domain: &str, uri: &str, chain: &str) -> Value {
        SiwxExtension::declare(domain, uri, None, &[chain], payments::unix_now(), Some(300))
            .and_then(|offer| serde_json::to_value(offer).ok())
            .unwrap_or_default()
    }

    /// The 402 (or 401) for an unpaid request to `path`.
    fn refuse(&self, path: &str) -> Response {
        let here = format!("{}{path}", self.origin);
        let base_sepolia = "eip155:84532";
        let v2 = |terms: &Terms, siwx: Option<Value>| {
            let mut challenge = terms.challenge_v2(None);
            if let Some(offer) = siwx {
                challenge
                    .extensions
                    .insert(payments::siwx::SIGN_IN_WITH_X.into(), offer);
            }
            reply(
                StatusCode::PAYMENT_REQUIRED,
                &[(
                    payments::PAYMENT_REQUIRED,
                    payments::wire::encode(&challenge),
                )],
                json!({"error": {"code": "payment_required"}}).to_string(),
            )
        };
        let mpp = |realm: &str| {
            let header = charge_params(realm, &self.terms(here.clone()))
                .ok()
                .and_then(|params| params.issue(&self.secret, payments::unix_now() + 300).ok())
                .and_then(|challenge| challenge.to_header().ok())
                .unwrap_or_default();
            reply(
                StatusCode::PAYMENT_REQUIRED,
                &[(payments::mpp::WWW_AUTHENTICATE, header)],
                json!({"type": "https://paymentauth.org/problems/payment-required"}).to_string(),
            )
        };
        let auth_only = |offer: Value| {
            reply(
                StatusCode::UNAUTHORIZED,
                &[],
                json!({"error": {"code": "auth_required"}, "extensions": {"sign-in-with-x": offer}})
                    .to_string(),
            )
        };
        match self.answer {
            Answer::ForeignOrigin => v2(&self.terms(format!("http://evil.example{path}")), None),
            Answer::ForeignOriginV1 => reply(
                StatusCode::PAYMENT_REQUIRED,
                &[],
                serde_json::to_string(
                    &self
                        .terms(format!("https://{}{path}", self.host()))
                        .challenge_v1("X-PAYMENT header is required"),
                )
                .unwrap_or_default(),
            ),
            Answer::OtherPath => v2(
                &self.terms(format!("{}/entrypoints/withdraw/invoke", self.origin)),
                None,
            ),
            Answer::ForeignRealm => mpp("evil.example"),
            Answer::OtherPortRealm => mpp("127.0.0.1:1"),
            Answer::ForeignSiwxDomain => v2(
                &self.terms(here.clone()),
                Some(self.siwx("evil.example", "http://evil.example", base_sepolia)),
            ),
            Answer::ForeignSiwxUri => v2(
                &self.terms(here.clone()),
                Some(self.siwx(self.host(), "http://evil.example", base_sepolia)),
            ),
            Answer::ForeignSiwx401 => {
                auth_only(self.siwx("evil.example", "http://evil.example", base_sepolia))
            }
            Answer::UnknownSiwxChain => {
                auth_only(self.siwx(self.host(), &self.origin, "eip155:31337"))
            }
            Answer::UnknownNetwork => {
                let mut challenge = self.terms(here).challenge_v2(None);
                challenge.accepts[0].network = "eip155:31337".into();
                reply(
                    StatusCode::PAYMENT_REQUIRED,
                    &[(
                        payments::PAYMENT_REQUIRED,
                        payments::wire::encode(&challenge),
                    )],
                    String::new(),
                )
            }
            Answer::UnknownAsset => {
                let mut challenge = self.terms(here).challenge_v2(None);
                challenge.accepts[0].asset = Address::repeat_byte(0x66).to_checksum(None);
                reply(
                    StatusCode::PAYMENT_REQUIRED,
                    &[(
                        payments::PAYMENT_REQUIRED,
                        payments::wire::encode(&challenge),
                    )],
                    String::new(),
                )
            }
            Answer::HonestGreedy => {
                let mut terms = self.terms(here);
                terms.max_timeout_seconds = 365 * 86_400;
                v2(&terms, None)
            }
            Answer::HonestMpp => mpp(self.host()),
            Answer::HonestSiwx401 => auth_only(self.siwx(self.host(), &self.origin, base_sepolia)),
        }
    }
}

fn reply(status: StatusCode, headers: &[(&str, String)], body: String) -> Response {
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn handle(State(agent): State<Arc<Agent>>, uri: Uri, headers: HeaderMap) -> Response {
    let credentials: Vec<(&'static str, String)> = CREDENTIAL_HEADERS
        .iter()
        .filter_map(|name| {
            headers
                .get(*name)
                .and_then(|value| value.to_str().ok())
                .map(|value| (*name, value.to_owned()))
        })
        .collect();
    let paid = !credentials.is_empty();
    agent
        .seen
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Seen {
            path: uri.path().to_owned(),
            credentials,
        });
    if !paid {
        return agent.refuse(uri.path());
    }
    match uri.path() {
        "/tasks" => reply(
            StatusCode::CREATED,
            &[],
            json!({"taskId": "t-1", "status": "running"}).to_string(),
        ),
        "/entrypoints/echo/stream" => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .body(Body::from(
                "event: run-end\ndata: {\"status\":\"succeeded\",\"output\":{}}\n\n",
            ))
            .unwrap_or_else(|_| Response::new(Body::empty())),
        _ => reply(
            StatusCode::OK,
            &[],
            json!({"run_id": "r-1", "status": "succeeded", "output": {}}).to_string(),
        ),
    }
}

async fn start(answer: Answer) -> Result<(AgentCard, Arc<Agent>), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let agent = Arc::new(Agent {
        origin: origin.clone(),
        answer,
        secret: ChallengeSecret::new([7u8; 32])?,
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new().fallback(handle).with_state(agent.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((AgentCard::for_url(&origin), agent))
}

fn key_payer() -> Result<KeyPayer, PayError> {
    Ok(KeyPayer::new(LocalPayer::from_hex(ANVIL_KEY_0)?, None))
}

/// Invokes `echo` at an agent answering `answer`, with a payer.
async fn invoke(
    answer: Answer,
    payer: KeyPayer,
) -> Result<(Result<(), ClientError>, Arc<Agent>), Box<dyn std::error::Error>> {
    let (card, agent) = start(answer).await?;
    let options = InvokeOptions {
        idempotency_key: None,
        payer: Some(Arc::new(payer)),
    };
    let result = Client::new(ClientOptions::default())?
        .invoke(&card, "echo", &json!({}), &options)
        .await
        .map(|_| ());
    Ok((result, agent))
}

/// Whether a refusal is the one a case expects.
type IsExpected = fn(&Refusal) -> bool;

/// Checks the call was refused for `expected` and the agent got one request, unsigned.
fn assert_refused(
    answer: Answer,
    result: &Result<(), ClientError>,
    agent: &Agent,
    expected: IsExpected,
) {
    match result {
        Err(ClientError::Payment(PayError::Refused(refusal))) if expected(refusal) => {}
        other => panic!("{answer:?}: expected a refusal, got {other:?}"),
    }
    let seen = agent.seen();
    assert_eq!(seen.len(), 1, "{answer:?}: {seen:?}");
    assert!(
        seen.iter().all(|seen| seen.credentials.is_empty()),
        "{answer:?}: signed something: {:?}",
        seen.iter()
            .map(|seen| seen.credentials.iter().map(|c| c.0).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn hostile_402s_are_refused_and_nothing_is_signed() -> TestResult {
    let cases: [(Answer, IsExpected); 11] = [
        (Answer::ForeignOrigin, |r| {
            matches!(r, Refusal::ResourceOrigin { .. })
        }),
        (Answer::ForeignOriginV1, |r| {
            matches!(r, Refusal::ResourceOrigin { .. })
        }),
        (Answer::OtherPath, |r| {
            matches!(r, Refusal::ResourcePath { .. })
        }),
        (Answer::ForeignRealm, |r| matches!(r, Refusal::Realm { .. })),
        (Answer::OtherPortRealm, |r| {
            matches!(r, Refusal::Realm { .. })
        }),
        (Answer::ForeignSiwxDomain, |r| {
            matches!(r, Refusal::SiwxDomain { .. })
        }),
        (Answer::ForeignSiwxUri, |r| {
            matches!(r, Refusal::SiwxUri { .. })
        }),
        (Answer::ForeignSiwx401, |r| {
            matches!(r, Refusal::SiwxDomain { .. })
        }),
        (
            Answer::UnknownSiwxChain,
            |r| matches!(r, Refusal::UnknownNetwork { network } if network == "\"eip155:31337\""),
        ),
        (
            Answer::UnknownNetwork,
            |r| matches!(r, Refusal::UnknownNetwork { network } if network == "\"eip155:31337\""),
        ),
        (Answer::UnknownAsset, |r| {
            matches!(
                r,
                Refusal::UnknownAsset {
                    network: "base-sepolia",
                    ..
                }
            )
        }),
    ];
    for (answer, expected) in cases {
        let (result, agent) = invoke(answer, key_payer()?).await?;
        assert_refused(answer, &result, &agent, expected);
        // The error says why, in words, and names what was requested.
        let message = result.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("refused to sign"), "{answer:?}: {message}");
    }
    Ok(())
}

#[tokio::test]
async fn streams_and_task_creation_refuse_alike() -> TestResult {
    let (card, agent) = start(Answer::ForeignOrigin).await?;
    let client = Client::new(ClientOptions::default())?;
    let payer: Arc<dyn Payer> = Arc::new(key_payer()?);
    let stream = client
        .stream_with_options(
            &card,
            "echo",
            &json!({}),
            &InvokeOptions {
                idempotency_key: None,
                payer: Some(payer.clone()),
            },
        )
        .await;
    assert!(
        matches!(
            stream,
            Err(ClientError::Payment(PayError::Refused(
                Refusal::ResourceOrigin { .. }
            )))
        ),
        "{stream:?}"
    );
    let created = client
        .send_message(
            &card,
            "echo",
            &json!({}),
            SendOptions {
                payer: Some(payer),
                ..SendOptions::default()
            },
        )
        .await;
    let Err(failure) = created else {
        panic!("a task was created for a foreign resource");
    };
    assert_eq!(failure.response_status, Some(402));
    assert!(
        matches!(
            failure.cause,
            ClientError::Payment(PayError::Refused(Refusal::ResourceOrigin { .. }))
        ),
        "{failure:?}"
    );
    let seen = agent.seen();
    let paths: Vec<&str> = seen.iter().map(|seen| seen.path.as_str()).collect();
    assert_eq!(paths, ["/entrypoints/echo/stream", "/tasks"]);
    assert!(seen.iter().all(|seen| seen.credentials.is_empty()));
    Ok(())
}

#[tokio::test]
async fn honest_answers_are_paid_and_signed_in() -> TestResult {
    // MPP in this host's realm: paid with an Authorization credential.
    let (result, agent) = invoke(Answer::HonestMpp, key_payer()?).await?;
    assert!(result.is_ok(), "{result:?}");
    let seen = agent.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].credentials[0].0, payments::mpp::AUTHORIZATION);

    // An auth-only 401 for this host: signed in.
    let (result, agent) = invoke(Answer::HonestSiwx401, key_payer()?).await?;
    assert!(result.is_ok(), "{result:?}");
    let seen = agent.seen();
    assert_eq!(seen.len(), 2);
    let (name, value) = &seen[1].credentials[0];
    assert_eq!(*name, payments::siwx::SIGN_IN_WITH_X);
    let payload = SiwxPayload::decode(value)?;
    assert_eq!(payload.domain, agent.host());
    Ok(())
}

/// The seconds between `validAfter` and `validBefore` of the x402 credential the agent got:
/// the signer back-dates `validAfter` by ten minutes, so this is 600 + (validBefore - now).
fn signed_window(agent: &Agent) -> Result<u64, Box<dyn std::error::Error>> {
    let seen = agent.seen();
    let (_, value) = seen
        .get(1)
        .and_then(|seen| seen.credentials.first())
        .ok_or("nothing was paid")?;
    let credential = Credential::decode(X402Version::V2, value)?;
    Ok(credential.valid_before() - credential.valid_after())
}

#[tokio::test]
async fn what_is_signed_is_valid_for_the_capped_time_only() -> TestResult {
    // The agent asks for a year: the default cap signs for 300 s.
    let (result, agent) = invoke(Answer::HonestGreedy, key_payer()?).await?;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(signed_window(&agent)?, 600 + DEFAULT_MAX_VALIDITY_SECONDS);

    // A tighter cap.
    let (result, agent) = invoke(Answer::HonestGreedy, key_payer()?.max_validity(90)).await?;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(signed_window(&agent)?, 600 + 90);

    // MPP: validBefore is at most now + the cap, whatever the challenge's expiry.
    let (result, agent) = invoke(Answer::HonestMpp, key_payer()?.max_validity(30)).await?;
    assert!(result.is_ok(), "{result:?}");
    let seen = agent.seen();
    let credential = PaymentCredential::parse_authorization(&seen[1].credentials[0].1)?;
    let valid_before: u64 = credential.payload["validBefore"]
        .as_str()
        .ok_or("validBefore")?
        .parse()?;
    // Signed before this line ran: at most 30 s after now.
    assert!(valid_before <= payments::unix_now() + 30, "{valid_before}");
    Ok(())
}
