//! `ListTasks` on both bindings, each test with a fresh owner holding three tasks in one
//! context and one in a context of its own: pages by context with totals and tokens; all of an
//! owner's tasks without a context; none for another token; the state filter, which lists and
//! counts that state only; artifacts only when asked for; the default page size; refused page
//! sizes, page tokens and history lengths.

use harness::TestResult;
use serde_json::json;

use crate::support::{
    A2a, BINDINGS, Binding, Cluster, INVALID_PARAMS, expect_error, ok, state, tck, unique,
};

/// A fresh owner, on `binding`, of three tasks (completed, completed with a text artifact,
/// rejected) in a context of their own and one more in another context: the owner, the
/// context and the three tasks' ids.
async fn owner_of_four_tasks(
    cluster: &Cluster,
    binding: Binding,
) -> TestResult<(A2a, String, Vec<String>)> {
    let owner = cluster.client(&unique("list-token-of-enough-length"));
    let context = unique("list-ctx");
    let mut created = Vec::new();
    for prefix in ["tck-complete-task", "tck-artifact-text", "tck-reject-task"] {
        let mut request = tck(prefix);
        request["message"]["contextId"] = json!(context);
        let task = owner.send_task(binding, request).await?;
        created.push(task["id"].as_str().ok_or("no task id")?.to_owned());
    }
    // One more, in a context of its own.
    owner.send_task(binding, tck("tck-complete-task")).await?;
    Ok((owner, context, created))
}

