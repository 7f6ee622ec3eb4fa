//! `list`: one owner's tasks, newest first, filtered by context and status, paged.

use std::time::Duration;

use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::{Admission, ListQuery, MAX_LIST_LIMIT, TaskPage, Transition};

use crate::support::{BoxError, Fx, Harness, LONG, TestResult, other_owner};

/// Creates queued tasks `names` in order, each in a later millisecond than the one before (so
/// "newest first" does not depend on how a store breaks ties); returns their ids.
async fn create_in_order(
    fx: &Fx,
    names: &[&str],
    context: impl Fn(usize) -> Option<String>,
) -> Result<Vec<String>, BoxError> {
    let mut ids = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let mut new = fx.new_task(name, Admission::Queued);
        new.invocation.context_id = context(n);
        ids.push(fx.store.create(new).await?.task_id);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(ids)
}

fn ids(page: &TaskPage) -> Vec<String> {
    page.tasks.iter().map(|task| task.task_id.clone()).collect()
}

fn newest_first(ids: &[String]) -> Vec<String> {
    ids.iter().rev().cloned().collect()
}

pub async fn lists_the_owners_tasks_newest_first(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let created = create_in_order(&fx, &["a", "b", "c"], |_| None).await?;
    let mut foreign = fx.new_task("foreign", Admission::Queued);
    foreign.owner = other_owner();
    fx.store.create(foreign).await?;

    let page = fx.store.list(&fx.owner, &ListQuery::default()).await?;
    assert_eq!(ids(&page), newest_first(&created));
    assert_eq!((page.total, page.has_more), (3, false));
    assert!(
        page.tasks
            .windows(2)
            .all(|pair| pair[0].created_at > pair[1].created_at)
    );
    let stored = fx.stored(&created[0]).await?;
    assert_eq!(page.tasks[2], stored.task);
    Ok(())
}

pub async fn filters_by_context_and_status(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let names = ["a", "b", "c", "d", "e"];
    // Contexts: a, c, e in ctx-1; b, d in ctx-2.
    let created = create_in_order(&fx, &names, |n| Some(format!("ctx-{}", 1 + n % 2))).await?;
    assert!(fx.cancel(&created[0]).await?.applied().is_some());
    assert!(fx.cancel(&created[1]).await?.applied().is_some());

    let query = |context: Option<&str>, statuses: &[TaskStatus]| ListQuery {
        context_id: context.map(str::to_owned),
        statuses: statuses.to_vec(),
        ..ListQuery::default()
    };
    let cases = [
        (query(Some("ctx-1"), &[]), vec![4, 2, 0]),
        (query(Some("ctx-2"), &[]), vec![3, 1]),
        (query(Some("ctx-3"), &[]), vec![]),
        (query(None, &[TaskStatus::Cancelled]), vec![1, 0]),
        (query(None, &[TaskStatus::Running]), vec![4, 3, 2]),
        (
            query(None, &[TaskStatus::Completed, TaskStatus::Cancelled]),
            vec![1, 0],
        ),
        (query(Some("ctx-1"), &[TaskStatus::Running]), vec![4, 2]),
        (query(None, &TaskStatus::ALL), vec![4, 3, 2, 1, 0]),
    ];
    for (query, expected) in cases {
        let page = fx.store.list(&fx.owner, &query).await?;
        let expected: Vec<_> = expected.iter().map(|&n| created[n].clone()).collect();
        assert_eq!(ids(&page), expected, "{query:?}");
        assert_eq!(page.total, expected.len() as u64, "{query:?}");
        assert!(!page.has_more);
    }
    Ok(())
}

pub async fn pages_with_total_and_has_more(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let created = create_in_order(&fx, &["a", "b", "c", "d", "e"], |_| None).await?;
    let order = newest_first(&created);
    let page = |limit: Option<usize>, offset: usize| ListQuery {
        limit,
        offset,
        ..ListQuery::default()
    };
    let cases = [
        (page(Some(2), 0), 0..2, true),
        (page(Some(2), 2), 2..4, true),
        (page(Some(2), 4), 4..5, false),
        (page(Some(2), 5), 5..5, false),
        (page(Some(2), 50), 5..5, false),
        (page(Some(0), 0), 0..0, true),
        (page(None, 1), 1..5, false),
        (page(Some(MAX_LIST_LIMIT * 10), 0), 0..5, false),
    ];
    for (query, range, has_more) in cases {
        let result = fx.store.list(&fx.owner, &query).await?;
        assert_eq!(ids(&result), order[range].to_vec(), "{query:?}");
        assert_eq!((result.total, result.has_more), (5, has_more), "{query:?}");
    }
    Ok(())
}

pub async fn the_default_page_holds_fifty(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    for n in 0..55 {
        fx.queued(&format!("t{n}")).await?;
    }
    let page = fx.store.list(&fx.owner, &ListQuery::default()).await?;
    assert_eq!(
        (page.tasks.len(), page.total, page.has_more),
        (50, 55, true)
    );
    Ok(())
}

