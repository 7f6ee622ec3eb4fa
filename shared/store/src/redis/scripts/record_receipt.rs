//! `record_receipt.lua`: stores the receipt of the payment that admitted a task and, when the
//! admitting claim is still live and `prepared` (or held for the settlement), hands the task to
//! its entrypoint's ready queue in the same step. A task already handed off by this payment is
//! committed as it is; on a task whose claim is otherwise gone the receipt is attached anyway.
//!
//! KEYS: task, leases, queue, wake. ARGV: task id, holder id, epoch, receipt.
//! Reply: 2 committed (queued) | 1 attached only | 0 no such task.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::redis::Core;
use crate::{Lease, ReceiptRecorded, StoreError};

lua_script!("record_receipt");

/// What a receipt script (`record_receipt.lua`, `attach_receipt.lua`) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReceiptReply {
    /// 2: the task is committed to run.
    Committed,
    /// 1: the receipt is attached, the task left as it was.
    Attached,
    /// 0 (or anything else): no such task.
    Missing,
}

impl redis::FromRedisValue for ReceiptReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        Ok(match int(&v)? {
            2 => ReceiptReply::Committed,
            1 => ReceiptReply::Attached,
            _ => ReceiptReply::Missing,
        })
    }
}

impl From<ReceiptReply> for ReceiptRecorded {
    fn from(reply: ReceiptReply) -> Self {
        match reply {
            ReceiptReply::Committed => ReceiptRecorded::Committed,
            ReceiptReply::Attached => ReceiptRecorded::Attached,
            ReceiptReply::Missing => ReceiptRecorded::Missing,
        }
    }
}

/// Records `receipt` under `lease`.
pub(crate) async fn call(
    core: &Core,
    lease: &Lease,
    receipt: &str,
) -> Result<ReceiptReply, StoreError> {
    let keys = &core.shard_of(&lease.task_id).keys;
    let mut invocation = core.scripts.record_receipt.prepare_invoke();
    invocation
        .key(keys.task(&lease.task_id))
        .key(keys.leases())
        .key(keys.queue(&lease.entrypoint))
        .key(keys.wake(&lease.entrypoint))
        .arg(&lease.task_id)
        .arg(&lease.holder)
        .arg(lease.epoch)
        .arg(receipt);
    run(core, NAME, keys, &mut invocation).await
}
