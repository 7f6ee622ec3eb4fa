//! The invariants of the design, checked once every process is back and every task has
//! finished: against the tasks' records and event logs in Redis, the whole key space, and what
//! the SSE subscribers saw, and the push notifications the run's webhook receiver got
//! (`push.rs`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use protocol::TaskStatus;
use redis::AsyncCommands;
use serde_json::Value;
use store::{RedisStore, StoredEvent, StoredTask, TaskStore};

use super::cluster::Cluster;
use super::load::{AckedTask, Load, SubscriberLog};
use super::push::{self, PushReceiver};
use super::report::ChaosReport;
use super::topology::{Routed, key_tags, shard_tags};
use super::{ChaosError, NAMESPACE};

/// Bound on one mid-run count comparison: during a failover the cluster client waits for the
/// new master, and a fault must not hold the injector much longer than that.
const SNAPSHOT_PATIENCE: Duration = Duration::from_secs(10);

/// How long settling took and whether everything finished.
#[derive(Debug, Default, Clone)]
pub struct SettleStats {
    pub duration: Duration,
    /// Acknowledged tasks still not terminal at the deadline.
    pub unfinished: Vec<String>,
}

pub(super) async fn store(cluster: &Cluster) -> Result<RedisStore, ChaosError> {
    let config = cluster.redis.store_config(cluster.shards);
    Ok(RedisStore::connect(config).await?)
}

fn is_terminal(task: &Option<StoredTask>) -> bool {
    task.as_ref().is_some_and(|t| t.task.status.is_terminal())
}

/// Waits until every acknowledged task is terminal and the store counts no live task.
pub async fn settle(
    cluster: &Cluster,
    load: &Load,
    patience: Duration,
) -> Result<SettleStats, ChaosError> {
    let started = Instant::now();
    let store = store(cluster).await?;
    let mut pending: Vec<String> = load.tasks().iter().map(|task| task.id.clone()).collect();
    loop {
        let states: Vec<(String, bool)> = futures::stream::iter(pending)
            .map(|id| {
                let store = &store;
                async move {
                    let done = matches!(store.get(&id).await, Ok(task) if is_terminal(&task));
                    (id, done)
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        pending = states
            .into_iter()
            .filter(|(_, done)| !done)
            .map(|(id, _)| id)
            .collect();
        let live = store.live_count().await.unwrap_or(u64::MAX);
        if pending.is_empty() && live == 0 {
            break;
        }
        if started.elapsed() > patience {
            break;
        }
        // Waiting for processes we do not control to finish their work: polling is the event.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(SettleStats {
        duration: started.elapsed(),
        unfinished: pending,
    })
}

/// Compares, in one atomic step per shard while the load runs, the store's count of
/// non-terminal tasks (the live sets that `MAX_TASKS` bounds) with the task records whose status
/// is `running`: `Ok(Some((live, running)))`, summed over the shards, when a shard's differ,
/// `Ok(None)` when they agree, `Err` when Redis could not be read (down, failing over).
///
/// The script reads keys it does not declare (`KEYS` over the shard's tag), which a standalone
/// Redis allows, and a cluster node too as long as they are in the slot of the declared key (a
/// shard's keys all are, and `KEYS` on a node lists only its own); it is a test's look at the
/// whole state, not a pattern to follow.
pub async fn count_mismatch(cluster: &Cluster) -> Result<Option<(u64, u64)>, String> {
    let snapshots = async {
        let mut redis = cluster.redis.routed().await.map_err(|e| e.to_string())?;
        let (mut live, mut running, mut differ) = (0, 0, false);
        for tag in shard_tags(cluster.shards) {
            let (shard_live, shard_running) = match &mut redis {
                Routed::Single(conn) => snapshot(conn, &tag).await,
                Routed::Cluster(conn) => snapshot(conn, &tag).await,
            }
            .map_err(|e| format!("shard {{{tag}}}: {e}"))?;
            differ |= shard_live != shard_running;
            live += shard_live;
            running += shard_running;
        }
        Ok::<_, String>((differ, live, running))
    };
    let (differ, live, running) = tokio::time::timeout(SNAPSHOT_PATIENCE, snapshots)
        .await
        .map_err(|_| format!("no answer within {SNAPSHOT_PATIENCE:?}"))??;
    Ok(differ.then_some((live, running)))
}

/// One shard's `(live count, running records)`, read atomically on the shard's node.
async fn snapshot<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    tag: &str,
) -> redis::RedisResult<(u64, u64)> {
    const SNAPSHOT: &str = r"
        local live = redis.call('SCARD', KEYS[1])
        local running = 0
        for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
          if redis.call('HGET', key, ARGV[2]) == 'running' then running = running + 1 end
        end
        return {live, running}";
    redis::Script::new(SNAPSHOT)
        .key(format!("{{{tag}}}:live"))
        .arg(format!("{{{tag}}}:task:*"))
        .arg(store::redis::fields::STATUS)
        .invoke_async(conn)
        .await
}

/// Splits `{tag}:kind:name` when `tag` is one of `tags`.
fn split_key<'k>(key: &'k str, tags: &[String]) -> Option<(&'k str, &'k str)> {
    let (tag, rest) = key.strip_prefix('{')?.split_once("}:")?;
    tags.iter().any(|known| known == tag).then_some(())?;
    Some(rest.split_once(':').unwrap_or((rest, "")))
}

