//! Design spike for P25 (issue 43): a task queue on a Redis Stream with a consumer group that
//! keeps lease fencing. Not used by the service; `tests/benches/streams_spike.rs` measures it
//! and `tests/tests/store/streams_spike.rs` proves its fences (see docs/store.md, "Toward P25").
//!
//! What maps to what:
//! - a task waiting = a stream entry not yet delivered; add = `XADD`;
//! - take = `XREADGROUP ... COUNT n ... >` by a consumer whose name carries the worker's epoch;
//! - lease = the entry's pending-entries-list (PEL) record: its owner (consumer), its age (idle
//!   time) and its delivery count, which serves as the entry's epoch;
//! - renew = [`renew.lua`]: `XCLAIM <consumer> 0 ... JUSTID` on the entries still pending to the
//!   renewing consumer with the expected count (resets idle, keeps the count);
//! - recovery = `XAUTOCLAIM` past the lease TTL (moves the entry, raises its count);
//! - fenced finish = [`finish.lua`]: one `XPENDING` over the batch's range, then result, `XACK`,
//!   `XDEL` and one `PUBLISH` for the batch;
//! - fair share = [`take_fair`]: one stream per entrypoint of a shard, read together with a
//!   `COUNT` per stream;
//! - retries with backoff (mode `Record`) = [`retry.lua`] (fenced; acknowledge, count, wait in a
//!   delayed set) and [`due.lua`] (add back as a new entry when due);
//! - cancellation (mode `Record`) = [`cancel.lua`]: the record says cancelled, the entry is
//!   acknowledged and deleted, so the holder's renewal and finish find it gone.

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use redis::{RedisResult, Script};

/// Upper bound of the one `XPENDING` a script runs over a batch's id range (`held_by.lua`); a
/// consumer with more entries pending in that range falls back to one `XPENDING` per missing item.
const PENDING_BOUND: usize = 4096;
/// Results in bucket mode are grouped per minute of the entry's creation time.
const BUCKET_MS: u64 = 60_000;

/// Where a finished task's result is kept for retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultMode {
    /// `SET {q}:r:<task> <result> PX <retention>`: one key per task.
    Key,
    /// `HSET {q}:rb:<minute of creation> <task> <result>` + `PEXPIRE` once per bucket and batch.
    Bucket,
    /// The service's shape: a task record (a hash written when the task is added, and the task
    /// in the live set) completed in place (`HSET` + `PEXPIRE`, no read), with the retained-task
    /// bookkeeping (live set, retained set, sizes, bytes) written once per batch.
    Record,
}

impl ResultMode {
    fn as_arg(self) -> &'static str {
        match self {
            ResultMode::Key => "key",
            ResultMode::Bucket => "bucket",
            ResultMode::Record => "record",
        }
    }
}

/// A task a consumer holds: its entry, the delivery count it was given (its epoch) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Stream entry id.
    pub entry: String,
    /// Delivery count when this consumer got it; a reclaim raises it.
    pub count: u64,
    /// Task id.
    pub task: String,
    /// Task payload.
    pub payload: String,
}

/// One entry of the pending entries list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Consumer that holds the entry.
    pub consumer: String,
    /// Milliseconds since the last delivery (or renewal).
    pub idle_ms: u64,
    /// Delivery count.
    pub count: u64,
}

/// One queue: a stream, its consumer group, its result keys and its event channel, all under one
/// hash tag (one Redis Cluster slot).
#[derive(Debug, Clone)]
pub struct SpikeQueue {
    tag: String,
    stream: String,
    group: String,
    channel: String,
    retention_ms: u64,
    mode: ResultMode,
    trim: bool,
    events_each: bool,
    finish: Script,
    renew: Script,
    cancel: Script,
    retry: Script,
    due: Script,
}

/// `(ms, seq)` of a stream id, for the batch's range; an unparsable id sorts first.
fn id_key(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// Lowest and highest entry id of a batch (callers pass a non-empty batch).
fn range<'a>(ids: impl Iterator<Item = &'a str>) -> (String, String) {
    let mut lo: Option<&str> = None;
    let mut hi: Option<&str> = None;
    for id in ids {
        if lo.is_none_or(|l| id_key(id) < id_key(l)) {
            lo = Some(id);
        }
        if hi.is_none_or(|h| id_key(id) > id_key(h)) {
            hi = Some(id);
        }
    }
    (lo.unwrap_or("-").to_owned(), hi.unwrap_or("+").to_owned())
}

