//! The A2A x402 extension (a2a-x402's standalone flow, mapped onto A2A v1.0) against real
//! processes: the shared paying cluster (a private redis-server with AOF, the dev
//! `facilitator`, a `worker` pricing `summarize` for x402, two `gateway`s). Payloads are signed
//! for real with Anvil #0's key by the client crate's `KeyPayer`, from the `PaymentRequired`
//! document the gateway put in the task's metadata.
//!
//! What is proven, on both bindings (JSON-RPC and HTTP+JSON): the card declares the extension;
//! a client that activates it (`A2A-Extensions`) gets a `TASK_STATE_INPUT_REQUIRED` task with
//! `payment-required` and the x402 `PaymentRequired` document, and nothing is stored, claimed
//! or settled; its payment message (the offer's task id, the request again, the
//! `PaymentPayload` in `x402.payment.payload`) runs the skill once and settles once, the task
//! answering `payment-completed` with the settlement in `x402.payment.receipts` (also on
//! `GetTask` and on a stream's first event), at either gateway; the same message again, or the
//! same payload for a new offer, settles nothing more; tampered payloads, another request or
//! caller under the offer's id and a declined payment are answered `TASK_STATE_FAILED` with
//! `payment-failed` / `payment-rejected` and `x402.payment.error`, never a 5xx, and spend
//! nothing; a client that does not activate the extension meets the header flow (`402`).

use std::sync::atomic::{AtomicU64, Ordering};

use client::{KeyPayer, Payer, PaymentRequired};
use harness::TestResult;
use harness::a2a::{A2a, Binding};
use harness::paid::{PATIENCE, PAYER, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const PRICES: &str = "summarize=0.001";
const SUMMARIZE_PRICE: &str = "1000";
/// The extension's URI (v0.2), and v0.1's.
const EXTENSION: &str = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2";
const EXTENSION_V01: &str = "https://github.com/google-a2a/a2a-x402/v0.1";
const TOKEN: &str = "a2a-x402-extension-suite-token-0123";
const OTHER_TOKEN: &str = "a2a-x402-extension-suite-someone-else";
const TEXT: &str = "Payments in A2A messages go through the gateway's gate. The offer stores \
    nothing. A paid message becomes a task that runs once. The weather was pleasant that day.";

/// The origin both gateways are reached at (behind one name, as a load balancer would have
/// them): what payments are bound to, so that an offer from one may be paid at the other.
const PUBLIC_URL: &str = "http://agents.example.test";

async fn start() -> TestResult<PaidCluster> {
    let ready = |card: &Value| card["entrypoints"]["summarize"]["payment_protocol"] == "x402";
    PaidCluster::start(
        &[("WORKER_PRICES", PRICES.to_owned())],
        &[("PUBLIC_URL", PUBLIC_URL.to_owned())],
        ready,
    )
    .await
}

/// One call's whole answer.
struct Answer {
    binding: Binding,
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {} {}", self.binding, self.status, self.body)
    }
}

impl Answer {
    /// The JSON-RPC result or the HTTP+JSON body of a `200`.
    fn result(&self) -> TestResult<&Value> {
        if self.status != StatusCode::OK {
            return Err(format!("not answered 200: {self:?}").into());
        }
        match self.binding {
            Binding::JsonRpc => match self.body.get("result") {
                Some(result) => Ok(result),
                None => Err(format!("no JSON-RPC result: {self:?}").into()),
            },
            Binding::Rest => Ok(&self.body),
        }
    }

    fn task(&self) -> TestResult<Value> {
        let task = self.result()?["task"].clone();
        if !task["id"].is_string() {
            return Err(format!("no task in the answer: {self:?}").into());
        }
        Ok(task)
    }