/// One entry of a task's event log: `<seq>|<event>|<data>`.
fn terminal_event(event: &str, data: &Value) -> bool {
    matches!(event, "statusUpdate" | "resultUpdate" | "error")
        && data["status"].as_str().is_some_and(|s| s != "running")
}

/// Checks one acknowledged task against its record and its event log.
fn check_task(
    task: &AckedTask,
    stored: Option<&StoredTask>,
    log: &[StoredEvent],
    cancel: (bool, bool),
    report: &mut ChaosReport,
) {
    let id = &task.id;
    let (cancel_requested, cancel_acknowledged) = cancel;
    let Some(stored) = stored else {
        let when = match report.faults.redis_fault_at {
            Some(fault) if task.acked_at <= fault => {
                format!("{:.1?} before the Redis fault", fault - task.acked_at)
            }
            Some(fault) => format!("{:.1?} after the Redis fault", task.acked_at - fault),
            None => "with no Redis fault".to_owned(),
        };
        report.violation(format!(
            "acknowledged task {id} ({}) is gone (acknowledged {when})",
            task.entrypoint
        ));
        return;
    };
    let status = stored.task.status;
    if !status.is_terminal() {
        report.violation(format!("task {id} never finished: {:?}", stored.phase));
        return;
    }
    *report.statuses.entry(status.as_str()).or_default() += 1;
    if stored.attempt > 1 {
        report.rerun += 1;
    }
    if task.entrypoint.starts_with("remote-") {
        report.remote += 1;
        if stored.attempt > 1 {
            report.remote_rerun += 1;
        }
    }
    report.max_attempt = report.max_attempt.max(stored.attempt);
    // Runs a handler ended asking for a retry are not abandoned runs: `max_attempts` bounds
    // the others.
    if stored.attempt.saturating_sub(stored.retries) > stored.max_attempts {
        report.violation(format!(
            "task {id} ran {} times ({} of them retries asked for), more than its {} attempts",
            stored.attempt, stored.retries, stored.max_attempts
        ));
    }
    let error_code = stored.task.error.as_ref().map(|e| e.code.as_str());
    if error_code == Some("task_attempts_exhausted") {
        report.exhausted += 1;
    }
    match (status, task.entrypoint) {
        _ if cancel_acknowledged && status != TaskStatus::Cancelled => {
            report.violation(format!("task {id} was cancelled (200) but ended {status}"))
        }
        (TaskStatus::Cancelled, _) if !cancel_requested => {
            report.violation(format!("task {id} ended cancelled but nobody cancelled it"))
        }
        (TaskStatus::Completed, "fail") => {
            report.violation(format!("fail task {id} completed"));
        }
        (TaskStatus::Failed, "fail")
            if !matches!(
                error_code,
                Some("chaos_failure" | "task_attempts_exhausted")
            ) =>
        {
            report.violation(format!("fail task {id} failed with {error_code:?}"));
        }
        (TaskStatus::Failed, entrypoint)
            if entrypoint != "fail" && error_code != Some("task_attempts_exhausted") =>
        {
            report.violation(format!("{entrypoint} task {id} failed with {error_code:?}"));
        }
        (TaskStatus::Completed, "echo" | "remote-echo") => {
            let output = stored.task.result.as_ref().map(|result| &result.output);
            if output != Some(&task.input) {
                report.violation(format!("{} task {id} returned {output:?}", task.entrypoint));
            }
        }
        _ => {}
    }

    // The event log as subscribers read it (logged entries and the events the record
    // rebuilds): contiguous sequence numbers from 1, one terminal event and it is the last (a
    // fenced write landing after the end would follow it), progress from runs in order (an
    // older run's write landing after a newer run's would be a fenced write that got through).
    let events: Vec<(u64, &str, &Value)> = log
        .iter()
        .map(|event| (event.seq, event.event.as_str(), &event.data))
        .collect();
    if events.first().map(|first| first.0) != Some(1) {
        report.violation(format!("task {id}: its events do not start at seq 1"));
    }
    for pair in events.windows(2) {
        if pair[1].0 != pair[0].0 + 1 {
            report.violation(format!(
                "task {id}: event seq {} follows {}",
                pair[1].0, pair[0].0
            ));
        }
    }
    if let Some(last) = events.last()
        && last.0 != stored.seq
    {
        report.violation(format!(
            "task {id}: last logged event {} but the record says {}",
            last.0, stored.seq
        ));
    }
    let terminals: Vec<_> = events
        .iter()
        .enumerate()
        .filter(|(_, (_, event, data))| terminal_event(event, data))
        .collect();
    match terminals.as_slice() {
        [(position, (_, _, data))] => {
            if *position + 1 != events.len() {
                report.violation(format!("task {id}: events after the terminal event"));
            }
            if data["status"].as_str() != Some(status.as_str()) {
                report.violation(format!(
                    "task {id}: terminal event says {} but the record {status}",
                    data["status"]
                ));
            }
        }
        [] => report.violation(format!("task {id}: no terminal event in its log")),
        many => report.violation(format!("task {id}: {} terminal events", many.len())),
    }
    let mut last_attempt = 0;
    for (_, event, data) in &events {
        if *event != "progress" {
            continue;
        }
        let Some(attempt) = data["attempt"].as_u64() else {
            report.violation(format!(
                "task {id}: progress without the run's attempt: {data}"
            ));
            continue;
        };
        if attempt < last_attempt || attempt > u64::from(stored.attempt) {
            report.violation(format!(
                "task {id}: progress of run {attempt} landed after run {last_attempt} (record: attempt {})",
                stored.attempt
            ));
        }
        last_attempt = last_attempt.max(attempt);
    }
}

