//! The A2A x402 extension's flow ([`crate::a2a::x402`]) in `SendMessage` and
//! `SendStreamingMessage`, for a client that activated it on a gateway that takes payments:
//!
//! 1. a message for a skill priced by x402, carrying no payment header, is answered with a
//!    payment-required task ([`offer`]): `TASK_STATE_INPUT_REQUIRED`, the x402
//!    `PaymentRequired` document in its status message's metadata, and an id that says what
//!    was offered (`x402::offer`). Nothing is stored, reserved or counted.
//! 2. the client answers that task ([`pay`]): a message naming its id, with
//!    `x402.payment.status: payment-submitted`, the x402 `PaymentPayload` in
//!    `x402.payment.payload`, and the original request's parts and metadata again. The request
//!    must be the one offered (the id's fingerprint), by the same caller, while the offer
//!    stands. The payload then meets the header credential's gate in full
//!    ([`crate::core::pay::inband`]), and the task is admitted under the offer's id by the
//!    same durable admission: one settlement, one run, the receipt stored with the task.
//! 3. the answer is the task as a paid send's is, its status message carrying
//!    `payment-completed` and the settlement in `x402.payment.receipts` (so do later reads:
//!    [`paid_task`]). A refused payload, a declined payment (`payment-rejected`) or a message
//!    that does not match its offer is answered `TASK_STATE_FAILED` with `payment-failed` or
//!    `payment-rejected` and `x402.payment.error`, and nothing is stored. A gateway that is
//!    busy (payer rate, pending places, a credential in use, capacity, a facilitator that does
//!    not answer) answers as it does a header payment (`429`, `409`, `503` with
//!    `Retry-After`): the payload was not spent, and the same message may be sent again.

use a2a::{Message, SendMessageRequest, SendMessageResponse, StreamResponse, Task};
use axum::http::StatusCode;
use axum::response::Response;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use store::registry::EntrypointInfo;

use super::message::{check_message, input_for};
use super::send::{Begun, admit_new, skill_for};
use super::{Caller, Refusal, check_id};
use crate::a2a::error::{A2aError, truncated};
use crate::a2a::mapping;
use crate::a2a::x402::answer::{self, code};
use crate::a2a::x402::{self, offer};
use crate::core::create::Admit;
use crate::core::pay::credential::{Fault, VALIDITY_SLACK_SECONDS};
use crate::core::pay::receipt::Receipt;
use crate::core::pay::{self, Priced};

/// Whether the caller activated the extension on a gateway that takes payments.
pub(super) fn activated(caller: &Caller<'_>) -> bool {
    x402::supported(caller.state, caller.headers).is_some()
}

/// Whether `message` speaks the extension: it carries an `x402.payment.status`.
pub(super) fn submitted(message: &Message) -> bool {
    message
        .metadata
        .as_ref()
        .is_some_and(|metadata| metadata.contains_key(x402::STATUS))
}

/// A request carrying a credential or a sign-in of its own is the header flow's.
fn pays_by_header(headers: &axum::http::HeaderMap) -> bool {
    [
        payments::PAYMENT_SIGNATURE,
        payments::X_PAYMENT,
        payments::siwx::SIGN_IN_WITH_X,
    ]
    .into_iter()
    .any(|name| headers.contains_key(name))
}

/// The payment-required task for a new task's `message` (its `input` read for `entrypoint`),
/// when the skill is priced by x402 and the request carries no payment header; `None`
/// otherwise (the request goes on as it would without the extension).
pub(super) async fn offer(
    caller: &Caller<'_>,
    entrypoint: &EntrypointInfo,
    message: &Message,
    input: &Value,
) -> Result<Option<Task>, Box<Response>> {
    if pays_by_header(caller.headers) {
        return Ok(None);
    }
    let Some(terms) = pay::inband::terms(
        caller.state.pay_context(),
        entrypoint,
        Priced::Task,
        caller.headers,
        caller.uri,
    )
    .await?
    else {
        return Ok(None);
    };
    let offered = offer::Offered {
        owner: &caller.owner,
        skill: &entrypoint.key,
        context_id: message.context_id.as_deref(),
        input,
    };
    let expiry = payments::unix_now()
        .saturating_add(terms.max_timeout_seconds())
        .saturating_add(VALIDITY_SLACK_SECONDS);
    let task_id = offer::issue(&offered, expiry);
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(|| task_id.clone());
    tracing::info!(%task_id, entrypoint = %entrypoint.key, "A2A x402 payment required");
    Ok(Some(answer::required(
        &task_id,
        &context_id,
        terms.required(None),
    )))
}