/// Two pages of a context of three at `pageSize` 2: the totals, the token to the second page,
/// none after it, every task of the context once, and no artifacts unasked.
#[tokio::test(flavor = "multi_thread")]
async fn a_context_is_listed_in_pages_with_totals_and_tokens() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let what = |case: &str| format!("{case} ({binding:?})");
        let (owner, context, created) = owner_of_four_tasks(&cluster, binding).await?;
        let first = ok(
            owner
                .list(binding, json!({"contextId": context, "pageSize": 2}))
                .await?,
            "ListTasks",
        )?;
        let first_tasks = first["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(first_tasks.len(), 2, "{first}");
        assert_eq!(first["totalSize"], 3, "{first}");
        assert_eq!(first["pageSize"], 2, "{first}");
        let token = first["nextPageToken"].as_str().unwrap_or_default();
        assert!(!token.is_empty(), "{}: {first}", what("a next page"));
        let second = ok(
            owner
                .list(
                    binding,
                    json!({"contextId": context, "pageSize": 2, "pageToken": token}),
                )
                .await?,
            "ListTasks page 2",
        )?;
        let second_tasks = second["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(second_tasks.len(), 1, "{second}");
        assert_eq!(second["nextPageToken"], "", "{second}");
        assert_eq!(second["totalSize"], 3, "{second}");
        let mut listed: Vec<String> = first_tasks
            .iter()
            .chain(second_tasks)
            .map(|task| {
                assert_eq!(task["contextId"], context.as_str(), "{task}");
                task["id"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        listed.sort();
        let mut expected = created.clone();
        expected.sort();
        assert_eq!(listed, expected, "{}", what("both pages"));
        assert!(
            first_tasks
                .iter()
                .chain(second_tasks)
                .all(|task| task.get("artifacts").is_none()),
            "{}: {first} {second}",
            what("no artifacts by default")
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_context_all_the_owners_tasks_are_listed() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let (owner, _, _) = owner_of_four_tasks(&cluster, binding).await?;
        let all = ok(owner.list(binding, json!({})).await?, "ListTasks")?;
        assert_eq!(all["tasks"].as_array().map(Vec::len), Some(4), "{all}");
        assert_eq!(all["totalSize"], 4, "{all}");
    }
    Ok(())
}

/// Another token lists none of the owner's tasks, by context or not.
#[tokio::test(flavor = "multi_thread")]
async fn another_owner_lists_none_of_the_tasks() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let (_, context, _) = owner_of_four_tasks(&cluster, binding).await?;
        let stranger = cluster.client(&unique("stranger-token-of-enough-length"));
        for params in [json!({"contextId": context}), json!({})] {
            let none = ok(stranger.list(binding, params).await?, "ListTasks")?;
            assert_eq!(
                none["tasks"],
                json!([]),
                "another token ({binding:?}): {none}"
            );
            assert_eq!(none["totalSize"], 0, "{none}");
        }
    }
    Ok(())
}

/// A state filter lists, counts and pages the tasks in that state only: the context holds two
/// completed tasks, one rejected and no failed one.
#[tokio::test(flavor = "multi_thread")]
async fn a_state_filter_lists_and_counts_only_that_state() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let (owner, context, _) = owner_of_four_tasks(&cluster, binding).await?;
        let completed = ok(
            owner
                .list(
                    binding,
                    json!({"contextId": context, "status": "TASK_STATE_COMPLETED"}),
                )
                .await?,
            "ListTasks by state",
        )?;
        let tasks = completed["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(tasks.len(), 2, "{completed}");
        assert!(
            tasks
                .iter()
                .all(|task| state(task) == "TASK_STATE_COMPLETED"),
            "{completed}"
        );
        for (status, count) in [("TASK_STATE_REJECTED", 1), ("TASK_STATE_FAILED", 0)] {
            let page = ok(
                owner
                    .list(binding, json!({"contextId": context, "status": status}))
                    .await?,
                "ListTasks by state",
            )?;
            let tasks = page["tasks"].as_array().ok_or("no tasks")?;
            assert_eq!(tasks.len(), count, "{status} ({binding:?}): {page}");
            assert!(
                tasks.iter().all(|task| state(task) == status),
                "{status} ({binding:?}): {page}"
            );
            assert_eq!(
                page["totalSize"], count,
                "totalSize counts only {status} ({binding:?}): {page}"
            );
        }
    }
    Ok(())
}

/// No artifacts by default; with `includeArtifacts`, the one task that made one shows it.
#[tokio::test(flavor = "multi_thread")]
async fn artifacts_are_listed_only_when_asked_for() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let (owner, context, _) = owner_of_four_tasks(&cluster, binding).await?;
        let without = ok(
            owner.list(binding, json!({"contextId": context})).await?,
            "ListTasks",
        )?;
        let tasks = without["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(tasks.len(), 3, "{without}");
        assert!(
            tasks.iter().all(|task| task.get("artifacts").is_none()),
            "no artifacts by default ({binding:?}): {without}"
        );
        let with = ok(
            owner
                .list(
                    binding,
                    json!({"contextId": context, "includeArtifacts": true}),
                )
                .await?,
            "ListTasks with artifacts",
        )?;
        let with_artifacts = with["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|task| task["artifacts"][0]["parts"][0]["text"] == "Generated text content")
            .count();
        assert_eq!(with_artifacts, 1, "{with}");
    }
    Ok(())
}

/// `pageSize` 0 is the default, 50: the whole context on one page, no next page.
#[tokio::test(flavor = "multi_thread")]
async fn page_size_0_is_the_default_of_50() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let (owner, context, _) = owner_of_four_tasks(&cluster, binding).await?;
        let default = ok(
            owner
                .list(binding, json!({"contextId": context, "pageSize": 0}))
                .await?,
            "ListTasks pageSize 0",
        )?;
        assert_eq!(
            default["tasks"].as_array().map(Vec::len),
            Some(3),
            "{default}"
        );
        assert_eq!(default["pageSize"], 50, "{default}");
        assert_eq!(default["nextPageToken"], "", "{default}");
    }
    Ok(())
}

/// `pageSize` past 100 or negative, a page token the gateway did not issue, or a negative
/// `historyLength`: `InvalidParams` (HTTP 400).
#[tokio::test(flavor = "multi_thread")]
async fn bad_page_sizes_tokens_and_history_lengths_are_invalid_params() -> TestResult {
    let cluster = Cluster::start().await?;
    for binding in BINDINGS {
        let (owner, _, _) = owner_of_four_tasks(&cluster, binding).await?;
        for (params, case) in [
            (json!({"pageSize": 101}), "pageSize 101"),
            (json!({"pageSize": -1}), "pageSize -1"),
            (json!({"pageToken": "not-a-token"}), "a foreign pageToken"),
            (json!({"pageToken": "!!!"}), "a garbage pageToken"),
            (json!({"historyLength": -1}), "historyLength -1"),
        ] {
            let reply = owner.list(binding, params).await?;
            expect_error(
                binding,
                reply,
                INVALID_PARAMS,
                400,
                &format!("{case} ({binding:?})"),
            )?;
        }
    }
    Ok(())
}
