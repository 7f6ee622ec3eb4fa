//! `record_receipt.lua` in memory: stores the receipt of the payment that admitted a task
//! and, while the admitting claim holds it, hands the task to its ready queue.

use crate::memory::state::State;
use crate::{Lease, Phase, ReceiptRecorded};
use protocol::TaskStatus;

impl State {
    /// Stores a settled payment's receipt with its task; see [`TaskStore::record_receipt`].
    pub(in crate::memory) fn record_receipt(
        &mut self,
        lease: &Lease,
        receipt: &str,
        now: u64,
    ) -> ReceiptRecorded {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return ReceiptRecorded::Missing;
        };
        entry.stored.receipt = Some(receipt.to_owned());
        // A held claim is still its admission's past its deadline: nobody else can claim it.
        let held_by_lease = entry.stored.settlement_held
            && entry.stored.task.status == TaskStatus::Running
            && entry.stored.lease.as_ref().is_some_and(|current| {
                current.holder == lease.holder && current.epoch == lease.epoch
            });
        if (entry.holds(lease, now) || held_by_lease) && entry.stored.phase == Phase::Prepared {
            self.enqueue(&lease.task_id);
            self.reindex(&lease.task_id);
            ReceiptRecorded::Committed
        } else if entry.stored.task.status == TaskStatus::Running && entry.stored.handed_off {
            // Committed by this payment before (a recovered receipt, or an earlier try).
            ReceiptRecorded::Committed
        } else {
            ReceiptRecorded::Attached
        }
    }
}
