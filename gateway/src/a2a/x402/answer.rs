//! What the extension answers: the tasks of a payment that is required, refused or failed
//! (answers only: none of them is stored, so `GetTask` does not find them), and the payment
//! metadata of a paid task.

use std::collections::HashMap;

use a2a::{Message, Part, Role, Task, TaskState, TaskStatus};
use serde_json::Value;

use super::{
    ERROR, PAYMENT_COMPLETED, PAYMENT_FAILED, PAYMENT_REJECTED, PAYMENT_REQUIRED, RECEIPTS,
    REQUIRED, STATUS,
};
use crate::core::pay::receipt::Receipt;

/// `x402.payment.error` codes: the spec's common ones, and this gateway's own for faults the
/// spec names none for.
pub mod code {
    pub const INSUFFICIENT_FUNDS: &str = "INSUFFICIENT_FUNDS";
    pub const INVALID_SIGNATURE: &str = "INVALID_SIGNATURE";
    pub const EXPIRED_PAYMENT: &str = "EXPIRED_PAYMENT";
    pub const DUPLICATE_NONCE: &str = "DUPLICATE_NONCE";
    pub const NETWORK_MISMATCH: &str = "NETWORK_MISMATCH";
    pub const INVALID_AMOUNT: &str = "INVALID_AMOUNT";
    pub const SETTLEMENT_FAILED: &str = "SETTLEMENT_FAILED";
    /// The payload was made for another resource (`resource.url`: another skill or endpoint).
    pub const RESOURCE_MISMATCH: &str = "RESOURCE_MISMATCH";
    /// The facilitator did not accept the payment, for a reason it named.
    pub const VERIFICATION_FAILED: &str = "VERIFICATION_FAILED";
    /// `x402.payment.payload` is missing or not a payment payload this gateway reads.
    pub const INVALID_PAYLOAD: &str = "INVALID_PAYLOAD";
    /// The payment message does not carry the request its task offered (or another caller
    /// sent it), or names no task this gateway offered.
    pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
    /// The offer's time passed: send the request again for a new one.
    pub const OFFER_EXPIRED: &str = "OFFER_EXPIRED";
    /// The client declined the payment (`payment-rejected`).
    pub const PAYMENT_REJECTED: &str = "PAYMENT_REJECTED";
}

/// The payment-required task: `TASK_STATE_INPUT_REQUIRED`, its status message carrying the
/// x402 `PaymentRequired` document (`required`).
pub fn required(task_id: &str, context_id: &str, required: Value) -> Task {
    let metadata = HashMap::from([
        (STATUS.to_owned(), Value::from(PAYMENT_REQUIRED)),
        (REQUIRED.to_owned(), required),
    ]);
    unstored(
        task_id,
        context_id,
        TaskState::InputRequired,
        "Payment is required: answer this task with a message carrying x402.payment.payload, \
         and the request's parts and metadata again",
        metadata,
    )
}

/// A payment that was refused (`payment-failed`) or that the client declined
/// (`payment-rejected`): `TASK_STATE_FAILED`, with the code and the reason. Nothing was
/// settled: the receipts are none.
pub fn failed(task_id: &str, context_id: &str, rejected: bool, code: &str, reason: &str) -> Task {
    let status = if rejected {
        PAYMENT_REJECTED
    } else {
        PAYMENT_FAILED
    };
    let metadata = HashMap::from([
        (STATUS.to_owned(), Value::from(status)),
        (ERROR.to_owned(), Value::from(code)),
        (RECEIPTS.to_owned(), Value::Array(Vec::new())),
    ]);
    unstored(task_id, context_id, TaskState::Failed, reason, metadata)
}

fn unstored(
    task_id: &str,
    context_id: &str,
    state: TaskState,
    text: &str,
    metadata: HashMap<String, Value>,
) -> Task {
    Task {
        id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        status: TaskStatus {
            state,
            message: Some(agent_message(task_id, context_id, text, metadata)),
            timestamp: now(),
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// Now, as a status timestamp.
fn now() -> Option<chrono::DateTime<chrono::Utc>> {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    chrono::DateTime::from_timestamp_millis(i64::try_from(millis).ok()?)
}

fn agent_message(
    task_id: &str,
    context_id: &str,
    text: &str,
    metadata: HashMap<String, Value>,
) -> Message {
    Message {
        message_id: format!("{task_id}-payment"),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::Agent,
        parts: vec![Part::text(text.to_owned())],
        metadata: Some(metadata),
        extensions: None,
        reference_task_ids: None,
    }
}

/// The settlement a stored receipt records, as `x402.payment.receipts` lists it (the x402
/// `SettleResponse`); `None` for a receipt of another rail, or unreadable.
pub fn settlement(receipt: &Receipt) -> Option<Value> {
    let x402 = [payments::PAYMENT_RESPONSE, payments::X_PAYMENT_RESPONSE];
    if !x402.contains(&receipt.header.as_str()) {
        return None;
    }
    payments::wire::decode::<Value>(&receipt.value).ok()
}

/// The payment metadata of a task paid in-band: `payment-completed` and its receipt, added to
/// its status message's metadata (an agent message saying so when it has none).
pub fn paid(task: &mut Task, settlement: Value) {
    let message = task.status.message.get_or_insert_with(|| {
        agent_message(
            &task.id,
            &task.context_id,
            "Payment settled",
            HashMap::new(),
        )
    });
    paid_message(message, settlement);
}

/// [`paid`] for a message answered instead of a task.
pub fn paid_message(message: &mut Message, settlement: Value) {
    let metadata = message.metadata.get_or_insert_with(HashMap::new);
    metadata.insert(STATUS.to_owned(), Value::from(PAYMENT_COMPLETED));
    metadata.insert(RECEIPTS.to_owned(), Value::Array(vec![settlement]));
}
