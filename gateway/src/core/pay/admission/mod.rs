//! Durable admission of a paid request (task, invoke or stream), in the upstream's order:
//!
//! ```text
//! per-payer rate limit (see super::payer_rate: 429, nothing claimed or charged)
//!   -> wait for a pending place (per gateway and per payer: see super::pending)
//!   -> claim the credential (Redis, atomic: one credential, one execution)
//!   -> verify                                   (refused or failed: release, 402/503)
//!   -> reserve the task (durable, counted against capacity, expires if abandoned)
//!   -> claim it (prepared; renewed by a heartbeat while the facilitator works)
//!   -> credential `settling` (with the request), task held for the settlement, settle
//!                                               (refused: cancel, 402 settlement_failed;
//!                                                no answer: the task stays held, 503
//!                                                settlement_failed; recovery runs or
//!                                                cancels it once the outcome is known)
//!   == the rail is irreversible from here ==
//!   -> credential `settled` with the receipt, and, in one script, the receipt stored with the
//!      task and the task handed to the ready queue
//!                                               (any later failure: 200 with the task and
//!                                                its receipt, or 503 task_terminalization_failed;
//!                                                a terminal status is never invented)
//! ```
//!
//! A gateway killed anywhere in here loses nothing: before settlement the reservation is
//! reaped to `cancelled` and nothing was charged; once the receipt is stored the task is
//! already queued and runs. Killed between the facilitator's settle and the receipt write, it
//! leaves the credential `settling` with the facilitator request and the task held (no store
//! sweep cancels a held task, however long ago its claim expired): the settlement recovery
//! sweep of any gateway looks the settlement up, stores the receipt with the task and commits
//! it to run, or cancels it when nothing was settled (see [`super::recovery`]).
//!
//! [`admit_paid`] reads as that sequence; each step is a method of [`Attempt`] that refuses
//! with the client's answer after undoing what it must:
//!
//! - [`claim`]: capacity and payer rate, a pending place, the credential's claim, the
//!   facilitator's verdict (before anything is reserved);
//! - [`settle`]: the reservation, the credential `settling` with the task held, the settlement;
//! - [`commit`]: the receipt stored with the task and the task handed to the ready queue;
//! - [`end`]: how a task that must not run ends; [`heartbeat`]: the claim kept alive meanwhile.

mod claim;
mod commit;
mod end;
mod heartbeat;
pub mod reserve;
mod settle;

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use payments::Terms;
use payments::wire::facilitator::FacilitatorRequest;
use protocol::{Task, TaskStatus};
use store::TaskStore;

use super::receipt::Receipt;
use super::{FaultPoint, Gate, PayContext, Payment, Rail};
use crate::core::create::Admit;
use crate::http::error::ApiError;
use heartbeat::Heartbeat;

pub(super) use end::end;

/// A paid request that got through the rail: its task and receipt.
#[derive(Debug)]
pub struct Paid {
    pub task_id: String,
    /// `Running` once handed off; a terminal status when the task ended before it could run
    /// (its claim was lost after settlement): the caller answers 200 with it.
    pub status: TaskStatus,
    /// The task as created (status `running`), for callers that follow it.
    pub created: Task,
    pub receipt: Receipt,
}

/// What a paid request gets instead of a task.
#[derive(Debug)]
pub enum Refused {
    /// An answer to send as it is (402 challenge, 409, 503...).
    Answer(Response),
    /// Settled, but the task's state could not be confirmed: `503 task_terminalization_failed`
    /// with the task id and token (the caller adds the token) and the receipt.
    Unconfirmed { task_id: String, receipt: Receipt },
}

impl From<ApiError> for Refused {
    fn from(err: ApiError) -> Self {
        Refused::Answer(err.into_response())
    }
}

/// What a credential record in `settling` keeps: the facilitator request (to look a lost
/// settlement up) and, for an MPP payment, the challenge it answered (for its receipt).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettlingRecord {
    #[serde(flatten)]
    pub request: FacilitatorRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpp_challenge_id: Option<String>,
}

/// Admits `admit` as a task paid by `payment` (its credential passed the offline checks), in
/// the order of the module's diagram: the same Redis and facilitator calls, in the same order.
pub async fn admit_paid(
    state: PayContext<'_>,
    payment: Payment<'_>,
    admit: Admit<'_>,
) -> Result<Paid, Refused> {
    admit_paid_as(state, payment, admit, uuid::Uuid::new_v4().to_string()).await
}

/// [`admit_paid`] for a task id the caller chose (fresh, never used: an A2A send stores the
/// task's inline push config under it first).
pub async fn admit_paid_as(
    state: PayContext<'_>,
    payment: Payment<'_>,
    admit: Admit<'_>,
    task_id: String,
) -> Result<Paid, Refused> {
    let Payment {
        gate,
        terms,
        checked,
        rail,
        entitles,
    } = payment;
    let credential = checked.credential;
    let attempt = Attempt {
        state,
        gate,
        terms: &terms,
        rail: &rail,
        payer: checked.payer,
        store: state.store.clone(),
        entrypoint: admit.entrypoint.to_owned(),
        task_id,
        nonce_key: credential.nonce_key().to_string(),
    };

    attempt.check_capacity().await?;
    attempt.check_payer_rate().await?;
    let pending = attempt.wait_for_pending_place().await?;
    attempt.claim_credential(&credential).await?;
    let request = payments::facilitator::request(&credential, &terms);
    attempt.verify(&request).await?;
    // The pending place bounds credentials not yet known to pay; this one is.
    drop(pending);

    let (created, lease) = attempt.reserve(admit).await?;
    let mut heartbeat =
        Heartbeat::start(attempt.store.clone(), lease.clone(), gate.admission_lease);
    attempt
        .mark_settling(&request, &lease, &mut heartbeat)
        .await?;
    let settlement = attempt.settle(&request, &mut heartbeat).await?;

    // == irreversible from here: every answer carries the receipt ==
    FaultPoint::trip(gate.fault_point, FaultPoint::AfterSettle);
    let receipt = rail.receipt(&terms, credential.version, &settlement);
    if entitles {
        // The payer may sign in (SIWX) instead of paying again.
        super::siwx::entitle(gate, &attempt.entrypoint, checked.payer).await;
    }
    tracing::info!(task_id = %attempt.task_id, payer = %checked.payer, transaction = %settlement.transaction, "payment settled");
    let status = attempt.commit_receipt(&lease, &receipt).await;
    heartbeat.stop();
    let task_id = attempt.task_id;
    match status {
        Some(status) => Ok(Paid {
            task_id,
            status,
            created,
            receipt,
        }),
        None => Err(Refused::Unconfirmed { task_id, receipt }),
    }
}

/// One paid admission under way: what its steps share.
struct Attempt<'a> {
    state: PayContext<'a>,
    gate: &'a Gate,
    terms: &'a Terms,
    rail: &'a Rail<'a>,
    payer: payments::Address,
    store: Arc<dyn TaskStore>,
    entrypoint: String,
    /// The task's id, chosen before the credential is claimed (the claim names it).
    task_id: String,
    /// The credential's EIP-3009 nonce key: one credential, one execution.
    nonce_key: String,
}
