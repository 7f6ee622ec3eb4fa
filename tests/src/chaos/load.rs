//! The clients of a chaos run: concurrent creators that retry on any gateway until a task is
//! acknowledged, SSE subscribers that follow their task across gateway deaths to its terminal
//! event, cancellers, and probes with another owner's token. A seeded fraction of the tasks is
//! created over A2A (`SendMessage` with an inline push config naming the run's webhook
//! receiver, `push.rs`) instead of the Lucid profile's `POST /tasks`; followers, cancellers and
//! probes treat them like the others (the bearer token owns them as `Task-Access-Token` does).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use client::SseParser;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{ChaosConfig, ChaosError};

/// Pause before retrying a request that met a dead gateway or a 503.
const RETRY_PAUSE: Duration = Duration::from_millis(25);

/// One acknowledged task and what its client knows about it.
#[derive(Debug, Clone)]
pub struct AckedTask {
    pub id: String,
    pub owner: usize,
    pub entrypoint: &'static str,
    pub input: Value,
    /// When the client got the 200: set against the Redis fault when a task goes missing.
    pub acked_at: Instant,
    /// Created over A2A with a push config naming `/hook/{index}` of the run's receiver:
    /// `Some(index)`.
    pub push: Option<usize>,
}

/// What one SSE subscriber saw, over all its connections.
#[derive(Debug, Default)]
pub struct SubscriberLog {
    pub task_id: String,
    /// `(event name, taskId of the data, status of the data)` in arrival order.
    pub events: Vec<(String, String, Option<String>)>,
    pub connections: u32,
    /// Why it stopped before a terminal event, if it did.
    pub gave_up: Option<String>,
}

/// Figures of the creation phase.
#[derive(Debug, Default, Clone)]
pub struct DriveStats {
    pub duration: Duration,
    /// Requests a client retried on another gateway (a dead gateway, 503 while Redis was
    /// down).
    pub retries: usize,
    pub probes: usize,
}

pub struct Load {
    /// When the load started: the clock of the report's timeline.
    pub started: Instant,
    http: reqwest::Client,
    gateways: Vec<String>,
    owners: Vec<String>,
    config: ChaosConfig,
    next: AtomicUsize,
    pub acknowledged: AtomicUsize,
    retries: AtomicUsize,
    probes: AtomicUsize,
    tasks: Mutex<Vec<AckedTask>>,
    /// Tasks whose cancel was answered 200: their final status must be `cancelled`.
    cancel_acknowledged: Mutex<HashSet<String>>,
    /// Tasks a cancel was sent for (its answer may have been lost with a gateway): the only
    /// tasks that may end `cancelled`.
    cancel_requested: Mutex<HashSet<String>>,
    /// What clients saw that breaks an invariant.
    violations: Mutex<Vec<String>>,
    /// The base of the push configs' URLs: the run's webhook receiver.
    push_url: String,
    /// `SendMessage` requests sent per task number (each may have created a task).
    a2a_sends: Mutex<HashMap<usize, u32>>,
    followers: Mutex<Vec<JoinHandle<SubscriberLog>>>,
    helpers: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether task number `index` is created over A2A with a push config: `percent` of them,
/// drawn from the seed apart from [`plan`]'s draws (a seed keeps its task mix).
fn via_a2a(seed: u64, index: usize, percent: u32) -> bool {
    let mut rng = StdRng::seed_from_u64(
        seed.rotate_left(29) ^ (index as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
    );
    rng.random_range(0..100u32) < percent
}

/// Whether task number `index`, if an `echo` or `sleep`, goes to the remote agent's
/// entrypoint instead: `percent` of them, drawn apart from [`plan`]'s draws.
fn via_remote(seed: u64, index: usize, percent: u32) -> bool {
    let mut rng = StdRng::seed_from_u64(
        seed.rotate_left(43) ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407),
    );
    rng.random_range(0..100u32) < percent
}

/// The remote agent's twin of a built-in, if it has one (`echo_agent --prefix remote-`).
pub fn remote_twin(entrypoint: &str) -> Option<&'static str> {
    match entrypoint {
        "echo" => Some("remote-echo"),
        "sleep" => Some("remote-sleep"),
        _ => None,
    }
}

