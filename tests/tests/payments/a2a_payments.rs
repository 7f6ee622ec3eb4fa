//! Paid skills over the official A2A v1.0 bindings against real processes: the shared paying
//! cluster (a private redis-server with AOF, the dev `facilitator`, a `worker` pricing
//! `summarize` for x402 and `count` for MPP, and two `gateway`s sharing one MPP secret).
//! Credentials are signed for real with Anvil #0's key by the client crate's `KeyPayer`, from
//! the gateway's own 402, as a paying A2A client would.
//!
//! What is proven: a priced skill's `SendMessage` meets the same payment gate as `POST /tasks`
//! on both bindings (JSON-RPC `POST /a2a/jsonrpc` and HTTP+JSON `POST /a2a/v1/message:send`):
//! the unpaid call is the gate's own `402` (x402's `PAYMENT-REQUIRED` for the URL the call went
//! to, or MPP's `WWW-Authenticate: Payment`) and reserves and settles nothing; the paid call
//! answers the completed task with the skill's output as its artifact and the receipt header
//! (`PAYMENT-RESPONSE`, `Payment-Receipt`), after exactly one settlement; the same credential
//! again, at either gateway, is refused without a receipt or a second settlement; and a free
//! skill on the same gateways needs no payment over A2A.

use std::sync::atomic::{AtomicU64, Ordering};

use client::pay::PaymentHeader;
use client::{KeyPayer, Payer, PaymentRequired};
use harness::TestResult;
use harness::a2a::{A2a, Binding};
use harness::paid::{PATIENCE, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// `summarize` is paid by x402, `count` by MPP; `echo` (and the rest) are free.
const PRICES: &str = "summarize=0.001,count=0.002:mpp";
/// The prices in atomic USDC units (6 decimals).
const SUMMARIZE_PRICE: &str = "1000";
const COUNT_PRICE: &str = "2000";
const MPP_SECRET: &str = "an-mpp-secret-of-at-least-32-bytes-for-a2a-tests";
/// The A2A caller: bearer tokens have 20 to 256 characters.
const TOKEN: &str = "a2a-payments-suite-token-0123456789";
/// Anvil #0's address: who pays.
const PAYER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const TEXT: &str = "Payments over A2A go through the gateway's gate. The gate answers an unpaid \
    message with a challenge. A paid message becomes a task that runs once. The weather was \
    pleasant that afternoon.";

/// The suite's cluster: the shared paying cluster, plus A2A calls.
struct Cluster(PaidCluster);

impl std::ops::Deref for Cluster {
    type Target = PaidCluster;

    fn deref(&self) -> &PaidCluster {
        &self.0
    }
}

impl Cluster {
    async fn start() -> TestResult<Cluster> {
        let ready = |card: &Value| {
            let entrypoints = &card["entrypoints"];
            entrypoints["summarize"]["payment_protocol"] == "x402"
                && entrypoints["summarize"]["pricing"]["invoke"] == "0.001"
                && entrypoints["count"]["payment_protocol"] == "mpp"
                && entrypoints["echo"].is_object()
                && entrypoints["echo"]["pricing"].is_null()
        };
        Ok(Cluster(
            PaidCluster::start(
                &[("WORKER_PRICES", PRICES.to_owned())],
                &[
                    ("MPP_SECRET", MPP_SECRET.to_owned()),
                    // The host the gateways listen on: a paying client checks the realm
                    // names the host it requested.
                    ("MPP_REALM", "127.0.0.1".to_owned()),
                ],
                ready,
            )
            .await?,
        ))
    }

    /// The harness's A2A client of gateway `gateway`, without credentials.
    fn a2a(&self, gateway: usize) -> A2a {
        A2a::new(self.http.clone(), self.base(gateway))
    }

    /// Where `binding`'s `SendMessage` goes on gateway `gateway`.
    fn url(&self, gateway: usize, binding: Binding) -> String {
        match binding {
            Binding::JsonRpc => self.a2a(gateway).jsonrpc_url(),
            Binding::Rest => self.a2a(gateway).rest_url("/message:send"),
        }
    }

    /// `SendMessage` of `request` on `binding` at `gateway`, as the suite's caller, carrying
    /// `payment` when given. The caller is identified by the bearer token, or, when the
    /// payment itself is an `Authorization` header (MPP's `Payment` scheme), by the same token
    /// in `Task-Access-Token`, the card's second security scheme.
    async fn send(
        &self,
        gateway: usize,
        binding: Binding,
        request: &Value,
        payment: Option<&PaymentHeader>,
    ) -> TestResult<Answer> {
        let (id, body) = match binding {
            Binding::JsonRpc => {
                let (id, body) = A2a::envelope("SendMessage", request.clone());
                (Some(id), body)
            }
            Binding::Rest => (None, request.clone()),
        };
        let pays_by_authorization =
            payment.is_some_and(|payment| payment.name.eq_ignore_ascii_case("authorization"));
        let a2a = self
            .a2a(gateway)
            .with_bearer((!pays_by_authorization).then_some(TOKEN));
        let mut call = a2a
            .request(Method::POST, &self.url(gateway, binding))
            .json(&body);
        if pays_by_authorization {
            call = call.header("Task-Access-Token", TOKEN);
        }
        if let Some(payment) = payment {
            call = call.header(payment.name, &payment.value);
        }
        let answer = Answer::read(binding, call.send().await?).await?;
        if let Some(id) = id
            && answer.status == StatusCode::OK
        {
            let body = answer.json()?;
            if body["id"] != id {
                return Err(format!("the JSON-RPC answer's id is not {id}: {answer:?}").into());
            }
        }
        Ok(answer)
    }
}

/// A whole answer: status, headers and body text.
struct Answer {
    binding: Binding,
    /// The URL the request was sent to (a payer signs only for it).
    url: reqwest::Url,
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {} {:?} {}",
            self.binding, self.status, self.headers, self.text
        )
    }
}