/// A message answering a payment-required task (see the module doc).
pub(super) async fn pay(
    caller: &Caller<'_>,
    request: SendMessageRequest,
) -> Result<Begun, Refusal> {
    let state = caller.state;
    let inline = request
        .configuration
        .and_then(|configuration| configuration.task_push_notification_config);
    let (mut message, status, payload) = split(request.message);
    // The task it names is not stored (an offer's id): only the message's own checks apply.
    let task_id = message.task_id.take();
    check_message(state, caller, &message).await?;
    let Some(task_id) = task_id else {
        return Err(A2aError::invalid_params(
            "A message carrying x402.payment.status answers a payment-required task: it names \
             the task (taskId)",
        )
        .into());
    };
    check_id("taskId", &task_id)?;
    // A context the client names must be the offer's (its own id when the request named none).
    let named_context = message
        .context_id
        .clone()
        .filter(|context| *context != task_id);
    let context_id = named_context.clone().unwrap_or_else(|| task_id.clone());
    let failed = |code: &str, reason: &str| {
        Begun::Answered(answer::failed(&task_id, &context_id, false, code, reason))
    };
    match status.as_deref() {
        Some(x402::PAYMENT_SUBMITTED) => {}
        Some(x402::PAYMENT_REJECTED) => {
            tracing::info!(%task_id, "A2A x402 payment declined by the client");
            return Ok(Begun::Answered(answer::failed(
                &task_id,
                &context_id,
                true,
                code::PAYMENT_REJECTED,
                "The client declined the payment; nothing was charged",
            )));
        }
        _ => {
            return Err(A2aError::invalid_params(
                "x402.payment.status of a client's message is payment-submitted or \
                 payment-rejected",
            )
            .into());
        }
    }
    // A message that names no skill, or parts that are no input, cannot be the offered
    // request: answered in-band like any other mismatch (a client that sends only "here is
    // the payment" is told what it must send).
    let entrypoint = match skill_for(caller, &message).await {
        Ok(entrypoint) => entrypoint,
        Err(err) if err.code == A2aError::invalid_params("").code => {
            return Ok(failed(code::INVALID_REQUEST, &err.message));
        }
        Err(err) => return Err(err.into()),
    };
    let raw_input = mapping::input_of(&message).unwrap_or(Value::Null);
    let offered = offer::Offered {
        owner: &caller.owner,
        skill: &entrypoint.key,
        context_id: named_context.as_deref(),
        input: &raw_input,
    };
    match offer::check(&task_id, &offered, payments::unix_now()) {
        Ok(()) => {}
        Err(offer::Mismatch::Expired) => {
            return Ok(failed(
                code::OFFER_EXPIRED,
                "The payment-required task's offer has expired; send the request again for a \
                 new one",
            ));
        }
        Err(offer::Mismatch::NotAnOffer) => {
            return Ok(failed(
                code::INVALID_REQUEST,
                &format!("Task {task_id} is not a payment-required task of this agent"),
            ));
        }
        Err(offer::Mismatch::OtherRequest) => {
            return Ok(failed(
                code::INVALID_REQUEST,
                "The payment message must carry the request the payment-required task was \
                 offered for (the same skill, parts and context), from the same caller",
            ));
        }
    }
    // The offered request passed these checks; they are made again as for any new task.
    let input = input_for(state, &entrypoint, &message)?;
    // An offer's id is its task's once paid: a second payment for it is refused before any
    // credential is claimed (the store refuses a duplicate id too, should two race).
    if state
        .store
        .get(&task_id)
        .await
        .map_err(A2aError::from)?
        .is_some()
    {
        return Err(A2aError::unsupported(format!(
            "Task {task_id} was paid for already (or its payment failed at settlement); it takes \
             no second payment: send the request again for a new offer"
        ))
        .into());
    }
    let Some(terms) = pay::inband::terms(
        state.pay_context(),
        &entrypoint,
        Priced::Task,
        caller.headers,
        caller.uri,
    )
    .await
    .map_err(|answer| Refusal::Http(*answer))?
    else {
        return Ok(failed(
            code::INVALID_REQUEST,
            "This skill takes no x402 payment in A2A messages",
        ));
    };
    let Some(payload) = payload else {
        return Ok(failed(
            code::INVALID_PAYLOAD,
            "x402.payment.payload (the x402 PaymentPayload) is missing",
        ));
    };
    let payment = match terms.pay(&payload) {
        Ok(payment) => payment,
        Err(unusable) => {
            tracing::info!(%task_id, reason = %unusable.reason, "A2A x402 payment payload refused");
            return Ok(failed(fault_code(unusable.fault), &unusable.reason));
        }
    };
    let admit = Admit {
        owner: caller.owner.clone(),
        entrypoint: &entrypoint.key,
        metadata: Some(mapping::metadata_of(&message, &input)),
        input,
        context_id: named_context,
        max_attempts: state.config.max_attempts,
        retention: None,
        source: caller.source.clone(),
        private_owner: false,
    };
    match admit_new(caller, Some(payment), admit, task_id.clone(), inline).await {
        Ok(mut started) => {
            started.in_band = true;
            Ok(Begun::Started(started))
        }
        Err(Refusal::Http(response)) if response.status() == StatusCode::PAYMENT_REQUIRED => {
            let (code, reason) = refusal(response).await;
            tracing::info!(%task_id, %code, "A2A x402 payment refused");
            Ok(failed(code, &reason))
        }
        Err(refusal) => Err(refusal),
    }
}

