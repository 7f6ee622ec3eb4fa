//! An operator looks at one task, cancels a running one and runs a failed one again, against
//! real processes (a private redis-server, a `worker` hosting `echo`, `fail` and `sleep`, two
//! gateways with the operator token, the second with `CONSOLE_SHOW_PAYLOADS`), through the
//! console API and `taskctl admin task|cancel|rerun`.
//!
//! What is proven: the task view shows a finished task's status, attempts, error and event
//! kinds but neither its input nor its result, unless the gateway opts in; an operator cancel
//! ends a running `sleep` and its owner reads it cancelled; a re-run of a failed task is a new
//! task the owner's token reads, marked as a re-run, that runs (and fails again, as `fail`
//! does), while the original stays failed; a completed task is not re-run (409), nor a
//! finished one cancelled (409); the failed list (`taskctl admin failed`) shows failed tasks
//! newest first with their codes, paged by cursor, and the entrypoints' counts; a re-run
//! original leaves it; bulk re-run runs each id (an unknown one refused on its own) and bulk
//! remove empties the list while the tasks stay readable; each action is in the audit log;
//! refusals: no operator token (401), an unknown or malformed id (404), an empty id list (400).

use std::time::Duration;

use harness::TestResult;
use harness::cluster::Cluster;
use reqwest::StatusCode;
use serde_json::{Value, json};
use store::{Phase, RedisStore, RedisStoreConfig, TaskStore};

const OPERATOR_TOKEN: &str = "operator-tasks-suite-operator-token-0123456789";
const TOKEN: &str = "operator-tasks-suite-task-access-token";
const PATIENCE: Duration = Duration::from_secs(30);

/// `taskctl --json admin ARGS` as the operator: exit code and JSON answer.
async fn admin(args: &[&str]) -> TestResult<(i32, Value)> {
    harness::operator::taskctl_admin(args, Some(OPERATOR_TOKEN)).await
}

/// `taskctl --output human admin ARGS` as the operator: exit code and what it printed.
async fn admin_text(args: &[&str]) -> TestResult<(i32, String)> {
    harness::operator::taskctl_admin_output(&["--output", "human"], args, Some(OPERATOR_TOKEN))
        .await
}

/// Polls `check` until it holds, within [`PATIENCE`].
async fn until(what: &str, check: impl AsyncFnMut() -> TestResult<bool>) -> TestResult {
    harness::operator::until(what, PATIENCE, check).await
}

/// Creates a task of `skill` with `input` under [`TOKEN`]; its id.
async fn created(cluster: &Cluster, skill: &str, input: Value) -> TestResult<String> {
    harness::operator::create_task(&cluster.http, cluster.base(), TOKEN, skill, &input).await
}

/// Waits until the task is terminal; its status.
async fn finished(store: &RedisStore, task_id: &str) -> TestResult<String> {
    let mut status = String::new();
    until(&format!("{task_id} finished"), async || {
        let task = store.get(task_id).await?.ok_or("task gone")?;
        status = task.task.status.as_str().to_owned();
        Ok(task.task.status.is_terminal())
    })
    .await?;
    Ok(status)
}