/// Checks what one subscriber saw: only its own task, running before terminal, exactly one
/// terminal event and the one the task really ended with.
fn check_subscriber(log: &SubscriberLog, stored: Option<&StoredTask>, report: &mut ChaosReport) {
    let id = &log.task_id;
    report.subscriber_events += log.events.len();
    report.subscriber_reconnects += log.connections.saturating_sub(1) as usize;
    if let Some(reason) = &log.gave_up {
        report.violation(format!("subscriber of {id} gave up: {reason}"));
    }
    let mut terminal_seen = None;
    for (event, task_id, status) in &log.events {
        if task_id != id {
            report.violation(format!(
                "subscriber of {id} got a {event} of task {task_id}"
            ));
        }
        if terminal_seen.is_some() {
            report.violation(format!("subscriber of {id} got {event} after the terminal"));
        }
        match status.as_deref() {
            Some("running") => {}
            Some(terminal) => terminal_seen = Some(terminal.to_owned()),
            None => report.violation(format!("subscriber of {id} got {event} without status")),
        }
    }
    let final_status = stored.map(|task| task.task.status.as_str());
    if log.gave_up.is_none() && terminal_seen.as_deref() != final_status {
        report.violation(format!(
            "subscriber of {id} saw the end as {terminal_seen:?}, the task ended {final_status:?}"
        ));
    }
}

/// Every key of the namespace (under `{tc}` or a shard's `{tc:i}`), each with a connection to
/// the node holding it: a cluster's masters are scanned one by one.
async fn namespace_keys(
    cluster: &Cluster,
) -> Result<Vec<(String, redis::aio::MultiplexedConnection)>, ChaosError> {
    let mut keys = Vec::new();
    for mut node in cluster.redis.key_holders().await? {
        // Matches `{tc}:...` and `{tc:0}:...`; the caller flags any other tag.
        let mut iter: redis::AsyncIter<String> = node.scan_match(format!("{{{NAMESPACE}*")).await?;
        let mut found = Vec::new();
        while let Some(key) = iter.next_item().await {
            found.push(key?);
        }
        drop(iter);
        keys.extend(found.into_iter().map(|key| (key, node.clone())));
    }
    Ok(keys)
}

