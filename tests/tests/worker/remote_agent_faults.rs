//! `worker --agent URL` when things go wrong, on real processes (redis-server, gateway and
//! worker binaries) with a scripted agent in this process: a small HTTP server that serves a
//! card it may change, answers each run as the test scripts it (or never), and reports every
//! request, every connection it saw closed, and every card read.
//!
//! Proven here: a cancel closes the agent's connection; a worker SIGKILLed mid-call is
//! recovered by another and the agent is called again (same idempotency key, next attempt)
//! only where the retry-safe rules allow it; a refreshed card adds, drops and changes
//! entrypoints; a priced gateway entrypoint whose work runs in the agent is paid with x402;
//! the agent down then back gives the task another attempt (needs the P19 retries).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use harness::TestResult;
use harness::cluster::{Cluster, PATIENCE, wait_for_card};
use harness::paid::{PAYER_KEY, PaidCluster};
use harness::store_fixtures::queued_task_with;
use payments::LocalPayer;
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, TaskStore, Transition};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A run request as the agent saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    attempt: String,
    idempotency_key: String,
    task_id: String,
}

/// What the agent saw happen.
#[derive(Debug)]
enum Event {
    Run(Seen),
    /// The worker closed the connection of a run the agent had not answered.
    Closed(String),
    /// A card was read (answered with the card, or with 503 while it has none).
    Card,
    /// A connection dropped at once while the agent is down.
    Refused,
}

/// How the agent answers its next run.
enum Reply {
    /// Never: holds the connection open until the worker closes it.
    Hang,
    Answer {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
}

/// What the test changes while the agent runs.
struct Script {
    /// `None`: the card answers 503 (unreadable).
    card: Option<Value>,
    replies: VecDeque<Reply>,
    /// Down: every connection is dropped unanswered.
    down: bool,
}

struct Agent {
    base: String,
    script: Arc<Mutex<Script>>,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Agent {
    async fn start(card: Value) -> TestResult<Agent> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let script = Arc::new(Mutex::new(Script {
            card: Some(card),
            replies: VecDeque::new(),
            down: false,
        }));
        let (tx, events) = mpsc::unbounded_channel();
        let shared = script.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, shared.clone(), tx.clone()));
            }
        });
        Ok(Agent {
            base,
            script,
            events,
        })
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reply(&self, reply: Reply) {
        self.script().replies.push_back(reply);
    }

    fn answer(&self, body: Value) {
        self.reply(Reply::Answer {
            status: 200,
            headers: Vec::new(),
            body,
        });
    }

    /// The next event other than card reads.
    async fn next(&mut self) -> TestResult<Event> {
        loop {
            match tokio::time::timeout(PATIENCE, self.events.recv()).await? {
                Some(Event::Card) => continue,
                Some(event) => return Ok(event),
                None => return Err("the agent stopped".into()),
            }
        }
    }

    async fn run(&mut self) -> TestResult<Seen> {
        match self.next().await? {
            Event::Run(seen) => Ok(seen),
            other => Err(format!("expected a run, the agent saw {other:?}").into()),
        }
    }

    /// Waits for `n` more card reads.
    async fn card_reads(&mut self, n: usize) -> TestResult {
        let mut left = n;
        while left > 0 {
            match tokio::time::timeout(PATIENCE, self.events.recv()).await? {
                Some(Event::Card) => left -= 1,
                Some(_) => {}
                None => return Err("the agent stopped".into()),
            }
        }
        Ok(())
    }
}

/// One connection: one request, answered with `connection: close` (so each run has its own).
async fn serve(
    mut socket: TcpStream,
    script: Arc<Mutex<Script>>,
    events: mpsc::UnboundedSender<Event>,
) {
    let lock = || script.lock().unwrap_or_else(PoisonError::into_inner);
    if lock().down {
        let _ = events.send(Event::Refused);
        return;
    }
    let Some((head, _body)) = read_request(&mut socket).await else {
        return;
    };
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .unwrap_or_default()
        .to_owned();
    let header = |name: &str| {
        head.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default()
    };
    if path == "/.well-known/agent-card.json" {
        let card = lock().card.clone();
        let _ = events.send(Event::Card);
        let (status, body) = match card {
            Some(card) => (200, card),
            None => (503, json!({"error": {"code": "unavailable"}})),
        };
        respond(&mut socket, status, &[], &body).await;
        return;
    }
    let seen = Seen {
        path: path.clone(),
        attempt: header("x-task-attempt"),
        idempotency_key: header("idempotency-key"),
        task_id: header("x-task-id"),
    };
    let reply = lock().replies.pop_front().unwrap_or(Reply::Hang);
    let _ = events.send(Event::Run(seen));
    match reply {
        Reply::Answer {
            status,
            headers,
            body,
        } => respond(&mut socket, status, &headers, &body).await,
        Reply::Hang => {
            // Reads until the worker closes its end: that is what a cancel must cause.
            let mut rest = [0u8; 1024];
            while let Ok(read) = socket.read(&mut rest).await {
                if read == 0 {
                    break;
                }
            }
            let _ = events.send(Event::Closed(path));
        }
    }
}

