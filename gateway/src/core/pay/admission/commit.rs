//! The step after the settlement, when the rail is irreversible: the credential `settled` with
//! the receipt and, in one script, the receipt stored with the task and the task handed to the
//! ready queue. Its outcome is the task's status, never invented.

use std::time::Duration;

use protocol::TaskStatus;
use store::credentials::CredentialState;
use store::{Lease, ReceiptRecorded, TaskStore};

use super::Attempt;
use super::end::end;
use crate::core::pay::FaultPoint;
use crate::core::pay::receipt::Receipt;

/// Times the receipt write is tried before the answer says the task's state is unconfirmed.
const RECEIPT_WRITE_TRIES: u32 = 3;

impl Attempt<'_> {
    /// The task's status once its receipt is stored: `Running` when it was queued with it, a
    /// terminal status when its claim was lost first; `None` when that is unconfirmed (the
    /// caller answers `503 task_terminalization_failed` with the receipt).
    pub(super) async fn commit_receipt(
        &self,
        lease: &Lease,
        receipt: &Receipt,
    ) -> Option<TaskStatus> {
        let task_id = &self.task_id;
        // The credential record and the task are written at once: independent keys, and the
        // answer waits for both anyway.
        let (settled, recorded) = tokio::join!(
            self.gate.credentials.advance(
                &self.nonce_key,
                task_id,
                CredentialState::Settling,
                CredentialState::Settled,
                Some(&receipt.value),
            ),
            record_receipt(self.store.as_ref(), lease, receipt),
        );
        if let Err(err) = settled {
            // The record stays `settling`, which refuses reuse just as well.
            tracing::warn!(%task_id, error = %err, "could not mark a credential settled");
        }
        match recorded {
            // Stored and queued in one step: it runs.
            Some(ReceiptRecorded::Committed) => {
                FaultPoint::trip(self.gate.fault_point, FaultPoint::AfterReceipt);
                Some(TaskStatus::Running)
            }
            // The claim was lost before the receipt landed (reaped or cancelled): the task
            // must not run, so it ends, and the payer reads that end with its receipt. Its
            // state is never invented: unreadable or unwritable is "unconfirmed".
            Some(ReceiptRecorded::Attached) => end(self.store.as_ref(), task_id, &self.entrypoint)
                .await
                .ok()
                .flatten(),
            Some(ReceiptRecorded::Missing) | None => None,
        }
    }
}

async fn record_receipt(
    store: &dyn TaskStore,
    lease: &Lease,
    receipt: &Receipt,
) -> Option<ReceiptRecorded> {
    let stored = receipt.to_stored();
    for attempt in 1..=RECEIPT_WRITE_TRIES {
        match store.record_receipt(lease, &stored).await {
            Ok(recorded) => return Some(recorded),
            Err(err) => {
                tracing::warn!(task_id = %lease.task_id, attempt, error = %err, "could not store a payment receipt");
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
        }
    }
    None
}
