//! The example agent's program (`examples/research-agent`, on `taskcluster-agent`) on real
//! processes, both ways it runs: as the worker of a cluster (a redis-server, the program with
//! `REDIS_URL`, a gateway binary), and alone with no Redis (embedded: the program serves the
//! bindings itself). Callers speak A2A's HTTP+JSON binding; on the cluster the task's events
//! are read from the store, where the handler's progress lands.

use harness::TestResult;
use harness::a2a::{A2a, ok};
use harness::cluster::{Cluster, free_port, lists_skills, wait_for_card};
use harness::store_fixtures::next_named;
use protocol::token::AccessToken;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, StoredEvent, Subscription, TaskStore};

/// The caller's token: its hash owns the tasks (A2A bearer token).
const TOKEN: &str = "example-agent-suite-token-0123456789";

/// An A2A HTTP+JSON caller of the gateway at `base` (the harness's A2A client, as [`TOKEN`]).
struct Caller {
    a2a: A2a,
}

impl Caller {
    fn new(base: &str) -> TestResult<Caller> {
        Ok(Caller {
            a2a: A2a::new(harness::cluster::http()?, base).with_bearer(Some(TOKEN)),
        })
    }

    /// `POST /a2a/v1{path}` with `body`: the answer, or an error when it is refused.
    async fn post(&self, path: &str, body: Value) -> TestResult<Value> {
        let reply = self
            .a2a
            .rest(reqwest::Method::POST, path, Some(body))
            .await?;
        ok(reply, path)
    }

    /// `SendMessage` of one data part to `research`: the task.
    async fn ask(&self, input: Value, return_immediately: bool) -> TestResult<Value> {
        let sent = self
            .post(
                "/message:send",
                json!({
                    "message": {
                        "messageId": uuid(),
                        "role": "ROLE_USER",
                        "parts": [{"data": input}],
                        "metadata": {"skillId": "research"},
                    },
                    "configuration": {"returnImmediately": return_immediately},
                }),
            )
            .await?;
        Ok(sent["task"].clone())
    }

    /// The follow-up message answering `task`, which waits for input: the task.
    async fn answer(&self, task: &Value, input: Value) -> TestResult<Value> {
        let sent = self
            .post(
                "/message:send",
                json!({"message": {
                    "messageId": uuid(),
                    "taskId": task["id"],
                    "contextId": task["contextId"],
                    "role": "ROLE_USER",
                    "parts": [{"data": input}],
                }}),
            )
            .await?;
        Ok(sent["task"].clone())
    }

    async fn cancel(&self, task_id: &str) -> TestResult<Value> {
        self.post(&format!("/tasks/{task_id}:cancel"), json!({}))
            .await
    }
}