impl SpikeQueue {
    /// A queue named `name` (used as the hash tag).
    pub fn new(name: &str, mode: ResultMode, retention_ms: u64) -> Self {
        let tag = format!("{{{name}}}");
        Self {
            stream: format!("{tag}:q"),
            group: "workers".to_owned(),
            channel: format!("{tag}:events"),
            tag,
            retention_ms,
            mode,
            trim: false,
            events_each: false,
            finish: Script::new(concat!(
                include_str!("held_by.lua"),
                include_str!("finish.lua")
            )),
            renew: Script::new(concat!(
                include_str!("held_by.lua"),
                include_str!("renew.lua")
            )),
            cancel: Script::new(include_str!("cancel.lua")),
            retry: Script::new(include_str!("retry.lua")),
            due: Script::new(include_str!("due.lua")),
        }
    }

    /// The queue of one entrypoint in shard `name`: its own stream (`{name}:q:<entrypoint>`)
    /// under the shard's hash tag, so that one `XREADGROUP` can read several entrypoints'
    /// queues of a shard ([`take_fair`]).
    pub fn for_entrypoint(
        name: &str,
        entrypoint: &str,
        mode: ResultMode,
        retention_ms: u64,
    ) -> Self {
        let mut queue = Self::new(name, mode, retention_ms);
        queue.stream = format!("{}:q:{entrypoint}", queue.tag);
        queue
    }

    /// Acknowledged entries leave the stream by one `XTRIM MINID ~` per finished batch rather
    /// than an `XDEL` each (`finish.lua`).
    pub fn trimming(mut self) -> Self {
        self.trim = true;
        self
    }

    /// Each finished task's event is also published on its own channel (`finish.lua`), as the
    /// service's subscribers of one task hear it.
    pub fn events_each(mut self) -> Self {
        self.events_each = true;
        self
    }

    /// The channel a finished task's own event is published on (with [`Self::events_each`]).
    pub fn task_channel(&self, task: &str) -> String {
        format!("{}:{task}", self.channel)
    }

