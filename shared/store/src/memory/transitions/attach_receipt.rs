//! `attach_receipt.lua` in memory: stores a receipt recovered after its gateway lost the
//! settle answer; the paid-for task runs (at once when held, else when its claim expires).

use crate::memory::state::State;
use crate::{Phase, ReceiptRecorded};
use protocol::TaskStatus;

impl State {
    /// See [`TaskStore::attach_receipt`].
    pub(in crate::memory) fn attach_receipt(
        &mut self,
        task_id: &str,
        receipt: &str,
    ) -> ReceiptRecorded {
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return ReceiptRecorded::Missing;
        };
        entry.stored.receipt = Some(receipt.to_owned());
        if entry.stored.task.status == TaskStatus::Running && entry.stored.phase == Phase::Prepared
        {
            if entry.stored.settlement_held {
                // Paid for: it runs now.
                self.enqueue(task_id);
                self.reindex(task_id);
            } else {
                // Recovery queues it when the admitting claim expires.
                entry.stored.handed_off = true;
            }
            ReceiptRecorded::Committed
        } else {
            ReceiptRecorded::Attached
        }
    }
}