impl Answer {
    async fn read(binding: Binding, response: reqwest::Response) -> TestResult<Answer> {
        let status = response.status();
        let url = response.url().clone();
        let headers = response.headers().clone();
        let text = tokio::time::timeout(PATIENCE, response.text()).await??;
        Ok(Answer {
            binding,
            url,
            status,
            headers,
            text,
        })
    }

    fn json(&self) -> TestResult<Value> {
        serde_json::from_str(&self.text).map_err(|err| format!("not JSON ({err}): {self:?}").into())
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The `SendMessageResponse` of a successful call (JSON-RPC: its `result`), refusing any
    /// other answer.
    fn response(&self) -> TestResult<Value> {
        if self.status != StatusCode::OK {
            return Err(format!("SendMessage was not answered 200: {self:?}").into());
        }
        let body = self.json()?;
        match self.binding {
            Binding::JsonRpc => {
                if body.get("error").is_some() || body["jsonrpc"] != "2.0" {
                    return Err(format!("SendMessage answered no result: {self:?}").into());
                }
                Ok(body["result"].clone())
            }
            Binding::Rest => Ok(body),
        }
    }

    /// The task of a successful call.
    fn task(&self) -> TestResult<Value> {
        let task = self.response()?["task"].clone();
        if !task["id"].is_string() {
            return Err(format!("SendMessage answered no task: {self:?}").into());
        }
        Ok(task)
    }

    /// What the 402 asks for, as the client crate reads it, tied to the request it answered.
    fn payment_required(&self) -> PaymentRequired {
        PaymentRequired::parse(
            self.header(payments::PAYMENT_REQUIRED),
            self.text.as_bytes(),
        )
        .with_www_authenticate(self.header(payments::mpp::WWW_AUTHENTICATE))
        .for_request(&self.url)
    }
}

/// A `SendMessageRequest` of one part for `skill` (named in `metadata.skillId`).
fn for_skill(skill: &str, part: Value) -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let message_id = format!(
        "{skill}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    json!({
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [part],
            "metadata": {"skillId": skill},
        }
    })
}

fn summarize_request() -> Value {
    for_skill("summarize", json!({"data": {"text": TEXT, "sentences": 1}}))
}