/// The message without the extension's metadata (the payload is a credential: it is never
/// stored with the task), with its status and payload.
fn split(mut message: Message) -> (Message, Option<String>, Option<Value>) {
    let Some(metadata) = message.metadata.as_mut() else {
        return (message, None, None);
    };
    let status = metadata.remove(x402::STATUS).map(|status| match status {
        Value::String(status) => status,
        other => truncated(&other.to_string()).to_owned(),
    });
    let payload = metadata.remove(x402::PAYLOAD);
    metadata.retain(|key, _| !key.starts_with("x402.payment."));
    if metadata.is_empty() {
        message.metadata = None;
    }
    (message, status, payload)
}

fn fault_code(fault: Fault) -> &'static str {
    match fault {
        Fault::Malformed => code::INVALID_PAYLOAD,
        Fault::Resource => code::RESOURCE_MISMATCH,
        Fault::Terms => code::INVALID_AMOUNT,
        Fault::Network => code::NETWORK_MISMATCH,
        Fault::Validity => code::EXPIRED_PAYMENT,
        Fault::Signature => code::INVALID_SIGNATURE,
    }
}

/// The code and reason of the gate's `402` after the offline checks (a spent credential, the
/// facilitator's refusal, a refused settlement), read back from the answer it built for a
/// header payment: the x402 body's `error`, or the API error's `message`.
async fn refusal(response: Response) -> (&'static str, String) {
    let settlement = response
        .extensions()
        .get::<protocol::ErrorCode>()
        .is_some_and(|code| *code == protocol::ErrorCode::SettlementFailed);
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let reason = match &body["error"] {
        Value::String(reason) => reason.clone(),
        error => error["message"]
            .as_str()
            .unwrap_or("The payment was refused")
            .to_owned(),
    };
    let lower = reason.to_ascii_lowercase();
    let code = if settlement {
        code::SETTLEMENT_FAILED
    } else if lower.contains("already used") {
        code::DUPLICATE_NONCE
    } else if lower.contains("insufficient") {
        code::INSUFFICIENT_FUNDS
    } else {
        code::VERIFICATION_FAILED
    };
    (code, reason)
}

/// A paid send's answer with the payment's metadata.
pub(super) fn paid_reply(value: &mut SendMessageResponse, receipt: Option<&Receipt>) {
    let Some(settlement) = receipt.and_then(answer::settlement) else {
        return;
    };
    match value {
        SendMessageResponse::Task(task) => answer::paid(task, settlement),
        SendMessageResponse::Message(message) => answer::paid_message(message, settlement),
    }
}

/// A paid stream's events: its first (the task as admitted) carries the payment's metadata.
pub(super) fn paid_events(
    events: BoxStream<'static, StreamResponse>,
    receipt: Option<&Receipt>,
) -> BoxStream<'static, StreamResponse> {
    let Some(settlement) = receipt.and_then(answer::settlement) else {
        return events;
    };
    let mut settlement = Some(settlement);
    events
        .map(move |mut event| {
            if let StreamResponse::Task(task) = &mut event
                && let Some(settlement) = settlement.take()
            {
                answer::paid(task, settlement);
            }
            event
        })
        .boxed()
}

/// A stored task paid in-band, as `GetTask` shows it: with the payment's metadata, which the
/// extension asks to be on the task's final status message.
pub(super) fn paid_task(stored: &store::StoredTask, task: &mut Task) {
    if !offer::is_offer(&stored.task.task_id) {
        return;
    }
    if let Some(settlement) = stored
        .receipt
        .as_deref()
        .and_then(Receipt::from_stored)
        .as_ref()
        .and_then(answer::settlement)
    {
        answer::paid(task, settlement);
    }
}
