//! Reconciliation by an operator: the credentials left `settling` (a settle answer was lost
//! and the sweep could not resolve them, for instance because the facilitator offers no
//! lookup) listed with their age, payer and amount, and resolved one at a time:
//!
//! - `lookup`: ask the facilitator now, as the sweep does ([`super::recovery::recover`]);
//! - `void`: the operator decides nothing was charged (checked on chain, say): the held task
//!   is cancelled and the record becomes `void`, keeping the decision (who, when, note);
//! - `settled`: the operator decides it was charged, naming the transaction: the receipt the
//!   payer is owed is built from it and stored with the task, which then runs.
//!
//! Only records older than the sweep's grace are listed or acted on: younger ones may still
//! have a settle call running. A record is named by the task that holds it; an id never comes
//! from the caller (it is looked up in the settling index).

use payments::wire::facilitator::SettleResponse;
use serde::Serialize;
use serde_json::Value;
use store::TaskStore;
use store::credentials::Stuck;

use super::Gate;
use super::admission::SettlingRecord;
use super::recovery::{self, Resolved};

/// Most records one listing shows (and one action looks through for its task).
pub const MAX_LISTED: usize = 1_000;
/// Longest note an operator may keep with a decision, in bytes.
pub const MAX_NOTE_BYTES: usize = 500;

/// One record left settling, as an operator sees it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Settling {
    /// The paid task held for this settlement.
    pub task_id: String,
    /// `settling` (a settle answer lost) or `reserved` (a settle=after run nobody settled).
    pub state: &'static str,
    pub age_ms: u64,
    /// What the payment payload says (for an operator's search on chain), when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

impl Settling {
    /// `stuck`, whose request reads as `record`.
    fn of(record: &SettlingRecord, stuck: &Stuck) -> Settling {
        let field = |read: fn(&SettlingRecord) -> Option<&Value>| {
            read(record).and_then(Value::as_str).map(str::to_owned)
        };
        Settling {
            task_id: stuck.holder.clone(),
            state: stuck.state.as_str(),
            age_ms: age_ms(stuck),
            payer: field(|r| {
                r.request
                    .payment_payload
                    .pointer("/payload/authorization/from")
            }),
            amount: field(|r| {
                r.request
                    .payment_payload
                    .pointer("/payload/authorization/value")
            }),
            network: field(|r| r.request.payment_requirements.get("network")),
        }
    }
}

/// What an operator asks for one record.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(tag = "action", rename_all = "lowercase", deny_unknown_fields)]
pub enum Action {
    Lookup,
    Void {
        #[serde(default)]
        note: String,
    },
    Settled {
        transaction: String,
        #[serde(default)]
        note: String,
    },
}

/// Why an action was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("no credential of task {0} is left settling (past the grace of a running settle call)")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the facilitator could not look the settlement up: {0}")]
    Facilitator(#[from] payments::FacilitatorError),
    #[error("the store failed: {0}")]
    Store(#[from] store::StoreError),
}

/// The records left settling past `grace`, oldest first.
pub async fn list(
    gate: &Gate,
    grace: std::time::Duration,
) -> Result<Vec<Settling>, ReconcileError> {
    let stuck = gate.credentials.stuck(grace, MAX_LISTED).await?;
    Ok(stuck
        .iter()
        .map(
            |stuck| match serde_json::from_str::<SettlingRecord>(&stuck.request) {
                Ok(record) => Settling::of(&record, stuck),
                // Unreadable: listed by task and age only (a lookup voids it).
                Err(_) => Settling {
                    task_id: stuck.holder.clone(),
                    state: stuck.state.as_str(),
                    age_ms: age_ms(stuck),
                    payer: None,
                    amount: None,
                    network: None,
                },
            },
        )
        .collect())
}

/// Applies `action` to the record held by `task_id`; `by` names the operator (for the kept
/// decision and the log).
pub async fn act(
    gate: &Gate,
    store: &dyn TaskStore,
    grace: std::time::Duration,
    task_id: &str,
    action: Action,
    by: &str,
) -> Result<Resolved, ReconcileError> {
    let stuck = gate
        .credentials
        .stuck(grace, MAX_LISTED)
        .await?
        .into_iter()
        .find(|stuck| stuck.holder == task_id)
        .ok_or_else(|| ReconcileError::NotFound(task_id.to_owned()))?;
    let at = protocol::Timestamp::now().as_millis();
    let resolved = match &action {
        Action::Lookup => recovery::recover(gate, store, &stuck).await?,
        Action::Void { note } => {
            check_note(note)?;
            let decision =
                serde_json::json!({"decision": "void", "by": by, "at": at, "note": note});
            recovery::unpaid(gate, store, &stuck, Some(&decision.to_string())).await
        }
        Action::Settled { transaction, note } => {
            check_note(note)?;
            check_transaction(transaction)?;
            let record = serde_json::from_str::<SettlingRecord>(&stuck.request).map_err(|_| {
                ReconcileError::Invalid(
                    "the record keeps no readable request to build a receipt from; void it instead"
                        .into(),
                )
            })?;
            let listed = Settling::of(&record, &stuck);
            let settlement = SettleResponse {
                success: true,
                error_reason: None,
                payer: listed.payer,
                transaction: transaction.clone(),
                network: listed.network.unwrap_or_default(),
                amount: listed.amount,
            };
            recovery::settled(gate, store, &stuck, &record, &settlement).await
        }
    };
    tracing::info!(%task_id, operator = %by, ?action, outcome = ?resolved, "settlement reconciled by an operator");
    Ok(resolved)
}

fn age_ms(stuck: &Stuck) -> u64 {
    u64::try_from(stuck.age.as_millis()).unwrap_or(u64::MAX)
}

fn check_note(note: &str) -> Result<(), ReconcileError> {
    if note.len() > MAX_NOTE_BYTES {
        return Err(ReconcileError::Invalid(format!(
            "note is longer than {MAX_NOTE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// An EVM transaction hash: `0x` and 64 hex digits.
fn check_transaction(transaction: &str) -> Result<(), ReconcileError> {
    let hex = transaction.strip_prefix("0x").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ReconcileError::Invalid(
            "transaction must be an EVM transaction hash (0x and 64 hex digits)".into(),
        ));
    }
    Ok(())
}
