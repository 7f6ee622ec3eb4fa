//! Field names of a task hash (`{ns}:task:<id>`), two letters each.
//!
//! A retained task is mostly its hash, and Redis keeps a small hash as one listpack where every
//! field name is stored in full: names such as `admission_expires` cost more than the values
//! they label. Two-letter names cut a retained `echo` task's record by about a fifth, and with
//! it the Redis memory per retained task (see README, Performance). The Lua scripts in
//! `shared/store/lua/` spell the same names as literals; this is the one place that says what each
//! one means, and the store layout version ([`super::schema`]) changes whenever they do.

/// `running`, `completed`, `failed` or `cancelled`.
pub const STATUS: &str = "st";
/// `reserved`, `prepared`, `queued`, `active`, `waiting` or `backoff`; absent once the task is
/// terminal.
pub const PHASE: &str = "ph";
/// The owner hash (hex).
pub const OWNER: &str = "ow";
/// The context id, when the task has one.
pub const CONTEXT: &str = "cx";
/// Creation time, ms (Redis clock).
pub const CREATED: &str = "cr";
/// Time of the last transition, ms.
pub const UPDATED: &str = "up";
/// The invocation (JSON): entrypoint, input, context, metadata, trace context.
pub const INVOCATION: &str = "iv";
/// The entrypoint, until the task is terminal (then the invocation names it).
pub const ENTRYPOINT: &str = "en";
/// Activations so far.
pub const ATTEMPT: &str = "at";
/// Runs allowed before an abandoned task fails (retries a handler asked for not counted).
pub const MAX_ATTEMPTS: &str = "ma";
/// Runs of the current turn that ended asking for a retry (`retry_later.lua`); absent before
/// the first.
pub const RETRIES: &str = "ry";
/// The failure (JSON) of the last run that asked for a retry; kept once the task is terminal.
pub const LAST_ERROR: &str = "le";
/// Sequence number of the task's last event.
pub const SEQ: &str = "sq";
/// Admission deadline of a reserved task, the waiting deadline of a `waiting` one, the due
/// time of a `backoff` one, ms.
pub const ADMISSION_EXPIRES: &str = "ax";
/// The lease holder's id.
pub const LEASE_OWNER: &str = "lo";
/// The fence epoch and the lease's deadlines: `<lease deadline>:<run deadline>:<run
/// limit>:<epoch>`, ms, the run's two empty while the claim is only `prepared` and all three
/// while the task holds no lease; the epoch starts at 0 and every claim raises it. Until the
/// task is terminal (`lua/includes/lease_field.lua`; [`super::replies::lease`] reads it). One
/// field, not four as in layout 2 (`lx`, `rd`, `rm`, `ec`): each field name a script names on a
/// listpack record costs a scan of it.
pub const LEASE: &str = "ls";
/// The result (JSON) of a completed task.
pub const RESULT: &str = "rs";
/// The error (JSON) of a failed task.
pub const ERROR: &str = "er";
/// The receipt of the payment that admitted a paid task.
pub const RECEIPT: &str = "rc";
/// `1` once the task reached the ready queue; until the task is terminal.
pub const HANDED_OFF: &str = "ho";
/// `1` while a paid admission holds the task's `prepared` claim for a settlement whose outcome
/// may be unknown (`hold.lua`): out of the lease index, reaped and requeued by no sweep, claimed
/// by no one; until the task is queued or terminal.
pub const SETTLEMENT_HELD: &str = "sh";
/// What the last run of a `waiting` task asked for (JSON); only while it waits.
pub const INPUT_REQUEST: &str = "iq";
/// How long the task is kept once terminal, ms, when not the store's retention; until the
/// task is terminal.
pub const RETENTION: &str = "rt";
/// The task's earlier turns (a JSON array of `{input, metadata?, request}`), once it waited.
pub const TURNS: &str = "tu";
/// The notify channel of the process that created the task and follows it
/// (`Keys::notify_channel`); until the task is terminal.
pub const NOTIFY: &str = "nc";
/// The client address key the task's push deliveries share slots under (`push_claim.lua`):
/// its creator's (create.lua), then that of whoever puts a config on it last (push_put.lua).
pub const PUSH_ADDRESS: &str = "pa";

/// The wire view of a task, in the order `replies::task_view` reads it.
pub const VIEW: [&str; 6] = [STATUS, CONTEXT, CREATED, UPDATED, RESULT, ERROR];