/// `select` (A2A `ListTasks`): the owner's tasks by status, phase, context, update time and
/// error code, ordered by last update (newest first), paged, with the count that matched.
pub async fn selects_by_small_fields_newest_update_first(h: &impl Harness) -> TestResult {
    use protocol::TaskError;
    use store::{CodeMatch, Phase, Selection};

    let fx = Fx::new(h).await?;
    // Contexts: a, c, e in ctx-1; b, d in ctx-2. Then a cancelled, b rejected, c failed,
    // each update in a later millisecond: by update, c b a e d.
    let created = create_in_order(&fx, &["a", "b", "c", "d", "e"], |n| {
        Some(format!("ctx-{}", 1 + n % 2))
    })
    .await?;
    assert!(fx.cancel(&created[0]).await?.applied().is_some());
    tokio::time::sleep(Duration::from_millis(2)).await;
    let rejected = TaskError::new("rejected", "no");
    assert!(
        fx.fail(&created[1], None, rejected)
            .await?
            .applied()
            .is_some()
    );
    tokio::time::sleep(Duration::from_millis(2)).await;
    let failed = TaskError::new("boom", "broke");
    assert!(
        fx.fail(&created[2], None, failed)
            .await?
            .applied()
            .is_some()
    );
    let mut foreign = fx.new_task("foreign", Admission::Queued);
    foreign.owner = other_owner();
    fx.store.create(foreign).await?;

    let all = || Selection {
        limit: 10,
        ..Selection::default()
    };
    let cancelled_at = fx.stored(&created[0]).await?.task.updated_at.0;
    let cases = [
        (all(), vec![2, 1, 0, 4, 3]),
        (
            Selection {
                statuses: vec![TaskStatus::Failed],
                error_code: Some(CodeMatch::IsNot("rejected".into())),
                ..all()
            },
            vec![2],
        ),
        (
            Selection {
                statuses: vec![TaskStatus::Failed],
                error_code: Some(CodeMatch::Is("rejected".into())),
                ..all()
            },
            vec![1],
        ),
        (
            Selection {
                statuses: vec![TaskStatus::Running],
                phases: vec![Phase::Queued],
                ..all()
            },
            vec![4, 3],
        ),
        (
            Selection {
                phases: vec![Phase::Active],
                ..all()
            },
            vec![],
        ),
        (
            Selection {
                context_id: Some("ctx-1".into()),
                ..all()
            },
            vec![2, 0, 4],
        ),
        (
            Selection {
                updated_after_ms: Some(cancelled_at),
                ..all()
            },
            vec![2, 1],
        ),
    ];
    for (selection, expected) in cases {
        let selected = fx.store.select(&fx.owner, &selection).await?;
        let want: Vec<String> = expected.iter().map(|&i| created[i].clone()).collect();
        assert_eq!(selected.ids, want, "{selection:?}");
        assert_eq!(selected.total, want.len() as u64, "{selection:?}");
    }
    // A page: its ids, and the count of all that matched.
    let page = fx
        .store
        .select(
            &fx.owner,
            &Selection {
                offset: 1,
                limit: 2,
                ..all()
            },
        )
        .await?;
    assert_eq!(page.ids, [created[1].clone(), created[0].clone()]);
    assert_eq!(page.total, 5);
    let none = fx.store.select(&other_owner(), &all()).await?;
    assert!(
        none.ids.iter().all(|id| !created.contains(id)),
        "another owner selects none of the owner's tasks"
    );
    Ok(())
}

/// A task whose owner is private (`NewTask::private_owner`: a direct run's fresh internal
/// token, which owns nothing else) is listed under no owner, before or after its run, and
/// otherwise runs, finishes and is read as any other; with a retention shorter than the
/// store's, as a direct run has, its finish leaves no owner key behind (the Redis stores' leak
/// check). Another owner's tasks are listed as ever beside it.
pub async fn a_private_owners_task_runs_and_is_never_listed(h: &impl Harness) -> TestResult {
    // One shard: the take finds the private task first (FIFO).
    let fx = Fx::ordered(h).await?;
    let private = other_owner();
    let mut new = fx.new_task("direct", Admission::Queued);
    new.owner = private.clone();
    new.private_owner = true;
    new.retention = Some(LONG);
    let id = fx.store.create(new).await?.task_id;
    let listed = fx.store.list(&private, &ListQuery::default()).await?;
    assert_eq!((ids(&listed), listed.total), (vec![], 0));
    let public = fx.queued("listed").await?;

    let started = fx.start("w1", LONG).await?;
    assert_eq!(started.claim.lease.task_id, id);
    let finished = fx
        .store
        .finish_and_take(
            &started.activation.lease,
            Transition::completed(TaskResult::output(json!("done"))),
            None,
        )
        .await?;
    let applied = finished.outcome.applied().ok_or("the finish was refused")?;
    assert_eq!(applied.status, TaskStatus::Completed);
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    assert_eq!(stored.owner, private);
    let listed = fx.store.list(&private, &ListQuery::default()).await?;
    assert_eq!((ids(&listed), listed.total), (vec![], 0));
    let listed = fx.store.list(&fx.owner, &ListQuery::default()).await?;
    assert_eq!(ids(&listed), vec![public.clone()]);

    assert!(fx.cancel(&public).await?.applied().is_some());
    h.check_no_leaks().await?;
    Ok(())
}