    /// The stream's key.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Creates the stream and its group (reading from the start).
    pub async fn create(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.stream)
            .arg(&self.group)
            .arg("0")
            .arg("MKSTREAM")
            .exec_async(conn)
            .await
    }

    /// The live set (mode `Record`): tasks added and not finished.
    pub fn live_key(&self) -> String {
        format!("{}:live", self.tag)
    }

    /// The retained set (mode `Record`): finished tasks by expiry, with their sizes and sum.
    fn retained_keys(&self) -> [String; 3] {
        [
            format!("{}:terminal", self.tag),
            format!("{}:terminal:sizes", self.tag),
            format!("{}:terminal:bytes", self.tag),
        ]
    }

    /// The retained set's key (mode `Record`).
    pub fn terminal_key(&self) -> String {
        format!("{}:terminal", self.tag)
    }

    fn record_key(&self, task: &str) -> String {
        format!("{}:task:{task}", self.tag)
    }

    /// Mode `Record`: the task's record and its place in the live set, as a creation writes them.
    fn record_to(&self, pipe: &mut redis::Pipeline, task: &str, payload: &str) {
        if self.mode != ResultMode::Record {
            return;
        }
        pipe.cmd("HSET")
            .arg(self.record_key(task))
            .arg("st")
            .arg("running")
            .arg("sq")
            .arg(1)
            .arg("iv")
            .arg(payload)
            .ignore();
        pipe.cmd("SADD").arg(self.live_key()).arg(task).ignore();
    }

    /// One task's commands (its record in mode `Record`, then its `XADD`, last) in a pipeline.
    fn add_commands(&self, pipe: &mut redis::Pipeline, task: &str, payload: &str) {
        self.record_to(pipe, task, payload);
        pipe.cmd("XADD")
            .arg(&self.stream)
            .arg("*")
            .arg("t")
            .arg(task)
            .arg("p")
            .arg(payload);
    }

    /// Adds `XADD` for one task to a pipeline (and its record, in mode `Record`).
    pub fn add_to(&self, pipe: &mut redis::Pipeline, task: &str, payload: &str) {
        self.add_commands(pipe, task, payload);
        pipe.ignore();
    }

    /// Adds one task; returns its entry id.
    pub async fn add(
        &self,
        conn: &mut MultiplexedConnection,
        task: &str,
        payload: &str,
    ) -> RedisResult<String> {
        let mut pipe = redis::pipe();
        self.add_commands(&mut pipe, task, payload);
        let (id,): (String,) = pipe.query_async(conn).await?;
        Ok(id)
    }

    /// Takes up to `count` new tasks for `consumer`; each is delivered for the first time, so
    /// its count is 1.
    pub async fn take(
        &self,
        conn: &mut MultiplexedConnection,
        consumer: &str,
        count: usize,
    ) -> RedisResult<Vec<Lease>> {
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.group)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("STREAMS")
            .arg(&self.stream)
            .arg(">")
            .query_async(conn)
            .await?;
        let mut out = Vec::new();
        for key in reply.map(|r| r.keys).unwrap_or_default() {
            for id in key.ids {
                out.push(Lease {
                    count: 1,
                    task: id.get("t").unwrap_or_default(),
                    payload: id.get("p").unwrap_or_default(),
                    entry: id.id,
                });
            }
        }
        Ok(out)
    }

    /// Where a task's result is kept: its key, or its bucket (by the entry's creation minute).
    fn result_key(&self, lease: &Lease) -> String {
        match self.mode {
            ResultMode::Key => format!("{}:r:{}", self.tag, lease.task),
            ResultMode::Bucket => {
                format!("{}:rb:{}", self.tag, id_key(&lease.entry).0 / BUCKET_MS)
            }
            ResultMode::Record => self.record_key(&lease.task),
        }
    }

    /// Fenced completion of a batch held by `consumer`: per item true when written, false when
    /// refused (no longer pending to this consumer with that count).
    pub async fn finish(
        &self,
        conn: &mut MultiplexedConnection,
        consumer: &str,
        items: &[(&Lease, &str)],
    ) -> RedisResult<Vec<bool>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let (lo, hi) = range(items.iter().map(|(l, _)| l.entry.as_str()));
        let mut call = self.finish.prepare_invoke();
        call.key(&self.stream)
            .arg(&self.group)
            .arg(consumer)
            .arg(self.retention_ms)
            .arg(self.mode.as_arg())
            .arg(&self.channel)
            .arg(lo)
            .arg(hi)
            .arg(PENDING_BOUND)
            .arg(format!(
                "{}{}",
                if self.trim { "t" } else { "" },
                if self.events_each { "e" } else { "" }
            ));
        for (lease, result) in items {
            call.key(self.result_key(lease))
                .arg(&lease.entry)
                .arg(lease.count)
                .arg(&lease.task)
                .arg(*result);
        }
        if self.mode == ResultMode::Record {
            call.key(self.live_key());
            for key in self.retained_keys() {
                call.key(key);
            }
        }
        let written: Vec<i64> = call.invoke_async(conn).await?;
        Ok(written.into_iter().map(|w| w == 1).collect())
    }

    /// Mode `Record`: cancels a task, queued or running, by its entry (see `cancel.lua`); false
    /// when it was no longer running.
    pub async fn cancel(
        &self,
        conn: &mut MultiplexedConnection,
        task: &str,
        entry: &str,
    ) -> RedisResult<bool> {
        let done: i64 = self
            .cancel
            .key(&self.stream)
            .key(self.record_key(task))
            .key(self.live_key())
            .arg(&self.group)
            .arg(entry)
            .arg(task)
            .invoke_async(conn)
            .await?;
        Ok(done == 1)
    }

    /// The shard's delayed set (mode `Record`): tasks waiting out a retry's backoff, by due time.
    fn delayed_key(&self) -> String {
        format!("{}:delayed", self.tag)
    }

    /// Mode `Record`: the run of `lease` failed asking for another attempt in `delay_ms` (see
    /// `retry.lua`); false when refused (the lease is no longer this consumer's).
    pub async fn retry_later(
        &self,
        conn: &mut MultiplexedConnection,
        consumer: &str,
        lease: &Lease,
        delay_ms: u64,
    ) -> RedisResult<bool> {
        let done: i64 = self
            .retry
            .key(&self.stream)
            .key(self.record_key(&lease.task))
            .key(self.delayed_key())
            .arg(&self.group)
            .arg(consumer)
            .arg(&lease.entry)
            .arg(lease.count)
            .arg(&lease.task)
            .arg(delay_ms)
            .invoke_async(conn)
            .await?;
        Ok(done == 1)
    }

    /// Mode `Record`: adds up to `max` tasks whose retry is due back to the stream (`due.lua`);
    /// returns how many.
    pub async fn move_due(&self, conn: &mut MultiplexedConnection, max: usize) -> RedisResult<u64> {
        self.due
            .key(&self.stream)
            .key(self.delayed_key())
            .arg(&self.tag)
            .arg(max)
            .invoke_async(conn)
            .await
    }

    /// Renews the leases of `consumer` that are still its own; returns the entries renewed.
    pub async fn renew(
        &self,
        conn: &mut MultiplexedConnection,
        consumer: &str,
        leases: &[&Lease],
    ) -> RedisResult<Vec<String>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (lo, hi) = range(leases.iter().map(|l| l.entry.as_str()));
        let mut call = self.renew.prepare_invoke();
        call.key(&self.stream)
            .arg(&self.group)
            .arg(consumer)
            .arg(lo)
            .arg(hi)
            .arg(PENDING_BOUND);
        for lease in leases {
            call.arg(&lease.entry).arg(lease.count);
        }
        call.invoke_async(conn).await
    }

    /// Recovery: moves up to `count` entries idle longer than `ttl_ms` to `consumer` (raising
    /// their delivery count) and returns them with their new count.
    pub async fn recover(
        &self,
        conn: &mut MultiplexedConnection,
        consumer: &str,
        ttl_ms: u64,
        count: usize,
    ) -> RedisResult<Vec<Lease>> {
        type Claimed = (
            String,
            Vec<(String, Option<HashMap<String, String>>)>,
            Vec<String>,
        );
        let (_cursor, entries, _deleted): Claimed = redis::cmd("XAUTOCLAIM")
            .arg(&self.stream)
            .arg(&self.group)
            .arg(consumer)
            .arg(ttl_ms)
            .arg("0-0")
            .arg("COUNT")
            .arg(count)
            .query_async(conn)
            .await?;
        let mut out = Vec::new();
        for (entry, fields) in entries {
            let fields = fields.unwrap_or_default();
            // XAUTOCLAIM does not say the new count; the PEL does (a rare path).
            let Some(pending) = self.pending(conn, &entry).await? else {
                continue;
            };
            out.push(Lease {
                count: pending.count,
                task: fields.get("t").cloned().unwrap_or_default(),
                payload: fields.get("p").cloned().unwrap_or_default(),
                entry,
            });
        }
        Ok(out)
    }

    /// The PEL record of one entry, if it is pending.
    pub async fn pending(
        &self,
        conn: &mut MultiplexedConnection,
        entry: &str,
    ) -> RedisResult<Option<Pending>> {
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(&self.stream)
            .arg(&self.group)
            .arg(entry)
            .arg(entry)
            .arg(1)
            .query_async(conn)
            .await?;
        Ok(rows
            .into_iter()
            .next()
            .map(|(_, consumer, idle_ms, count)| Pending {
                consumer,
                idle_ms,
                count,
            }))
    }

    /// The kept result of a finished task, if any.
    pub async fn result(
        &self,
        conn: &mut MultiplexedConnection,
        lease: &Lease,
    ) -> RedisResult<Option<String>> {
        let key = self.result_key(lease);
        match self.mode {
            ResultMode::Key => redis::cmd("GET").arg(key).query_async(conn).await,
            ResultMode::Bucket => {
                redis::cmd("HGET")
                    .arg(key)
                    .arg(&lease.task)
                    .query_async(conn)
                    .await
            }
            ResultMode::Record => {
                redis::cmd("HGET")
                    .arg(key)
                    .arg("rs")
                    .query_async(conn)
                    .await
            }
        }
    }

    /// Remaining time to live of a task's result (ms; -2 when gone, -1 when without expiry).
    pub async fn result_ttl_ms(
        &self,
        conn: &mut MultiplexedConnection,
        lease: &Lease,
    ) -> RedisResult<i64> {
        redis::cmd("PTTL")
            .arg(self.result_key(lease))
            .query_async(conn)
            .await
    }
}