    /// The A2A error code: JSON-RPC's `error.code`, or HTTP+JSON's `ErrorInfo.reason`.
    fn error(&self) -> String {
        match self.binding {
            Binding::JsonRpc => self.body["error"]["code"].to_string(),
            Binding::Rest => self.body["error"]["details"][0]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

/// A client of gateway `gateway` as `token`, activating `extension` when given.
struct Client<'a> {
    cluster: &'a PaidCluster,
    gateway: usize,
    token: &'a str,
    extension: Option<&'a str>,
}

impl Client<'_> {
    fn a2a(&self) -> A2a {
        A2a::new(self.cluster.http.clone(), self.cluster.base(self.gateway))
            .with_bearer(Some(self.token))
    }

    fn url(&self, binding: Binding, method: &str) -> String {
        match binding {
            Binding::JsonRpc => self.a2a().jsonrpc_url(),
            Binding::Rest if method == "SendStreamingMessage" => {
                self.a2a().rest_url("/message:stream")
            }
            Binding::Rest => self.a2a().rest_url("/message:send"),
        }
    }

    /// [`Client::url`] at the public origin: what a payment for it names.
    fn public(&self, binding: Binding, method: &str) -> String {
        self.url(binding, method)
            .replacen(self.cluster.base(self.gateway), PUBLIC_URL, 1)
    }

    async fn call(&self, binding: Binding, method: &str, request: &Value) -> TestResult<Answer> {
        let body = match binding {
            Binding::JsonRpc => A2a::envelope(method, request.clone()).1,
            Binding::Rest => request.clone(),
        };
        let mut call = self
            .a2a()
            .request(Method::POST, &self.url(binding, method))
            .json(&body);
        if let Some(extension) = self.extension {
            call = call.header("A2A-Extensions", extension);
        }
        let response = call.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = tokio::time::timeout(PATIENCE, response.text()).await??;
        let body = if method == "SendStreamingMessage" {
            first_event(&text)?
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        };
        Ok(Answer {
            binding,
            status,
            headers,
            body,
        })
    }

    async fn send(&self, binding: Binding, request: &Value) -> TestResult<Answer> {
        self.call(binding, "SendMessage", request).await
    }

    async fn get_task(&self, binding: Binding, id: &str) -> TestResult<Value> {
        match self.a2a().get_task(binding, id, None).await? {
            Ok(task) => Ok(task),
            Err(failure) => Err(format!("GetTask {id} failed: {failure:?}").into()),
        }
    }
}

/// A stream's first event (over JSON-RPC, the answer carrying it).
fn first_event(text: &str) -> TestResult<Value> {
    let data = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .ok_or_else(|| format!("no event in the stream: {text}"))?;
    Ok(serde_json::from_str(data.trim())?)
}

/// A new `summarize` request (a fresh message id each time).
fn summarize() -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    json!({
        "message": {
            "messageId": format!("x402-ext-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)),
            "role": "ROLE_USER",
            "parts": [{"data": {"text": TEXT, "sentences": 1}}],
            "metadata": {"skillId": "summarize"},
        }
    })
}

/// The payment message answering `offer` (a payment-required task) for `request`: the
/// request again, naming the task, with `status` and `payload`.
fn payment_message(request: &Value, offer: &Value, status: &str, payload: Option<&Value>) -> Value {
    let mut message = request.clone();
    message["message"]["messageId"] = json!(format!(
        "{}-pay",
        request["message"]["messageId"].as_str().unwrap_or("m")
    ));
    message["message"]["taskId"] = offer["id"].clone();
    message["message"]["metadata"]["x402.payment.status"] = json!(status);
    if let Some(payload) = payload {
        message["message"]["metadata"]["x402.payment.payload"] = payload.clone();
    }
    message
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

fn payment_metadata(task: &Value) -> &Value {
    &task["status"]["message"]["metadata"]
}

/// Checks a payment-required answer: the unstored input-required task with the x402
/// `PaymentRequired` document for `resource`. Returns the task.
fn offered(answer: &Answer, resource: &str) -> TestResult<Value> {
    let task = answer.task()?;
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{answer:?}");
    let metadata = payment_metadata(&task);
    assert_eq!(
        metadata["x402.payment.status"], "payment-required",
        "{answer:?}"
    );
    let required = &metadata["x402.payment.required"];
    assert_eq!(required["x402Version"], 2, "{answer:?}");
    assert_eq!(required["resource"]["url"], resource, "{answer:?}");
    assert_eq!(
        required["accepts"][0]["amount"], SUMMARIZE_PRICE,
        "{answer:?}"
    );
    assert_eq!(task["contextId"], task["id"], "{answer:?}");
    assert_eq!(
        answer
            .headers
            .get("a2a-extensions")
            .and_then(|value| value.to_str().ok()),
        Some(EXTENSION),
        "{answer:?}"
    );
    Ok(task)
}

/// The x402 `PaymentPayload` answering `offer`'s `PaymentRequired`, signed by Anvil #0 for the
/// URL the request went to.
fn sign(offer: &Value, url: &str) -> TestResult<Value> {
    let required = payments::wire::encode(&payment_metadata(offer)["x402.payment.required"]);
    let required =
        PaymentRequired::parse(Some(&required), b"").for_request(&reqwest::Url::parse(url)?);
    let payer = KeyPayer::new(LocalPayer::from_hex(PAYER_KEY)?, None);
    let header = payer.pay(&required)?;
    assert_eq!(header.name, payments::PAYMENT_SIGNATURE);
    Ok(payments::wire::decode(&header.value)?)
}

/// Checks a paid answer: the offer's task completed with the summary, `payment-completed` and
/// one successful receipt naming the payer.
fn paid(task: &Value, offer: &Value) -> TestResult<()> {
    assert_eq!(task["id"], offer["id"], "{task}");
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{task}");
    let summary = &task["artifacts"][0]["parts"][0]["data"]["summary"];
    assert!(
        summary
            .as_str()
            .is_some_and(|summary| TEXT.contains(summary)),
        "{task}"
    );
    completed(task)
}

fn completed(task: &Value) -> TestResult<()> {
    let metadata = payment_metadata(task);
    assert_eq!(
        metadata["x402.payment.status"], "payment-completed",
        "{task}"
    );
    let receipts = metadata["x402.payment.receipts"]
        .as_array()
        .ok_or_else(|| format!("no receipts: {task}"))?;
    assert_eq!(receipts.len(), 1, "{task}");
    assert_eq!(receipts[0]["success"], true, "{task}");
    assert_eq!(
        receipts[0]["payer"].as_str().map(str::to_lowercase),
        Some(PAYER.to_lowercase()),
        "{task}"
    );
    assert!(
        receipts[0]["transaction"]
            .as_str()
            .is_some_and(|tx| !tx.is_empty()),
        "{task}"
    );
    Ok(())
}

/// Checks a refused payment: the unstored failed task with `status` and `code`.
fn refused(answer: &Answer, status: &str, code: &str) -> TestResult<()> {
    let task = answer.task()?;
    assert_eq!(state(&task), "TASK_STATE_FAILED", "{answer:?}");
    let metadata = payment_metadata(&task);
    assert_eq!(metadata["x402.payment.status"], status, "{answer:?}");
    assert_eq!(metadata["x402.payment.error"], code, "{answer:?}");
    assert_eq!(metadata["x402.payment.receipts"], json!([]), "{answer:?}");
    assert!(
        answer.headers.get(payments::PAYMENT_RESPONSE).is_none(),
        "{answer:?}"
    );
    Ok(())
}

/// Offers, pays and checks one `summarize` on `binding`: the offer at gateway `offer_at`, the
/// payment at `pay_at`. Returns the paid task and the payload (for replays).
async fn pay_once(
    cluster: &PaidCluster,
    binding: Binding,
    offer_at: usize,
    pay_at: usize,
) -> TestResult<(Value, Value, Value, Value)> {
    let client = |gateway| Client {
        cluster,
        gateway,
        token: TOKEN,
        extension: Some(EXTENSION),
    };
    let request = summarize();
    let settled = cluster.settled().await?;
    let tasks = cluster.count("{tc}:task:*").await?;

    let url = client(offer_at).public(binding, "SendMessage");
    let offer = offered(
        &client(offer_at).send(binding, &request).await?,
        &format!("{url}?skillId=summarize"),
    )?;
    // The offer stores, claims and settles nothing.
    assert_eq!(cluster.count("{tc}:task:*").await?, tasks);
    assert_eq!(cluster.settled().await?, settled);
    let missing = client(offer_at)
        .a2a()
        .get_task(binding, offer["id"].as_str().unwrap_or_default(), None)
        .await?;
    assert!(
        missing.is_err(),
        "an offer is not a stored task: {missing:?}"
    );

    let payload = sign(&offer, &client(pay_at).public(binding, "SendMessage"))?;
    let payment = payment_message(&request, &offer, "payment-submitted", Some(&payload));
    let answer = client(pay_at).send(binding, &payment).await?;
    let task = answer.task()?;
    paid(&task, &offer)?;
    assert!(
        answer.headers.get(payments::PAYMENT_RESPONSE).is_some(),
        "{answer:?}"
    );
    assert_eq!(cluster.settled().await?, settled + 1, "{answer:?}");
    Ok((request, offer, task, payload))
}

#[tokio::test]
async fn the_card_declares_the_extension() -> TestResult {
    let cluster = start().await?;
    let card: Value = cluster
        .http
        .get(format!(
            "{}/a2a/.well-known/agent-card.json",
            cluster.base(0)
        ))
        .send()
        .await?
        .json()
        .await?;
    let uris: Vec<&str> = card["capabilities"]["extensions"]
        .as_array()
        .map(|extensions| {
            extensions
                .iter()
                .filter_map(|e| e["uri"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(uris, [EXTENSION, EXTENSION_V01], "{card}");
    assert_eq!(
        card["capabilities"]["extensions"][0]["required"], false,
        "{card}"
    );
    Ok(())
}

#[tokio::test]
async fn a_skill_is_paid_in_band_once_over_jsonrpc() -> TestResult {
    let cluster = start().await?;
    // Offered at one gateway, paid at the other: nothing of the offer is kept anywhere.
    let (request, offer, task, payload) = pay_once(&cluster, Binding::JsonRpc, 0, 1).await?;
    let client = |gateway| Client {
        cluster: &cluster,
        gateway,
        token: TOKEN,
        extension: Some(EXTENSION),
    };
    let id = offer["id"].as_str().unwrap_or_default();

    // A later read shows the payment too, and never the payload (a credential).
    let read = client(0).get_task(Binding::JsonRpc, id).await?;
    completed(&read)?;
    let signature = payload["payload"]["signature"].as_str().unwrap_or_default();
    assert!(
        !signature.is_empty() && !read.to_string().contains(signature),
        "{read}"
    );
    assert_eq!(read["artifacts"], task["artifacts"]);

    // The same payment message again: the task is paid for; an A2A error, nothing settled.
    let again = client(0)
        .send(
            Binding::JsonRpc,
            &payment_message(&request, &offer, "payment-submitted", Some(&payload)),
        )
        .await?;
    assert_eq!(again.error(), "-32004", "{again:?}");
    // The same payload for a new offer: spent, refused in-band.
    let fresh = summarize();
    let url = client(0).public(Binding::JsonRpc, "SendMessage");
    let second = offered(
        &client(0).send(Binding::JsonRpc, &fresh).await?,
        &format!("{url}?skillId=summarize"),
    )?;
    let replay = client(1)
        .send(
            Binding::JsonRpc,
            &payment_message(&fresh, &second, "payment-submitted", Some(&payload)),
        )
        .await?;
    refused(&replay, "payment-failed", "DUPLICATE_NONCE")?;
    assert_eq!(cluster.settled().await?, 1);
    assert_eq!(cluster.count("{tc}:task:*").await?, 1);
    Ok(())
}

#[tokio::test]
async fn a_skill_is_paid_in_band_once_over_http_json_and_streamed() -> TestResult {
    let cluster = start().await?;
    pay_once(&cluster, Binding::Rest, 1, 1).await?;

    // Streamed: the first event is the task, with the payment's metadata.
    let client = Client {
        cluster: &cluster,
        gateway: 0,
        token: TOKEN,
        extension: Some(EXTENSION_V01),
    };
    let request = summarize();
    let offer = client
        .call(Binding::Rest, "SendStreamingMessage", &request)
        .await?;
    let offer_task = offer.body["task"].clone();
    assert_eq!(state(&offer_task), "TASK_STATE_INPUT_REQUIRED", "{offer:?}");
    let payload = sign(
        &offer_task,
        &client.public(Binding::Rest, "SendStreamingMessage"),
    )?;
    let streamed = client
        .call(
            Binding::Rest,
            "SendStreamingMessage",
            &payment_message(&request, &offer_task, "payment-submitted", Some(&payload)),
        )
        .await?;
    let first = &streamed.body["task"];
    assert_eq!(first["id"], offer_task["id"], "{streamed:?}");
    completed(first)?;
    assert_eq!(cluster.settled().await?, 2);
    Ok(())
}

#[tokio::test]
async fn refused_payments_are_answered_in_band_and_spend_nothing() -> TestResult {
    let cluster = start().await?;
    let client = |token| Client {
        cluster: &cluster,
        gateway: 0,
        token,
        extension: Some(EXTENSION),
    };
    for binding in [Binding::JsonRpc, Binding::Rest] {
        let settled = cluster.settled().await?;
        let tasks = cluster.count("{tc}:task:*").await?;
        let credentials = cluster.count("{tc}:cred:*").await?;
        let request = summarize();
        let url = client(TOKEN).public(binding, "SendMessage");
        let offer = offered(
            &client(TOKEN).send(binding, &request).await?,
            &format!("{url}?skillId=summarize"),
        )?;
        let payload = sign(&offer, &url)?;

        let mut forged = payload.clone();
        let signature = forged["payload"]["signature"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let flipped = if signature.ends_with('1') { "2" } else { "1" };
        forged["payload"]["signature"] =
            json!(format!("{}{flipped}", &signature[..signature.len() - 1]));
        let mut cheaper = payload.clone();
        cheaper["payload"]["authorization"]["value"] = json!("1");
        let mut elsewhere = payload.clone();
        elsewhere["resource"]["url"] = json!(format!("{PUBLIC_URL}/a2a/jsonrpc?skillId=echo"));
        for (payload, code) in [
            (&forged, "INVALID_SIGNATURE"),
            (&cheaper, "INVALID_AMOUNT"),
            (&elsewhere, "RESOURCE_MISMATCH"),
            (&json!({"x402Version": 2}), "INVALID_PAYLOAD"),
            (&json!("not a payload"), "INVALID_PAYLOAD"),
        ] {
            let answer = client(TOKEN)
                .send(
                    binding,
                    &payment_message(&request, &offer, "payment-submitted", Some(payload)),
                )
                .await?;
            refused(&answer, "payment-failed", code)?;
        }
        // No payload at all.
        let answer = client(TOKEN)
            .send(
                binding,
                &payment_message(&request, &offer, "payment-submitted", None),
            )
            .await?;
        refused(&answer, "payment-failed", "INVALID_PAYLOAD")?;

        // The genuine payload, but for another request, or from another caller.
        let mut other = request.clone();
        other["message"]["parts"] = json!([{"text": "Payment authorization provided"}]);
        let answer = client(TOKEN)
            .send(
                binding,
                &payment_message(&other, &offer, "payment-submitted", Some(&payload)),
            )
            .await?;
        refused(&answer, "payment-failed", "INVALID_REQUEST")?;
        let answer = client(OTHER_TOKEN)
            .send(
                binding,
                &payment_message(&request, &offer, "payment-submitted", Some(&payload)),
            )
            .await?;
        refused(&answer, "payment-failed", "INVALID_REQUEST")?;

        // Declined by the client.
        let answer = client(TOKEN)
            .send(
                binding,
                &payment_message(&request, &offer, "payment-rejected", None),
            )
            .await?;
        refused(&answer, "payment-rejected", "PAYMENT_REJECTED")?;

        assert_eq!(cluster.settled().await?, settled);
        assert_eq!(cluster.count("{tc}:task:*").await?, tasks);
        assert_eq!(cluster.count("{tc}:cred:*").await?, credentials);

        // Nothing was spent: the genuine payment still pays the offer.
        let answer = client(TOKEN)
            .send(
                binding,
                &payment_message(&request, &offer, "payment-submitted", Some(&payload)),
            )
            .await?;
        paid(&answer.task()?, &offer)?;
        assert_eq!(cluster.settled().await?, settled + 1);
    }
    Ok(())
}

#[tokio::test]
async fn clients_that_do_not_activate_it_pay_with_headers() -> TestResult {
    let cluster = start().await?;
    for extension in [None, Some("https://example.com/another-extension")] {
        for binding in [Binding::JsonRpc, Binding::Rest] {
            let client = Client {
                cluster: &cluster,
                gateway: 0,
                token: TOKEN,
                extension,
            };
            let answer = client.send(binding, &summarize()).await?;
            assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
            assert!(
                answer.headers.get(payments::PAYMENT_REQUIRED).is_some(),
                "{answer:?}"
            );
            assert!(answer.headers.get("a2a-extensions").is_none(), "{answer:?}");
        }
    }
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);
    Ok(())
}