/// The owner's read of a task: status and body.
async fn owner_read(cluster: &Cluster, task_id: &str) -> TestResult<(StatusCode, Value)> {
    let response = cluster
        .http
        .get(format!("{}/tasks/{task_id}", cluster.base()))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

/// A console request to `base`: status and body.
async fn console(
    cluster: &Cluster,
    base: &str,
    post: bool,
    path: &str,
    token: Option<&str>,
) -> TestResult<(StatusCode, Value)> {
    let url = format!("{base}/console/api/{path}");
    let mut request = if post {
        cluster.http.post(url).json(&json!({}))
    } else {
        cluster.http.get(url)
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

/// A bulk action's answer: status and body.
async fn console_body(
    cluster: &Cluster,
    path: &str,
    body: Value,
) -> TestResult<(StatusCode, Value)> {
    let response = cluster
        .http
        .post(format!("{}/console/api/{path}", cluster.base()))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

/// `taskctl admin failed URL fail ARGS`: (id, code) of each task listed.
async fn listed(base: &str, args: &[&str]) -> TestResult<Vec<(String, String)>> {
    let mut command = vec!["failed", base, "fail"];
    command.extend_from_slice(args);
    let (code, answer) = admin(&command).await?;
    assert_eq!(code, 0, "{answer}");
    Ok(answer["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|task| {
            (
                task["id"].as_str().unwrap_or("?").to_owned(),
                task["code"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect())
}

fn kinds(view: &Value) -> Vec<String> {
    view["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|event| event["kind"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test]
async fn an_operator_views_cancels_and_reruns_tasks() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .gateway(
            "g2",
            &[
                ("OPERATOR_TOKEN", OPERATOR_TOKEN),
                ("CONSOLE_SHOW_PAYLOADS", "true"),
            ],
        )
        .skills(&["echo", "fail", "sleep"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let base = cluster.base().to_owned();
    let showing = cluster.gateways[1].base.clone();

    // A completed echo: no payloads on g1, payloads on g2.
    let echo = created(&cluster, "echo", json!({"secret": "caller-data-1"})).await?;
    assert_eq!(finished(&store, &echo).await?, "completed");
    let (code, view) = admin(&["task", &base, &echo]).await?;
    assert_eq!(code, 0, "{view}");
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["entrypoint"], "echo");
    assert_eq!(view["attempt"], 1);
    assert_eq!(view["paid"], false);
    assert_eq!(view["payloadsShown"], false);
    assert!(view.get("input").is_none() && view.get("result").is_none());
    assert!(!view.to_string().contains("caller-data-1"), "{view}");
    let events = kinds(&view);
    assert_eq!(events.first().map(String::as_str), Some("statusUpdate"));
    assert_eq!(events.last().map(String::as_str), Some("resultUpdate"));
    let (status, shown) = console(
        &cluster,
        &showing,
        false,
        &format!("tasks/{echo}"),
        Some(OPERATOR_TOKEN),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["payloadsShown"], true);
    assert!(shown.to_string().contains("caller-data-1"), "{shown}");

    // Refusals: no token, unknown and malformed ids, a completed task is not re-run, nor a
    // finished one cancelled.
    let (status, _) = console(&cluster, &base, false, &format!("tasks/{echo}"), None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = console(&cluster, &base, true, &format!("tasks/{echo}/rerun"), None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for id in ["no-such-task", "bad%20id", "%E2%9C%93"] {
        let (status, body) = console(
            &cluster,
            &base,
            false,
            &format!("tasks/{id}"),
            Some(OPERATOR_TOKEN),
        )
        .await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: {body}");
        assert_eq!(body["error"]["code"], "task_not_found");
    }
    let (code, answer) = admin(&["rerun", &base, &echo]).await?;
    assert_ne!(code, 0);
    assert_eq!(answer["error"]["status"], 409, "{answer}");
    let (code, answer) = admin(&["cancel", &base, &echo]).await?;
    assert_ne!(code, 0);
    assert_eq!(answer["error"]["status"], 409, "{answer}");

    // A failed task: its code in the view, and a re-run as a new task of the same owner.
    let failed = created(&cluster, "fail", json!({"code": "suite_failure"})).await?;
    assert_eq!(finished(&store, &failed).await?, "failed");
    let (code, view) = admin(&["task", &base, &failed]).await?;
    assert_eq!(code, 0, "{view}");
    assert_eq!(view["error"]["code"], "suite_failure", "{view}");
    assert_eq!(
        listed(&base, &[]).await?,
        [(failed.clone(), "suite_failure".to_owned())]
    );
    assert_eq!(kinds(&view).last().map(String::as_str), Some("error"));
    let (code, text) = admin_text(&["task", &base, &failed]).await?;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("failed (terminal)"), "{text}");
    assert!(text.contains("suite_failure"), "{text}");
    let (code, text) = admin_text(&["failed", &base, "fail"]).await?;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&failed) && text.contains("suite_failure"),
        "{text}"
    );
    let (code, rerun) = admin(&["rerun", &base, &failed]).await?;
    assert_eq!(code, 0, "{rerun}");
    assert_eq!(rerun["rerunOf"], failed.as_str());
    let again = rerun["task"]["taskId"]
        .as_str()
        .ok_or("no new task id")?
        .to_owned();
    assert_ne!(again, failed);
    assert_eq!(finished(&store, &again).await?, "failed");
    let (status, read) = owner_read(&cluster, &again).await?;
    assert_eq!(status, StatusCode::OK, "the owner's token reads the re-run");
    assert_eq!(read["error"]["code"], "suite_failure", "{read}");
    let (_, view) = admin(&["task", &base, &again]).await?;
    assert_eq!(view["rerunOf"], failed.as_str(), "{view}");
    let (_, original) = owner_read(&cluster, &failed).await?;
    assert_eq!(original["status"], "failed", "the original is not reopened");

    // The failed list: the re-run original left it, its re-run entered it; pages newest first.
    let newer = created(&cluster, "fail", json!({"code": "newer_failure"})).await?;
    assert_eq!(finished(&store, &newer).await?, "failed");
    let (code, first) = admin(&["failed", &base, "fail", "--limit", "1"]).await?;
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["tasks"][0]["id"], newer.as_str(), "{first}");
    assert_eq!(first["tasks"][0]["code"], "newer_failure");
    assert_eq!(first["tasks"][0]["attempt"], 1);
    let cursor = first["nextCursor"].as_str().ok_or("no next cursor")?;
    let (code, second) =
        admin(&["failed", &base, "fail", "--limit", "1", "--cursor", cursor]).await?;
    assert_eq!(code, 0, "{second}");
    assert_eq!(second["tasks"][0]["id"], again.as_str(), "{second}");
    assert!(second.get("nextCursor").is_none(), "{second}");
    let (code, counts) = admin(&["failed", &base]).await?;
    assert_eq!(code, 0, "{counts}");
    assert_eq!(counts["entrypoints"], json!([{"key": "fail", "failed": 2}]));

    // Bulk re-run: each id on its own (an unknown one is refused, the others run).
    let (status, bulk) = console_body(
        &cluster,
        "failed/rerun",
        json!({"ids": [newer, "no-such-task"]}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{bulk}");
    assert_eq!(bulk["done"], 1, "{bulk}");
    assert_eq!(bulk["results"][1]["status"], 404, "{bulk}");
    let newer_again = bulk["results"][0]["newTaskId"]
        .as_str()
        .ok_or("no new task id")?
        .to_owned();
    assert_eq!(finished(&store, &newer_again).await?, "failed");
    let mut listed_ids: Vec<String> = listed(&base, &[])
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    listed_ids.sort();
    let mut expected = vec![again.clone(), newer_again.clone()];
    expected.sort();
    assert_eq!(listed_ids, expected);

    // Bulk remove empties the list; the tasks stay readable.
    let (status, body) = console_body(&cluster, "failed/remove", json!({"ids": []})).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, removed) = console_body(
        &cluster,
        "failed/remove",
        json!({"ids": [again, newer_again]}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{removed}");
    assert_eq!(removed["done"], 2, "{removed}");
    assert!(listed(&base, &[]).await?.is_empty());
    let (status, _) = owner_read(&cluster, &again).await?;
    assert_eq!(
        status,
        StatusCode::OK,
        "a removed task stays until its retention"
    );
    let (status, _) = console(&cluster, &base, false, "failed?entrypoint=fail", None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Cancel a running sleep: its owner reads it cancelled.
    let sleep = created(&cluster, "sleep", json!({"ms": 60_000})).await?;
    until("the sleep runs", async || {
        let task = store.get(&sleep).await?.ok_or("task gone")?;
        Ok(task.phase == Phase::Active)
    })
    .await?;
    let (code, view) = admin(&["task", &base, &sleep]).await?;
    assert_eq!(code, 0, "{view}");
    assert_eq!(view["phase"], "active");
    assert!(view["lease"]["holder"].is_string(), "{view}");
    assert!(view["runDeadlineMs"].is_u64(), "{view}");
    let (code, answer) = admin(&["cancel", &base, &sleep]).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["task"]["status"], "cancelled");
    let (_, read) = owner_read(&cluster, &sleep).await?;
    assert_eq!(read["status"], "cancelled", "{read}");

    // The audit log: the cancel and the re-run, newest first.
    let (code, audit) = admin(&["audit", &base]).await?;
    assert_eq!(code, 0, "{audit}");
    let entries = audit["entries"].as_array().cloned().unwrap_or_default();
    let actions = harness::operator::audit_actions(&entries);
    assert_eq!(
        actions,
        [
            ("cancel", sleep.as_str()),
            ("remove_failed", "failed"),
            ("rerun_failed", "failed"),
            ("rerun", failed.as_str())
        ]
    );
    assert_eq!(entries[1]["detail"]["count"], 2);
    assert_eq!(entries[2]["detail"]["count"], 1);
    assert_eq!(entries[3]["detail"]["newTaskId"], again.as_str());
    assert_eq!(entries[3]["detail"]["charged"], false);
    Ok(())
}
