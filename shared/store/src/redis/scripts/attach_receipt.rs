//! `attach_receipt.lua`: stores a receipt recovered after its gateway lost the settle answer
//! (the settlement recovery sweep). The task was paid for, so it runs: one held for the
//! settlement is queued at once; one still `prepared` under the admitting claim without a hold
//! is marked handed off (the recovery sweep queues it when that claim expires). A task that
//! already ended keeps its status; the receipt is attached to it.
//!
//! KEYS: task, leases, queue, wake. ARGV: task id, receipt.
//! Reply: 2 committed to run | 1 attached only | 0 no such task ([`ReceiptReply`]).

pub(crate) use super::record_receipt::ReceiptReply;
use super::run;
use crate::StoreError;
use crate::lua::lua_script;
use crate::redis::Core;

lua_script!("attach_receipt");

/// Attaches `receipt` to task `task_id`, whose record names `entrypoint`.
pub(crate) async fn call(
    core: &Core,
    task_id: &str,
    entrypoint: &str,
    receipt: &str,
) -> Result<ReceiptReply, StoreError> {
    let keys = &core.shard_of(task_id).keys;
    let mut invocation = core.scripts.attach_receipt.prepare_invoke();
    invocation
        .key(keys.task(task_id))
        .key(keys.leases())
        .key(keys.queue(entrypoint))
        .key(keys.wake(entrypoint))
        .arg(task_id)
        .arg(receipt);
    run(core, NAME, keys, &mut invocation).await
}