fn payer() -> TestResult<KeyPayer> {
    Ok(KeyPayer::new(LocalPayer::from_hex(PAYER_KEY)?, None))
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The data of the task's first artifact's first part.
fn artifact_data(task: &Value) -> &Value {
    &task["artifacts"][0]["parts"][0]["data"]
}

/// Checks an unpaid call's x402 402: the challenge is for `resource` at the skill's price, and
/// nothing was reserved or settled. Returns the credential answering it.
async fn x402_challenge(
    cluster: &Cluster,
    unpaid: &Answer,
    resource: &str,
) -> TestResult<PaymentHeader> {
    assert_eq!(unpaid.status, StatusCode::PAYMENT_REQUIRED, "{unpaid:?}");
    let header = unpaid
        .header(payments::PAYMENT_REQUIRED)
        .ok_or_else(|| format!("no PAYMENT-REQUIRED on the 402: {unpaid:?}"))?;
    let challenge: Value = payments::wire::decode(header)?;
    assert_eq!(challenge["x402Version"], 2, "{challenge}");
    assert_eq!(challenge["resource"]["url"], resource, "{challenge}");
    assert_eq!(
        challenge["accepts"][0]["amount"], SUMMARIZE_PRICE,
        "{challenge}"
    );
    assert!(unpaid.header(payments::PAYMENT_RESPONSE).is_none());
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);
    assert_eq!(cluster.count("{tc}:cred:*").await?, 0);
    assert_eq!(cluster.settled().await?, 0);
    let payment = payer()?.pay(&unpaid.payment_required())?;
    assert_eq!(payment.name, payments::PAYMENT_SIGNATURE);
    Ok(payment)
}

/// Checks a paid `summarize` call: 200, the completed task with the summary as its artifact,
/// and the x402 receipt naming the payer.
fn paid_summary(paid: &Answer) -> TestResult<Value> {
    let task = paid.task()?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{paid:?}");
    let output = artifact_data(&task);
    assert_eq!(output["sentences"], 1, "{paid:?}");
    assert!(
        output["summary"]
            .as_str()
            .is_some_and(|summary| !summary.is_empty() && TEXT.contains(summary)),
        "{paid:?}"
    );
    let receipt = paid
        .header(payments::PAYMENT_RESPONSE)
        .ok_or_else(|| format!("no PAYMENT-RESPONSE on the paid answer: {paid:?}"))?;
    let receipt: payments::wire::facilitator::SettleResponse = payments::wire::decode(receipt)?;
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(
        receipt.payer.as_deref().map(str::to_lowercase),
        Some(PAYER.to_lowercase())
    );
    assert!(!receipt.transaction.is_empty(), "{receipt:?}");
    Ok(task)
}

/// A replayed credential: refused with a fresh x402 challenge and no receipt.
fn refused_replay(replay: &Answer) {
    assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED, "{replay:?}");
    assert!(
        replay.header(payments::PAYMENT_REQUIRED).is_some(),
        "{replay:?}"
    );
    assert!(
        replay.header(payments::PAYMENT_RESPONSE).is_none(),
        "{replay:?}"
    );
}

#[tokio::test]
async fn an_x402_skill_over_jsonrpc_is_paid_once() -> TestResult {
    let cluster = Cluster::start().await?;
    let request = summarize_request();

    let unpaid = cluster.send(0, Binding::JsonRpc, &request, None).await?;
    let resource = format!("{}?skillId=summarize", cluster.url(0, Binding::JsonRpc));
    let payment = x402_challenge(&cluster, &unpaid, &resource).await?;

    let paid = cluster
        .send(0, Binding::JsonRpc, &request, Some(&payment))
        .await?;
    let task = paid_summary(&paid)?;
    assert_eq!(cluster.settled().await?, 1, "{paid:?}");

    // The same credential again, at either gateway: spent, refused, never settled again.
    for gateway in [0, 1] {
        let replay = cluster
            .send(gateway, Binding::JsonRpc, &request, Some(&payment))
            .await?;
        refused_replay(&replay);
    }
    assert_eq!(cluster.settled().await?, 1);
    // One task was admitted: the paid one.
    assert_eq!(cluster.count("{tc}:task:*").await?, 1, "{task}");
    Ok(())
}