/// The request head and body (by `content-length`).
async fn read_request(socket: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buffer[end + 4..].to_vec();
    while body.len() < length {
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some((head, body))
}

async fn respond(socket: &mut TcpStream, status: u16, headers: &[(&str, String)], body: &Value) {
    let body = body.to_string();
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(body.as_bytes()).await;
    let _ = socket.shutdown().await;
}

fn card(entrypoints: Value) -> Value {
    json!({"name": "scripted", "entrypoints": entrypoints})
}

fn work_card() -> Value {
    card(json!({"work": {"description": "Does work remotely"}}))
}

/// A task of `entrypoint` created in the store as the gateway would, with `max_attempts`.
async fn create(
    store: &RedisStore,
    task_id: &str,
    entrypoint: &str,
    max_attempts: u32,
) -> TestResult<OwnerHash> {
    let owner = AccessToken::generate().owner_hash();
    store
        .create(queued_task_with(
            task_id,
            &owner,
            entrypoint,
            json!({"job": task_id}),
            max_attempts,
        ))
        .await?;
    Ok(owner)
}

/// Waits until task `task_id` is finished, and returns it.
async fn finished(
    store: &RedisStore,
    task_id: &str,
    owner: &OwnerHash,
) -> TestResult<protocol::Task> {
    let mut sub = store
        .subscribe(task_id, owner, Some(0))
        .await?
        .ok_or("own task not visible")?;
    let terminal = |status: TaskStatus| {
        matches!(
            status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    };
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(stored) = store.get(task_id).await?
                && terminal(stored.task.status)
            {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(stored.task);
            }
            use futures::StreamExt;
            sub.replay.clear();
            if sub.events.next().await.is_none() {
                return Err("subscription ended".into());
            }
        }
    })
    .await??;
    Ok(waited)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_closes_the_agents_connection() -> TestResult {
    let mut agent = Agent::start(work_card()).await?;
    let cluster = Cluster::builder()
        .worker("w1", &[("WORKER_AGENTS", agent.base.as_str())])
        .gateway("g1", &[])
        .skills(&["work"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    create(&store, "to-cancel", "work", 1).await?;
    let seen = agent
        .run()
        .await
        .map_err(|err| format!("{err}:\n{}", cluster.logs()))?;
    assert_eq!(seen.path, "/entrypoints/work/invoke");
    assert_eq!(seen.task_id, "to-cancel");

    let outcome = store
        .compare_and_set(
            "to-cancel",
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?;
    assert!(outcome.applied().is_some());
    // The agent sees its connection closed: the cancel reached it.
    match agent.next().await? {
        Event::Closed(path) => assert_eq!(path, "/entrypoints/work/invoke"),
        other => panic!("expected the connection closed, saw {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_call_is_recovered_and_the_agent_called_again() -> TestResult {
    let mut agent = Agent::start(work_card()).await?;
    let mut cluster = Cluster::builder()
        .worker(
            "w1",
            &[
                ("WORKER_AGENTS", agent.base.as_str()),
                ("WORKER_LEASE_TTL_MS", "1000"),
            ],
        )
        .gateway("g1", &[])
        .skills(&["work"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    // A task created with POST /tasks: retried after a lost worker, up to its attempts.
    let owner = create(&store, "survives", "work", 3).await?;
    let first = agent
        .run()
        .await
        .map_err(|err| format!("{err}:\n{}", cluster.logs()))?;
    assert_eq!(first.attempt, "1");
    cluster.workers[0].kill()?;
    // The kill closed the agent's connection.
    assert!(matches!(agent.next().await?, Event::Closed(_)));
    agent.answer(json!({"output": {"done": true}}));
    cluster.add_worker(
        "w2",
        &[
            ("WORKER_AGENTS", agent.base.as_str()),
            ("WORKER_LEASE_TTL_MS", "1000"),
        ],
    )?;
    let second = agent
        .run()
        .await
        .map_err(|err| format!("{err}:\n{}", cluster.logs()))?;
    assert_eq!(second.attempt, "2");
    assert_eq!(second.task_id, "survives");
    // The same key on every attempt: the agent can tell it is the same task.
    assert_eq!(second.idempotency_key, first.idempotency_key);
    assert_eq!(first.idempotency_key, "taskcluster-task-id:survives");
    let task = finished(&store, "survives", &owner).await?;
    assert_eq!(task.status, TaskStatus::Completed, "{task:?}");
    assert_eq!(
        task.result.map(|result| result.output),
        Some(json!({"done": true}))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_direct_run_whose_worker_is_killed_is_not_run_again_unless_retry_safe() -> TestResult {
    for retry_safe in [false, true] {
        let mut agent = Agent::start(work_card()).await?;
        let mut env = vec![
            ("WORKER_AGENTS", agent.base.clone()),
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
        ];
        if retry_safe {
            env.push(("WORKER_RETRY_SAFE", "work".to_owned()));
        }
        let env: Vec<(&str, &str)> = env
            .iter()
            .map(|(key, value)| (*key, value.as_str()))
            .collect();
        let mut cluster = Cluster::builder()
            .worker("w1", &env)
            .gateway("g1", &[])
            .skills(&["work"])
            .start()
            .await?;
        let invoke = tokio::spawn({
            let http = cluster.http.clone();
            let url = format!("{}/entrypoints/work/invoke", cluster.base());
            async move { http.post(url).json(&json!({"input": {}})).send().await }
        });
        let first = agent
            .run()
            .await
            .map_err(|err| format!("{err}:\n{}", cluster.logs()))?;
        cluster.workers[0].kill()?;
        agent.answer(json!({"output": {"again": true}}));
        cluster.add_worker("w2", &env)?;
        let answer = invoke.await??;
        let status = answer.status();
        let body: Value = answer.json().await?;
        if retry_safe {
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["output"], json!({"again": true}));
        } else {
            // One attempt only: the lost run fails rather than reaching the agent twice.
            assert_eq!(status, 502, "{body}");
            assert_eq!(body["error"]["code"], "task_attempts_exhausted", "{body}");
        }
        // Whatever the agent saw after the first run: never a second run of a task that is
        // not retry-safe (it is finished now, so none can come later).
        let mut runs = vec![first];
        while let Ok(event) = agent.events.try_recv() {
            if let Event::Run(seen) = event {
                runs.push(seen);
            }
        }
        let attempts: Vec<&str> = runs.iter().map(|seen| seen.attempt.as_str()).collect();
        if retry_safe {
            assert_eq!(attempts, ["1", "2"]);
        } else {
            assert_eq!(attempts, ["1"]);
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refreshed_card_adds_drops_and_changes_entrypoints() -> TestResult {
    let mut agent = Agent::start(card(json!({
        "stays": {"description": "First words"},
        "goes": {"description": "Soon gone"},
    })))
    .await?;
    let cluster = Cluster::builder()
        .worker(
            "w1",
            &[
                ("WORKER_AGENTS", agent.base.as_str()),
                ("WORKER_AGENT_REFRESH_SECS", "1"),
            ],
        )
        .gateway(
            "g1",
            &[("REGISTRY_REFRESH_MS", "100"), ("ENTRYPOINT_GRACE_MS", "0")],
        )
        .skills(&["stays", "goes"])
        .start()
        .await?;
    let gateway = cluster.gateway().ok_or("no gateway")?;

    agent.script().card = Some(card(json!({
        "stays": {"description": "Second words", "input_schema": {"type": "object"}},
        "comes": {"description": "New here"},
        "paid": {"description": "Priced upstream", "pricing": {"invoke": "0.01"}},
    })));
    wait_for_card(gateway, cluster.base(), |card| {
        let entrypoints = &card["entrypoints"];
        entrypoints["stays"]["description"] == "Second words"
            && entrypoints["comes"].is_object()
            && entrypoints["goes"].is_null()
    })
    .await?;
    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base()))
        .send()
        .await?
        .json()
        .await?;
    assert!(card["entrypoints"]["paid"].is_null(), "{card}");
    assert_eq!(
        card["entrypoints"]["stays"]["input_schema"],
        json!({"type": "object"})
    );
    let log = cluster.workers[0].log();
    assert!(log.contains("entrypoint paid is priced upstream"), "{log}");

    // The new entrypoint runs at the agent; the one gone is no longer taken.
    agent.answer(json!({"output": "came"}));
    let came: Value = cluster
        .http
        .post(format!("{}/entrypoints/comes/invoke", cluster.base()))
        .json(&json!({"input": {}}))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(came["output"], "came", "{came}");
    assert_eq!(agent.run().await?.path, "/entrypoints/comes/invoke");
    let gone = cluster
        .http
        .post(format!("{}/entrypoints/goes/invoke", cluster.base()))
        .json(&json!({"input": {}}))
        .send()
        .await?;
    assert_eq!(gone.status(), 404);

    // An unreadable card keeps the last good one.
    agent.script().card = None;
    agent.card_reads(2).await?;
    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base()))
        .send()
        .await?
        .json()
        .await?;
    assert!(card["entrypoints"]["comes"].is_object(), "{card}");
    assert!(
        cluster.workers[0]
            .log()
            .contains("keeping the agent's last card")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_priced_entrypoint_whose_work_runs_in_the_agent_is_paid() -> TestResult {
    let mut agent = Agent::start(work_card()).await?;
    let cluster = PaidCluster::start(
        &[
            ("WORKER_AGENTS", agent.base.clone()),
            ("WORKER_PRICES", "work=0.001".to_owned()),
        ],
        &[],
        |card| card["entrypoints"]["work"]["pricing"]["invoke"].is_string(),
    )
    .await?;
    let body = json!({"input": {"job": "paid"}});
    let challenge = cluster.x402_challenge(0, "work", &body).await?;
    // Nothing ran for the unpaid request.
    while let Ok(event) = agent.events.try_recv() {
        assert!(
            !matches!(event, Event::Run(_)),
            "an unpaid run reached the agent"
        );
    }
    let payment =
        LocalPayer::from_hex(PAYER_KEY)?.answer(&challenge, None, payments::unix_now())?;
    agent.answer(json!({"output": {"worked": "paid"}}));
    let paid = cluster
        .http
        .post(format!("{}/entrypoints/work/invoke", cluster.base(0)))
        .header(payment.name, &payment.value)
        .json(&body)
        .send()
        .await?;
    assert_eq!(paid.status(), 200, "{}", cluster.logs());
    assert!(paid.headers().contains_key("payment-response"));
    let paid: Value = paid.json().await?;
    assert_eq!(paid["output"], json!({"worked": "paid"}), "{paid}");
    let seen = agent.run().await?;
    assert_eq!(seen.path, "/entrypoints/work/invoke");
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_down_then_back_gives_the_task_another_attempt() -> TestResult {
    let mut agent = Agent::start(work_card()).await?;
    let cluster = Cluster::builder()
        .worker("w1", &[("WORKER_AGENTS", agent.base.as_str())])
        .gateway("g1", &[])
        .skills(&["work"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    // Down: the first attempt's connection is dropped unanswered.
    agent.script().down = true;
    let owner = create(&store, "comes-back", "work", 3).await?;
    assert!(matches!(agent.next().await?, Event::Refused));
    // Back, but busy: 503 with Retry-After, then an answer.
    agent.script().down = false;
    agent.reply(Reply::Answer {
        status: 503,
        headers: vec![("retry-after", "1".to_owned())],
        body: json!({"error": {"code": "busy", "message": "later"}}),
    });
    agent.answer(json!({"output": "back"}));
    let busy = agent.run().await?;
    let answered = agent.run().await?;
    assert!(busy.attempt < answered.attempt, "{busy:?} {answered:?}");
    assert_eq!(busy.idempotency_key, answered.idempotency_key);
    let task = finished(&store, "comes-back", &owner).await?;
    assert_eq!(task.status, TaskStatus::Completed, "{task:?}");
    assert_eq!(task.result.map(|result| result.output), Some(json!("back")));
    Ok(())
}
