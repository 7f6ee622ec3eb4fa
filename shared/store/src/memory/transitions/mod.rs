//! The memory store's transitions, one file per task-store Lua script (`redis/scripts/`), each
//! an `impl State` block: `claim.rs` here does in one process what `claim.lua` does in Redis,
//! so that the two read side by side and the conformance suite holds both to one contract.
//! Each method is one whole transition under the store's lock at time `now`; the bookkeeping
//! they share (statuses, queues, indexes) is `state.rs`'s.
//!
//! Scripts without a file here: `due.lua` (the `due` index, read in `recover.rs`);
//! `finish_take.lua` (a finish and a take are two transitions under one lock: `cas.rs`,
//! `take.rs`); `list_page.lua` (`listing.rs`); `layout.lua` (nothing persists).

mod activate;
mod attach_receipt;
mod await_input;
mod cas;
mod claim;
mod create;
mod emit;
mod hand_off;
mod hold;
mod record_receipt;
mod recover;
mod renew;
mod resume;
mod retry_later;
mod take;
