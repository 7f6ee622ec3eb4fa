//! What a retained task costs the in-memory store (embedded mode), counted by a global
//! allocator that tracks live heap bytes: a finished direct invoke (a task with an owner of its
//! own, subscribed to while it ran) and a finished task of a client that made many. Both must
//! stay within 2 KB, so that the embedded gateway's memory is `MAX_TASKS` × 2 KB at most.
//!
//! Heap bytes, not RSS: deterministic for a given build, so the bound is a real check, and the
//! benchmark (`scripts/bench-report`) reports the process's RSS beside it.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use protocol::TaskResult;
use protocol::token::{AccessToken, OwnerHash};
use serde_json::json;
use store::{
    Admission, Invocation, MemoryStore, MemoryStoreConfig, NewTask, TaskStore, Transition,
};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The budget per retained task the issue sets for embedded mode.
const BUDGET: isize = 2 * 1024;
const TASKS: usize = 2_000;
const LEASE: Duration = Duration::from_secs(30);
const RUN: Duration = Duration::from_secs(60);

fn store() -> MemoryStore {
    MemoryStore::new(MemoryStoreConfig {
        max_tasks: 1_000_000,
        ..MemoryStoreConfig::default()
    })
}

fn new_task(i: usize, owner: &OwnerHash) -> NewTask {
    let mut trace_context = BTreeMap::new();
    trace_context.insert(
        "traceparent".to_owned(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
    );
    NewTask {
        task_id: uuid::Uuid::new_v4().to_string(),
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: "echo".into(),
            input: json!({ "i": i }),
            context_id: None,
            metadata: None,
            trace_context,
        },
        admission: Admission::Queued,
        max_attempts: 1,
        retention: None,
        source: None,
        private_owner: false,
    }
}

/// Runs one task to completion the way a worker does (take, activate, complete).
async fn run_one(store: &MemoryStore) -> Result<(), Box<dyn std::error::Error>> {
    let claims = store
        .take_next(&["echo".into()], "w1", LEASE, 1, Duration::ZERO)
        .await?;
    let claim = claims.into_iter().next().ok_or("nothing to take")?;
    store
        .activate_execution(&claim.lease, LEASE, RUN)
        .await?
        .ok_or("fenced")?;
    let output = claim.invocation.input.clone();
    store
        .compare_and_set(
            &claim.lease.task_id,
            &[protocol::TaskStatus::Running],
            Transition::completed(TaskResult::output(output)),
            Some(&claim.lease),
        )
        .await?;
    Ok(())
}

/// Heap bytes live right now.
fn live() -> isize {
    isize::try_from(dhat::HeapStats::get().curr_bytes).unwrap_or(isize::MAX)
}

/// A finished direct invoke: its own owner, watched from creation to its terminal event.
async fn invoke_like(store: &MemoryStore, i: usize) -> Result<(), Box<dyn std::error::Error>> {
    let owner = AccessToken::generate().owner_hash();
    let task = store.create(new_task(i, &owner)).await?;
    let mut subscription = store
        .subscribe(&task.task_id, &owner, None)
        .await?
        .ok_or("own task not visible")?;
    run_one(store).await?;
    while let Some(event) = subscription.events.next().await {
        if event.event == "resultUpdate" {
            break;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_retained_task_costs_at_most_2_kb() -> Result<(), Box<dyn std::error::Error>> {
    let _profiler = dhat::Profiler::builder().testing().build();
    // Direct invokes.
    let store = store();
    for i in 0..50 {
        invoke_like(&store, i).await?;
    }
    let before = live();
    for i in 0..TASKS {
        invoke_like(&store, i).await?;
    }
    let per_invoke = (live() - before) / TASKS as isize;

    // Tasks of 64 clients.
    let store = self::store();
    let owners: Vec<OwnerHash> = (0..64)
        .map(|_| AccessToken::generate().owner_hash())
        .collect();
    for i in 0..50 {
        store.create(new_task(i, &owners[i % 64])).await?;
        run_one(&store).await?;
    }
    let before = live();
    for i in 0..TASKS {
        store.create(new_task(i, &owners[i % 64])).await?;
        run_one(&store).await?;
    }
    let per_task = (live() - before) / TASKS as isize;

    println!("heap bytes per retained task: direct invoke {per_invoke}, POST /tasks {per_task}");
    assert!(
        per_invoke <= BUDGET,
        "a finished invoke keeps {per_invoke} bytes (budget {BUDGET})"
    );
    assert!(
        per_task <= BUDGET,
        "a retained task keeps {per_task} bytes (budget {BUDGET})"
    );
    Ok(())
}