/// Fair share across entrypoints: one `XREADGROUP` over the queues of one shard (same hash tag,
/// same group name), asking each for up to `count_each` new entries. `COUNT` applies per stream,
/// so a busy entrypoint cannot take another's turn, and each stream is read in id order (FIFO per
/// entrypoint). Returns, per queue in the order given, the leases taken from it.
pub async fn take_fair(
    conn: &mut MultiplexedConnection,
    queues: &[&SpikeQueue],
    consumer: &str,
    count_each: usize,
) -> RedisResult<Vec<Vec<Lease>>> {
    let mut out: Vec<Vec<Lease>> = queues.iter().map(|_| Vec::new()).collect();
    let Some(first) = queues.first() else {
        return Ok(out);
    };
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&first.group)
        .arg(consumer)
        .arg("COUNT")
        .arg(count_each)
        .arg("STREAMS");
    for q in queues {
        cmd.arg(&q.stream);
    }
    for _ in queues {
        cmd.arg(">");
    }
    let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        let Some(at) = queues.iter().position(|q| q.stream == key.key) else {
            continue;
        };
        for id in key.ids {
            out[at].push(Lease {
                count: 1,
                task: id.get("t").unwrap_or_default(),
                payload: id.get("p").unwrap_or_default(),
                entry: id.id,
            });
        }
    }
    Ok(out)
}
