//! The failed index (`failed_page`, `failed_count`, `forget_failed`): every transition to
//! `failed` (a worker's or a caller's write, recovery's attempts-exhausted) enters the task;
//! pages come newest first, each entry with its error and attempt; an entry the operator
//! forgot leaves the index while its task stays.

use std::collections::HashSet;

use protocol::TaskError;
use store::{Admission, FailedEntry};

use crate::support::{Fx, Harness, LONG, SHORT, TestResult, outlive};

/// Every page of the fixture's entrypoint, `limit` at a time, in order.
async fn all_pages(
    fx: &Fx,
    limit: usize,
) -> Result<Vec<Vec<FailedEntry>>, crate::support::BoxError> {
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = fx
            .store
            .failed_page(&fx.entrypoint, cursor.as_ref(), limit)
            .await?;
        assert!(page.entries.len() <= limit);
        pages.push(page.entries);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(pages),
        }
        if pages.len() > 20 {
            return Err("the pages never end".into());
        }
    }
}

pub async fn failed_tasks_are_paged_newest_first(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut failed = Vec::new();
    for n in 0..5 {
        let id = fx.queued(&format!("f{n}")).await?;
        fx.fail(&id, None, TaskError::new(format!("code_{n}"), "it broke"))
            .await?;
        failed.push(id);
    }
    // Neither a completed nor a cancelled task is failed.
    let done = fx.queued("done").await?;
    fx.complete(&done, None, serde_json::json!({})).await?;
    let cancelled = fx.queued("cancelled").await?;
    fx.cancel(&cancelled).await?;
    let running = fx.queued("running").await?;

    assert_eq!(fx.store.failed_count(&fx.entrypoint).await?, 5);
    let pages = all_pages(&fx, 2).await?;
    let entries: Vec<&FailedEntry> = pages.iter().flatten().collect();
    let ids: Vec<&str> = entries.iter().map(|entry| entry.task_id.as_str()).collect();
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert_eq!(
        ids.iter().collect::<HashSet<_>>(),
        failed
            .iter()
            .map(String::as_str)
            .collect::<HashSet<_>>()
            .iter()
            .collect(),
    );
    assert!(!ids.contains(&done.as_str()) && !ids.contains(&cancelled.as_str()));
    assert!(!ids.contains(&running.as_str()));
    // Newest first: by failure time, then id, descending.
    for pair in entries.windows(2) {
        assert!(
            (pair[0].failed_at_ms, &pair[0].task_id) > (pair[1].failed_at_ms, &pair[1].task_id),
            "{pair:?}"
        );
    }
    for entry in &entries {
        let n = failed
            .iter()
            .position(|id| *id == entry.task_id)
            .ok_or("an unknown id")?;
        let error = entry.error.as_ref().ok_or("no error")?;
        assert_eq!(error.code, format!("code_{n}"));
        assert_eq!(entry.entrypoint, fx.entrypoint);
    }
    // Another entrypoint's index is its own.
    let other = fx.store.failed_page("ep-nobody-fails", None, 10).await?;
    assert!(other.entries.is_empty() && other.next.is_none());
    Ok(())
}

pub async fn recovery_failures_enter_the_failed_index(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut new = fx.new_task("abandoned", Admission::Queued);
    new.max_attempts = 1;
    let id = fx.store.create(new).await?.task_id;
    let run = fx.running("w1", SHORT, LONG).await?;
    assert_eq!(run.attempt, 1);
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.failed, [id.as_str()]);

    let page = fx.store.failed_page(&fx.entrypoint, None, 10).await?;
    assert_eq!(page.entries.len(), 1, "{page:?}");
    let entry = &page.entries[0];
    assert_eq!(entry.task_id, id);
    assert_eq!(entry.attempt, 1);
    assert_eq!(
        entry.error.as_ref().map(|error| error.code.as_str()),
        Some("task_attempts_exhausted")
    );
    assert!(page.next.is_none());
    Ok(())
}

pub async fn forgotten_failures_leave_the_index_not_the_store(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let kept = fx.queued("kept").await?;
    let forgotten = fx.queued("forgotten").await?;
    for id in [&kept, &forgotten] {
        fx.fail(id, None, TaskError::new("boom", "it broke"))
            .await?;
    }
    let removed = fx
        .store
        .forget_failed(
            &fx.entrypoint,
            &[forgotten.clone(), "never-failed".to_owned()],
        )
        .await?;
    assert_eq!(removed, 1);
    let page = fx.store.failed_page(&fx.entrypoint, None, 10).await?;
    let ids: Vec<&str> = page.entries.iter().map(|e| e.task_id.as_str()).collect();
    assert_eq!(ids, [kept.as_str()]);
    assert_eq!(fx.store.failed_count(&fx.entrypoint).await?, 1);
    assert!(fx.store.get(&forgotten).await?.is_some(), "the task stays");
    Ok(())
}