fn uuid() -> String {
    format!("m-{}", AccessToken::generate().expose())
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// Asks without an audience (the agent asks for one, once), answers, and checks the report:
/// what both modes must do. The waiting task.
async fn asks_once_then_reports(caller: &Caller) -> TestResult<Value> {
    let asking = caller
        .ask(json!({"topic": "tide pools", "pauseMs": 0}), false)
        .await?;
    assert_eq!(state(&asking), "TASK_STATE_INPUT_REQUIRED", "{asking}");
    let question = &asking["status"]["message"]["parts"][0]["text"];
    assert!(
        question
            .as_str()
            .is_some_and(|text| text.starts_with("Who is the report on tide pools for?")),
        "{asking}"
    );
    let report = caller
        .answer(
            &asking,
            json!({"topic": "tide pools", "audience": "children", "pauseMs": 0}),
        )
        .await?;
    assert_eq!(state(&report), "TASK_STATE_COMPLETED", "{report}");
    assert_eq!(report["id"], asking["id"], "{report}");
    let result = report["artifacts"]
        .as_array()
        .and_then(|artifacts| {
            artifacts
                .iter()
                .find_map(|artifact| artifact["parts"][0].get("data"))
        })
        .ok_or_else(|| format!("no report in {report}"))?;
    assert_eq!(result["audience"], "children", "{report}");
    assert_eq!(
        result["summary"],
        "tide pools, explained for children, in 3 steps"
    );
    Ok(asking)
}

/// A cluster whose only worker is the example agent's program, with `env` added.
async fn cluster(env: &[(&str, &str)]) -> TestResult<Cluster> {
    Cluster::builder()
        .worker("research-agent", env)
        .program("research-agent")
        .gateway("g1", &[])
        .skills(&["research"])
        .start()
        .await
}

/// The task's events on the cluster's store, from the first.
async fn events(cluster: &Cluster, task_id: &str) -> TestResult<Subscription> {
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let owner = AccessToken::parse(TOKEN)?.owner_hash();
    Ok(store
        .subscribe(task_id, &owner, Some(0))
        .await?
        .ok_or("no such task")?)
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_the_example_agent_streams_progress_asks_once_and_reports() -> TestResult {
    let cluster = cluster(&[]).await?;
    let caller = Caller::new(cluster.base())?;
    let task = asks_once_then_reports(&caller).await?;
    let task_id = task["id"].as_str().ok_or("no task id")?;
    let mut sub = events(&cluster, task_id).await?;
    let mut stages = Vec::new();
    let mut notes = Vec::new();
    for event in &sub.replay {
        match event.event.as_str() {
            "progress" => stages.push(event.data["stage"].clone()),
            "text" => notes.push(event.data["text"].clone()),
            _ => {}
        }
    }
    assert_eq!(
        stages,
        ["planning", "gathering sources", "reading", "drafting"],
        "{}",
        cluster.logs()
    );
    assert_eq!(notes.len(), 3, "one streamed note per step: {notes:?}");
    sub.replay.clear();
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_a_cancel_stops_the_example_agent_mid_step() -> TestResult {
    let cluster = cluster(&[("WORKER_CONCURRENCY", "1")]).await?;
    let caller = Caller::new(cluster.base())?;
    // A step of ten minutes: only the cancel can end it within the test.
    let task = caller
        .ask(
            json!({"topic": "tides", "audience": "sailors", "pauseMs": 600_000}),
            true,
        )
        .await?;
    let task_id = task["id"].as_str().ok_or("no task id")?;
    let mut sub = events(&cluster, task_id).await?;
    let started = next_named(&mut sub, "progress").await?;
    assert_eq!(
        started.data["stage"], "gathering sources",
        "{}",
        started.data
    );
    let cancelled = caller.cancel(task_id).await?;
    assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
    // The worker's only slot is free again: the next research runs to its report.
    let next = caller
        .ask(
            json!({"topic": "currents", "audience": "divers", "pauseMs": 0}),
            false,
        )
        .await?;
    assert_eq!(state(&next), "TASK_STATE_COMPLETED", "{next}");
    // The cancelled run stopped in its first step: no later step, no note.
    let cancelled_events = events(&cluster, task_id).await?;
    let later: Vec<&StoredEvent> = cancelled_events
        .replay
        .iter()
        .filter(|event| {
            event.event == "text"
                || (event.event == "progress" && event.data["stage"] != "gathering sources")
        })
        .collect();
    assert!(
        later.is_empty(),
        "the run went on after the cancel: {later:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_redis_the_example_agent_serves_itself_embedded() -> TestResult {
    // No REDIS_URL: the program serves the bindings itself, as a gateway would.
    let harness::cluster::Gateway {
        process: agent,
        base,
    } = harness::cluster::gateway_process("research-agent", free_port()?, "embedded", &[], &[])
        .await?;
    wait_for_card(&agent, &base, |card| {
        lists_skills(card, &["research".to_owned()])
    })
    .await?;
    let card: Value = harness::cluster::http()?
        .get(format!("{base}/.well-known/agent-card.json"))
        .send()
        .await?
        .json()
        .await?;
    // The program's entrypoints, none of the built-ins.
    assert!(!lists_skills(&card, &["echo".to_owned()]), "{card}");
    asks_once_then_reports(&Caller::new(&base)?).await?;
    assert!(agent.log().contains("embedded mode"), "{}", agent.log());
    Ok(())
}
