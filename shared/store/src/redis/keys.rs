//! Key and channel names, one function each. Every key and channel carries its shard's hash tag
//! (`{ns}` unsharded; see `shards.rs`), so each shard lives in one Redis Cluster slot, every
//! script can declare all its keys in KEYS, and a script's `SPUBLISH` stays in its own slot.

use protocol::token::OwnerHash;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(namespace: &str) -> Self {
        Keys {
            prefix: format!("{{{namespace}}}"),
        }
    }

    /// The hash tag itself (`{ns}`): a key name in this namespace's (or shard's) slot, for
    /// routing a keyless command there.
    pub fn tag(&self) -> &str {
        &self.prefix
    }

    /// Hash: one task's record and invocation payload, under the two-letter field names of
    /// `fields.rs`: status, owner, created, updated, invocation, attempt, max_attempts, seq,
    /// and while they apply context, result, error, receipt, and, until the task is terminal,
    /// phase, entrypoint, handed-off flag, fence epoch, admission deadline, lease holder and
    /// deadline, run deadline and limit. Each transition writes it with one HSET (see
    /// `shared/store/lua/`); the terminal one also drops the fields only a runnable task needs, so a
    /// retained task is one small listpack.
    pub fn task(&self, id: &str) -> String {
        format!("{}:task:{id}", self.prefix)
    }

    /// List: the task's last events that its record cannot rebuild (a worker's progress and
    /// stream output), `<seq>|<event>|<data>`; absent for a task that emitted none. The
    /// creation and terminal events are rebuilt from the hash (`event_log.rs`).
    pub fn events(&self, id: &str) -> String {
        format!("{}:events:{id}", self.prefix)
    }

    /// Set: ids of every non-terminal task (its cardinality is what `max_tasks` bounds).
    pub fn live(&self) -> String {
        format!("{}:live", self.prefix)
    }

    /// Sorted set: the shard's retained terminal tasks, `<owner hash>:<id>` scored by when
    /// each expires (`finish_task.lua`): what creation evicts first when the retained budget
    /// is full, and what pruning walks to drop expired ids from owner indexes.
    pub fn terminal(&self) -> String {
        format!("{}:terminal", self.prefix)
    }

    /// The shard's retained-task keys, in the order every script that finishes, evicts or
    /// prunes retained tasks declares them: [`Self::terminal`], then its hash of each entry's
    /// bytes (`<owner hash>:<id>` -> bytes), then their sum (a counter), which the
    /// retained-bytes bound reads.
    pub fn retained(&self) -> [String; 3] {
        let terminal = self.terminal();
        let sizes = format!("{terminal}:sizes");
        let bytes = format!("{terminal}:bytes");
        [terminal, sizes, bytes]
    }

    /// Sorted set: the owner's task ids by creation time.
    pub fn owner_index(&self, owner: &OwnerHash) -> String {
        format!("{}:owner:{owner}", self.prefix)
    }

    /// Counter: the owner's non-terminal tasks (the index expires only when it reaches 0).
    pub fn owner_live(&self, owner: &OwnerHash) -> String {
        format!("{}:owner-live:{owner}", self.prefix)
    }

    /// Sorted set: the live task ids created from one client address (`NewTask::source`), by
    /// creation time: what `max_live_per_address` bounds. Finished ids are dropped by the next
    /// creation from the address that finds the set at its bound (`create.lua`: the scripts
    /// that finish a task cannot declare it); it expires a day after its last addition, so an
    /// address that never returns leaves nothing.
    pub fn source_live(&self, source: &str) -> String {
        format!("{}:src-live:{source}", self.prefix)
    }

    /// Sorted set: an entrypoint's ready queue, by enqueue time. Takes pop from it inside their
    /// script (`take_queued.lua`); a sorted set rather than a list so that a queued task that
    /// is cancelled leaves it in O(log N).
    pub fn queue(&self, entrypoint: &str) -> String {
        format!("{}:queue:{entrypoint}", self.prefix)
    }

    /// Sorted set: the ids of the shard's tasks of `entrypoint` that failed, scored by when
    /// (ms, Redis clock): the operator's dead-letter view (`TaskStore::failed_page`). Every
    /// terminal write to `failed` adds to it (`index_failed.lua`, called by `cas.lua`,
    /// `finish_take.lua` and `recover.lua`), keeping the newest `FAILED_KEPT` and none older
    /// than the retention, and it expires a retention after its latest failure. Per shard (a
    /// script names only keys of its own slot) and per entrypoint (a page of one entrypoint
    /// is one range read per shard).
    pub fn failed(&self, entrypoint: &str) -> String {
        format!("{}:failed:{entrypoint}", self.prefix)
    }

    /// List: doorbell that blocked workers of an entrypoint wait on.
    pub fn wake(&self, entrypoint: &str) -> String {
        format!("{}:wake:{entrypoint}", self.prefix)
    }

    /// Sorted set: task id by lease deadline.
    pub fn leases(&self) -> String {
        format!("{}:leases", self.prefix)
    }

    /// Sorted set: reserved task id by admission deadline.
    pub fn admissions(&self) -> String {
        format!("{}:admissions", self.prefix)
    }

    /// String: one worker's registry entry (JSON), expiring `ttl` after its last heartbeat.
    /// (Not `:worker:`, which prefixes the workers' cancellation channels.)
    pub fn registry_entry(&self, worker_id: &str) -> String {
        format!("{}:registry:{worker_id}", self.prefix)
    }

    /// Sorted set: registered worker id by entry expiry (ms, Redis clock); pruned on every
    /// heartbeat and expiring with its latest deadline.
    pub fn registry(&self) -> String {
        format!("{}:registry", self.prefix)
    }

    /// Pub/sub channel of one task (in the task's shard), readable only by someone who knows
    /// the owner hash.
    pub fn task_channel(&self, owner: &OwnerHash, id: &str) -> String {
        format!("{}{owner}:{id}", self.task_channel_prefix())
    }

    pub fn task_channel_prefix(&self) -> String {
        format!("{}:ch:", self.prefix)
    }

    /// Pub/sub channel of one process (in this shard) on which it hears the events of the
    /// tasks it created and follows (`publish_event.lua`): subscribed once, each message routed
    /// in the process by the task channel it names.
    pub fn notify_channel(&self, process: &str) -> String {
        format!("{}:nc:{process}", self.prefix)
    }

    /// Pub/sub channel on which a worker hears that one of its tasks in this shard was
    /// cancelled (a worker listens on every shard's).
    pub fn worker_channel(&self, worker_id: &str) -> String {
        format!("{}{worker_id}", self.worker_channel_prefix())
    }

    pub fn worker_channel_prefix(&self) -> String {
        format!("{}:worker:", self.prefix)
    }

    /// Pattern matching every key of the namespace (tests and operators use it to look for leaks).
    pub fn all_pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }

    /// String: the registry version, bumped by the registry scripts when the set of live
    /// workers or an entry changes, expiring with the index. (Not under `:registry:`, where a
    /// worker named `version` would have its entry.)
    pub fn registry_version(&self) -> String {
        format!("{}:registry-version", self.prefix)
    }

    /// Hash: paused entrypoint key -> its pause as JSON (`registry::Pause`); written only by
    /// operators, with no expiry, so a pause outlives every process.
    pub fn paused(&self) -> String {
        format!("{}:paused", self.prefix)
    }

    /// Hash: worker id -> an operator's drain request of it as JSON (`registry::Drain`).
    /// Written only for a live worker; a field goes when its worker deregisters or is pruned
    /// from the index, and the hash expires with the index (its latest deadline).
    pub fn registry_drain(&self) -> String {
        format!("{}:registry-drain", self.prefix)
    }

    /// List: the operators' audit log, newest first (`registry::AuditEntry` as JSON), trimmed
    /// to `registry::AUDIT_KEPT` entries on every append.
    pub fn audit(&self) -> String {
        format!("{}:audit", self.prefix)
    }

    /// String: the id of the process that reports the cluster gauges (the reporter lease),
    /// `SET NX PX ttl` by whoever finds it free, renewed by its holder, deleted by it on exit.
    pub fn reporter(&self) -> String {
        format!("{}:reporter", self.prefix)
    }

    /// Hash: a task's push notification configs, config id -> the config as its binding
    /// stored it (opaque JSON). Its existence is what makes `publish_event.lua` copy the
    /// task's events into [`Self::push_outbox`]. Lives as long as the task (`push/mod.rs`).
    pub fn push_configs(&self, id: &str) -> String {
        format!("{}:push:{id}", self.prefix)
    }

    /// List: a task's events not yet delivered to every one of its push configs,
    /// `<seq>|<event>|<data>` as the event log's, bounded (`publish_event.lua`).
    pub fn push_outbox(&self, id: &str) -> String {
        format!("{}:push-out:{id}", self.prefix)
    }

    /// Counter: events the shard's full push outboxes dropped, until a deliverer takes it
    /// (`push/mod.rs`; incremented by `lua/includes/push_outbox.lua`: [`Self::push_of`]).
    pub fn push_dropped(&self) -> String {
        format!("{}:push-dropped", self.prefix)
    }

    /// Hash: config id -> how far that config's deliveries got (`push::PushCursor`).
    pub fn push_cursors(&self, id: &str) -> String {
        format!("{}:push-cur:{id}", self.prefix)
    }

    /// Sorted set: ids of the shard's tasks with deliveries to make, by when (ms, Redis
    /// clock); a claimed task is scored by its claim's expiry.
    pub fn push_due(&self) -> String {
        format!("{}:push-due", self.prefix)
    }

    /// The push keys of task `id` that every script publishing its events declares, in this
    /// order (`push_keys` in `push_outbox.lua`): its configs, outbox and cursors, and the
    /// shard's due set and dropped counter. One helper, so that every caller passes them the
    /// same way.
    pub fn push_of(&self, id: &str) -> [String; 5] {
        [
            self.push_configs(id),
            self.push_outbox(id),
            self.push_cursors(id),
            self.push_due(),
            self.push_dropped(),
        ]
    }

    /// List: the shard's exhausted deliveries (JSON), newest first, bounded: kept for
    /// inspection (`taskctl`-free: `LRANGE`), counted by `taskcluster.push.exhausted`.
    pub fn push_exhausted(&self) -> String {
        format!("{}:push-exhausted", self.prefix)
    }

    /// String: the store layout the namespace's data is written in (`schema.rs`); set once,
    /// never expiring.
    pub fn layout(&self) -> String {
        format!("{}:layout", self.prefix)
    }
}