/// What task number `index` runs: a seeded mix of every built-in, including runs long enough
/// to be caught by a crash and runs that get cancelled.
fn plan(seed: u64, index: usize) -> (&'static str, Value, Option<Duration>) {
    let mut rng = StdRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    match rng.random_range(0..100u32) {
        0..40 => ("sleep", json!({"ms": rng.random_range(0..300u64)}), None),
        40..65 => ("echo", json!({"i": index, "note": "chaos"}), None),
        65..75 => ("fail", json!({"code": "chaos_failure"}), None),
        75..90 => ("count", json!({"n": rng.random_range(1..6u64)}), None),
        _ => (
            "sleep",
            json!({"ms": 2_000}),
            Some(Duration::from_millis(rng.random_range(0..1_500u64))),
        ),
    }
}

impl Load {
    pub fn new(
        config: &ChaosConfig,
        gateways: Vec<String>,
        push_url: String,
    ) -> Result<Load, ChaosError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let owners = (0..config.owners.max(2))
            .map(|_| client::generate_token())
            .collect();
        Ok(Load {
            started: Instant::now(),
            http,
            gateways,
            owners,
            config: config.clone(),
            next: AtomicUsize::new(0),
            acknowledged: AtomicUsize::new(0),
            retries: AtomicUsize::new(0),
            probes: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            cancel_acknowledged: Mutex::new(HashSet::new()),
            cancel_requested: Mutex::new(HashSet::new()),
            violations: Mutex::new(Vec::new()),
            push_url,
            a2a_sends: Mutex::new(HashMap::new()),
            followers: Mutex::new(Vec::new()),
            helpers: Mutex::new(Vec::new()),
        })
    }

    pub fn tasks(&self) -> Vec<AckedTask> {
        lock(&self.tasks).clone()
    }

    pub fn cancel_acknowledged(&self) -> HashSet<String> {
        lock(&self.cancel_acknowledged).clone()
    }

    pub fn cancel_requested(&self) -> HashSet<String> {
        lock(&self.cancel_requested).clone()
    }

    pub fn client_violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }

    pub fn a2a_sends(&self) -> HashMap<usize, u32> {
        lock(&self.a2a_sends).clone()
    }

    pub fn push_percent(&self) -> u32 {
        self.config.push_percent
    }

    pub fn violation(&self, text: String) {
        lock(&self.violations).push(text);
    }

    pub fn owner_token(&self, owner: usize) -> &str {
        &self.owners[owner % self.owners.len()]
    }

    fn gateway(&self, turn: usize) -> &str {
        &self.gateways[turn % self.gateways.len()]
    }

    /// Creates every task with `clients` concurrent creators; returns when all are
    /// acknowledged (or given up on, which is a violation).
    pub async fn drive(self: &std::sync::Arc<Self>) -> DriveStats {
        let started = Instant::now();
        let creators: Vec<_> = (0..self.config.clients.max(1))
            .map(|_| {
                let load = std::sync::Arc::clone(self);
                tokio::spawn(async move {
                    loop {
                        let index = load.next.fetch_add(1, Ordering::Relaxed);
                        if index >= load.config.tasks {
                            break;
                        }
                        if load.config.rate > 0 {
                            let due =
                                Duration::from_secs_f64(index as f64 / f64::from(load.config.rate));
                            tokio::time::sleep_until((started + due).into()).await;
                        }
                        load.create(index).await;
                    }
                })
            })
            .collect();
        for creator in creators {
            if let Err(err) = creator.await {
                self.violation(format!("a creator panicked: {err}"));
            }
        }
        DriveStats {
            duration: started.elapsed(),
            retries: self.retries.load(Ordering::Relaxed),
            probes: self.probes.load(Ordering::Relaxed),
        }
    }

    async fn create(self: &std::sync::Arc<Self>, index: usize) {
        let (mut entrypoint, input, cancel_after) = plan(self.config.seed, index);
        if via_remote(self.config.seed, index, self.config.remote_percent)
            && let Some(twin) = remote_twin(entrypoint)
        {
            entrypoint = twin;
        }
        let owner = index % self.owners.len();
        let push = via_a2a(self.config.seed, index, self.config.push_percent).then_some(index);
        let task_id = if push.is_some() {
            self.create_a2a(index, owner, entrypoint, &input).await
        } else {
            self.create_lucid(index, owner, entrypoint, &input).await
        };
        let Some(task_id) = task_id else { return };
        let task = AckedTask {
            id: task_id.clone(),
            owner,
            entrypoint,
            input,
            acked_at: Instant::now(),
            push,
        };
        lock(&self.tasks).push(task.clone());
        self.acknowledged.fetch_add(1, Ordering::Relaxed);

        if index.is_multiple_of(self.config.subscribe_one_in.max(1)) {
            let load = std::sync::Arc::clone(self);
            let follower = tokio::spawn(async move { load.follow(task).await });
            lock(&self.followers).push(follower);
        }
        if let Some(delay) = cancel_after {
            let load = std::sync::Arc::clone(self);
            let id = task_id.clone();
            let canceller = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                load.cancel(&id, owner).await;
            });
            lock(&self.helpers).push(canceller);
        }
        if index.is_multiple_of(7) {
            let load = std::sync::Arc::clone(self);
            let probe = tokio::spawn(async move { load.probe(&task_id, owner + 1).await });
            lock(&self.helpers).push(probe);
        }
    }

    /// Creates task number `index` over the Lucid profile (`POST /tasks`): its id once
    /// acknowledged.
    async fn create_lucid(
        &self,
        index: usize,
        owner: usize,
        entrypoint: &str,
        input: &Value,
    ) -> Option<String> {
        let body = json!({
            "skillId": entrypoint,
            "message": {"role": "user", "content": {"text": input.to_string()}},
        });
        let Some((status, text, gateway)) = self
            .until_answered(Method::POST, "/tasks", owner, Some(&body), index)
            .await
        else {
            self.violation(format!("task #{index} was never acknowledged"));
            return None;
        };
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match (status, answer["taskId"].as_str()) {
            (200, Some(id)) => Some(id.to_owned()),
            _ => {
                self.violation(format!(
                    "create of {entrypoint} answered {status} at {gateway}, {:.1?} into the load: {text}",
                    self.started.elapsed()
                ));
                None
            }
        }
    }

    /// Creates task number `index` over A2A: JSON-RPC `SendMessage` returning at once, with an
    /// inline push config naming `/hook/{index}` of the run's receiver and a token of its own.
    /// Sent to the gateways in turn until one answers with the task: a dead gateway, a 5xx and
    /// JSON-RPC's internal error (-32603: the store unreachable while Redis is down) are
    /// retried, under the same message id, as a client would. Its id once acknowledged.
    async fn create_a2a(
        &self,
        index: usize,
        owner: usize,
        entrypoint: &str,
        input: &Value,
    ) -> Option<String> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": index,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": format!("chaos-{}-{index}", self.config.seed),
                    "role": "ROLE_USER",
                    "parts": [{"data": input}],
                    "metadata": {"skillId": entrypoint},
                },
                "configuration": {
                    "returnImmediately": true,
                    "taskPushNotificationConfig": {
                        "url": format!("{}/hook/{index}", self.push_url),
                        "token": super::push::config_token(index),
                    },
                },
            },
        });
        let deadline = Instant::now() + self.config.settle_timeout;
        let mut turn = index;
        while Instant::now() < deadline {
            turn += 1;
            *lock(&self.a2a_sends).entry(index).or_default() += 1;
            let gateway = self.gateway(turn);
            let sent = self
                .http
                .post(format!("{gateway}/a2a/jsonrpc"))
                .bearer_auth(self.owner_token(owner))
                .header("A2A-Version", "1.0")
                .json(&body)
                .send()
                .await;
            if let Ok(response) = sent {
                let status = response.status().as_u16();
                if !(500..600).contains(&status)
                    && let Ok(text) = response.text().await
                {
                    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if let Some(id) = answer["result"]["task"]["id"].as_str() {
                        return Some(id.to_owned());
                    }
                    if answer["error"]["code"] != -32603 {
                        self.violation(format!(
                            "SendMessage of {entrypoint} answered {status} at {gateway}, {:.1?} into the load: {text}",
                            self.started.elapsed()
                        ));
                        return None;
                    }
                }
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        self.violation(format!("A2A task #{index} was never acknowledged"));
        None
    }

    /// Sends `method path` (with `owner`'s token) to the gateways in turn until one gives an
    /// answer that is not a 5xx: a dead gateway, Redis down or a body cut off by a dying gateway
    /// is retried on the next. `None` when nothing answered before the settle timeout.
    async fn until_answered(
        &self,
        method: Method,
        path: &str,
        owner: usize,
        body: Option<&Value>,
        mut turn: usize,
    ) -> Option<(u16, String, &str)> {
        let deadline = Instant::now() + self.config.settle_timeout;
        while Instant::now() < deadline {
            turn += 1;
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.gateway(turn)))
                .header("Task-Access-Token", self.owner_token(owner));
            if let Some(body) = body {
                request = request.json(body);
            }
            if let Ok(response) = request.send().await {
                let status = response.status().as_u16();
                if !(500..600).contains(&status)
                    && let Ok(text) = response.text().await
                {
                    return Some((status, text, self.gateway(turn)));
                }
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        None
    }

    /// Cancels a task, retrying through gateway deaths; a 200 is remembered, since the task
    /// must then end `cancelled` whatever its worker does.
    async fn cancel(&self, task_id: &str, owner: usize) {
        lock(&self.cancel_requested).insert(task_id.to_owned());
        let path = format!("/tasks/{task_id}/cancel");
        let Some((status, text, _)) = self
            .until_answered(Method::POST, &path, owner, None, owner)
            .await
        else {
            self.violation(format!("cancel of {task_id} never got an answer"));
            return;
        };
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match status {
            200 if answer["status"] == "cancelled" => {
                lock(&self.cancel_acknowledged).insert(task_id.to_owned());
            }
            // `invalid_state`: already terminal, because the task finished first or because an
            // earlier try of this cancel landed and its answer was lost (400), or because it
            // finished between the gateway's read and its compare-and-set (409, upstream's
            // answer to a lost race).
            400 | 409 if answer["error"]["code"] == "invalid_state" => {}
            _ => self.violation(format!("cancel of {task_id} answered {status}: {text}")),
        }
    }

    /// Another owner's token must see exactly what a missing task looks like: 404.
    async fn probe(&self, task_id: &str, other_owner: usize) {
        let path = format!("/tasks/{task_id}");
        match self
            .until_answered(Method::GET, &path, other_owner, None, other_owner)
            .await
        {
            Some((404, _, _)) => {
                self.probes.fetch_add(1, Ordering::Relaxed);
            }
            Some((status, _, _)) => self.violation(format!(
                "task {task_id} answered {status} to another owner's token"
            )),
            None => self.violation(format!("probe of {task_id} never got an answer")),
        }
    }

    /// Follows a task over SSE until its terminal event, reconnecting (to any gateway) after
    /// every cut; each connection starts with a snapshot of the current status.
    async fn follow(&self, task: AckedTask) -> SubscriberLog {
        let mut log = SubscriberLog {
            task_id: task.id.clone(),
            ..SubscriberLog::default()
        };
        let deadline = Instant::now() + self.config.settle_timeout * 2;
        let mut turn = task.owner;
        loop {
            if Instant::now() > deadline {
                log.gave_up = Some("no terminal event before the deadline".into());
                return log;
            }
            turn += 1;
            let sent = self
                .http
                .get(format!(
                    "{}/tasks/{}/subscribe",
                    self.gateway(turn),
                    task.id
                ))
                .header("Task-Access-Token", self.owner_token(task.owner))
                .timeout(self.config.settle_timeout * 2)
                .send()
                .await;
            let Ok(response) = sent else {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            };
            match response.status().as_u16() {
                200 => {}
                500 | 502 | 503 | 504 => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                status => {
                    log.gave_up = Some(format!("subscribe answered {status}"));
                    return log;
                }
            }
            log.connections += 1;
            let mut parser = SseParser::new(1 << 20);
            let mut body = response.bytes_stream();
            while let Some(chunk) = body.next().await {
                let Ok(chunk) = chunk else { break };
                let Ok(events) = parser.push(&chunk) else {
                    log.gave_up = Some("oversized SSE event".into());
                    return log;
                };
                for event in events {
                    let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                    let status = data["status"].as_str().map(str::to_owned);
                    let terminal = status.as_deref().is_some_and(|s| s != "running");
                    log.events.push((
                        event.event,
                        data["taskId"].as_str().unwrap_or("").to_owned(),
                        status,
                    ));
                    if terminal {
                        return log;
                    }
                }
            }
            // Cut off (gateway killed, Redis restarted): reconnect.
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Awaits the subscribers (and cancellers and probes); those still running after
    /// `patience` are stopped and reported as having given up.
    pub async fn finish_subscribers(&self, patience: Duration) -> Vec<SubscriberLog> {
        let deadline = tokio::time::Instant::now() + patience;
        let helpers: Vec<_> = lock(&self.helpers).drain(..).collect();
        for helper in helpers {
            let _ = tokio::time::timeout_at(deadline, helper).await;
        }
        let followers: Vec<_> = lock(&self.followers).drain(..).collect();
        let mut logs = Vec::new();
        for follower in followers {
            let abort = follower.abort_handle();
            match tokio::time::timeout_at(deadline, follower).await {
                Ok(Ok(log)) => logs.push(log),
                Ok(Err(err)) => self.violation(format!("a subscriber panicked: {err}")),
                Err(_) => {
                    abort.abort();
                    self.violation("a subscriber was still waiting after the settle time".into());
                }
            }
        }
        logs
    }
}