/// The key space once everything is terminal: nothing live, nothing queued or leased, and
/// every key either expires or is one of the cluster's few permanent structures.
async fn check_keys(
    cluster: &Cluster,
    store: &RedisStore,
    acknowledged: &HashSet<&str>,
    report: &mut ChaosReport,
) -> Result<(), ChaosError> {
    let keys = namespace_keys(cluster).await?;
    let tags = key_tags(cluster.shards);
    report.keys = keys.len();
    let mut non_terminal = 0u64;
    let replay_ttl_ms = i64::try_from(store::redis::REPLAY_TTL.as_millis()).unwrap_or(i64::MAX);
    for (key, mut redis) in keys {
        let key = &key;
        let Some((kind, name)) = split_key(key, &tags) else {
            report.violation(format!("unexpected key {key}"));
            continue;
        };
        let ttl: i64 = redis.pttl(key).await?;
        let expiring = ttl > 0;
        match kind {
            "task" => {
                match store.get(name).await? {
                    Some(task) if task.task.status.is_terminal() => {}
                    Some(_) => non_terminal += 1,
                    None => {}
                }
                if !acknowledged.contains(name) {
                    report.created_unacknowledged += 1;
                }
                if !expiring {
                    report.violation(format!("task key {key} never expires"));
                }
            }
            "events" | "owner" | "registry" | "wake" | "idem" | "terminal" | "failed"
                if !expiring =>
            {
                report.violation(format!("{key} never expires"));
            }
            "events" | "owner" | "registry" | "wake" | "idem" | "terminal" | "failed" => {}
            // A script call's reply on a cluster (replay.rs): the last calls of each process,
            // and those of killed ones, until their TTL (-2: deleted since the scan by a later
            // call).
            "rp" if ttl == -1 || ttl > replay_ttl_ms => {
                report.violation(format!("{key} would outlive its call (PTTL {ttl})"));
            }
            "rp" => {}
            // A task's push configs and cursors: kept while it runs, then as long as the task
            // once its last event is delivered (a config given with a send that was refused
            // expires within a minute).
            "push" | "push-cur" if !expiring => {
                report.violation(format!("{key} never expires"));
            }
            "push" | "push-cur" => {}
            // Deliveries still owed once every final status was delivered and the outbox
            // drained (the wait's deadline passed).
            "push-out" | "push-due" => {
                report.violation(format!("{key} is left over: deliveries still owed"));
            }
            // Reported with the push checks, record by record.
            "push-exhausted" if name.is_empty() => {}
            "owner-live" => {
                let count: i64 = redis.get(key).await.unwrap_or(-1);
                if count != 0 || !expiring {
                    report.violation(format!("{key} = {count} with nothing live"));
                }
            }
            // The lease index stays for good with its pin, a member scored +inf
            // (lease_index.lua): left over only if it holds a deadline.
            "leases" if name.is_empty() && !expiring => {
                let deadlines: u64 = redis.zcount(key, "-inf", "(+inf").await?;
                if deadlines != 0 {
                    report.violation(format!(
                        "{key} holds {deadlines} lease deadlines with nothing live"
                    ));
                }
            }
            "live" | "leases" | "admissions" | "queue" => {
                report.violation(format!("{key} is left over with nothing live"));
            }
            // The registry index and its version live while workers do, and expire with them.
            _ if name.is_empty() && matches!(kind, "registry" | "registry-version") => {}
            // The namespace's layout stamp stays for good (one key per namespace).
            "layout" if name.is_empty() && !expiring => {}
            _ => report.violation(format!("unexpected key {key}")),
        }
    }
    let live = store.live_count().await?;
    if live != non_terminal {
        report.violation(format!(
            "the store counts {live} live tasks, the records say {non_terminal}"
        ));
    }
    Ok(())
}

pub async fn check(
    cluster: &Cluster,
    load: &Load,
    receiver: &PushReceiver,
    report: &mut ChaosReport,
) -> Result<(), ChaosError> {
    let store = store(cluster).await?;
    let tasks = load.tasks();
    let cancel_requested = load.cancel_requested();
    let cancel_acknowledged = load.cancel_acknowledged();
    let mut records: HashMap<String, StoredTask> = HashMap::new();
    for task in &tasks {
        let stored = store.get(&task.id).await?;
        let log = match store.events_after(&task.id, 0).await {
            Ok(log) => log,
            Err(err) => {
                report.violation(format!("task {}: unreadable event log: {err}", task.id));
                Vec::new()
            }
        };
        check_task(
            task,
            stored.as_ref(),
            &log,
            (
                cancel_requested.contains(&task.id),
                cancel_acknowledged.contains(&task.id),
            ),
            report,
        );
        if let Some(stored) = stored {
            records.insert(task.id.clone(), stored);
        }
    }
    let ids: HashSet<&str> = tasks.iter().map(|task| task.id.as_str()).collect();
    if ids.len() != tasks.len() {
        report.violation("two acknowledgements carried the same task id".into());
    }
    for subscriber in std::mem::take(&mut report.subscriber_logs) {
        check_subscriber(&subscriber, records.get(&subscriber.task_id), report);
        report.subscribers += 1;
    }
    push::check(receiver, load, &store, &records, report).await;
    check_keys(cluster, &store, &ids, report).await?;
    for violation in load.client_violations() {
        report.violation(violation);
    }
    Ok(())
}