#[tokio::test]
async fn an_x402_skill_over_http_json_is_paid_once() -> TestResult {
    let cluster = Cluster::start().await?;
    let request = summarize_request();

    let unpaid = cluster.send(1, Binding::Rest, &request, None).await?;
    let resource = format!("{}?skillId=summarize", cluster.url(1, Binding::Rest));
    let payment = x402_challenge(&cluster, &unpaid, &resource).await?;
    let before = cluster.settled().await?;

    let paid = cluster
        .send(1, Binding::Rest, &request, Some(&payment))
        .await?;
    paid_summary(&paid)?;
    assert_eq!(cluster.settled().await?, before + 1, "{paid:?}");

    let replay = cluster
        .send(1, Binding::Rest, &request, Some(&payment))
        .await?;
    refused_replay(&replay);
    assert_eq!(cluster.settled().await?, before + 1);
    Ok(())
}

#[tokio::test]
async fn an_mpp_skill_over_jsonrpc_is_paid_with_a_payment_credential() -> TestResult {
    let cluster = Cluster::start().await?;
    let request = for_skill("count", json!({"data": {"n": 2}}));

    let unpaid = cluster.send(0, Binding::JsonRpc, &request, None).await?;
    assert_eq!(unpaid.status, StatusCode::PAYMENT_REQUIRED, "{unpaid:?}");
    let challenge = unpaid
        .header(payments::mpp::WWW_AUTHENTICATE)
        .ok_or_else(|| format!("no WWW-Authenticate on the 402: {unpaid:?}"))?
        .to_owned();
    assert!(challenge.starts_with("Payment "), "{challenge}");
    assert_eq!(unpaid.header("cache-control"), Some("no-store"));
    let offer = payments::mpp::challenge::parse_www_authenticate(&challenge)?
        .into_iter()
        .next()
        .ok_or("no Payment challenge")??;
    assert_eq!(offer.realm, "127.0.0.1");
    assert_eq!(cluster.settled().await?, 0);
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);

    let payment = payer()?.pay(&unpaid.payment_required())?;
    assert_eq!(payment.name, payments::mpp::AUTHORIZATION);
    assert_eq!(payment.amount.to_string(), COUNT_PRICE);

    let paid = cluster
        .send(0, Binding::JsonRpc, &request, Some(&payment))
        .await?;
    let task = paid.task()?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{paid:?}");
    assert_eq!(*artifact_data(&task), json!({"count": 2}), "{paid:?}");
    let receipt = paid
        .header(payments::mpp::PAYMENT_RECEIPT)
        .ok_or_else(|| format!("no Payment-Receipt on the paid answer: {paid:?}"))?;
    let receipt = payments::mpp::Receipt::decode(receipt)?;
    assert_eq!(receipt.status, "success");
    assert_eq!(receipt.method, "evm");
    assert_eq!(receipt.challenge_id.as_deref(), Some(offer.id.as_str()));
    assert_eq!(paid.header("cache-control"), Some("private"));
    assert_eq!(cluster.settled().await?, 1);

    // The challenge is spent: the same credential again is a 402, not a second settlement.
    let replay = cluster
        .send(1, Binding::JsonRpc, &request, Some(&payment))
        .await?;
    assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED, "{replay:?}");
    assert!(replay.header(payments::mpp::PAYMENT_RECEIPT).is_none());
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test]
async fn a_free_skill_beside_priced_ones_needs_no_payment() -> TestResult {
    let cluster = Cluster::start().await?;
    for (gateway, binding) in [(0, Binding::JsonRpc), (1, Binding::Rest)] {
        let value = json!({"free": true, "binding": format!("{binding:?}")});
        let answer = cluster
            .send(
                gateway,
                binding,
                &for_skill("echo", json!({"data": value})),
                None,
            )
            .await?;
        let task = answer.task()?;
        assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{answer:?}");
        assert_eq!(*artifact_data(&task), value, "{answer:?}");
        assert!(answer.header(payments::PAYMENT_RESPONSE).is_none());
        assert!(answer.header(payments::mpp::PAYMENT_RECEIPT).is_none());
    }
    assert_eq!(cluster.settled().await?, 0);
    assert_eq!(cluster.count("{tc}:cred:*").await?, 0);
    Ok(())
}
